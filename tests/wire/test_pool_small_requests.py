"""Small requests, cut whole from a connection's staging buffer, count in the node's memory pool
(``queued.max.request.bytes``) until they are answered: once the requests held add up to the pool, a connection
reads no more, so many clients each sending requests that stay unanswered hold at most the bound plus what each had
already received (one staging buffer), not 64 requests each."""

from __future__ import annotations

import asyncio
import struct

from wire.dispatch import Peer, Response
from wire.listener import KafkaListener
from wire.memory_pool import MemoryPool
from wire.metrics import ServerMetrics

_BODY = 2000  # bytes of each request after its length
_POOL = 5 * _BODY  # five such requests fill the pool


class _Holding:
    """Holds every request until :attr:`answer` is set, then answers it with its correlation id."""

    def __init__(self) -> None:
        self.answer = asyncio.Event()
        self.dispatched: list[int] = []

    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None:
        _key, _version, correlation_id = struct.unpack_from(">hhi", frame)
        self.dispatched.append(correlation_id)
        await self.answer.wait()
        return struct.pack(">ii", 4, correlation_id)


def _frame(correlation_id: int) -> bytes:
    header = struct.pack(">hhih", 18, 0, correlation_id, -1)
    body = header + bytes(_BODY - len(header))
    return struct.pack(">i", len(body)) + body


async def _eventually(condition: object, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():  # type: ignore[operator]
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_unanswered_small_requests_fill_the_pool_and_reading_stops_until_they_are_answered() -> None:
    pool = MemoryPool(_POOL)
    dispatcher = _Holding()
    listener = KafkaListener(ServerMetrics(), host="127.0.0.1", port=0, max_request_bytes=1 << 20,
                             memory_pool=pool)
    await listener.start_serving(dispatcher)
    try:
        clients = [await asyncio.open_connection("127.0.0.1", listener.bound_port) for _ in range(8)]
        for n, (_reader, writer) in enumerate(clients[:5]):
            writer.write(_frame(n))
        await _eventually(lambda: len(dispatcher.dispatched) == 5)
        assert pool.reserved == 5 * _BODY and pool.exhausted

        # Three more clients send: what a connection has already received is served (it is in memory anyway, at
        # most one staging buffer), but then the connection is not read, so their second requests stay unread.
        for n, (_reader, writer) in enumerate(clients[5:], start=5):
            writer.write(_frame(n))
        await _eventually(lambda: len(dispatcher.dispatched) == 8)
        for n, (_reader, writer) in enumerate(clients[5:], start=5):
            writer.write(_frame(10 + n))
        await asyncio.sleep(0.3)  # time for the second requests to arrive; none may be read
        assert sorted(dispatcher.dispatched) == [0, 1, 2, 3, 4, 5, 6, 7]
        assert pool.reserved == 8 * _BODY

        # Once answered, the held bytes go back and the waiting clients are read and served.
        dispatcher.answer.set()
        for n, (reader, _writer) in enumerate(clients):
            answer = await asyncio.wait_for(reader.readexactly(8), timeout=5)
            assert struct.unpack(">ii", answer) == (4, n)
        for n, (reader, _writer) in enumerate(clients[5:], start=5):
            answer = await asyncio.wait_for(reader.readexactly(8), timeout=5)
            assert struct.unpack(">ii", answer) == (4, 10 + n)
        await _eventually(lambda: pool.reserved == 0)
        for _reader, writer in clients:
            writer.close()
    finally:
        await listener.close()
