"""A node's bound on the bytes of requests being read and queued (Kafka's ``queued.max.request.bytes``).

Each request frame larger than a connection's staging buffer (``wire.frames``) reserves its claimed size here before
its first chunk is read, and gives it back once its request has been answered. A connection whose frame does not fit
stops reading (the client waits, pushed back through TCP) until reservations are released, first come first served;
it never fails. Smaller frames, already received whole in the staging buffer, are counted once cut (:meth:`take`)
until their requests are answered; while the pool is :attr:`~MemoryPool.exhausted` a connection serves what it
has received and then reads no more. So the requests a node holds at once cannot add up past the bound (plus, at
most, one staging buffer per connection), however many clients send them.

Kafka's ``SimpleMemoryPool`` lets a reservation through while any memory is left, going over for a moment; this one
grants a frame larger than what is left only when nothing is reserved, so a frame larger than the pool (the bound
set below ``socket.request.max.bytes``) is read alone rather than never.

A pool counts what an operator needs to see it at work (``wire.metrics`` exports it on ``/metrics``): the bytes
reserved, how many requests had to wait for room and how long they waited in all.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

#: ``queued.max.request.bytes``'s default in Fjord (Kafka's is -1, unbounded): room for two requests of the
#: largest size ``socket.request.max.bytes`` allows by default, and a fraction of a node's memory.
DEFAULT_QUEUED_MAX_REQUEST_BYTES = 256 * 1024 * 1024


class MemoryPool:
    """Reservations of request bytes against ``capacity`` (None: unbounded, as Kafka's -1). ``name`` tells a node's
    pools apart on ``/metrics`` (its client listeners share one, its CONTROLLER listener has its own)."""

    def __init__(self, capacity: int | None, name: str = "client", clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self.name = name
        self.reserved = 0
        #: Requests that had to wait for room, and the seconds of the waits that ended (granted or given up).
        self.waits = 0
        self.wait_seconds = 0.0
        self._clock = clock
        #: Callbacks of the connections waiting for room, oldest first, with when each began to wait; each reserves
        #: what it needs and says whether it could.
        self._waiters: collections.deque[tuple[Callable[[], bool], float]] = collections.deque()

    def try_reserve(self, size: int) -> bool:
        """Reserves ``size`` bytes if they fit (or nothing is reserved at all)."""
        if self.capacity is not None and self.reserved > 0 and self.reserved + size > self.capacity:
            return False
        self.reserved += size
        return True

    def take(self, size: int) -> None:
        """Counts ``size`` bytes already received (a small frame cut from a staging buffer): they are in memory
        whatever the pool says, so this may go over the capacity for a moment, as Kafka's ``SimpleMemoryPool``
        does; connections then stop reading until enough is released (:attr:`exhausted`)."""
        self.reserved += size

    @property
    def exhausted(self) -> bool:
        """Nothing more may be read by any connection until bytes are released."""
        return self.capacity is not None and self.reserved >= self.capacity

    def wait(self, granted: Callable[[], bool]) -> None:
        """``granted`` is called, in turn, each time bytes are released, until it returns True."""
        self._waiters.append((granted, self._clock()))
        self.waits += 1

    def cancel(self, granted: Callable[[], bool]) -> None:
        """A waiting connection went away."""
        for entry in self._waiters:
            if entry[0] == granted:
                self._waiters.remove(entry)
                self.wait_seconds += self._clock() - entry[1]
                return

    def release(self, size: int) -> None:
        """Gives ``size`` reserved bytes back and lets the connections waiting for them read on, in order."""
        if size <= 0:
            return
        self.reserved -= size
        while self._waiters and self._waiters[0][0]():
            self.wait_seconds += self._clock() - self._waiters.popleft()[1]

    @property
    def waiting(self) -> int:
        return len(self._waiters)


def pool_of(queued_max_request_bytes: int, name: str = "client") -> MemoryPool:
    """The pool a ``queued.max.request.bytes`` value asks for: -1 or 0 is unbounded, as in Kafka."""
    return MemoryPool(queued_max_request_bytes if queued_max_request_bytes > 0 else None, name)


def seconds_or_never(ms: int) -> float | None:
    """A time-out key's value in seconds; negative: never (None), as Kafka reads ``connections.max.idle.ms``."""
    return ms / 1000 if ms >= 0 else None
