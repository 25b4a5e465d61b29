"""Which of the file WAL's groups are written on the event loop rather than on its writer thread.

The hop to the writer thread and back costs a busy event loop more than a small write: the thread needs the GIL
twice, and a loop that lets go of it only at its own system calls keeps it for up to a switch interval (5 ms) each
time (``storage.offload`` says why), while the write and fdatasync of a few KiB take a tenth of a millisecond on a
local SSD. A balancing move's closing meta entries waited 4-18 ms for that hop on a loaded broker. So a group of at
most ``INLINE_GROUP_BYTES`` is written in place, unless the disk is slow: should the inline writes take longer than
``INLINE_SLOW_S`` on average (a moving average over the last eight or so, so that one write a busy machine
preempted does not count as a slow disk), groups go to the thread for ``INLINE_PAUSE_S`` before the loop tries again.
That bound is the switch interval: a write shorter than it holds the loop for less than the hop can add to the
acknowledgement, and a longer one holds up every other request for more. (A shared disk under load is not fast:
in ``bench/balancer.py``, four brokers' WALs, their object store and the controller's log on one disk, a small
group's write and fdatasync averaged about 2 ms.)
The WAL adds its own conditions (no roll, nothing else on the thread: ``FileWAL``).
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger(__name__)

INLINE_GROUP_BYTES = 64 * 1024  # a group this small may be written on the event loop
INLINE_SLOW_S = sys.getswitchinterval()  # inline writes slower than this on average send groups to the thread ...
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
