"""SASL on client listeners, with a real broker process and real clients: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 over
SASL_PLAINTEXT and SASL_SSL with confluent-kafka, kafka-python, aiokafka, kcat and kafkajs, and with the broker's own
inter-broker client (``wire.client.ClientConnection``); SCRAM users created with
``--add-scram`` and with AlterUserScramCredentials; and what wrong passwords, requests before authenticating,
garbage and huge tokens do (a failure for that connection only, one log line, no secret in it).

One broker serves the module on three listeners: PLAINTEXT (what ``start_broker`` waits on, and the tests' way to
look at the broker unauthenticated), SASL (SASL_PLAINTEXT) and SECURE (SASL_SSL), both with all three mechanisms,
PLAIN users from ``listener.name.*.plain.sasl.jaas.config`` and SCRAM users from the metadata. How long a session
and a failed authentication last, each on a node of its own, is ``test_sasl_timing.py``.
"""

from __future__ import annotations

import asyncio
import shutil
import struct
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError as KafkaPythonError
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, api_versions_request, start_broker
from testkit.tls_certs import CertificateAuthority
from testkit.waiting import eventually
from tests.broker.kafka_clients import run_kafkajs
from tests.broker.sasl_wire import (
    JAAS,
    MECHANISMS,
    PLAIN_PASSWORD,
    SCRAM_PASSWORD,
    WRONG_PASSWORD,
    authenticate,
    handshake,
    metadata_request,
)
from wire import codec, schema
from wire.client import ClientConnection, SaslAuthenticationFailed
from wire.sasl.client import SaslCredentials
from wire.tls import TlsSettings, client_context

REAUTH_MS = 3_600_000


@dataclass(frozen=True)
class SaslBroker:
    broker: BrokerProcess
    ca: CertificateAuthority

    def bootstrap(self, listener: str) -> str:
        host, port = self.broker.endpoints[listener]
        return f"{host}:{port}"

    def port(self, listener: str) -> int:
        return self.broker.endpoints[listener][1]


@pytest.fixture(scope="module")
def sasl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslBroker]:
    ca = CertificateAuthority(tmp_path_factory.mktemp("certs"))
    server = ca.issue("server", server=True)
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL://127.0.0.1:0,SECURE://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,"
        "SECURE:SASL_SSL",
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "listener.name.sasl.plain.sasl.jaas.config": JAAS,
        "listener.name.secure.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.location": str(server.keystore_path),
        "connections.max.reauth.ms": str(REAUTH_MS),
    }
    args = [
        "--add-scram",
        f"SCRAM-SHA-256=[name=admin,password={SCRAM_PASSWORD}]",
        "--add-scram",
        f"SCRAM-SHA-512=[name=admin,password={SCRAM_PASSWORD},iterations=8192]",
    ]
    broker = start_broker(tmp_path_factory.mktemp("sasl-broker"), overrides, args=args)
    try:
        yield SaslBroker(broker, ca)
    finally:
        code = broker.stop()
    assert code == 0, broker.log_text()
    log = broker.log_text()
    for secret in (PLAIN_PASSWORD, SCRAM_PASSWORD, WRONG_PASSWORD):
        assert secret not in log


def _password(mechanism: str) -> str:
    return PLAIN_PASSWORD if mechanism == "PLAIN" else SCRAM_PASSWORD


