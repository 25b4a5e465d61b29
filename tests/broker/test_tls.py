"""TLS on client listeners, with real clients: confluent-kafka, kafka-python and kcat over SSL, mutual TLS, inline
PEM keys (KIP-651), and what a bad handshake or a bad key file does.

One broker serves the module on three listeners: PLAINTEXT (what ``start_broker`` waits on), SSL (key and chain in
one PEM file, the key encrypted with ``ssl.key.password``) and MTLS (an SSL listener whose ``listener.name.mtls.*``
overrides give an inline key and chain, inline CA certificates and ``ssl.client.auth=required``).
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer

from settings.describe import describe_broker_configs
from settings.server import ServerConfig
from storage.config import ConfigError
from testkit.node_process import BrokerProcess, default_overrides, server_command, start_broker
from testkit.tls_certs import CertificateAuthority, Identity
from testkit.waiting import eventually
from tests.node.cli_exit import assert_one_line_error, run_to_exit

KEY_PASSWORD = "keystore-pass-never-printed"


@dataclass(frozen=True)
class TlsBroker:
    broker: BrokerProcess
    ca: CertificateAuthority
    client: Identity  # a certificate the CA signed, for the MTLS listener

    def bootstrap(self, listener: str) -> str:
        host, port = self.broker.endpoints[listener]
        return f"{host}:{port}"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    certs = tmp_path_factory.mktemp("certs")
    ca = CertificateAuthority(certs)
    server = ca.issue("server", server=True, password=KEY_PASSWORD)
    inline = ca.issue("inline-server", server=True)
    client = ca.issue("client", server=False)
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(server.keystore_path),
        "ssl.key.password": KEY_PASSWORD,
        "listener.name.mtls.ssl.keystore.location": "",
        "listener.name.mtls.ssl.key.password": "",
        "listener.name.mtls.ssl.keystore.key": inline.key_pem,
        "listener.name.mtls.ssl.keystore.certificate.chain": inline.cert_pem,
        "listener.name.mtls.ssl.truststore.certificates": ca.cert_pem,
        "listener.name.mtls.ssl.client.auth": "required",
    }
    broker = start_broker(tmp_path_factory.mktemp("tls-broker"), overrides)
    try:
        yield TlsBroker(broker, ca, client)
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()
    assert KEY_PASSWORD not in broker.log_text()
    assert "PRIVATE KEY" not in broker.log_text()


def _ssl_config(tls: TlsBroker, listener: str, **extra: str) -> dict[str, Any]:
    return {"bootstrap.servers": tls.bootstrap(listener), "security.protocol": "SSL",
            "ssl.ca.location": str(tls.ca.cert_path), **extra}


def _round_trip(config: dict[str, Any], topic: str) -> list[bytes]:
    producer = Producer(config)
    for i in range(3):
        producer.produce(topic, f"value-{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        def three() -> bool:
            message = consumer.poll(1.0)
            value = message.value() if message is not None and message.error() is None else None
            if value is not None:
                got.append(value)
            return len(got) >= 3
        eventually(three, timeout=60, what=lambda: f"three records of {topic} over TLS, got {got}")
    finally:
        consumer.close()
    return got


def test_confluent_kafka_round_trip_over_ssl(tls: TlsBroker) -> None:
    topic = f"tls-confluent-{uuid.uuid4().hex[:8]}"
    assert _round_trip(_ssl_config(tls, "SSL"), topic) == [b"value-0", b"value-1", b"value-2"]


def test_metadata_over_ssl_names_the_ssl_listener(tls: TlsBroker) -> None:
    """A client that bootstrapped over TLS is sent the SSL listener's address, so it stays on TLS."""
    brokers = AdminClient(_ssl_config(tls, "SSL")).list_topics(timeout=20).brokers
    assert [f"{b.host}:{b.port}" for b in brokers.values()] == [tls.bootstrap("SSL")]


def test_kafka_python_over_ssl(tls: TlsBroker) -> None:
    topic = f"tls-kafka-python-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=tls.bootstrap("SSL"), security_protocol="SSL",
                             ssl_cafile=str(tls.ca.cert_path), acks="all")
    producer.send(topic, b"over tls").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=tls.bootstrap("SSL"), security_protocol="SSL",
                             ssl_cafile=str(tls.ca.cert_path), auto_offset_reset="earliest",
                             consumer_timeout_ms=20000)
    try:
        assert next(iter(consumer)).value == b"over tls"
    finally:
        consumer.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/install-system-deps.sh")
def test_kcat_over_ssl(tls: TlsBroker) -> None:
    topic = f"tls-kcat-{uuid.uuid4().hex[:8]}"
    common = ["kcat", "-b", tls.bootstrap("SSL"), "-X", "security.protocol=ssl",
              "-X", f"ssl.ca.location={tls.ca.cert_path}"]
    subprocess.run([*common, "-P", "-t", topic], input="one\ntwo\n", check=True, capture_output=True, text=True,
                   timeout=60)
    consumed = subprocess.run([*common, "-C", "-t", topic, "-o", "beginning", "-c", "2", "-e"], check=True,
                              capture_output=True, text=True, timeout=60)
    assert consumed.stdout.split() == ["one", "two"]


