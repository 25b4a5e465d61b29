"""Retention for ``cleanup.policy=delete`` partitions: how far ``retention.ms`` / ``retention.bytes`` move the log
start offset (DESIGN.md §10).

Kafka deletes whole segments (``segment.bytes`` / ``segment.ms`` decide their size). Fjord's log is a stream with no
segments, so retention cuts on *batch* boundaries instead: the same rules, applied at a finer grain. A batch is never
split, and nothing past the high watermark is deleted, so the log start never passes it; a partition whose every
batch expired becomes empty (log start = high watermark), as Kafka deletes its active segment once the high
watermark reached the log end (``UnifiedLog.deletableSegments``) and rolls a new one.

:class:`RetentionPlanner` is the pure decision: fed the headers of the oldest batches in offset order, it says how
far the log start may move and why. :func:`enforce_retention` is the I/O around it for one open partition: it bounds
the scan with the time index, reads batch headers from the log start, and applies the result through the partition's
delete-records path (which trims the log and time streams and persists the log start in the meta stream). Objects
whose data is all trimmed are reclaimed by the storage engine's compaction and sweep, not here.
"""

from __future__ import annotations

import enum
import logging
import time
import uuid
from dataclasses import dataclass

from broker.partition.log_config import LogConfig
from broker.partition.partition_log import PartitionLog
from wire.record_batch import BatchHeader

logger = logging.getLogger(__name__)


class Reason(enum.Flag):
    """Which limit a deleted prefix breached (both when a batch breached both)."""

    NONE = 0
    TIME = enum.auto()
    SIZE = enum.auto()

    def describe(self) -> str:
        parts = []
        if Reason.TIME in self:
            parts.append("retention.ms")
        if Reason.SIZE in self:
            parts.append("retention.bytes")
        return " and ".join(parts) or "nothing"


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """The three topic configs retention acts on, as the partition's :class:`LogConfig` resolved them."""

    delete_enabled: bool
    retention_ms: int
    retention_bytes: int

    @classmethod
    def of(cls, config: LogConfig) -> RetentionPolicy:
        return cls(config.delete_retention_enabled, config.retention_ms, config.retention_bytes)

    @property
    def active(self) -> bool:
        """False when nothing can ever be deleted (compact-only topic, or both limits unlimited)."""
        return self.delete_enabled and (self.retention_ms >= 0 or self.retention_bytes >= 0)


@dataclass(frozen=True, slots=True)
class BatchSummary:
    """What retention knows of one stored batch (from its header)."""

    base_offset: int
    next_offset: int
    max_timestamp: int
    size: int


#: The oldest batch of each partition as the last check read it, keyed by (topic id, partition): a check whose
#: cutoff has not reached that batch's max timestamp (and with the size within retention.bytes) then reads nothing,
#: so a quiet partition costs no object-storage read per check. A batch below the high watermark never changes.
HeadCache = dict[tuple[uuid.UUID, int], BatchSummary]


@dataclass(frozen=True, slots=True)
class RetentionDecision:
    """Move the log start from ``old_start`` to ``new_start``, freeing the ``freed_bytes`` of the whole batches
    in between, because of ``reason``."""

    old_start: int
    new_start: int
    freed_bytes: int
    deleted_batches: int
    reason: Reason


