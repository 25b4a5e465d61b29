"""The hostile-client sweep (issue 26): every listener kind, every API served, every client-supplied string field,
against one real node with a PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL and CONTROLLER listener and ACLs on.

- **Slowloris**: a connection that sends part of a TLS handshake, of a SASL exchange or of a request frame, and
  then a byte every few hundred milliseconds, is never idle; it is closed once ``fjord.connections.setup.max.ms``
  has passed since it was accepted (before it authenticated or sent a whole request) or once one request frame has
  been half received for ``connections.max.idle.ms`` (after), within the sweep's margin, on every listener kind;
  a well-behaved client on the same node is served throughout.
- **Lying bodies**: for every API a listener lists in ApiVersions (PLAINTEXT and CONTROLLER as ``User:ANONYMOUS``,
  SASL_PLAINTEXT logged in as a user without rights), a frame over ``socket.request.max.bytes`` closes its
  connection, and a body declaring 2**31-1 elements (at the top or nested inside one element) gets an error code or
  closes that connection only; the node keeps serving another client through all of it.
- **Injection**: a user without rights and one with rights send every API with every string field (topics, groups,
  transactional ids, member and instance ids, racks, client software name and version, share groups, ...) and the
  client id set to a newline, a forged log line, an ANSI escape and 30 KiB; a failed login sends them as user
  name and mechanism. Every log line still starts with the broker's prefix, no ESC byte reaches the log, no line
  is longer than a cap, and ``/metrics`` holds none of it.

The module ends by checking the log for tracebacks.
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AclOperation, AdminClient, ResourceType
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, api_versions_request, start_broker
from testkit.tls_certs import CertificateAuthority
from tests.broker.acl_clients import allow, grant
from tests.broker.test_hostile_labels_logs import FORGED, LOG_LINE
from tests.broker.test_hostile_requests import Profile, hostile
from tests.hostile_bodies import claiming_body, frame
from tests.metrics_scrape import metrics_url, scrape
from wire import codec, schema
from wire.codec import UnsupportedRequestError

PASSWORD = "sweep-pass-never-logged"
SETUP_S = 1.5  # fjord.connections.setup.max.ms
FRAME_S = 3.0  # connections.max.idle.ms: also the bound on a request half received
#: The sweep looks every quarter of the smallest bound; a close comes within two sweeps of a bound, plus slack for
#: a loaded machine.
MARGIN_S = 2 * SETUP_S / 4 + 1.5
MAX_REQUEST = 2 * 1024 * 1024  # socket.request.max.bytes
TRICKLE_S = 0.3
#: No log line may be longer (a client string is cut at 256 characters; a leak would be a 30 KiB line).
LINE_CAP = 8 * 1024
CASE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SweepNode:
    broker: BrokerProcess
    ca: CertificateAuthority

    def port(self, listener: str) -> int:
        return self.broker.endpoints[listener][1] if listener in self.broker.endpoints else (
            self.broker.listener_ports[listener])

    def tls(self, sock: socket.socket) -> ssl.SSLSocket:
        context = ssl.create_default_context(cafile=str(self.ca.cert_path))
        context.check_hostname = False
        return context.wrap_socket(sock)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SweepNode]:
    root = tmp_path_factory.mktemp("sweep")
    ca = CertificateAuthority(root / "certs")
    server = ca.issue("server", server=True)
    accounts = " ".join(f'user_{name}="{PASSWORD}"' for name in ("admin", "alice", "mallory"))
    jaas = (f'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            f'password="{PASSWORD}" {accounts};')
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FJORD_LOG_LEVEL", "DEBUG")  # every line a client's strings may reach is looked at
        broker = _start(root, server.keystore_path, jaas)
    try:
        admin = AdminClient({
            "bootstrap.servers": f"127.0.0.1:{broker.endpoints['SASL'][1]}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": PASSWORD,
        })
        grant(admin, *(allow(resource, "*", AclOperation.ALL, principal="User:alice")
                       for resource in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)))
        yield SweepNode(broker, ca)
    finally:
        code = broker.stop()
    log = broker.log_text()
    assert code == 0, log[-3000:]
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]


def _start(root: Path, keystore: Path, jaas: str) -> BrokerProcess:
    return start_broker(root / "node", {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL://127.0.0.1:0,SASLSSL://127.0.0.1:0,"
                     "CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map":
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL:SASL_PLAINTEXT,SASLSSL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl.plain.sasl.jaas.config": jaas,
        "listener.name.saslssl.plain.sasl.jaas.config": jaas,
        "inter.broker.listener.name": "SASL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",  # User:ANONYMOUS (PLAINTEXT, SSL, CONTROLLER) has no rights
        "fjord.connections.setup.max.ms": str(int(SETUP_S * 1000)),
        "connections.max.idle.ms": str(int(FRAME_S * 1000)),
        "socket.request.max.bytes": str(MAX_REQUEST),
        "connection.failed.authentication.delay.ms": "0",
        "group.initial.rebalance.delay.ms": "0",
        "metrics.port": "0",
    })


def _login(client: WireClient, user: str, mechanism: str = "PLAIN") -> ErrorCode:
    handshake = client.request(schema.build(codec.request_class(17, 1), mechanism=mechanism))
    if handshake.error_code != ErrorCode.none:
        return ErrorCode(handshake.error_code)
    token = f"\x00{user}\x00{PASSWORD}".encode()
    return ErrorCode(client.request(schema.build(codec.request_class(36, 2), auth_bytes=token)).error_code)


class TlsWireClient(WireClient):
    """A WireClient over TLS (the SSL and SASL_SSL listeners)."""

    def __init__(self, node: SweepNode, listener: str, timeout: float = CASE_TIMEOUT_S) -> None:
        self.sock = node.tls(socket.create_connection(("127.0.0.1", node.port(listener)), timeout=timeout))
        self.sock.settimeout(timeout)
        self._correlation = 0


# -- slowloris ---------------------------------------------------------------------------------------------------


@dataclass
class Slow:
    """One slow connection: ``what`` it is, the ``bound`` it must be closed by, counted from ``since``."""

    what: str
    sock: socket.socket
    bound: float
    since: float = field(default_factory=time.monotonic)
    closed_after: float | None = None

    def tick(self) -> None:
        """Sends one more byte unless the node has closed the connection (then notes after how long)."""
        if self.closed_after is not None:
            return
        if _closed(self.sock):
            self.closed_after = time.monotonic() - self.since
            return
        try:
            self.sock.send(b"\x00")
        except (OSError, ssl.SSLError):
            self.closed_after = time.monotonic() - self.since


def _closed(sock: socket.socket) -> bool:
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except (ssl.SSLWantReadError, TimeoutError):
        return False  # a TLS 1.3 session ticket, not data
    except (OSError, ssl.SSLError):
        return True
    finally:
        sock.settimeout(CASE_TIMEOUT_S)


def _partial_frame(sock: socket.socket) -> None:
    """The length of a 1000-byte request and its first two bytes: the rest comes a byte at a time."""
    sock.sendall(struct.pack(">i", 1000) + b"\x00\x12")


def _client_hello_start() -> bytes:
    """The first bytes of a real TLS ClientHello."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="fjord")
    try:
        client.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()[:20]


