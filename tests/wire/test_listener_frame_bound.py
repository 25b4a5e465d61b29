"""A request half received for the listener's ``frame_timeout_s`` (``connections.max.idle.ms``) closes its connection
however the client trickles it, but only the time the connection is read counts: a partial frame the broker stopped
reading (a mute, KIP-219) is the broker's choice, not the client's slowness."""

from __future__ import annotations

import asyncio
import struct
import time

from wire.dispatch import Peer, Response
from wire.listener import KafkaListener
from wire.metrics import ServerMetrics

_BOUND_S = 0.3


class _Dispatcher:
    """Answers each request with its correlation id; mutes the connection for ``mute_s`` after request 1."""

    def __init__(self, mute_s: float = 0.0) -> None:
        self._mute_s = mute_s

    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None:
        _key, _version, correlation_id = struct.unpack_from(">hhi", frame)
        if correlation_id == 1 and self._mute_s:
            assert peer.mute is not None
            peer.mute(self._mute_s)
        return struct.pack(">ii", 4, correlation_id)


def _frame(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, -1)  # an ApiVersions v0 header with a null client id
    return struct.pack(">i", len(body)) + body


async def _listener(dispatcher: _Dispatcher) -> KafkaListener:
    listener = KafkaListener(ServerMetrics(), host="127.0.0.1", port=0, max_request_bytes=1024,
                             frame_timeout_s=_BOUND_S)
    await listener.start_serving(dispatcher)
    return listener


async def test_a_trickled_request_is_cut_off_at_the_bound() -> None:
    listener = await _listener(_Dispatcher())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.bound_port)
        writer.write(_frame(1))
        assert struct.unpack(">ii", await reader.readexactly(8)) == (4, 1)
        started = time.monotonic()
        writer.write(struct.pack(">i", 1000) + _frame(2)[4:])  # a 1000-byte request, of which 10 bytes come now
        closed_after = None
        for _ in range(40):  # and then one byte every 50 ms: far from complete when the bound is reached
            await asyncio.sleep(0.05)  # the client's pace
            if reader.at_eof():
                closed_after = time.monotonic() - started
                break
            writer.write(b"\x00")
        assert closed_after is not None, "the trickling connection was never closed"
        assert _BOUND_S <= closed_after <= _BOUND_S + 2 * _BOUND_S / 4 + 0.5, closed_after
        writer.close()
    finally:
        await listener.close()


async def test_a_partial_frame_held_by_a_mute_is_not_counted() -> None:
    mute_s = 4 * _BOUND_S
    listener = await _listener(_Dispatcher(mute_s))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.bound_port)
        second = _frame(2)
        writer.write(_frame(1) + second[:5])  # read together: request 1 mutes, half of request 2 waits with it
        assert struct.unpack(">ii", await reader.readexactly(8)) == (4, 1)
        await asyncio.sleep(mute_s + _BOUND_S / 3)  # the client sends the rest soon after the mute ends
        writer.write(second[5:])
        answer = await asyncio.wait_for(reader.readexactly(8), timeout=5)
        assert struct.unpack(">ii", answer) == (4, 2)
        writer.close()
    finally:
        await listener.close()
