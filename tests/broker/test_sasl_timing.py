"""How long a SASL session and a failed authentication last, each on a node of its own whose settings make the times
short enough to watch: KIP-368 ``connections.max.reauth.ms`` (librdkafka re-authenticates on its open connection,
a raw connection that does not is closed at its next request) and KIP-306
``connection.failed.authentication.delay.ms`` (the failure's answer is held, the connections next to it are
served). The mechanisms and clients on one shared broker are ``test_sasl.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from node.process import Node
from settings.server import ServerConfig
from testkit.node_process import WireClient, api_versions_request, start_broker
from testkit.waiting import eventually
from tests.broker.sasl_wire import (
    JAAS,
    PLAIN_PASSWORD,
    SCRAM_PASSWORD,
    WRONG_PASSWORD,
    authenticate,
    handshake,
    metadata_request,
)
from tests.metrics_scrape import metrics_url, scrape
from wire import codec, schema


def _metric(text: str, name: str, listener: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and f'listener="{listener}"' in line
    )


def test_sessions_end_after_connections_max_reauth_ms_and_clients_reauthenticate(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """KIP-368 with a short session: librdkafka re-authenticates on its open connection before the end (more
    authentications than connections), and a raw connection that does not is closed at its next request."""
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN",
        "sasl.jaas.config": JAAS,
        "connections.max.reauth.ms": "1500",
        "metrics.port": "0",
    }
    args = ["--add-scram", f"SCRAM-SHA-256=[name=admin,password={SCRAM_PASSWORD}]"]
    broker = start_broker(tmp_path_factory.mktemp("reauth-broker"), overrides, args=args)
    try:
        port = broker.endpoints["SASL"][1]
        with WireClient(port) as client:
            assert handshake(client, "PLAIN").error_code == ErrorCode.none
            answer = authenticate(client, f"\x00alice\x00{PLAIN_PASSWORD}".encode())
            assert answer.session_lifetime.total_seconds() == 1.5

            def closed() -> bool:
                try:
                    client.request(metadata_request())
                except (ConnectionError, OSError):
                    return True
                return False

            eventually(closed, timeout=20, interval=0.2, what="the expired session's connection to close")
        assert "expired (connections.max.reauth.ms=1500)" in broker.log_text()

        url = metrics_url(broker.log_text())
        with WireClient(port) as wrong:
            assert handshake(wrong, "PLAIN").error_code == ErrorCode.none
            failed = authenticate(wrong, f"\x00alice\x00{WRONG_PASSWORD}".encode())
            assert failed.error_code == ErrorCode.sasl_authentication_failed
        counted = scrape(url)
        assert 'fjord_broker_authentication_failures_total{listener="SASL",mechanism="PLAIN"} 1.0' in counted
        topic = f"sasl-reauth-{uuid.uuid4().hex[:8]}"
        producer = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "admin",
                "sasl.password": SCRAM_PASSWORD,
            }
        )
        failures: list[str] = []

        def reauthenticated() -> bool:
            producer.produce(topic, b"x", on_delivery=lambda err, _m: failures.extend([str(err)] if err else []))
            producer.flush(10)
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
            accepted = _metric(text, "fjord_broker_connections_accepted_total", "SASL")
            return _metric(text, "fjord_broker_authentications_total", "SASL") > accepted > 0

        eventually(reauthenticated, timeout=30, interval=0.3, what="librdkafka to re-authenticate a connection")
        assert producer.flush(10) == 0 and not failures
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()


FAILURE_DELAY_MS = 1500


def _fail_authentication(port: int, sent: threading.Event) -> tuple[int, float]:
    """A wrong PLAIN password: the error code answered and how long after the token was sent."""
    with WireClient(port) as client:
        assert handshake(client, "PLAIN").error_code == ErrorCode.none
        token = f"\x00alice\x00{WRONG_PASSWORD}".encode()
        started = time.monotonic()
        client.send(schema.build(codec.request_class(36, 2), auth_bytes=token))
        sent.set()
        _, answer = client.receive(36, 2)
        return int(answer.error_code), time.monotonic() - started


def _api_versions_once_sent(port: int, sent: threading.Event) -> int:
    assert sent.wait(10.0)
    with WireClient(port) as client:
        return int(client.request(api_versions_request(3)).error_code)


async def test_a_failed_authentication_is_answered_after_the_delay_and_holds_no_other_connection(
    tmp_path: Path,
) -> None:
    """KIP-306: ``connection.failed.authentication.delay.ms`` holds the answer to a failed exchange, so a password
    guesser gets few tries a second; the connections next to it are served meanwhile. A node of its own, in this
    process, with a delay long enough to tell the two apart."""
    overrides = {
        "node.id": "0",
        "controller.quorum.voters": "0@127.0.0.1:0",
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl.plain.sasl.jaas.config": JAAS,
        "connection.failed.authentication.delay.ms": str(FAILURE_DELAY_MS),
        "log.dirs": str(tmp_path / "kraft"),
        "s3.data.buckets": f"0@file://{tmp_path / 'objects'}",
        "s3.wal.path": f"0@file://{tmp_path / 'wal'}",
    }
    node = Node(ServerConfig.load(None, [f"{key}={value}" for key, value in overrides.items()]))
    await node.start()
    try:
        port = next(endpoint.port for endpoint in node.broker.bound_endpoints if endpoint.name == "SASL")
        sent = threading.Event()
        failing = asyncio.create_task(asyncio.to_thread(_fail_authentication, port, sent))
        other = asyncio.create_task(asyncio.to_thread(_api_versions_once_sent, port, sent))
        done, _ = await asyncio.wait({failing, other}, timeout=30.0, return_when=asyncio.FIRST_COMPLETED)
        assert done == {other} and other.result() == 0  # answered while the failure's answer was held
        code, elapsed = await asyncio.wait_for(failing, 30.0)
        assert code == ErrorCode.sasl_authentication_failed
        assert elapsed >= FAILURE_DELAY_MS / 1000
    finally:
        await node.stop()
