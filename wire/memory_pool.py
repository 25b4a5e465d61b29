"""A node's bound on the bytes of large requests being read and queued (Kafka's ``queued.max.request.bytes``).

Each request frame larger than a connection's staging buffer (``wire.frames``) reserves its claimed size here before
its first chunk is read, and gives it back once its request has been answered. A connection whose frame does not fit
stops reading (the client waits, pushed back through TCP) until reservations are released, first come first served;
it never fails. So the requests a node holds at once cannot add up past the bound, however many clients send them.

Kafka's ``SimpleMemoryPool`` lets a reservation through while any memory is left, going over for a moment; this one
grants a frame larger than what is left only when nothing is reserved, so a frame larger than the pool (the bound
set below ``socket.request.max.bytes``) is read alone rather than never.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

#: ``queued.max.request.bytes``'s default in Fjord (Kafka's is -1, unbounded): room for two requests of the
#: largest size ``socket.request.max.bytes`` allows by default, and a fraction of a node's memory.
DEFAULT_QUEUED_MAX_REQUEST_BYTES = 256 * 1024 * 1024


class MemoryPool:
    """Reservations of request bytes against ``capacity`` (None: unbounded, as Kafka's -1)."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self.reserved = 0
        #: Callbacks of the connections waiting for room, oldest first; each reserves what it needs and says
        #: whether it could.
        self._waiters: collections.deque[Callable[[], bool]] = collections.deque()

    def try_reserve(self, size: int) -> bool:
        """Reserves ``size`` bytes if they fit (or nothing is reserved at all)."""
        if self.capacity is not None and self.reserved > 0 and self.reserved + size > self.capacity:
            return False
        self.reserved += size
        return True

    def wait(self, granted: Callable[[], bool]) -> None:
        """``granted`` is called, in turn, each time bytes are released, until it returns True."""
        self._waiters.append(granted)

    def cancel(self, granted: Callable[[], bool]) -> None:
        """A waiting connection went away."""
        try:
            self._waiters.remove(granted)
        except ValueError:
            pass

    def release(self, size: int) -> None:
        """Gives ``size`` reserved bytes back and lets the connections waiting for them read on, in order."""
        if size <= 0:
            return
        self.reserved -= size
        while self._waiters and self._waiters[0]():
            self._waiters.popleft()

    @property
    def waiting(self) -> int:
        return len(self._waiters)


def pool_of(queued_max_request_bytes: int) -> MemoryPool:
    """The pool a ``queued.max.request.bytes`` value asks for: -1 or 0 is unbounded, as in Kafka."""
    return MemoryPool(queued_max_request_bytes if queued_max_request_bytes > 0 else None)


def seconds_or_never(ms: int) -> float | None:
    """A time-out key's value in seconds; negative: never (None), as Kafka reads ``connections.max.idle.ms``."""
    return ms / 1000 if ms >= 0 else None
