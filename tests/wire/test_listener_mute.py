"""A muted connection (KIP-219) still answers the requests it read before it stopped reading: requests held back
for their turn after a mute are owed answers like any other, whether the stream then ends in a bad frame or in the
client's EOF (the module promises answers to every request before a bad frame)."""

from __future__ import annotations

import asyncio
import struct

from wire.dispatch import Peer, Response
from wire.listener import KafkaListener
from wire.metrics import ServerMetrics

_MUTE_S = 0.05


class _MutingDispatcher:
    """Answers each request with its correlation id; mutes the connection after the first, like a client over quota.

    Muting only once keeps reading going after the unmute, so the EOF or the bad frame is read while requests are
    still held back."""

    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None:
        _key, _version, correlation_id = struct.unpack_from(">hhi", frame)
        if correlation_id == 1:
            assert peer.mute is not None
            peer.mute(_MUTE_S)
        return struct.pack(">ii", 4, correlation_id)


def _frame(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, -1)  # an ApiVersions v0 header with a null client id
    return struct.pack(">i", len(body)) + body


async def _answers(reader: asyncio.StreamReader) -> list[int]:
    answered = []
    while len(header := await reader.read(8)) == 8:
        size, correlation_id = struct.unpack(">ii", header)
        assert size == 4
        answered.append(correlation_id)
    return answered


async def _held_requests_answered(ending: bytes | None) -> list[int]:
    listener = KafkaListener(ServerMetrics(), host="127.0.0.1", port=0, max_request_bytes=1024)
    await listener.start_serving(_MutingDispatcher())
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.bound_port)
        writer.write(_frame(1))
        await writer.drain()
        assert struct.unpack(">ii", await reader.readexactly(8)) == (4, 1)
        # Muted now: these are read together once the mute ends; from then on they go one at a time (serial).
        writer.write(b"".join(_frame(c) for c in (2, 3, 4)) + (ending or b""))
        await writer.drain()
        if ending is None:
            writer.write_eof()
        answered = await asyncio.wait_for(_answers(reader), timeout=5)
        writer.close()
        return answered
    finally:
        await listener.close()


async def test_held_requests_before_a_bad_frame_are_answered() -> None:
    oversized = struct.pack(">i", 1 << 20)
    assert await _held_requests_answered(oversized) == [2, 3, 4]


async def test_held_requests_before_eof_are_answered() -> None:
    assert await _held_requests_answered(None) == [2, 3, 4]
