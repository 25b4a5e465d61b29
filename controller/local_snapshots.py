"""Snapshots of a controller's local metadata log (a combined single node's), taken in the background.

A snapshot is due when the log grew enough or holds records an interval old (``metadata.log.SnapshotPolicy``). It
runs as its own task because the stream metadata applies its records only after the controller's sink returns: a
snapshot taken inside the sink would miss them. The records are captured when the task runs, with the controller's
appends blocked by the log. A Raft quorum's log snapshots through its driver instead, so there nothing is due here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from metadata.log import LocalMetadataLog, RecordLog
from storage.metadata.record_codec import MetadataRecord

logger = logging.getLogger(__name__)

SnapshotRecords = Callable[[], list[MetadataRecord]]


class LocalSnapshots:
    """One controller's snapshots: ``records()`` rebuilds its whole metadata state."""

    def __init__(self, log: RecordLog, records: SnapshotRecords) -> None:
        self._log = log if isinstance(log, LocalMetadataLog) else None
        self._records = records
        self._task: asyncio.Task[None] | None = None

    def maybe_start(self) -> None:
        """Starts a background snapshot when one is due and none is running."""
        log = self._log
        if log is None or not log.should_snapshot():
            return
        if self._task is not None and not self._task.done():
            return
        self._task = asyncio.get_running_loop().create_task(self._snapshot(log))

    async def _snapshot(self, log: LocalMetadataLog) -> None:
        try:
            await log.snapshot(self._records)
        except Exception:
            logger.exception(
                "metadata snapshot in %s failed; the log keeps growing until the next attempt", log.directory
            )

    async def take(self) -> int:
        """Snapshots now (tools and tests; normally size-triggered). Returns the snapshot's offset."""
        if self._log is None:
            raise RuntimeError("this controller's log does not take local snapshots")
        return await self._log.snapshot(self._records)

    async def close(self) -> None:
        """Waits for a running snapshot, then closes the local log once its writes are done."""
        if self._task is not None:
            await self._task
        if self._log is not None:
            await self._log.written()
            self._log.close()