def _config(
    sasl: SaslBroker, listener: str, mechanism: str, user: str = "admin", password: str | None = None
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": sasl.bootstrap(listener),
        "security.protocol": "SASL_SSL" if listener == "SECURE" else "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password if password is not None else _password(mechanism),
    }
    if listener == "SECURE":
        config["ssl.ca.location"] = str(sasl.ca.cert_path)
    return config


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

        eventually(three, timeout=60, what=lambda: f"three records of {topic} over SASL, got {got}")
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("listener", ["SASL", "SECURE"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_round_trip(sasl: SaslBroker, listener: str, mechanism: str) -> None:
    topic = f"sasl-confluent-{mechanism.lower()}-{uuid.uuid4().hex[:8]}"
    assert _round_trip(_config(sasl, listener, mechanism), topic) == [b"value-0", b"value-1", b"value-2"]


def test_metadata_over_sasl_names_the_sasl_listener(sasl: SaslBroker) -> None:
    brokers = AdminClient(_config(sasl, "SASL", "SCRAM-SHA-256")).list_topics(timeout=20).brokers
    assert [f"{b.host}:{b.port}" for b in brokers.values()] == [sasl.bootstrap("SASL")]


def _kafka_python(sasl: SaslBroker, listener: str, mechanism: str) -> dict[str, Any]:
    options: dict[str, Any] = {
        "bootstrap_servers": sasl.bootstrap(listener),
        "security_protocol": "SASL_SSL" if listener == "SECURE" else "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "admin",
        "sasl_plain_password": _password(mechanism),
    }
    if listener == "SECURE":
        options["ssl_cafile"] = str(sasl.ca.cert_path)
    return options


@pytest.mark.parametrize(
    ("listener", "mechanism"), [("SASL", "SCRAM-SHA-512"), ("SASL", "PLAIN"), ("SECURE", "SCRAM-SHA-256")]
)
def test_kafka_python_round_trip(sasl: SaslBroker, listener: str, mechanism: str) -> None:
    topic = f"sasl-kafka-python-{uuid.uuid4().hex[:8]}"
    options = _kafka_python(sasl, listener, mechanism)
    producer = KafkaProducer(acks="all", **options)
    producer.send(topic, b"over sasl").get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=20000, **options)
    try:
        assert next(iter(consumer)).value == b"over sasl"
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("listener", "mechanism"), [("SASL", "SCRAM-SHA-256"), ("SECURE", "SCRAM-SHA-512"), ("SECURE", "PLAIN")]
)
def test_aiokafka_round_trip(sasl: SaslBroker, listener: str, mechanism: str) -> None:
    topic = f"sasl-aiokafka-{uuid.uuid4().hex[:8]}"
    options: dict[str, Any] = {
        "bootstrap_servers": sasl.bootstrap(listener),
        "security_protocol": "SASL_SSL" if listener == "SECURE" else "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "admin",
        "sasl_plain_password": _password(mechanism),
    }
    if listener == "SECURE":
        options["ssl_context"] = create_ssl_context(cafile=str(sasl.ca.cert_path))

    async def run() -> bytes:
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"over sasl")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **options)
        await consumer.start()
        try:
            message = await asyncio.wait_for(consumer.getone(), timeout=30)
        finally:
            await consumer.stop()
        return bytes(message.value or b"")

    assert asyncio.run(run()) == b"over sasl"


_KAFKAJS_ROUND_TRIP = r"""
const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');
const [bootstrap, topic, mechanism, password, ca] = process.argv.slice(1);
const kafka = new Kafka({
  clientId: 'fjord-sasl-test', brokers: [bootstrap], logLevel: logLevel.NOTHING,
  ssl: ca ? { ca: [fs.readFileSync(ca, 'utf-8')] } : false,
  sasl: { mechanism, username: 'admin', password },
});
(async () => {
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({ topic, messages: [{ value: 'over sasl' }] });
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: `g-${topic}`, maxWaitTimeInMs: 200 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const value = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('no record within 25 s')), 25000);
    consumer.run({ eachMessage: async ({ message }) => { clearTimeout(timer); resolve(message.value.toString()); } });
  });
  await consumer.disconnect();
  console.log(JSON.stringify(value));
})().catch((e) => { console.error(e.message); process.exit(1); });
"""


@pytest.mark.parametrize(("listener", "mechanism"), [("SECURE", "SCRAM-SHA-512"), ("SASL", "PLAIN")])
def test_kafkajs_round_trip(sasl: SaslBroker, listener: str, mechanism: str) -> None:
    topic = f"sasl-kafkajs-{uuid.uuid4().hex[:8]}"
    ca = str(sasl.ca.cert_path) if listener == "SECURE" else ""
    got = run_kafkajs(_KAFKAJS_ROUND_TRIP, sasl.bootstrap(listener), topic, mechanism.lower(), _password(mechanism), ca)
    assert got == "over sasl"