def _slow_connections(node: SweepNode) -> list[Slow]:
    out: list[Slow] = []
    for listener in ("SSL", "SASLSSL"):  # a TLS handshake never finished
        raw = socket.create_connection(("127.0.0.1", node.port(listener)), timeout=CASE_TIMEOUT_S)
        raw.sendall(_client_hello_start())
        out.append(Slow(f"{listener}: a TLS handshake begun", raw, SETUP_S))
    for listener in ("PLAINTEXT", "SSL", "CONTROLLER"):  # no whole request yet
        plain = WireClient(node.port(listener)) if listener != "SSL" else TlsWireClient(node, listener)
        _partial_frame(plain.sock)
        out.append(Slow(f"{listener}: a first request begun", plain.sock, SETUP_S))
    for listener in ("SASL", "SASLSSL"):  # a SASL exchange begun
        begun = WireClient(node.port(listener)) if listener == "SASL" else TlsWireClient(node, listener)
        since = time.monotonic()
        handshake = begun.request(schema.build(codec.request_class(17, 1), mechanism="PLAIN"))
        assert handshake.error_code == ErrorCode.none
        _partial_frame(begun.sock)
        out.append(Slow(f"{listener}: a SASL exchange begun", begun.sock, SETUP_S, since))
    for listener in ("PLAINTEXT", "SSL", "SASL", "SASLSSL", "CONTROLLER"):  # set up, then a request half sent
        client = WireClient(node.port(listener)) if "SSL" not in listener else TlsWireClient(node, listener)
        if listener.startswith("SASL"):
            assert _login(client, "mallory") == ErrorCode.none
        assert client.request(api_versions_request(3)).error_code == ErrorCode.none
        _partial_frame(client.sock)
        out.append(Slow(f"{listener}: a request half received after set-up", client.sock, FRAME_S))
    return out


