"""Kafka's ``socket.send.buffer.bytes`` and ``socket.receive.buffer.bytes``: the SO_SNDBUF and SO_RCVBUF of every
connection a listener accepts (plain and on its own sockets, as a gated or TLS listener accepts), -1 the OS's."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from testkit.waiting import eventually_async
from wire.connection_gate import ConnectionGate
from wire.connection_limits import ConnectionLimitSettings
from wire.dispatch import Peer, Response
from wire.listener import KafkaListener
from wire.metrics import ServerMetrics

SEND = 48 * 1024
RECEIVE = 40 * 1024


class _Echo:
    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None:
        return struct.pack(">ii", 4, struct.unpack_from(">hhi", frame)[2])


def _buffers(listener: KafkaListener) -> tuple[int, int]:
    """SO_SNDBUF and SO_RCVBUF of the listener's one connection, on the broker's side."""
    (connection,) = listener.connections
    assert connection._transport is not None  # the socket of a served connection is only its transport's
    sock = connection._transport.get_extra_info("socket")
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF), sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)


async def _served_buffers(listener: KafkaListener) -> tuple[int, int]:
    await listener.start_serving(_Echo())
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", listener.bound_port)
        await eventually_async(lambda: len(listener.connections) == 1, timeout=5, interval=0.01,
                               what="the connection to open")
        buffers = _buffers(listener)
        writer.close()
        await writer.wait_closed()
        return buffers
    finally:
        await listener.close()


def _listener(gated: bool, **buffers: int) -> KafkaListener:
    metrics = ServerMetrics()
    gate = ConnectionGate(ConnectionLimitSettings(), metrics) if gated else None
    return KafkaListener(metrics, host="127.0.0.1", port=0, gate=gate, **buffers)


@pytest.mark.parametrize("gated", [False, True], ids=["plain", "own sockets"])
async def test_each_accepted_connection_gets_the_configured_buffers(gated: bool) -> None:
    default = await _served_buffers(_listener(gated))
    sized = await _served_buffers(_listener(gated, send_buffer_bytes=SEND, receive_buffer_bytes=RECEIVE))
    # Linux doubles what it is asked for (its own bookkeeping); other systems take it as it is.
    assert sized[0] in (SEND, 2 * SEND) and sized[1] in (RECEIVE, 2 * RECEIVE), (sized, default)
    assert default[0] not in (SEND, 2 * SEND) and default[1] not in (RECEIVE, 2 * RECEIVE), default
