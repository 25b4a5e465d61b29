"""The listener's per-connection slot: each connection gets its own dispatcher state, the same object with every
request of that connection, and lets go of it when it closes (the broker keeps its per-connection request ordering
there instead of in tables keyed by client address)."""

from __future__ import annotations

import asyncio
import gc
import struct
import weakref

from testkit.waiting import eventually_async
from wire.dispatch import Peer, Response
from wire.listener import KafkaListener
from wire.metrics import ServerMetrics


class _State:
    """Stands in for the broker's ConnectionState: any object will do, the listener never looks inside."""


class _RecordingDispatcher:
    def __init__(self) -> None:
        self.seen: list[tuple[int, object]] = []  # (correlation id, state) per request
        self.made: list[weakref.ref[_State]] = []

    def connection_state(self) -> _State:
        state = _State()
        self.made.append(weakref.ref(state))
        return state

    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None:
        _key, _version, correlation_id = struct.unpack_from(">hhi", frame)
        self.seen.append((correlation_id, peer.state))
        return struct.pack(">ii", 4, correlation_id)


def _frame(correlation_id: int) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, -1)  # an ApiVersions v0 header with a null client id
    return struct.pack(">i", len(body)) + body


async def _ask(writer: asyncio.StreamWriter, reader: asyncio.StreamReader, correlation_id: int) -> None:
    writer.write(_frame(correlation_id))
    await writer.drain()
    size, answered = struct.unpack(">ii", await reader.readexactly(8))
    assert (size, answered) == (4, correlation_id)


async def test_each_connection_has_its_own_state_until_it_closes() -> None:
    dispatcher = _RecordingDispatcher()
    listener = KafkaListener(ServerMetrics(), host="127.0.0.1", port=0)
    await listener.start_serving(dispatcher, connection_state=dispatcher.connection_state)
    try:
        first = await asyncio.open_connection("127.0.0.1", listener.bound_port)
        second = await asyncio.open_connection("127.0.0.1", listener.bound_port)
        for correlation_id, (reader, writer) in ((1, first), (2, second), (3, first), (4, second)):
            await _ask(writer, reader, correlation_id)
        states = dict(dispatcher.seen)
        assert states[1] is states[3] and states[2] is states[4], "one state per connection, on every request"
        assert states[1] is not states[2] and all(isinstance(s, _State) for s in states.values())
        del states
        dispatcher.seen.clear()

        for _reader, writer in (first, second):
            writer.close()
            await writer.wait_closed()


        def released() -> bool:
            gc.collect()
            return all(ref() is None for ref in dispatcher.made)

        await eventually_async(released, timeout=5, interval=0.01, what="the states to go with their connections")
        assert len(dispatcher.made) == 2
    finally:
        await listener.close()


async def test_without_a_state_factory_peers_carry_none() -> None:
    dispatcher = _RecordingDispatcher()
    listener = KafkaListener(ServerMetrics(), host="127.0.0.1", port=0)
    await listener.start_serving(dispatcher)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.bound_port)
        await _ask(writer, reader, 7)
        assert dispatcher.seen == [(7, None)]
        writer.close()
        await writer.wait_closed()
    finally:
        await listener.close()
