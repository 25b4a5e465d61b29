"""Mutual TLS principals (KIP-371 ``ssl.principal.mapping.rules``) feeding ACLs, and certificates reloaded without a
restart, with a real broker process and real clients.

One broker serves the module with the StandardAuthorizer on three client listeners: PLAINTEXT (what
``start_broker`` waits on; its ``User:ANONYMOUS`` is a super user, as an inter-broker listener's principal must be),
MTLS (``ssl.client.auth=required``, client certificates mapped by ``RULE:^CN=([^,]+),.*$/$1/L``), SASLSSL (SASL_SSL
with PLAIN and client certificates required: the SASL user is the principal, as in Kafka) and RELOAD (an SSL
listener whose key file the tests replace while the broker runs; ``ssl.reload.interval.ms`` is short).
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AclOperation, AdminClient, ResourceType
from cryptography import x509

from settings.server import ServerConfig
from storage.config import ConfigError
from testkit.node_process import BrokerProcess, start_broker
from testkit.tls_certs import CertificateAuthority, Identity
from testkit.waiting import eventually
from tests.broker.acl_clients import allow, grant, new_topic, produce_error
from tests.broker.kafka_clients import topic_name

KEY_PASSWORD = "reload-pass-never-printed"
SASL_PASSWORD = "sasl-pass-never-printed"
RULES = "RULE:^CN=([^,]+),.*$/$1/L"
#: ApiVersions v0 with correlation id 7 and a null client id: the smallest request a broker answers.
API_VERSIONS = struct.pack(">ihhih", 10, 18, 0, 7, -1)


@dataclass(frozen=True)
class Certificates:
    """Every certificate of the module, made once (key generation is what costs)."""

    clients_ca: CertificateAuthority  # signs the MTLS listener's certificate and the clients'
    server: Identity  # the broker's certificate on its TLS listeners but RELOAD
    alice: Identity
    bob: Identity
    carol: Identity  # CN=carol alone: the rule (which needs a comma after the CN) does not map it
    ca_a: CertificateAuthority  # signs the RELOAD listener's first certificate
    ca_b: CertificateAuthority  # signs the one that replaces it


@dataclass(frozen=True)
class MtlsBroker:
    broker: BrokerProcess
    certs: Certificates
    keystore: Path  # the RELOAD listener's key file

    def port(self, listener: str) -> int:
        return self.broker.endpoints[listener][1]

    def client_config(self, client: Identity) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{self.port('MTLS')}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.certs.clients_ca.cert_path),
            "ssl.certificate.location": str(client.cert_path),
            "ssl.key.location": str(client.key_path),
        }

    def admin(self) -> AdminClient:
        """An admin over PLAINTEXT, whose User:ANONYMOUS is a super user."""
        return AdminClient({"bootstrap.servers": f"127.0.0.1:{self.port('PLAINTEXT')}"})


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    root = tmp_path_factory.mktemp("certs")
    clients_ca = CertificateAuthority(root / "clients", "clients CA")
    alice, bob, carol = (
        clients_ca.issue(name, server=False, subject=x509.Name.from_rfc4514_string(dn))
        for name, dn in (
            ("alice", "CN=alice,OU=eng,O=Acme,C=US"),
            ("bob", "CN=bob,OU=eng,O=Acme,C=US"),
            ("carol", "CN=carol"),
        )
    )
    return Certificates(
        clients_ca,
        clients_ca.issue("mtls-server", server=True),
        alice,
        bob,
        carol,
        CertificateAuthority(root / "a", "CA A"),
        CertificateAuthority(root / "b", "CA B"),
    )


@pytest.fixture(scope="module")
def mtls(certs: Certificates, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MtlsBroker]:
    keystore = tmp_path_factory.mktemp("reload") / "keystore.pem"
    keystore.write_text(certs.ca_a.issue("reload-a", server=True, password=KEY_PASSWORD).keystore_path.read_text())
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,MTLS://127.0.0.1:0,SASLSSL://127.0.0.1:0,RELOAD://127.0.0.1:0,"
        "CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,MTLS:SSL,SASLSSL:SASL_SSL,"
        "RELOAD:SSL",
        "ssl.keystore.location": str(certs.server.keystore_path),
        "ssl.truststore.location": str(certs.clients_ca.cert_path),
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": RULES,
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.saslssl.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="bob" password="{SASL_PASSWORD}" user_bob="{SASL_PASSWORD}";'
        ),
        "listener.name.reload.ssl.truststore.location": "",
        "listener.name.reload.ssl.client.auth": "none",
        "listener.name.reload.ssl.keystore.location": str(keystore),
        "listener.name.reload.ssl.key.password": KEY_PASSWORD,
        "ssl.reload.interval.ms": "200",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    broker = start_broker(tmp_path_factory.mktemp("mtls-broker"), overrides)
    try:
        yield MtlsBroker(broker, certs, keystore)
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()
    assert KEY_PASSWORD not in broker.log_text() and SASL_PASSWORD not in broker.log_text()
    assert "PRIVATE KEY" not in broker.log_text()


def _topic_alice_may_write(mtls: MtlsBroker, prefix: str) -> str:
    """A new topic with an ACL letting User:alice write to it (and nobody else but the super user)."""
    topic = topic_name(prefix)
    admin = mtls.admin()
    new_topic(admin, topic)
    grant(admin, allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    return topic


def _context(cafile: Path, client: Identity | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cafile))
    if client is not None:
        context.load_cert_chain(str(client.cert_path), str(client.key_path))
    return context


@contextlib.contextmanager
def _tls_socket(port: int, context: ssl.SSLContext) -> Iterator[ssl.SSLSocket]:
    """A TLS connection to the broker's ``port`` (handshake done: the served certificate verified by ``context``)."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        yield tls


