"""A starting node's client listener listens from the start of the process (``node.early_listen``): a client that
connects while the node still starts is accepted, not refused, has its ApiVersions answered at once
(``wire.early_answers``) and its next request once the node serves; a port in use still fails the start with one
line naming the listener."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from testkit.node_process import REPO, BrokerProcess, WireClient, api_versions_request, server_command
from testkit.quorum_cluster import QuorumCluster
from testkit.waiting import eventually
from tests.broker.sasl_wire import JAAS, PLAIN_PASSWORD, metadata_request
from wire import codec, schema
from wire.ports import free_port


def _broker_only(root: Path, cluster: QuorumCluster, port: int) -> dict[str, str]:
    voters = ",".join(f"{v.node_id}@127.0.0.1:{v.port}" for v in cluster.voters)
    return {
        "process.roles": "broker",
        "node.id": "5",
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(root / "broker"),
        "s3.data.buckets": f"0@file://{root / 'objects'}",
        "s3.wal.path": f"0@file://{root / 'wal'}",
    }


def _spawn(root: Path, overrides: dict[str, str]) -> BrokerProcess:
    log_path = root / "broker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(server_command(None, overrides), cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    return BrokerProcess(proc, root, log_path, node_id=5)


def test_a_client_connecting_while_the_node_starts_is_answered_once_it_serves(tmp_path: Path) -> None:
    cluster = QuorumCluster(tmp_path / "quorum", size=1)
    port = free_port()
    broker = _spawn(tmp_path, _broker_only(tmp_path, cluster, port))
    try:
        # The broker waits for its quorum, which is not up: its listener accepts the connection all the same, and
        # answers its ApiVersions with what it will serve, the cluster's finalized features not known yet.
        client = eventually(lambda: WireClient(port, timeout=30.0), timeout=20.0, retry_on=(ConnectionRefusedError,),
                            what=lambda: f"the starting broker to accept a connection:\n{broker.log_text()}")
        with client:
            correlation_id = client.send(api_versions_request(3))
            got, response = client.receive(18, 3)
            assert got == correlation_id and response.error_code == 0
            assert {k.api_key for k in response.api_keys} >= {0, 1, 3}
            assert response.finalized_features_epoch == -1
            assert "node 5 serving" not in broker.log_text()
            # The next request waits for the broker: the quorum comes up, the broker registers and serves.
            correlation_id = client.send(schema.build(codec.request_class(3, 12), topics=None))
            cluster.start(0)
            got, metadata = client.receive(3, 12)
            assert got == correlation_id and [b.node_id for b in metadata.brokers] == [5]
            assert "node 5 serving PLAINTEXT" in broker.log_text()
            # Asked again on the same connection, now from the broker itself: with the finalized features.
            client.send(api_versions_request(3))
            assert client.receive(18, 3)[1].finalized_features_epoch >= 0
        assert broker.stop() == 0
        # A clean stop closes the sockets bound at the start: the port is free again.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))
    finally:
        broker.kill()
        cluster.close()


def test_a_sasl_client_answered_early_authenticates_once_the_node_serves(tmp_path: Path) -> None:
    """On a SASL_PLAINTEXT listener the early ApiVersions is the connection's first request; the handshake and the
    authentication that follow wait for the broker, whose SASL session then starts from that ApiVersions."""
    cluster = QuorumCluster(tmp_path / "quorum", size=1)
    port = free_port()
    overrides = _broker_only(tmp_path, cluster, port) | {
        "listeners": f"CLIENTS://127.0.0.1:{port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,CLIENTS:SASL_PLAINTEXT",
        "inter.broker.listener.name": "CLIENTS",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.clients.plain.sasl.jaas.config": JAAS,
    }
    broker = _spawn(tmp_path, overrides)
    try:
        client = eventually(lambda: WireClient(port, timeout=30.0), timeout=20.0, retry_on=(ConnectionRefusedError,),
                            what=lambda: f"the starting broker to accept a connection:\n{broker.log_text()}")
        with client:
            client.send(api_versions_request(3))
            assert client.receive(18, 3)[1].error_code == 0
            assert "node 5 serving" not in broker.log_text()
            client.send(schema.build(codec.request_class(17, 1), mechanism="PLAIN"))
            client.send(schema.build(codec.request_class(36, 2), auth_bytes=f"\0alice\0{PLAIN_PASSWORD}".encode()))
            cluster.start(0)
            assert client.receive(17, 1)[1].error_code == 0
            assert client.receive(36, 2)[1].error_code == 0
            client.send(metadata_request())
            assert [b.node_id for b in client.receive(3, 12)[1].brokers] == [5]
        assert broker.stop() == 0
    finally:
        broker.kill()
        cluster.close()


def test_a_port_in_use_fails_the_start_with_one_line_naming_the_listener(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        overrides = _broker_only(tmp_path, QuorumCluster(tmp_path / "quorum", size=1), port)
        done = subprocess.run(server_command(None, overrides), cwd=REPO, capture_output=True, text=True, timeout=60,
                              check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"fjord: configuration error: listeners: cannot bind PLAINTEXT to 127.0.0.1:{port}: "
        f"127.0.0.1:{port}: Address already in use"
    ]
