"""Keeps the appends of one connection to one partition in the order its Produce requests arrived.

The listener runs the requests of a connection concurrently (``wire.connection``), but Kafka clients rely on a
connection's requests being applied in order: a producer with several Produce requests in flight to one partition
expects their batches at increasing offsets. Concurrency alone breaks that whenever an earlier request has to wait for
something a later one does not, e.g. the first requests to a partition that is still opening wait in
``leader_log`` while a request arriving after the open finished goes straight to the log and is appended first.

Each append takes a turn when its request is dispatched (synchronously, so turns follow arrival order) and
starts its ``PartitionLog.append`` only after the previous turn on the same connection and partition has
started its own. Starting is all that is ordered: ``PartitionLog.append`` assigns offsets under a FIFO lock
before its first suspension, and asyncio steps tasks in the order they were scheduled, so appends started in
order get offsets in order while their WAL writes still overlap.

Each connection has its own :class:`AppendOrder` (``broker.handlers.context.ConnectionState``), so the queues go
away with the connection and connections never wait for each other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

P = TypeVar("P")
T = TypeVar("T")

#: (topic, partition): the connection's appends to one partition.
OrderKey = tuple[str, int]


class AppendTurn:
    """One append's place in its connection+partition queue."""

    __slots__ = ("_key", "_order", "_previous", "_started")

    def __init__(
        self, order: AppendOrder, key: OrderKey, previous: asyncio.Future[None] | None, started: asyncio.Future[None]
    ) -> None:
        self._order = order
        self._key = key
        self._previous = previous
        self._started = started

    async def start(self, prepare: Awaitable[P], append: Callable[[P], Awaitable[T]]) -> T:
        """Awaits ``prepare`` (may suspend for as long as it needs), then waits for the previous turn to have
        started and schedules ``append(prepared)``; the next turn is released whatever happens."""
        try:
            prepared = await prepare
            if self._previous is not None and not self._previous.done():
                await self._previous
            task = asyncio.ensure_future(append(prepared))
        finally:
            self._release()
        return await task

    def _release(self) -> None:
        if not self._started.done():
            self._started.set_result(None)
        self._order._done(self._key, self._started)


class AppendOrder:
    """The turn queues of one connection; an entry lives only while its queue has an unstarted append."""

    def __init__(self) -> None:
        self._tails: dict[OrderKey, asyncio.Future[None]] = {}

    def take(self, key: OrderKey) -> AppendTurn:
        """A turn behind every earlier one for ``key``; call in arrival order, before any suspension."""
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        previous = self._tails.get(key)
        self._tails[key] = started
        return AppendTurn(self, key, previous, started)

    def _done(self, key: OrderKey, started: asyncio.Future[None]) -> None:
        if self._tails.get(key) is started:
            del self._tails[key]

    def __len__(self) -> int:
        return len(self._tails)