def _api_versions_answer(port: int, context: ssl.SSLContext) -> bytes:
    """Opens a TLS connection, sends ApiVersions, and returns what comes back before the broker closes (b"" when it
    closes at once)."""
    with _tls_socket(port, context) as tls:
        tls.sendall(API_VERSIONS)
        try:
            return tls.recv(4)
        except (ssl.SSLError, ConnectionResetError):
            return b""


def _served_certificate(port: int, context: ssl.SSLContext) -> bytes:
    with _tls_socket(port, context) as tls:
        served = tls.getpeercert(binary_form=True)
    assert served is not None
    return served


def _replace(path: Path, text: str) -> None:
    """Writes ``path`` as renewal tools do: a new file renamed over the old one."""
    new = path.with_suffix(".new")
    new.write_text(text)
    os.replace(new, path)


def test_acls_apply_to_the_principal_mapped_from_the_certificate(mtls: MtlsBroker) -> None:
    """alice's certificate (CN=alice,OU=eng,...) is User:alice, whom an ACL lets write; bob's is User:bob, who has
    no ACL and is refused (were he User:ANONYMOUS, a super user here, he would be let through)."""
    topic = _topic_alice_may_write(mtls, "mtls")

    assert produce_error(mtls.client_config(mtls.certs.alice), topic) is None
    denied = produce_error(mtls.client_config(mtls.certs.bob), topic)
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    eventually(lambda: "User:bob" in mtls.broker.log_text(), timeout=10, what="the denial of User:bob to be logged")


def test_sasl_ssl_keeps_the_sasl_principal(mtls: MtlsBroker) -> None:
    """On SASL_SSL the principal is the SASL user's even when a client certificate was given (Kafka's rule): bob
    logging in with alice's certificate is bob, and refused where alice may write."""
    topic = _topic_alice_may_write(mtls, "mtls-sasl")
    config = {
        **mtls.client_config(mtls.certs.alice),
        "bootstrap.servers": f"127.0.0.1:{mtls.port('SASLSSL')}",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "bob",
        "sasl.password": SASL_PASSWORD,
    }
    denied = produce_error(config, topic)
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_error(mtls.client_config(mtls.certs.alice), topic) is None


@pytest.mark.parametrize("key", ["ssl.principal.mapping.rules", "listener.name.mtls.ssl.principal.mapping.rules"])
def test_bad_mapping_rules_stop_the_node_naming_the_key(key: str, certs: Certificates) -> None:
    with pytest.raises(ConfigError) as error:
        ServerConfig.from_properties(
            {
                "listeners": "MTLS://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,MTLS:SSL",
                "ssl.keystore.location": str(certs.server.keystore_path),
                key: "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
            }
        )
    message = str(error.value)
    assert message.startswith(f"{key}: invalid rule") and "\n" not in message and "listener MTLS" in message


def test_a_certificate_no_rule_maps_is_refused(mtls: MtlsBroker) -> None:
    """Kafka refuses a connection whose DN no rule maps; alice's, on the same listener, is answered."""
    certs = mtls.certs
    assert _api_versions_answer(mtls.port("MTLS"), _context(certs.clients_ca.cert_path, certs.carol)) == b""
    line = eventually(
        lambda: next((ln for ln in mtls.broker.log_text().splitlines() if "names no principal" in ln), None),
        timeout=10,
        what="the broker to log the unmapped certificate",
    )
    assert "CN=carol" in line and "on listener MTLS" in line
    assert len(_api_versions_answer(mtls.port("MTLS"), _context(certs.clients_ca.cert_path, certs.alice))) == 4


def test_certificates_are_reloaded_without_a_restart(mtls: MtlsBroker) -> None:
    port = mtls.port("RELOAD")
    trusts_a, trusts_b = _context(mtls.certs.ca_a.cert_path), _context(mtls.certs.ca_b.cert_path)
    first = _served_certificate(port, trusts_a)
    with pytest.raises(ssl.SSLCertVerificationError):
        _served_certificate(port, trusts_b)
    # A connection opened before the change goes on with the old certificate.
    with _tls_socket(port, trusts_a) as before:
        renewed = mtls.certs.ca_b.issue("reload-b", server=True, password=KEY_PASSWORD)
        _replace(mtls.keystore, renewed.keystore_path.read_text())

        served = eventually(
            lambda: _served_certificate(port, trusts_b),
            timeout=20,
            retry_on=(ssl.SSLError,),
            what="the RELOAD listener to serve the certificate of CA B",
        )
        assert served != first
        with pytest.raises(ssl.SSLCertVerificationError):
            _served_certificate(port, trusts_a)
        before.sendall(API_VERSIONS)
        assert len(before.recv(4)) == 4
    brokers = (
        AdminClient(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "security.protocol": "SSL",
                "ssl.ca.location": str(mtls.certs.ca_b.cert_path),
            }
        )
        .list_topics(timeout=20)
        .brokers
    )
    assert brokers

    # A half-written file keeps the listener on B, with one line naming the listener and the file.
    pem = renewed.keystore_path.read_text()
    mtls.keystore.write_text(pem[: len(pem) // 2])
    line = eventually(
        lambda: next((ln for ln in mtls.broker.log_text().splitlines() if "keeps its previous TLS" in ln), None),
        timeout=20,
        what="the broker to log the file that does not load",
    )
    assert "listener RELOAD" in line and str(mtls.keystore) in line and "no complete PEM certificate" in line
    assert _served_certificate(port, trusts_b) == served
