"""A request handler's own time on the event loop: what Fjord charges against ``request_percentage``.

Kafka charges a request the time a request handler thread (and a network thread) spent on it, as a percentage of
one thread (KIP-124). Fjord has one event-loop thread and runs handlers as coroutines that wait for storage, the
controller or a long-polling Fetch; their wall time would charge a consumer for waiting. :func:`timed` steps the
handler's coroutine itself and adds up only the time each step ran, so a request is charged for the share of the
event loop it used, which is Kafka's "percentage of one thread" with the event loop as the thread. Tasks a handler
spawns and waits for (``asyncio.gather``) are not charged: they run as their own tasks.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class BusyTime:
    """Seconds the timed coroutine ran; read it once the coroutine is done."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = 0.0


class _Timed:
    __slots__ = ("_busy", "_coro")

    def __init__(self, coro: Coroutine[Any, Any, Any], busy: BusyTime) -> None:
        self._coro = coro
        self._busy = busy

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        busy = self._busy
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coro.send(sent) if thrown is None else coro.throw(thrown)
            except StopIteration as stop:
                return stop.value
            finally:
                busy.seconds += time.perf_counter() - started
            try:
                sent, thrown = (yield yielded), None
            except BaseException as exc:  # cancellation and the like go to the handler, as a plain await would
                sent, thrown = None, exc


async def timed(coro: Coroutine[Any, Any, T], busy: BusyTime) -> T:
    """Awaits ``coro``, adding the time its own steps ran to ``busy.seconds``."""
    result: T = await _Timed(coro, busy)
    return result
