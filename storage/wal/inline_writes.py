"""Which of the file WAL's groups are written on the event loop rather than on its writer thread.

A write on the writer thread costs the acknowledgement a hop there and back: the thread must be woken, get a core
and get the GIL (once to take the group up, once after the write, once to hand it back), and on a busy machine each
of those waits. In ``bench/balancer.py`` (eight processes on two cores) the groups of a move's close took 30-40 ms
that way, for a write and fdatasync that average 0.1-2 ms on that shared disk and about a tenth of a millisecond on
a local SSD. So a group of at most ``INLINE_GROUP_BYTES`` is written in place, unless the disk is slow: should the
inline writes take longer than ``INLINE_SLOW_S`` on average (a moving average over the last eight or so, so that one
write a busy machine preempted does not count), groups go to the thread for ``INLINE_PAUSE_S`` before the loop tries
again. That bound is CPython's default switch interval: the longest one write should hold the loop's other requests.
A group that rolls the segment is written in place too (a spare renamed into place, or a new file, and the directory
synced: once per segment, and the moving average sees it); the WAL's own condition is that nothing else is on its
thread (``FileWAL``).
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

INLINE_GROUP_BYTES = 64 * 1024  # a group this small may be written on the event loop
INLINE_SLOW_S = 0.005  # inline writes slower than this on average send groups to the writer thread ...
INLINE_PAUSE_S = 1.0  # ... for this long
_WEIGHT = 0.125  # of the newest inline write in that average


class InlineWrites:
    """The moving average of one WAL's inline writes, and the pause it calls for."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._after = 0.0  # event-loop time before which groups go to the writer thread
        self._seconds = 0.0  # moving average of the inline writes' seconds

    def allows(self, length: int, now: float) -> bool:
        """Whether a group of ``length`` bytes may be written in place at event-loop time ``now``."""
        return length <= INLINE_GROUP_BYTES and now >= self._after

    def wrote(self, seconds: float, now: float) -> None:
        """An inline write took ``seconds``."""
        self._seconds += (seconds - self._seconds) * _WEIGHT
        if self._seconds > INLINE_SLOW_S:
            logger.debug(
                "%s: inline group writes took %.1f ms on average; groups go to the writer thread for %.0f s",
                self._name,
                self._seconds * 1000,
                INLINE_PAUSE_S,
            )
            self._after = now + INLINE_PAUSE_S
            self._seconds = 0.0  # the next try starts afresh
