"""ApiVersions answered while a broker starts (``wire.early_answers``): the answer is the broker's own but for the
finalized features, which it does not know yet (KIP-584's epoch -1); only ApiVersions is answered and anything else
stays in the socket; the connections go to the listener when it serves, whose dispatcher then sees the answered
requests without answering them twice."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from broker.handlers.table import HANDLERS
from testkit.node_process import api_versions_request
from wire import codec, schema
from wire.api_versions import API_VERSIONS, SUPPORTED_FEATURES, advertised
from wire.dispatch import Peer, Response
from wire.early_answers import EarlyAnswers, EarlyConnection, answer
from wire.listener import KafkaListener
from wire.metrics import ServerMetrics

TIMEOUT_S = 5.0


def _frame(request: Any, correlation_id: int) -> bytes:
    """The request frame without its length, as ``answer`` takes it."""
    return codec.encode_request(request, correlation_id, client_id="early-test")[4:]


def _decoded(response: bytes, version: int) -> tuple[int, Any]:
    (size,) = struct.unpack_from(">i", response)
    assert size == len(response) - 4
    return codec.decode_response(18, version, response[4:])


def _metadata_frame(correlation_id: int) -> bytes:
    return _frame(schema.build(codec.request_class(3, 12), topics=None), correlation_id)


@pytest.mark.parametrize("version", range(5))
def test_the_answer_lists_what_the_broker_serves_with_the_features_unknown(version: int) -> None:
    assert dict(advertised(HANDLERS)) == dict(API_VERSIONS), "a starting broker advertises every entry of the table"
    response = answer(_frame(api_versions_request(version), 41))
    assert response is not None
    correlation_id, body = _decoded(response, version)
    assert (correlation_id, body.error_code) == (41, 0)
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [
        (key, entry.min_version, entry.max_version) for key, entry in API_VERSIONS.items()
    ]
    if version >= 3:
        assert body.finalized_features_epoch == -1 and body.finalized_features == ()
        assert {f.name for f in body.supported_features} == {
            f.name for f in SUPPORTED_FEATURES if f.min_version > 0 or version >= 4
        }


def test_kip_511_answers_and_what_is_not_answered() -> None:
    newer = _frame(api_versions_request(4), 7)
    newer = newer[:2] + struct.pack(">h", 9) + newer[4:]  # ApiVersions v9: we serve up to v4
    response = answer(newer)
    assert response is not None
    correlation_id, body = _decoded(response, 0)
    assert (correlation_id, body.error_code) == (7, 35)  # UNSUPPORTED_VERSION, with our list to pick from
    assert len(body.api_keys) == len(API_VERSIONS)

    bad_name = schema.build(codec.request_class(18, 3), client_software_name="-bad-", client_software_version="1")
    response = answer(_frame(bad_name, 8))
    assert response is not None
    assert _decoded(response, 3)[1].error_code == 42  # INVALID_REQUEST

    assert answer(_metadata_frame(9)) is None
    assert answer(_frame(api_versions_request(3), 10)[:-3]) is None  # truncated: the broker closes it as usual
    assert answer(b"\x00") is None


@contextmanager
def _listening() -> Iterator[socket.socket]:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        yield listening


def _read_frame(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        assert chunk, "closed"
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        assert chunk, "closed"
        body += chunk
    return head + body


@contextmanager
def _answering() -> Iterator[tuple[tuple[str, int], EarlyAnswers]]:
    """A listening socket answered early, its address; the answers are stopped (and what they hold closed) after."""
    with _listening() as listening:
        answers = EarlyAnswers({"PLAINTEXT": [listening]})
        answers.start()
        try:
            yield listening.getsockname(), answers
        finally:
            answers.abandon()


def test_a_starting_broker_answers_api_versions_and_leaves_the_next_request_in_the_socket() -> None:
    with _answering() as (address, answers), socket.create_connection(address, timeout=TIMEOUT_S) as client:
        first = _frame(api_versions_request(3), 1)
        client.sendall(struct.pack(">i", len(first)) + first)
        correlation_id, body = _decoded(_read_frame(client), 3)
        assert (correlation_id, body.error_code) == (1, 0)
        metadata = _metadata_frame(2)
        client.sendall(struct.pack(">i", len(metadata)) + metadata)
        client.settimeout(0.3)
        with pytest.raises(TimeoutError):
            client.recv(1)  # the Metadata request waits for the broker
        handed = answers.stop()
    assert list(handed) == ["PLAINTEXT"]
    (connection,) = handed["PLAINTEXT"]
    assert connection.answered == [first]
    with connection.sock:
        connection.sock.setblocking(True)
        assert _read_frame(connection.sock)[4:] == metadata, "the next request is left whole for the broker"


def test_a_partial_or_large_first_frame_is_left_whole_for_the_broker_without_spinning() -> None:
    big = struct.pack(">i", 10_000) + b"\x00" * 10_000
    with (
        _answering() as (address, answers),
        socket.create_connection(address, timeout=TIMEOUT_S) as partial,
        socket.create_connection(address, timeout=TIMEOUT_S) as large,
    ):
        partial.sendall(b"\x00\x00\x00")
        partial_address = partial.getsockname()
        large.sendall(big)
        cpu = time.process_time()
        time.sleep(0.5)
        # A thread peeking the same bytes over and over would have used the half second.
        assert time.process_time() - cpu < 0.25
        handed = answers.stop()
    connections = handed["PLAINTEXT"]
    assert len(connections) == 2 and all(not c.answered for c in connections)
    kept = []
    for connection in connections:
        with connection.sock:
            connection.sock.setblocking(True)
            connection.sock.settimeout(TIMEOUT_S)
            data = b""
            while len(data) < (3 if connection.address == partial_address else len(big)):
                data += connection.sock.recv(65536)
            kept.append(data)
    assert sorted(map(len, kept)) == [3, len(big)]


class _Recording:
    """Answers each request with its correlation id, and keeps the frames it was given."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None:
        self.frames.append(frame)
        _key, _version, correlation_id = struct.unpack_from(">hhi", frame)
        return struct.pack(">ii", 4, correlation_id)


async def test_the_listener_serves_a_connection_accepted_before_it_and_sees_the_answered_request() -> None:
    with _listening() as listening:
        listener = KafkaListener(ServerMetrics(), host="127.0.0.1", port=0, sockets=[listening])
        client = socket.create_connection(listening.getsockname(), timeout=TIMEOUT_S)
        accepted, address = listening.accept()
        listening.setblocking(False)  # as the node's listening sockets are (wire.listening_sockets)
        answered = _frame(api_versions_request(3), 1)
        dispatcher = _Recording()
        try:
            await listener.start_serving(dispatcher, accepted=[
                EarlyConnection(accepted, (str(address[0]), int(address[1])), "PLAINTEXT", [answered])])
            reader, writer = await asyncio.open_connection(sock=client)
            metadata = _metadata_frame(2)
            writer.write(struct.pack(">i", len(metadata)) + metadata)
            await writer.drain()
            reply = await asyncio.wait_for(reader.readexactly(8), TIMEOUT_S)
            assert struct.unpack(">ii", reply) == (4, 2), "the answered ApiVersions is not answered again"
            assert dispatcher.frames == [answered, metadata]
            writer.close()
        finally:
            await listener.close()
