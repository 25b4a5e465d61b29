"""Backpressure for both WAL modes: appends wait, in arrival order, until trimming frees room.

A full WAL must slow producers down, never fail them (the WriteAheadLog contract). Waiters are admitted strictly
first-come-first-served, so a large record cannot be starved by a stream of small ones and admission order stays
the append order the WAL acknowledges in. A record larger than the whole capacity is admitted once the WAL is
empty; otherwise it could never be written at all.
"""

from __future__ import annotations

import asyncio
import collections
import logging

logger = logging.getLogger(__name__)


class CapacityGate:
    def __init__(self, capacity: int, name: str) -> None:
        if capacity <= 0:
            raise ValueError(f"{name}: WAL capacity must be positive, got {capacity}")
        self._capacity = capacity
        self._name = name
        self._used = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._error: BaseException | None = None

    @property
    def used(self) -> int:
        return self._used

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def waiting(self) -> int:
        """Appends currently blocked on capacity (for metrics and tests)."""
        return len(self._waiters)

    def reset_used(self, used: int) -> None:
        """Sets the untrimmed byte count after recovery, before any append."""
        self._used = used
        self._wake()

    def _fits(self, size: int) -> bool:
        return self._used == 0 or self._used + size <= self._capacity

    async def acquire(self, size: int) -> None:
        if self._error is not None:
            raise self._error
        if not self._waiters and self._fits(size):
            self._used += size
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, future)
        self._waiters.append(entry)
        logger.debug("%s: append of %d bytes waits for capacity (%d of %d used)", self._name, size, self._used,
                     self._capacity)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.exception() is None:
                self.release(size)  # granted just as we were cancelled: give the room back
            else:
                try:
                    self._waiters.remove(entry)
                except ValueError:
                    pass
                self._wake()  # a smaller waiter behind us may fit now
            raise

    def release(self, size: int) -> None:
        self._used = max(0, self._used - size)
        self._wake()

    def fail(self, error: BaseException) -> None:
        """Fails every waiting and future acquire (the WAL is closing or broken)."""
        self._error = error
        while self._waiters:
            _size, future = self._waiters.popleft()
            if not future.done():
                future.set_exception(error)

    def _wake(self) -> None:
        while self._waiters:
            size, future = self._waiters[0]
            if future.done():
                self._waiters.popleft()
                continue
            if not self._fits(size):
                return
            self._waiters.popleft()
            self._used += size
            future.set_result(None)
