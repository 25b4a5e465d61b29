"""A cluster with every listener secured (issue 13): one controller and three brokers as real processes, the
CONTROLLER listener SSL (client certificates required), the client listener SASL_SSL with SCRAM-SHA-512, and the
brokers reaching each other on that same listener as ``User:broker`` (``inter.broker.listener.name``,
``sasl.mechanism.inter.broker.protocol`` and the listener's ScramLoginModule JAAS config), with ACLs on and
``User:broker`` a super user, as Kafka's brokers are. On the CONTROLLER listener the nodes are named by their
certificate (``User:CN=localhost``, the default ``ssl.principal.mapping.rules``), a super user too, as the nodes'
principals must be there; so is the operator whose certificate reads the whole metadata (DescribeMetadata, served
to super users only).

A transactional producer (confluent-kafka, as ``alice`` with ACLs for her topic, transactional id and group) commits a
transaction over partitions led by all three brokers, so the coordinator's WriteTxnMarkers and the leaders'
AddPartitionsToTxn verification go broker to broker over SASL_SSL; a read_committed consumer reads it (the last
stable offset only moves once every marker is written). A plaintext connection to any listener gets no answer, and
no node's log holds a password. Last, ``fjord cluster drain`` reaches the cluster with a Kafka tool's
``--command-config`` file: refused with a wrong password, draining a broker with the admin's. ``fjord metadata
shell --command-config`` lists the brokers through the SSL CONTROLLER listener (an operator's client certificate)
and through a SASL_SSL broker, and a wrong password or a missing certificate is one line naming host:port. The
cluster is started once for the module.
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from node.local_cluster import REPO_ROOT, LocalCluster, NodeSpec, plan_cluster
from testkit.tls_certs import CertificateAuthority
from testkit.waiting import eventually
from tests.cluster.cluster_support import FAST
from tests.reading import read_to_end
from wire import codec, schema
from wire.client import ClientConnection

BROKER_PASSWORD = "broker-pass-never-logged"
ADMIN_PASSWORD = "admin-pass-never-logged"
ALICE_PASSWORD = "alice-pass-never-logged"
MECHANISM = "SCRAM-SHA-512"
PARTITIONS = 6
DEADLINE_S = 30.0
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'


@dataclasses.dataclass(frozen=True, slots=True)
class _BootstrapSpec(NodeSpec):
    """A planned node started with ``--add-scram`` options (the cluster's first SCRAM users)."""

    add_scram: tuple[str, ...] = ()

    def command(self) -> list[str]:
        return [*NodeSpec.command(self), *(arg for user in self.add_scram for arg in ("--add-scram", user))]


def _secured_specs(root: Path, ca: CertificateAuthority) -> list[NodeSpec]:
    identity = ca.issue("node", server=True)
    common = {
        **FAST,
        "listener.security.protocol.map": "CONTROLLER:SSL,SECURE:SASL_SSL",
        "ssl.keystore.location": str(identity.keystore_path),
        "ssl.truststore.location": str(ca.cert_path),
        "listener.name.controller.ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # The nodes' certificate principal on the CONTROLLER listener, and the metadata shell's operator there.
        "super.users": "User:broker;User:admin;User:CN=localhost;User:CN=operator",
        "allow.everyone.if.no.acl.found": "false",
    }
    brokers = {
        "inter.broker.listener.name": "SECURE",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.secure.scram-sha-512.sasl.jaas.config": SCRAM_JAAS.format("broker", BROKER_PASSWORD),
    }
    specs = plan_cluster(root, controllers=1, brokers=3, extra=common)
    out: list[NodeSpec] = []
    for index, spec in enumerate(s for s in specs if s.is_broker):
        overrides = {
            **spec.overrides,
            **brokers,
            "listeners": spec.overrides["listeners"].replace("PLAINTEXT://", "SECURE://"),
            "advertised.listeners": spec.overrides["advertised.listeners"].replace("PLAINTEXT://", "SECURE://"),
        }
        users = (
            tuple(
                f"{MECHANISM}=[name={name},password={password}]"
                for name, password in (
                    ("broker", BROKER_PASSWORD),
                    ("admin", ADMIN_PASSWORD),
                    ("alice", ALICE_PASSWORD),
                )
            )
            if index == 0
            else ()
        )
        fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(NodeSpec)}
        out.append(_BootstrapSpec(**{**fields, "overrides": overrides}, add_scram=users))
    return [*(s for s in specs if not s.is_broker), *out]