def test_slowloris_is_cut_off_within_its_bound_on_every_listener_kind(node: SweepNode) -> None:
    served = WireClient(node.port("PLAINTEXT"))
    slow = _slow_connections(node)
    deadline = time.monotonic() + FRAME_S + MARGIN_S + 2
    try:
        while time.monotonic() < deadline and any(s.closed_after is None for s in slow):
            for connection in slow:
                connection.tick()
            # Meanwhile a well-behaved client is served (and, busy, never cut off by either bound).
            assert served.request(api_versions_request(3)).error_code == ErrorCode.none
            time.sleep(TRICKLE_S)  # the attacker's pace, not a wait for a condition
        late = {s.what: s.closed_after for s in slow
                if s.closed_after is None or not s.bound - 0.1 <= s.closed_after <= s.bound + MARGIN_S}
        assert not late, f"closed outside [bound, bound + {MARGIN_S} s] (None: still open): {late}"
        assert served.request(api_versions_request(3)).error_code == ErrorCode.none
    finally:
        served.close()
        for connection in slow:
            connection.sock.close()
    log = node.broker.log_text()
    assert "not set up within fjord.connections.setup.max.ms" in log
    assert "a request half received for longer than connections.max.idle.ms" in log


# -- lying bodies ------------------------------------------------------------------------------------------------


def _served(port: int) -> list[tuple[int, int]]:
    """(api key, version) pairs to try: the lowest and highest version of every Kafka API the listener lists."""
    with WireClient(port) as client:
        listed = client.request(api_versions_request(3)).api_keys
    pairs = []
    for entry in listed:
        for version in sorted({int(entry.min_version), int(entry.max_version)}):
            try:
                codec.request_class(int(entry.api_key), version)
            except UnsupportedRequestError:
                continue  # a stream RPC of the CONTROLLER listener: JSON, not a Kafka schema
            pairs.append((int(entry.api_key), version))
    return pairs


def _connect(node: SweepNode, listener: str) -> WireClient:
    """A connection to ``listener``; on SASL, logged in as mallory (a user with no rights)."""
    client = WireClient(node.port(listener), timeout=CASE_TIMEOUT_S)
    if listener == "SASL":
        assert _login(client, "mallory") == ErrorCode.none
    return client


def _answered_or_closed(node: SweepNode, listener: str, api_key: int, version: int, data: bytes) -> Any | None:
    """The response (None: the connection was closed); a hang fails (TimeoutError)."""
    with _connect(node, listener) as client:
        client.send_raw(data)
        try:
            return client.receive(api_key, version)[1]
        except ConnectionError:
            return None


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SASL", "CONTROLLER"])
def test_oversized_and_lying_bodies_on_every_api_close_only_their_connection(node: SweepNode, listener: str) -> None:
    port = node.port(listener)
    other = WireClient(node.port("PLAINTEXT"))
    assert other.request(api_versions_request(3)).error_code == ErrorCode.none  # set up: kept while it is busy
    pairs = _served(port)
    assert len(pairs) > (5 if listener == "CONTROLLER" else 40)
    try:
        for api_key, version in pairs:
            whole = frame(api_key, version, b"")
            with _connect(node, listener) as client:
                client.send_raw(struct.pack(">i", MAX_REQUEST + 1) + whole[4:])
                assert client.is_closed_by_peer(CASE_TIMEOUT_S), f"api {api_key} v{version}: oversized frame kept"
            request_cls = codec.request_class(api_key, version)
            for nested in (False, True):
                lie = frame(api_key, version, claiming_body(request_cls, nested=nested))
                answer = _answered_or_closed(node, listener, api_key, version, lie)
                if answer is not None and hasattr(answer, "error_code") and api_key != 18:
                    assert answer.error_code != ErrorCode.unknown_server_error, (api_key, version, answer)
            # Another client of the node is served all along.
            assert other.request(api_versions_request(3)).error_code == ErrorCode.none
    finally:
        other.close()
    log = node.broker.log_text()
    _no_failures(log)
    assert f", {MAX_REQUEST}]" in log  # the oversized frames' line names the bound


