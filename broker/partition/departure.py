"""A moving partition's last moments on its source: its producers told where it goes before the source lets go.

A move (AlterPartitionReassignments, the auto-balancer, a drain, a controlled shutdown) hands a partition from its
source to its target (DESIGN §9): the source closes it, the controller elects the target once its streams are
closed, and the target opens it. A producer that learns of the move from a refusal (NOT_LEADER_OR_FOLLOWER naming the
new leader, KIP-951) re-sends at once if it is Java's, but librdkafka first waits its ``retry.backoff.ms`` (100 ms
by default, ±20%) whatever the refusal says, and that wait was most of what its producers saw of a move.

So the source tells them first. From the moment its metadata shows the move until it lets go, it goes on appending,
and each successful Produce answer (v10+) names the target, with the move's leader epoch, as the partition's
current leader (``broker.handlers.produce``). librdkafka applies a ``CurrentLeader`` found on any Produce answer, so
its next records go to the target, which holds them until it has opened the partition instead of refusing them
(``broker.partition.access``): the producer waits for the hand-over alone, with no refusal and no backoff. A client
that reads the hint only from refusals (Java's) goes on appending at the source meanwhile and is refused once it
lets go, as before, and re-sends at once.

:class:`Writers` is the sans-I/O half: who appended to one partition lately, whom an answer has told, and so whether
the source may let go. It may once every connection that appended within :data:`RECENT_S` with a Produce version
that can carry the hint has been told, and no told connection's requests still arrive: requests sent before the
client read its answer land shortly after it, so a told connection holds the source until it has been quiet for
:data:`QUIET_S`, for :data:`STRAGGLE_S` after its telling at most (a client that ignores the hint keeps appending
and must not keep the source). :data:`LIMIT_S` bounds the whole wait: a producer that stopped writing, or writes
rarely, is refused like before when it comes back.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

#: A connection that appended within this many seconds is one the source waits to tell.
RECENT_S = 1.0
#: A told connection holds the source until none of its requests arrived for this long...
QUIET_S = 0.015
#: ... but only for the requests arriving within this long of its telling (those it had in flight).
STRAGGLE_S = 0.1
#: The longest a source keeps a moving partition to tell its producers.
LIMIT_S = 0.3
#: A wait shorter than this is none (rounding must not leave a zero-length wait to repeat).
_EPSILON_S = 1e-6


class Writers:
    """Who appended to one partition lately and whom a move's hint has reached (keyed by connection, weakly: a
    closed connection is forgotten with it)."""

    __slots__ = ("_last", "_told")

    def __init__(self) -> None:
        self._last: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._told: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def appended(self, connection: Any, now: float) -> None:
        """``connection`` starts an append with a Produce version that can carry the hint."""
        self._last[connection] = now

    def told(self, connection: Any, now: float) -> None:
        """An answer to ``connection`` names the partition's target (the first telling counts)."""
        self._told.setdefault(connection, now)

    def wait(self, now: float) -> float | None:
        """Seconds to wait before asking again, or None: the source may let go now."""
        longest: float | None = None
        for connection, last in list(self._last.items()):
            if now - last > RECENT_S:
                continue
            told = self._told.get(connection)
            if told is None:
                step = QUIET_S  # it has not appended since the move was seen: the next append tells it
            elif last - told <= STRAGGLE_S and last + QUIET_S - now > _EPSILON_S:
                step = last + QUIET_S - now  # its requests in flight when told are still arriving
            else:
                continue
            longest = step if longest is None else max(longest, step)
        return longest


class Leaving(Protocol):
    """What :func:`tell_producers` needs of a moving partition."""

    @property
    def writers(self) -> Writers: ...


async def tell_producers(
    partitions: Sequence[Leaving],
    clock: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> float:
    """Returns once every partition in ``partitions`` may let go (:meth:`Writers.wait`), or after :data:`LIMIT_S`;
    the seconds it waited (by ``clock``, waiting with ``sleep``). The partitions keep taking appends meanwhile."""
    started = clock()
    deadline = started + LIMIT_S
    while True:
        now = clock()
        waits = [w for w in (p.writers.wait(now) for p in partitions) if w is not None]
        if not waits or now >= deadline:
            return now - started
        await sleep(min(max(waits), deadline - now))
