"""A full disk slows a file WAL's appends down instead of failing the WAL.

Before, a group write that met ENOSPC failed the WAL for good: every later append failed, the broker answered
every produce with a retriable error until the node was restarted, and the trim that uploads allow could not even
write its checkpoint. The WAL contract (``storage.wal.capacity``) is that a full WAL slows producers and never
fails them; a full disk is the same condition reached from outside the WAL's own accounting (the ``file://``
object store on the same disk, another program, a WAL capacity larger than the disk).

So a write that finds the disk full (ENOSPC, or EDQUOT for a quota) starts an *episode*: the group goes back to the
head of the queue unacknowledged, its appenders keep waiting, one WARNING names the directory, the WAL frees what
is its own to free (its preallocated spares), and it tells its engine, which uploads what the WAL holds so that a
trim can delete segments. A trim that reaches the end of what was written deletes the live segment too (a disk
smaller than one segment holds nothing else), and the waiting group starts a new one. The group is written again
after each trim, and otherwise on a timer backing off to a second (room may come from outside, an operator
deleting files). A group is rewritten at the same offset, so what a failed write left behind is overwritten by the
same records (a crash before that leaves at most records nobody was told were written, as any crash during a write
does). The episode ends, with an INFO line, at the first write that succeeds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

#: The first retry of an episode, doubled after each until :data:`RETRY_MAX_S`.
RETRY_MIN_S = 0.05
RETRY_MAX_S = 1.0


class DiskFull:
    """The WAL's episode of a full disk (see the module docstring); used on the event loop only."""

    def __init__(self, name: str, began: Callable[[], None], ended: Callable[[], float]) -> None:
        """``began`` and ``ended`` tell the WAL's state an episode began and ended (the seconds it lasted): the
        metrics ``fjord_wal_unwritable`` and ``fjord_wal_unwritable_seconds`` count it as they count S3 away."""
        self._name = name
        self._began, self._ended = began, ended
        self._retry_s = RETRY_MIN_S
        self._room = asyncio.Event()
        #: An episode is under way: the last write found the disk full.
        self.active = False
        #: The flusher is waiting for room: no write is in flight, and none starts before :meth:`wait` returns.
        self.parked = False

    def begin(self, failure: BaseException) -> bool:
        """A write found the disk full; True when it is the first of an episode (the caller frees room then)."""
        self._room.clear()
        if self.active:
            return False
        self.active = True
        self._began()
        logger.warning(
            "%s; the disk is full: appends wait, unacknowledged, until uploads and trims (or the operator) free room "
            "in %s, and are written again then",
            failure,
            self._name,
        )
        return True

    def room(self) -> None:
        """Room may have been freed (a trim deleted segments, spares were dropped, the WAL is closing)."""
        self._room.set()

    def spares_dropped(self, dropped: asyncio.Future[int]) -> None:
        """The WAL deleted its spare segments (the bytes freed) for the episode: a retry may fit now."""
        if dropped.cancelled():
            return
        if dropped.exception() is not None:
            logger.warning("%s: cannot delete spare segments on a full disk: %r", self._name, dropped.exception())
        elif dropped.result():
            logger.info("%s: deleted spare segments (%d bytes) on a full disk", self._name, dropped.result())
            self.room()

    async def wait(self) -> None:
        """Until :meth:`room` is called or the next retry is due, whichever comes first."""
        self.parked = True
        try:
            async with asyncio.timeout(self._retry_s):
                await self._room.wait()
        except TimeoutError:
            pass
        finally:
            self.parked = False
        self._room.clear()
        self._retry_s = min(RETRY_MAX_S, self._retry_s * 2)

    def ended(self) -> None:
        """A write succeeded: the episode, if one ran, is over."""
        if not self.active:
            return
        logger.info("%s: the disk has room again; appends written after %.1f s of waiting", self._name, self._ended())
        self.active = False
        self._retry_s = RETRY_MIN_S
