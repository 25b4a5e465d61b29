"""Hostile clients cannot make a node hold memory they have not sent (issue 26), against real broker processes.

A 4-byte request length is the client's claim: the node's memory grows with the bytes it receives, a frame over
``socket.request.max.bytes`` closes only its own connection, the node's ``queued.max.request.bytes`` makes a large
request wait rather than fail, and connections that never finish a request are cut off by
``fjord.connections.setup.max.ms``.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, api_versions_request
from testkit.tls_certs import CertificateAuthority
from testkit.waiting import eventually
from tests.broker.kafka_clients import fetch_request, produce_request, topic_name
from tests.topics import create_topic
from wire import codec
from wire.record_batch import Record, build_batch, decode_records, iter_batches

CLAIMED = 104_857_599  # just under socket.request.max.bytes' default: a frame the broker must accept
MIB = 1024 * 1024


def rss_bytes(pid: int) -> int:
    """The process's resident set (VmRSS of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def claimers(port: int, count: int) -> list[socket.socket]:
    """``count`` connections, each sending a ~100 MB request length and 10 bytes of it, then nothing."""
    out = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(struct.pack(">i", CLAIMED) + b"\x00\x00\x00\x12" + b"\x00" * 6)
        out.append(sock)
    return out


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except (ConnectionResetError, ssl.SSLError):
        return True


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def _batch(values: list[bytes]) -> bytes:
    return build_batch([Record(key=None, value=v, headers=(), timestamp=None) for v in values])


def produce_and_fetch(client: WireClient, topic: str, values: list[bytes]) -> None:
    """The node still serves: ``values`` are produced and read back."""
    response = client.request(produce_request(topic, 0, _batch(values)))
    part = response.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.none
    fetched = client.request(fetch_request(topic, 0, part.base_offset)).responses[0].partitions[0]
    assert fetched.error_code == ErrorCode.none
    got = [r.value for _, raw in iter_batches(fetched.records) for r in decode_records(raw)]
    assert got[: len(values)] == values


def test_claimed_frames_cost_what_was_sent_and_are_cut_off(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient],
    sockets: list[socket.socket],
) -> None:
    broker = broker_factory({"fjord.connections.setup.max.ms": "3000"})
    topic = topic_name("claims")
    create_topic(broker.bootstrap, topic)
    client = wire(broker.port)
    produce_and_fetch(client, topic, [b"before"])
    before = rss_bytes(broker.proc.pid)
    sockets.extend(claimers(broker.port, 40))  # 50 x 100 MB claimed, 700 bytes sent, on both kinds of listener
    sockets.extend(claimers(broker.listener_ports["CONTROLLER"], 10))
    client.request(api_versions_request(3))  # the claims have been read by the time these are answered
    wire(broker.listener_ports["CONTROLLER"]).request(api_versions_request(3))
    grown = rss_bytes(broker.proc.pid) - before
    assert grown < 64 * MIB, f"RSS grew by {grown / MIB:.0f} MiB for 50 claimed 100 MB frames"
    produce_and_fetch(client, topic, [b"during", os.urandom(1000)])
    eventually(lambda: all(closed_by_peer(s) for s in sockets), timeout=15,
               what="the connections that never finished a request to be closed")
    assert "not set up within fjord.connections.setup.max.ms" in broker.log_text()
    produce_and_fetch(client, topic, [b"after"])  # set up in time: the bound did not touch it


def test_a_frame_over_socket_request_max_bytes_closes_only_its_connection(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient],
) -> None:
    broker = broker_factory({"socket.request.max.bytes": str(MIB)})
    topic = topic_name("oversize")
    create_topic(broker.bootstrap, topic)
    client, hostile = wire(broker.port), wire(broker.port)
    hostile.send_raw(struct.pack(">i", 2 * MIB) + b"\x00" * 10)
    assert hostile.is_closed_by_peer()
    eventually(lambda: f"request of {2 * MIB} bytes is outside" in broker.log_text(), timeout=5,
               what="the broker to log why it closed the connection")
    line = next(x for x in broker.log_text().splitlines() if f"request of {2 * MIB} bytes" in x)
    assert "127.0.0.1" in line and str(MIB) in line and "socket.request.max.bytes" in line
    produce_and_fetch(client, topic, [b"still served"])


def test_a_request_that_does_not_fit_the_pool_waits_and_is_then_served(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient],
) -> None:
    broker = broker_factory({"queued.max.request.bytes": str(MIB)})
    topic = topic_name("pool")
    create_topic(broker.bootstrap, topic)
    first, second, third = wire(broker.port), wire(broker.port), wire(broker.port)
    for client in (first, second):
        client.request(api_versions_request(3))
    values_a = [os.urandom(1000) for _ in range(700)]  # ~700 KiB each: two do not fit a 1 MiB pool
    values_b = [os.urandom(1000) for _ in range(700)]
    frame_a = codec.encode_request(produce_request(topic, 0, _batch(values_a)), 7, "pool-a")
    frame_b = codec.encode_request(produce_request(topic, 0, _batch(values_b)), 8, "pool-b")
    half = len(frame_a) // 2  # past the 256 KiB staging buffer: its whole claim is reserved
    first.send_raw(frame_a[:half])
    third.request(api_versions_request(3))  # a round trip after it: the broker has read the first half by then
    second.send_raw(frame_b)
    second.sock.settimeout(1.5)
    with pytest.raises(TimeoutError):  # waits for the pool: neither answered nor closed
        second.read_frame()
    second.sock.settimeout(10)
    first.send_raw(frame_a[half:])
    got_a, body_a = first.receive(0, 9)
    assert got_a == 7 and body_a.responses[0].partition_responses[0].error_code == ErrorCode.none
    got_b, body_b = second.receive(0, 9)
    assert got_b == 8 and body_b.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert body_b.responses[0].partition_responses[0].base_offset == len(values_a)


def test_handshakes_and_logins_never_finished_are_cut_off(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient], tmp_path: Path,
    sockets: list[socket.socket],
) -> None:
    ca = CertificateAuthority(tmp_path / "certs")
    server = ca.issue("server", server=True)
    broker = broker_factory({
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL:SASL_PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(server.keystore_path),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b" user_a="b";',
        "fjord.connections.setup.max.ms": "2000",
    })
    ssl_port, sasl_port = broker.endpoints["SSL"][1], broker.endpoints["SASL"][1]
    silent = socket.create_connection(("127.0.0.1", ssl_port), timeout=10)  # never sends its ClientHello
    context = ssl.create_default_context(cafile=str(ca.cert_path))
    context.check_hostname = False
    shaken = context.wrap_socket(socket.create_connection(("127.0.0.1", ssl_port), timeout=10))  # then nothing
    unauthenticated = WireClient(sasl_port)  # a whole request, but no login
    unauthenticated.request(api_versions_request(3))
    sockets.extend([silent, shaken, unauthenticated.sock])
    served = wire(broker.port)
    served.request(api_versions_request(3))
    eventually(lambda: all(closed_by_peer(s) for s in sockets), timeout=15,
               what="the TLS and SASL connections that never finished setting up to be closed")
    served.request(api_versions_request(3))  # the PLAINTEXT connection sent a whole request: it stays
