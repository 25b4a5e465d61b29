"""Admission of appends for both WAL modes: strictly in call order, and only while the WAL has room.

A full WAL must slow producers down, never fail them (the WriteAheadLog contract), and it must keep appends in
the order they were made: a stream's batches are appended one after another and must be replayed that way. So
every append joins one FIFO queue the moment it is called, and the queue admits from its head only — when the
WAL is open (recovered) and the head fits under the capacity. Nothing can overtake a waiting append, however
small. A record larger than the whole capacity is admitted once the WAL is empty; otherwise it never could be.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class CapacityGate(Generic[T]):
    """Queues items and hands them to ``admit`` in submission order as room allows.

    ``future`` is the caller's completion future for an item: an item whose future is already done (the caller
    was cancelled, or the WAL failed) is dropped instead of admitted. The gate starts *held* (nothing is admitted)
    until ``open()``, so appends made while the WAL is still recovering simply queue.
    """

    def __init__(self, capacity: int, name: str, admit: Callable[[T, int], None]) -> None:
        if capacity <= 0:
            raise ValueError(f"{name}: WAL capacity must be positive, got {capacity}")
        self._capacity = capacity
        self._name = name
        self._admit = admit
        self._used = 0
        self._queue: collections.deque[tuple[T, int, asyncio.Future[Any]]] = collections.deque()
        self._open = False
        self._error: BaseException | None = None
        self._draining = False

    @property
    def used(self) -> int:
        """Bytes admitted and not yet released (untrimmed)."""
        return self._used

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def waiting(self) -> int:
        """Appends queued for room or for recovery (for metrics and tests)."""
        return len(self._queue)

    def open(self, used: int) -> None:
        """Starts admitting, with ``used`` bytes already in the WAL (what recovery found)."""
        self._used = used
        self._open = True
        self._drain()

    def submit(self, item: T, size: int, future: asyncio.Future[Any]) -> None:
        if self._error is not None:
            if not future.done():
                future.set_exception(self._error)
            return
        self._queue.append((item, size, future))
        self._drain()
        if self._queue and self._queue[-1][0] is item and self._open:
            logger.debug("%s: append of %d bytes waits for capacity (%d of %d used)", self._name, size, self._used,
                         self._capacity)

    def release(self, size: int) -> None:
        self._used = max(0, self._used - size)
        self._drain()

    def fail(self, error: BaseException) -> None:
        """Fails every queued and future submission (the WAL is closing or broken)."""
        self._error = error
        while self._queue:
            _item, _size, future = self._queue.popleft()
            if not future.done():
                future.set_exception(error)

    def _drain(self) -> None:
        if self._draining:  # admit() may release or submit re-entrantly; the outer loop continues
            return
        self._draining = True
        try:
            while self._open and self._queue:
                item, size, future = self._queue[0]
                if future.done():
                    self._queue.popleft()
                    continue
                if self._used != 0 and self._used + size > self._capacity:
                    return
                self._queue.popleft()
                self._used += size
                self._admit(item, size)
        finally:
            self._draining = False