def _no_failures(log: str) -> None:
    """No traceback, and no handler that failed (UNKNOWN_SERVER_ERROR) instead of answering an error code."""
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]
    failed = [line[:300] for line in log.splitlines() if "handler failed" in line]
    assert failed == [], f"handlers failed on hostile input instead of answering an error code: {failed}"


# -- label and log injection -------------------------------------------------------------------------------------


def _evil(tag: str) -> str:
    """A newline, a forged line in ANSI red, and 30 KiB: logged raw, it forges a line and makes a huge one."""
    return f"{tag}\n{FORGED}\x1b[31m" + "z" * (30 * 1024) + "\x1b[0m"


def _sasl_client(node: SweepNode, user: str) -> WireClient:
    client = WireClient(node.port("SASL"), timeout=CASE_TIMEOUT_S)
    assert _login(client, user) == ErrorCode.none
    return client


def _send_everything(node: SweepNode, user: str, tag: str) -> int:
    """Every API the SASL listener lists, every string field and the client id evil, as ``user``; the number of
    requests answered (the others closed their connection, which was then replaced)."""
    profile = Profile("evil", lambda _t: 7, lambda _t, _name: _evil(tag), copies=1)
    answered = 0
    client = _sasl_client(node, user)
    try:
        for api_key, version in _served(node.port("SASL")):
            if api_key in (17, 36):
                continue  # the SASL exchange: sent on fresh connections below
            request = hostile(codec.request_class(api_key, version), profile)
            try:
                sent = client.send(request, client_id=_evil(tag))
                got, _ = client.receive(api_key, version)
                assert got == sent
                answered += 1
            except ConnectionError:
                client.close()
                client = _sasl_client(node, user)
    finally:
        client.close()
    return answered


def _failed_logins(node: SweepNode, tag: str) -> None:
    with WireClient(node.port("SASL")) as client:
        assert _login(client, _evil(tag)) == ErrorCode.sasl_authentication_failed
    with TlsWireClient(node, "SASLSSL") as client:
        assert _login(client, "mallory", mechanism=_evil(tag)) == ErrorCode.unsupported_sasl_mechanism


def _to_the_controller(node: SweepNode, tag: str) -> None:
    """Every Kafka API of the CONTROLLER listener, evil strings in every field and the client id, by
    ``User:ANONYMOUS`` (refused, or closed for what the listener does not serve)."""
    profile = Profile("evil", lambda _t: 7, lambda _t, _name: _evil(tag), copies=1)
    for api_key, version in _served(node.port("CONTROLLER")):
        with WireClient(node.port("CONTROLLER"), timeout=CASE_TIMEOUT_S) as client:
            client.send(hostile(codec.request_class(api_key, version), profile), client_id=_evil(tag))
            try:
                client.receive(api_key, version)
            except ConnectionError:
                pass  # closed: fine, a hang is not


def _foreign_lines(log: str) -> list[str]:
    return [line[:300] for line in log.splitlines() if line and not LOG_LINE.match(line)]


def test_client_strings_in_every_field_neither_forge_log_lines_nor_shape_metrics(node: SweepNode) -> None:
    url = metrics_url(node.broker.log_text())
    before = scrape(url)
    tag = f"inj-{uuid.uuid4().hex[:8]}"
    for user in ("mallory", "alice"):
        assert _send_everything(node, user, tag) > 40
    _failed_logins(node, tag)
    _to_the_controller(node, tag)
    with WireClient(node.port("PLAINTEXT")) as anonymous:  # and the ApiVersions v3 client software fields
        versions = schema.build(codec.request_class(18, 3), client_software_name=_evil(tag),
                                client_software_version=_evil(tag))
        anonymous.send(versions, client_id=_evil(tag))
        assert anonymous.receive(18, 3)[1].error_code == ErrorCode.invalid_request

    log = node.broker.log_text()
    assert tag in log, "no hostile string was logged at all: the sweep proves nothing"
    assert _foreign_lines(log) == [], "the log gained lines that are not the broker's"
    assert "\x1b" not in log
    _no_failures(log)
    long_lines = [line[:200] for line in log.splitlines() if len(line) > LINE_CAP]
    assert long_lines == [], f"{len(long_lines)} log lines over {LINE_CAP} characters"
    after = scrape(url)
    assert tag not in after and FORGED not in after
    assert max(len(line) for line in after.splitlines()) < 1024
    assert len(after) < len(before) + 512 * 1024, f"/metrics grew from {len(before)} to {len(after)} bytes"