def _client(cluster: LocalCluster, ca: CertificateAuthority, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap_servers,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(ca.cert_path),
    }


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, CertificateAuthority]]:
    root = tmp_path_factory.mktemp("secured")
    ca = CertificateAuthority(root / "certs")
    cluster = LocalCluster(_secured_specs(root / "cluster", ca))
    cluster.start_all()
    try:
        admins = [
            AdminClient({**_client(cluster, ca, "admin", ADMIN_PASSWORD), "bootstrap.servers": node.spec.address})
            for node in cluster.brokers
        ]
        expected = {node.spec.node_id for node in cluster.brokers}

        def ready() -> bool:
            assert not cluster.exited(), f"a node stopped:\n{cluster.logs()}"
            return all(set(admin.list_topics(timeout=5).brokers) == expected for admin in admins)

        eventually(
            ready,
            timeout=DEADLINE_S,
            interval=0.3,
            what="every broker to list every broker over SASL_SSL",
            retry_on=(Exception,),
        )
        yield cluster, ca
    finally:
        codes = cluster.stop_all(timeout=20)
        logs = "\n".join(node.log_text(tail=10**7) for node in cluster.nodes)
        for secret in (BROKER_PASSWORD, ADMIN_PASSWORD, ALICE_PASSWORD):
            assert secret not in logs, "a password reached a node's log"
    assert all(code == 0 for code in codes.values()), f"unclean stop {codes}:\n{cluster.logs()}"


def _leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    found = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
    return {} if found is None or found.error is not None else {p.id: p.leader for p in found.partitions.values()}


def _answers_plaintext(port: int) -> bool:
    """Whether a listener answers ApiVersions sent without TLS (it must not: the first bytes end the connection)."""

    async def ask() -> Any:
        connection = ClientConnection("127.0.0.1", port, client_id="plaintext-probe", timeout=5)
        try:
            return await connection.request(
                schema.build(codec.request_class(18, 3), client_software_name="probe", client_software_version="1")
            )
        finally:
            await connection.close()

    try:
        asyncio.run(ask())
    except (ConnectionError, TimeoutError, codec.ProtocolError):
        return False
    return True


def test_a_transaction_over_sasl_ssl_brokers_with_an_ssl_controller_listener(
    secured: tuple[LocalCluster, CertificateAuthority], tmp_path: Path
) -> None:
    cluster, ca = secured
    topic = f"secured-{uuid.uuid4().hex[:8]}"
    transactional_id = f"tid-{topic}"
    admin = AdminClient(_client(cluster, ca, "admin", ADMIN_PASSWORD))
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=20)[topic].result(timeout=DEADLINE_S)
    bindings = [
        AclBinding(kind, name, pattern, "User:alice", "*", AclOperation.ALL, AclPermissionType.ALLOW)
        for kind, name, pattern in (
            (ResourceType.TOPIC, topic, ResourcePatternType.LITERAL),
            (ResourceType.TRANSACTIONAL_ID, transactional_id, ResourcePatternType.LITERAL),
            (ResourceType.GROUP, "reader-", ResourcePatternType.PREFIXED),  # tests.reading's consumer groups
        )
    ]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=DEADLINE_S)
    alice = _client(cluster, ca, "alice", ALICE_PASSWORD)
    placement = eventually(
        lambda: _leaders(admin, topic),
        until=lambda found: len(found) == PARTITIONS and len(set(found.values())) == 3,
        timeout=DEADLINE_S,
        what="partitions led by all three brokers",
        retry_on=(Exception,),
    )

    producer = Producer({**alice, "transactional.id": transactional_id, "linger.ms": 5})
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    for i in range(PARTITIONS * 2):
        producer.produce(topic, value=f"committed-{i}".encode(), partition=i % PARTITIONS)
    producer.commit_transaction(DEADLINE_S)

    seen = sorted(
        v.decode()
        for _, v in read_to_end(cluster.bootstrap_servers, topic, PARTITIONS, settings=alice, timeout=DEADLINE_S)
    )
    assert seen == sorted(f"committed-{i}" for i in range(PARTITIONS * 2)), f"placement {placement}"

    answered = [f"{n.spec.role} {n.spec.node_id}" for n in cluster.nodes if _answers_plaintext(n.spec.port)]
    assert not answered, f"answered a plaintext request: {answered}"

    # The operator's tool reaches the secured cluster with Kafka's --command-config file: a wrong password is one
    # line and exit 1 (the password in no output); the admin's drains a broker.
    drained = sorted({n.spec.node_id for n in cluster.brokers})[-1]
    wrong = _drain(cluster, drained, _command_config(tmp_path, ca, "admin", "not-the-admin-password"))
    assert wrong.returncode == 1 and "authentication" in wrong.stderr.lower(), wrong.stderr
    assert "not-the-admin-password" not in wrong.stdout + wrong.stderr
    done = _drain(cluster, drained, _command_config(tmp_path, ca, "admin", ADMIN_PASSWORD))
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert f"broker {drained} leads no partition" in done.stdout
    assert drained not in _leaders(admin, topic).values()