class RetentionPlanner:
    """Sans-I/O walk over the oldest batches of one partition.

    Both limits delete a *prefix*, as Kafka's segment deletion does: the time rule deletes batches whose max
    timestamp is older than ``now - retention.ms`` up to the first one that is not (a batch with a newer timestamp
    protects everything after it); the size rule deletes the oldest batches while what remains stays at least
    ``retention.bytes`` (Kafka's ``size - segment.size >= retention.bytes``). The new log start is the end of the
    longer of the two prefixes. A batch without timestamps (max -1) has no age of its own: it goes with the batch
    after it, as in Kafka it ages with the other batches of its segment; so one such batch cannot hold back the
    deletion of everything after it. Call :meth:`offer` per batch until it returns False, then :meth:`decision`.
    """

    def __init__(
        self, policy: RetentionPolicy, *, now_ms: int, log_start: int, high_watermark: int, size_bytes: int
    ) -> None:
        self._policy = policy
        self._cutoff = now_ms - policy.retention_ms
        self._log_start = log_start
        self._high_watermark = high_watermark
        self._excess = size_bytes - policy.retention_bytes
        self._time_alive = policy.delete_enabled and policy.retention_ms >= 0
        self._size_alive = policy.delete_enabled and policy.retention_bytes >= 0 and self._excess > 0
        self._new_start = log_start
        self._freed = 0
        self._batches = 0
        self._reason = Reason.NONE
        #: Batches without timestamps met by the time rule alone: (next offset, size) of each, deleted if a later
        #: batch expires.
        self._untimed: list[tuple[int, int]] = []

    @property
    def wants_batches(self) -> bool:
        """False when no batch can be deleted any more (so the caller need not read further)."""
        return self._time_alive or self._size_alive

    @property
    def size_breached(self) -> bool:
        """The partition holds more than retention.bytes, so the walk may go past every time-expired batch."""
        return self._size_alive

    def time_bound(self, first_unexpired_offset: int | None) -> int:
        """Where the scan may stop: the high watermark, or, when only the time rule can delete, the offset of a
        batch known (from the time index) to hold a record at or after the cutoff; nothing from it on expires."""
        if self._size_alive or first_unexpired_offset is None:
            return self._high_watermark
        return min(self._high_watermark, first_unexpired_offset)

    @property
    def cutoff_ms(self) -> int:
        """Batches whose max timestamp is below this have outlived retention.ms."""
        return self._cutoff

    def offer(self, base_offset: int, next_offset: int, max_timestamp: int, size: int) -> bool:
        """One batch, in offset order from the log start; returns whether the next batch is still of interest."""
        if not self.wants_batches:
            return False
        if next_offset <= self._new_start:
            return True  # wholly below the log start already (the first stored batch may straddle it)
        if next_offset > self._high_watermark:
            # What consumers cannot see yet stays.
            self._time_alive = self._size_alive = False
            return False
        untimed = max_timestamp < 0
        by_time = self._time_alive and (untimed or max_timestamp < self._cutoff)
        by_size = self._size_alive and self._excess - size >= 0
        self._time_alive = by_time
        self._size_alive = by_size
        if not (by_time or by_size):
            return False
        if untimed and not by_size:
            self._untimed.append((next_offset, size))
            return self.wants_batches
        for held_next, held_size in self._untimed:
            self._take(held_next, held_size, Reason.TIME)
        self._untimed.clear()
        reason = Reason.NONE
        if by_time:
            reason |= Reason.TIME
        if by_size:
            reason |= Reason.SIZE
        self._take(next_offset, size, reason)
        return self.wants_batches

    def _take(self, next_offset: int, size: int, reason: Reason) -> None:
        self._new_start = next_offset
        self._freed += size
        self._excess -= size
        self._batches += 1
        self._reason |= reason

    def keeps(self, head: BatchSummary) -> bool:
        """True when ``head`` (the batch holding the log start) shows that nothing can be deleted: within
        retention.bytes, and the head itself has not expired, so the time prefix is empty."""
        if self._size_alive or not self._time_alive:
            return not self.wants_batches
        covers = head.base_offset <= self._log_start < head.next_offset
        # A head without timestamps may go with an expired batch after it: only a read can tell.
        return covers and head.max_timestamp >= self._cutoff

    def decision(self) -> RetentionDecision | None:
        """The prefix to delete, or None when nothing breached a limit."""
        if self._new_start <= self._log_start:
            return None
        return RetentionDecision(self._log_start, self._new_start, self._freed, self._batches, self._reason)


async def enforce_retention(
    log: PartitionLog, now_ms: int | None = None, heads: HeadCache | None = None
) -> RetentionDecision | None:
    """Applies retention.ms / retention.bytes to one open partition; returns what was deleted (None if nothing).

    Reads only batch headers of the prefix being deleted plus the first batch kept (the per-partition size must
    drop by exactly the bytes deleted, so the deleted batches are read even where the time index alone would
    justify the cut); when only retention.ms applies, the time index bounds the read. With nothing to delete the
    cost is one read of the oldest batch, and none at all when ``heads`` remembers it."""
    policy = RetentionPolicy.of(log.config)
    if not policy.active or log.closed:
        return None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    start = log.log_start_offset
    planner = RetentionPlanner(
        policy, now_ms=now, log_start=start, high_watermark=log.high_watermark, size_bytes=log.size_bytes
    )
    key = (log.topic_id, log.partition)
    known = heads.get(key) if heads is not None else None
    if not planner.wants_batches or (known is not None and planner.keeps(known)):
        return None
    # The time index's newest entry (T, o) says the batch at o has max timestamp T: when T is not older than the
    # cutoff, no batch from o on can expire by time, which bounds the read when only retention.ms applies.
    last = log.time_index.last
    recent = last.offset if last is not None and last.timestamp >= planner.cutoff_ms else None
    end = planner.time_bound(recent)
    if end <= start:
        return None
    last_read: list[BatchSummary] = []

    def visit(header: BatchHeader, _: memoryview) -> bool:
        summary = BatchSummary(header.base_offset, header.next_offset, header.max_timestamp, header.size)
        last_read[:] = [summary]
        return planner.offer(summary.base_offset, summary.next_offset, summary.max_timestamp, summary.size)

    await log.scan_batches(start, end, visit)
    decision = planner.decision()
    if heads is not None:
        # The last batch read is the first one kept when the walk stopped on it; otherwise nothing is known.
        new_start = start if decision is None else decision.new_start
        if last_read and last_read[0].base_offset <= new_start < last_read[0].next_offset:
            heads[key] = last_read[0]
        else:
            heads.pop(key, None)
    if decision is None:
        return None
    reason = (
        f"retention: {decision.deleted_batches} batch{'' if decision.deleted_batches == 1 else 'es'} / "
        f"{decision.freed_bytes} bytes past "
        f"{decision.reason.describe()} (retention.ms={policy.retention_ms}, retention.bytes={policy.retention_bytes})"
    )
    if not await log.trim_log_start(decision.new_start, decision.freed_bytes, expected_start=start, reason=reason):
        logger.info("%s: log start moved while retention was deciding; retrying at the next check", log.where)
        return None
    return decision