@pytest.mark.parametrize(("listener", "mechanism"), [("SECURE", "SCRAM-SHA-512"), ("SASL", "PLAIN")])
def test_the_inter_broker_client_connection_authenticates(sasl: SaslBroker, listener: str, mechanism: str) -> None:
    """wire.client.ClientConnection, as brokers connect to each other: TLS with the host name checked, SaslHandshake
    and SaslAuthenticate with the product's client state machines, then requests; before the session lifetime the
    broker announced (connections.max.reauth.ms) ends it re-authenticates on the same connection, and after an idle
    spell past the end it reconnects; a wrong password is refused."""
    tls = client_context(TlsSettings(truststore_location=str(sasl.ca.cert_path))) if listener == "SECURE" else None
    now = [0.0]

    async def run(password: str) -> list[tuple[int, int, int]]:
        connection = ClientConnection(
            "127.0.0.1",
            sasl.port(listener),
            ssl_context=tls,
            sasl=SaslCredentials(mechanism, "admin", password),
            timeout=15,
            clock=lambda: now[0],
            idle_timeout=None,  # the spells between requests are session lifetimes, longer than the client's idle
        )
        seen: list[tuple[int, int, int]] = []
        try:
            for advance_s in (0.0, REAUTH_MS / 1000 * 0.5, REAUTH_MS / 1000 * 0.46, REAUTH_MS / 1000 * 2):
                now[0] += advance_s
                answer = await connection.request(metadata_request())
                assert connection._writer is not None
                seen.append((len(answer.brokers), connection.authentications, id(connection._writer)))
        finally:
            await connection.close()
        return seen

    seen = asyncio.run(run(_password(mechanism)))
    assert [(brokers, count) for brokers, count, _ in seen] == [(1, 1), (1, 1), (1, 2), (1, 3)]
    writers = [writer for _, _, writer in seen]
    assert writers[0] == writers[1] == writers[2], "re-authentication kept the connection"
    with pytest.raises(SaslAuthenticationFailed, match=f"{mechanism}, user admin"):
        asyncio.run(run(WRONG_PASSWORD))


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by scripts/install-system-deps.sh")
def test_kcat_over_sasl_ssl_with_scram(sasl: SaslBroker) -> None:
    topic = f"sasl-kcat-{uuid.uuid4().hex[:8]}"
    common = [
        "kcat",
        "-b",
        sasl.bootstrap("SECURE"),
        "-X",
        "security.protocol=sasl_ssl",
        "-X",
        f"ssl.ca.location={sasl.ca.cert_path}",
        "-X",
        "sasl.mechanism=SCRAM-SHA-512",
        "-X",
        "sasl.username=admin",
        "-X",
        f"sasl.password={SCRAM_PASSWORD}",
    ]
    produced = subprocess.run(
        [*common, "-P", "-t", topic], input="one\ntwo\n", capture_output=True, text=True, timeout=60, check=False
    )
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [*common, "-C", "-t", topic, "-o", "beginning", "-c", "2", "-e"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == ["one", "two"]


def _failure_lines(sasl: SaslBroker, user: str) -> list[str]:
    return [
        line
        for line in sasl.broker.log_text().splitlines()
        if "SASL authentication failed" in line and f"user '{user}'" in line
    ]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_is_an_authentication_failure(sasl: SaslBroker, mechanism: str) -> None:
    user = f"mallory-{mechanism.lower()}"
    errors: list[KafkaError] = []
    config = _config(sasl, "SASL", mechanism, user=user, password=WRONG_PASSWORD)
    admin = AdminClient({**config, "error_cb": errors.append, "reconnect.backoff.ms": 1000, "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)

    def reported() -> bool:
        admin.poll(0.5)
        return any(e.code() == KafkaError._AUTHENTICATION for e in errors)

    eventually(reported, timeout=10, what=lambda: f"an authentication error reported to the client, got {errors}")
    lines = eventually(lambda: _failure_lines(sasl, user), timeout=10, what="the broker to log the failure")
    assert "on listener SASL" in lines[0] and f"mechanism {mechanism}" in lines[0]
    assert WRONG_PASSWORD not in sasl.broker.log_text()


def test_kafka_python_reports_a_wrong_password(sasl: SaslBroker, caplog: pytest.LogCaptureFixture) -> None:
    """kafka-python retries its bootstrap until ``bootstrap_timeout_ms`` (30 s unless set); each attempt reports the
    broker's error code."""
    options = _kafka_python(sasl, "SASL", "SCRAM-SHA-256")
    options["sasl_plain_username"], options["sasl_plain_password"] = "mallory-kp", WRONG_PASSWORD
    with pytest.raises(KafkaPythonError):
        KafkaProducer(**options, bootstrap_timeout_ms=3000)
    assert any("SaslAuthenticationFailedError" in r.getMessage() for r in caplog.records)
    eventually(lambda: _failure_lines(sasl, "mallory-kp"), timeout=10, what="the broker to log the failure")


def test_a_request_before_authenticating_closes_only_that_connection(sasl: SaslBroker) -> None:
    with WireClient(sasl.port("SASL")) as early, WireClient(sasl.port("SASL")) as other:
        assert other.request(api_versions_request(3)).error_code == 0  # allowed before authenticating
        early.send(metadata_request())
        assert early.is_closed_by_peer()
        assert handshake(other, "PLAIN").error_code == ErrorCode.none
        answer = authenticate(other, f"\x00alice\x00{PLAIN_PASSWORD}".encode())
        assert answer.error_code == ErrorCode.none and answer.session_lifetime.total_seconds() * 1000 == REAUTH_MS
        assert other.request(metadata_request()).brokers  # authenticated: served
    assert "is refused: it is not authenticated" in sasl.broker.log_text()


def test_garbage_and_huge_tokens_fail_that_connection_only(sasl: SaslBroker) -> None:
    with WireClient(sasl.port("SASL")) as garbage:
        assert handshake(garbage, "SCRAM-SHA-256").error_code == ErrorCode.none
        answer = authenticate(garbage, b"\xff\x00 not scram at all")
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        garbage.send(metadata_request())
        assert garbage.is_closed_by_peer()
    with WireClient(sasl.port("SASL"), timeout=30) as large:  # under the limit: a wrong password like any other
        assert handshake(large, "PLAIN").error_code == ErrorCode.none
        answer = authenticate(large, b"\x00alice\x00" + b"x" * 500_000)
        assert answer.error_code == ErrorCode.sasl_authentication_failed
    with WireClient(sasl.port("SASL"), timeout=30) as huge:  # over sasl.server.max.receive.size: closed unread
        assert handshake(huge, "PLAIN").error_code == ErrorCode.none
        huge.send(schema.build(codec.request_class(36, 2), auth_bytes=b"\x00alice\x00" + b"x" * 600_000))
        assert huge.is_closed_by_peer()
    assert "(sasl.server.max.receive.size)" in sasl.broker.log_text()
    with WireClient(sasl.port("SASL")) as unknown:
        answer = handshake(unknown, "GSSAPI")
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism and answer.mechanisms == MECHANISMS
    with WireClient(sasl.port("SASL")) as early:
        assert authenticate(early, b"\x00alice\x00x").error_code == ErrorCode.illegal_sasl_state
    assert AdminClient(_config(sasl, "SASL", "PLAIN")).list_topics(timeout=20).brokers  # others still served


def test_large_requests_are_served_once_authenticated(sasl: SaslBroker) -> None:
    """The pre-authentication limit (512 KiB) is lifted for an authenticated connection."""
    topic = f"sasl-large-{uuid.uuid4().hex[:8]}"
    producer = Producer({**_config(sasl, "SASL", "SCRAM-SHA-256"), "linger.ms": 0})
    errors: list[object] = []
    producer.produce(topic, b"v" * 700_000, on_delivery=lambda err, _m: errors.extend([err] if err else []))
    assert producer.flush(30) == 0 and not errors


def test_sasl_apis_on_a_plaintext_listener_are_an_illegal_state(sasl: SaslBroker) -> None:
    with WireClient(sasl.port("PLAINTEXT")) as client:
        assert handshake(client, "PLAIN").error_code == ErrorCode.illegal_sasl_state
        assert client.request(metadata_request()).brokers


def test_handshake_v0_then_raw_tokens(sasl: SaslBroker) -> None:
    """Old clients: after SaslHandshake v0 the token goes as a bare length and bytes, and so does the answer."""
    with WireClient(sasl.port("SASL")) as client:
        assert handshake(client, "PLAIN", version=0).error_code == ErrorCode.none
        token = f"\x00alice\x00{PLAIN_PASSWORD}".encode()
        client.send_raw(struct.pack(">i", len(token)) + token)
        assert client.read_frame() == b""
        assert client.request(metadata_request()).brokers
    with WireClient(sasl.port("SASL")) as wrong:
        assert handshake(wrong, "PLAIN", version=0).error_code == ErrorCode.none
        token = f"\x00alice\x00{WRONG_PASSWORD}".encode()
        wrong.send_raw(struct.pack(">i", len(token)) + token)
        assert wrong.is_closed_by_peer()


def test_reauthentication_keeps_the_connection(sasl: SaslBroker) -> None:
    token = f"\x00alice\x00{PLAIN_PASSWORD}".encode()
    with WireClient(sasl.port("SASL")) as client:
        for _ in range(2):  # the authentication, then a re-authentication
            assert handshake(client, "PLAIN").error_code == ErrorCode.none
            assert authenticate(client, token, version=1).error_code == ErrorCode.none
            assert client.request(metadata_request()).brokers
        # Within a second of the last re-authentication's start none begins: as Kafka's KafkaApis, the handshake
        # is answered ILLEGAL_SASL_STATE without mechanisms, a stray SaslAuthenticate likewise, and the
        # connection goes on.
        again = handshake(client, "PLAIN")
        assert (again.error_code, list(again.mechanisms)) == (ErrorCode.illegal_sasl_state, [])
        stray = authenticate(client, token)
        assert (stray.error_code, stray.error_message) == (
            ErrorCode.illegal_sasl_state, "SaslAuthenticate request received after successful authentication")
        assert client.request(metadata_request()).brokers
    with WireClient(sasl.port("SASL")) as client:
        assert handshake(client, "PLAIN").error_code == ErrorCode.none
        assert authenticate(client, token).error_code == ErrorCode.none
        assert handshake(client, "PLAIN").error_code == ErrorCode.none
        other = authenticate(client, f"\x00admin\x00{PLAIN_PASSWORD}".encode())
        assert other.error_code == ErrorCode.sasl_authentication_failed
        assert "Cannot change principals" in other.error_message
    with WireClient(sasl.port("SASL")) as client:  # a re-authentication must keep the mechanism
        assert handshake(client, "PLAIN").error_code == ErrorCode.none
        assert authenticate(client, token).error_code == ErrorCode.none
        assert handshake(client, "SCRAM-SHA-256").error_code == ErrorCode.none
        client.send(schema.build(codec.request_class(36, 2), auth_bytes=b"n,,n=admin,r=nonce"))
        assert client.is_closed_by_peer()  # unanswered, as Kafka's REAUTH_BAD_MECHANISM
    assert "not supported for re-authentication of mechanism 'PLAIN'" in sasl.broker.log_text()


def test_scram_users_created_and_deleted_with_alter_user_scram_credentials(sasl: SaslBroker) -> None:
    user = f"carol-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(_config(sasl, "SASL", "SCRAM-SHA-512"))
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"carol-secret"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    described = admin.describe_user_scram_credentials([user])[user].result(timeout=30)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)
    ]

    topic = f"sasl-carol-{uuid.uuid4().hex[:8]}"
    assert _round_trip(_config(sasl, "SECURE", "SCRAM-SHA-512", user=user, password="carol-secret"), topic)

    deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        future.result(timeout=30)
    with pytest.raises(KafkaException):
        AdminClient(_config(sasl, "SASL", "SCRAM-SHA-512", user=user, password="carol-secret")).list_topics(timeout=10)
    with pytest.raises(KafkaException):  # deleting it again: it does not exist
        admin.alter_user_scram_credentials([deletion])[user].result(timeout=30)


def test_kafka_python_admin_describes_the_bootstrap_user(sasl: SaslBroker) -> None:
    admin = KafkaAdminClient(**_kafka_python(sasl, "SASL", "SCRAM-SHA-256"))
    try:
        described = admin.describe_user_scram_credentials(["admin"])
    finally:
        admin.close()
    text = repr(described)
    assert "admin" in text and "8192" in text and "4096" in text


def test_describe_and_alter_user_scram_credentials_on_the_wire(sasl: SaslBroker) -> None:
    describe = codec.request_class(50, 0)
    alter = codec.request_class(51, 0)
    with WireClient(sasl.port("PLAINTEXT")) as client:
        everyone = client.request(schema.build(describe, users=None))
        admin = next(r for r in everyone.results if r.user == "admin")
        assert [(i.mechanism, i.iterations) for i in admin.credential_infos] == [(1, 4096), (2, 8192)]
        named = client.request(
            schema.build(
                describe, users=tuple(schema.build_nested(describe, "users", name=n) for n in ("x", "x", "nobody"))
            )
        )
        assert [(r.user, r.error_code) for r in named.results] == [
            ("x", ErrorCode.duplicate_resource),
            ("nobody", ErrorCode.resource_not_found),
        ]
        refused = client.request(
            schema.build(
                alter,
                deletions=(schema.build_nested(alter, "deletions", name="nobody", mechanism=1),),
                upsertions=(
                    schema.build_nested(
                        alter, "upsertions", name="weak", mechanism=1, iterations=10, salt=b"s", salted_password=b"p"
                    ),
                    schema.build_nested(
                        alter, "upsertions", name="odd", mechanism=9, iterations=4096, salt=b"s", salted_password=b"p"
                    ),
                ),
            )
        )
        assert [(r.user, r.error_code) for r in refused.results] == [
            ("nobody", ErrorCode.resource_not_found),
            ("weak", ErrorCode.unacceptable_credential),
            ("odd", ErrorCode.unsupported_sasl_mechanism),
        ]