def _command_config(
    directory: Path, ca: CertificateAuthority, user: str, password: str, keystore: Path | None = None
) -> Path:
    """A Kafka tool's client properties for this cluster's SASL_SSL listener (with ``keystore``, a client
    certificate too, which the SSL CONTROLLER listener asks for)."""
    path = directory / f"{user}-{uuid.uuid4().hex[:6]}.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={MECHANISM}\n"
        f"sasl.jaas.config={SCRAM_JAAS.format(user, password)}\n"
        f"ssl.truststore.location={ca.cert_path}\n"
        + (f"ssl.keystore.location={keystore}\n" if keystore is not None else "")
    )
    return path


def _drain(cluster: LocalCluster, node: int, config: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "node.cli", "cluster", "drain", "--bootstrap-server", cluster.bootstrap_servers,
            "--node", str(node), "--command-config", str(config), "--timeout", str(DEADLINE_S)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=DEADLINE_S + 30, cwd=REPO_ROOT, check=False)


def test_the_metadata_shell_reaches_the_secured_listeners_with_a_command_config(
    secured: tuple[LocalCluster, CertificateAuthority], tmp_path: Path
) -> None:
    cluster, ca = secured
    brokers = sorted(n.spec.node_id for n in cluster.brokers)
    operator = ca.issue("operator", server=False)
    controllers = ",".join(f"127.0.0.1:{n.spec.quorum_port}" for n in cluster.controllers)
    mtls = tmp_path / "controller.properties"
    mtls.write_text(
        f"security.protocol=SSL\nssl.truststore.location={ca.cert_path}\nssl.keystore.location={operator.keystore_path}\n"
    )

    # Named directly: the SSL CONTROLLER listener with the operator's certificate.
    direct = _metadata_shell("--controllers", controllers, mtls)
    assert direct.returncode == 0, direct.stderr
    assert _listed_brokers(direct.stdout) == brokers, direct.stdout
    # Through a SASL_SSL broker as the admin: the brokers name the controllers, reached over the same TLS (the
    # CONTROLLER listener speaks no SASL, so none is sent there).
    admin = _command_config(tmp_path, ca, "admin", ADMIN_PASSWORD, keystore=operator.keystore_path)
    via_brokers = _metadata_shell("--bootstrap", cluster.bootstrap_servers, admin)
    assert via_brokers.returncode == 0, via_brokers.stderr
    assert _listed_brokers(via_brokers.stdout) == brokers, via_brokers.stdout

    # A wrong password, and a CONTROLLER listener that wants a certificate the file does not hold: one line each,
    # naming where, no traceback and no password.
    wrong = _metadata_shell(
        "--bootstrap",
        cluster.brokers[0].spec.address,
        _command_config(tmp_path, ca, "admin", "not-the-admin-password", keystore=operator.keystore_path),
    )
    no_certificate = tmp_path / "no-certificate.properties"
    no_certificate.write_text(f"security.protocol=SSL\nssl.truststore.location={ca.cert_path}\n")
    refused = _metadata_shell("--controllers", controllers, no_certificate)
    for result, where in ((wrong, cluster.brokers[0].spec.address), (refused, controllers.split(",")[0])):
        assert result.returncode == 1 and result.stdout == "", result
        assert len(result.stderr.strip().splitlines()) == 1 and where in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and "not-the-admin-password" not in result.stderr
    assert "authentication" in wrong.stderr.lower(), wrong.stderr
    assert "ssl.keystore.location" in refused.stderr, refused.stderr
    # Named directly, the CONTROLLER listener is taken to be what the file says: SASL where it speaks none is refused.
    mismatch = _metadata_shell("--controllers", controllers, admin)
    assert mismatch.returncode == 1 and "does not speak SASL" in mismatch.stderr, mismatch.stderr


def _metadata_shell(flag: str, addresses: str, config: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "node.cli", "metadata", "shell", flag, addresses, "--command-config", str(config),
            "-c", "ls /brokers"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=DEADLINE_S + 30, cwd=REPO_ROOT, check=False)


def _listed_brokers(output: str) -> list[int]:
    """The broker ids of ``ls /brokers`` (a table headed ID EPOCH STATE ...)."""
    lines = output.splitlines()
    assert lines and lines[0].split()[:3] == ["ID", "EPOCH", "STATE"], output
    return [int(line.split()[0]) for line in lines[1:] if line.strip()]