def test_mutual_tls_refuses_a_client_without_a_certificate(tls: TlsBroker) -> None:
    without = AdminClient(_ssl_config(tls, "MTLS"))
    with pytest.raises(KafkaException):
        without.list_topics(timeout=5)
    eventually(lambda: "on listener MTLS" in tls.broker.log_text(), timeout=10,
               what="the broker to log the refused handshake")

    with_cert = AdminClient(_ssl_config(tls, "MTLS", **{"ssl.certificate.location": str(tls.client.cert_path),
                                                        "ssl.key.location": str(tls.client.key_path)}))
    assert with_cert.list_topics(timeout=20).brokers


def test_mtls_listener_serves_its_inline_certificate(tls: TlsBroker) -> None:
    """The MTLS listener's inline chain (listener.name.mtls.ssl.keystore.*) is what it presents, not the global
    keystore file's."""
    context = ssl.create_default_context(cafile=str(tls.ca.cert_path))
    context.load_cert_chain(str(tls.client.cert_path), str(tls.client.key_path))
    host, port = tls.broker.endpoints["MTLS"]
    with socket.create_connection((host, port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as wrapped:
        served = wrapped.getpeercert(binary_form=True)
    assert served == ssl.PEM_cert_to_DER_cert((tls.ca.directory / "inline-server.cert.pem").read_text())


def test_garbage_before_the_handshake_closes_only_that_connection(tls: TlsBroker) -> None:
    host, port = tls.broker.endpoints["SSL"]
    with socket.create_connection((host, port), timeout=10) as garbage:
        garbage.sendall(b"\x00\x00\x00\x0c\x00\x12\x00\x03 not TLS at all")
        assert garbage.recv(100) == b""  # closed by the broker
        local_port = garbage.getsockname()[1]
    # The peer and the listener together: an earlier test's connection to another listener may have had the same
    # ephemeral port, and its line must not be taken for this one.
    peer = f"127.0.0.1:{local_port} on listener SSL"
    line = eventually(
        lambda: next((ln for ln in tls.broker.log_text().splitlines() if peer in ln), None),
        timeout=10, what="the broker to log the failed handshake",
    )
    assert "TLS handshake failed" in line
    assert tls.broker.proc.poll() is None
    assert AdminClient(_ssl_config(tls, "SSL")).list_topics(timeout=20).brokers  # others are still served


def test_a_wrong_key_password_is_one_line_at_start(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "certs")
    server = ca.issue("server", server=True, password=KEY_PASSWORD)
    settings = default_overrides(tmp_path)
    settings.update({
        "listeners": "SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "ssl.keystore.location": str(server.keystore_path),
        "ssl.key.password": "not-the-password",
    })
    result = run_to_exit(server_command(None, settings))
    assert_one_line_error(result, "ssl.key.password", "wrong")
    assert "not-the-password" not in result.stderr and KEY_PASSWORD not in result.stderr


def test_a_missing_keystore_file_is_one_line_at_start(tmp_path: Path) -> None:
    settings = default_overrides(tmp_path)
    settings.update({
        "listeners": "SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.name.ssl.ssl.keystore.location": str(tmp_path / "absent.pem"),
    })
    assert_one_line_error(run_to_exit(server_command(None, settings)), "listener.name.ssl.ssl.keystore.location",
                          "absent.pem")


@pytest.mark.parametrize(
    ("garbage", "named"),
    [
        ("chain", "ssl.keystore.certificate.chain"),
        ("chain body", "ssl.keystore.certificate.chain"),
        ("key", "ssl.keystore.key"),
    ],
)
def test_an_unusable_inline_key_or_chain_names_its_own_key(tmp_path: Path, garbage: str, named: str) -> None:
    inline = CertificateAuthority(tmp_path).issue("inline-server", server=True)
    broken = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
    properties = {
        "listeners": "SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
        "ssl.keystore.key": "not a key" if garbage == "key" else inline.key_pem,
        "ssl.keystore.certificate.chain": {"chain": "not a chain", "chain body": broken}.get(garbage, inline.cert_pem),
    }
    with pytest.raises(ConfigError) as info:
        ServerConfig.from_properties(properties)
    assert str(info.value).startswith(f"{named}: "), str(info.value)
    assert "PRIVATE KEY" not in str(info.value)


def test_ssl_listeners_are_advertised_as_ssl(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    server = ca.issue("server", server=True)
    config = ServerConfig.from_properties({
        "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
        "advertised.listeners": "PLAINTEXT://broker:9092,SSL://broker:9094",
        "ssl.keystore.location": str(server.keystore_path),
        "listener.name.ssl.ssl.client.auth": "requested",
        "ssl.truststore.location": str(ca.cert_path),
    })
    assert {e.name: e.security_protocol for e in config.advertised_endpoints()} == {
        "PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
    assert set(config.tls) == {"SSL"}
    assert config.tls["SSL"].settings.client_auth == "requested"
    assert config.tls["SSL"].keys["client_auth"] == "listener.name.ssl.ssl.client.auth"
    assert config.tls["SSL"].context().verify_mode == ssl.CERT_OPTIONAL


def test_describe_configs_never_sends_a_key_password(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    server = ca.issue("server", server=True, password=KEY_PASSWORD)
    config = ServerConfig.from_properties({
        "listeners": "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093",
        "ssl.keystore.location": str(server.keystore_path),
        "ssl.key.password": KEY_PASSWORD,
    })
    (entry,) = describe_broker_configs(config, {}, names=["ssl.key.password"])
    assert entry.is_sensitive and entry.value is None
    assert entry.synonyms and all(synonym.value is None for synonym in entry.synonyms)
    assert KEY_PASSWORD not in repr(config.tls["SSL"])
