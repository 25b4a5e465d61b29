"""``SharePartition``: one share group's view of one topic partition on the partition's leader (Kafka's
SharePartition), the async facade over the sans-I/O :class:`~broker.share.partition_state.PartitionShareState`.

A fetch reads the partition's log from the state's fetch offset (read_committed: below the LSO), tells the state
machine which batches it found (control batches and, under read_committed, aborted transactions' batches are
archived, never handed out) and returns the batches that hold what it acquired. Acknowledgements, releases and lock
time-outs change the state synchronously and then append the change to the share stream (:mod:`.store`); the
caller is answered once it is durable, so an acknowledged record never comes back after a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.partition.partition_log import PartitionLog
from broker.share.config import ShareMetricsSink, limits_of
from broker.share.partition_state import AckBatch, AckError, AcquiredRange, LogBatch, PartitionShareState
from broker.share.record_states import AcknowledgeType
from broker.share.store import ShareStore
from metadata.errors import error_code_for
from settings.share_groups import ShareGroupConfig
from storage import errors as storage_errors
from wire.aborted_txns import AbortedTxn
from wire.errors import KafkaError
from wire.log_text import untrusted
from wire.record_batch import BatchHeader

logger = logging.getLogger(__name__)

#: Added to a fetch's estimated read size, so a batch straddling the estimate's end is still read whole.
_READ_MARGIN = 64 * 1024
#: Reads one fetch makes at most from one partition (each reads on where the last ended).
_MAX_READS = 8

__all__ = ["AckBatch", "AcquiredRange", "ShareFetched", "SharePartition"]


@dataclass(frozen=True, slots=True)
class ShareFetched:
    """What a share fetch got from one partition: the batches holding the acquired records, each a view of the
    stored batch (empty: nothing)."""

    records: list[memoryview]
    acquired: list[AcquiredRange]
    error: int = 0
    log_start_offset: int = -1
    high_watermark: int = -1


class SharePartition:
    """One (group, topic partition) on the partition's leader. Built by ``SharePartitions``, never directly."""

    def __init__(
        self,
        group_id: str,
        log: PartitionLog,
        store: ShareStore,
        state: PartitionShareState,
        *,
        config_for: Callable[[str], ShareGroupConfig],
        metrics: ShareMetricsSink,
        changed: Callable[[], None],
    ) -> None:
        self.group_id = group_id
        self.topic = log.topic
        self.topic_id: uuid.UUID = log.topic_id
        self.partition = log.partition
        self.log = log
        self.state = state
        self._store = store
        self._config_for = config_for
        self._metrics = metrics
        self._changed = changed
        #: The config the state's limits were last taken from.
        self._limits_from: ShareGroupConfig | None = None
        #: Log bytes per offset of the last read (record size plus batch overhead), for :meth:`_read_budget`.
        self._bytes_per_offset = 1024.0

    def _config(self) -> ShareGroupConfig:
        config = self._config_for(self.group_id)
        if config is not self._limits_from:  # the same config object while the group's configs are unchanged
            self.state.limits = limits_of(config)
            self._limits_from = config
        return config

    def _read_limit(self, config: ShareGroupConfig) -> int:
        return self.log.last_stable_offset if config.isolation_level == 1 else self.log.high_watermark

    # ------------------------------------------------------------------ what ShareFetch asks
    def available(self) -> bool:
        """Something could be acquired now (ShareFetch's long-poll stops waiting)."""
        if self.log.closed:
            return True  # the fetch answers NOT_LEADER_OR_FOLLOWER at once
        return self.state.can_acquire(self._read_limit(self._config()))

    def acquisition_lock_timeout_ms(self) -> int:
        return self._config().record_lock_duration_ms

    async def fetch(
        self, member_id: str, max_bytes: int, max_records: int, now_ms: int, *,
        whole_batches: bool = False, batch_size: int = 0,
    ) -> ShareFetched:
        """Acquires up to ``max_records`` records for ``member_id`` and returns the batches holding them; with
        ``whole_batches`` (ShareFetch's batch-optimized mode) the last batch is completed past the limit, see
        :meth:`PartitionShareState.acquire`."""
        pending: list[Awaitable[None]] = []
        try:
            config = self._config()
            moved = self._follow_log_start()
            if moved is not None:
                pending.append(moved)
            limit = self._read_limit(config)
            acquired: list[AcquiredRange] = []
            records: list[memoryview] = []
            if self.state.can_acquire(limit) and max_records > 0:
                acquired, records = await self._acquire(
                    member_id, limit=limit, read_committed=config.isolation_level == 1, max_bytes=max_bytes,
                    max_records=max_records, now_ms=now_ms, whole_batches=whole_batches, batch_size=batch_size)
                written = self._issue()
                if written is not None:
                    pending.append(written)
            for wait in pending:
                await wait
        except (KafkaError, storage_errors.StorageError) as exc:
            if isinstance(exc, storage_errors.StorageError):
                logger.warning("share fetch of %s for %s failed: %s", self.log.where, untrusted(self.group_id), exc)
            for wait in pending:  # issued before the failure: finish them (or see them fail) all the same
                with contextlib.suppress(Exception):
                    await wait
            return ShareFetched([], [], int(error_code_for(exc)))
        n = sum(r.last_offset - r.first_offset + 1 for r in acquired)
        if n:
            self._metrics.acquired(self.group_id, self.topic, n)
            again = sum(r.last_offset - r.first_offset + 1 for r in acquired if r.delivery_count > 1)
            if again:
                self._metrics.redelivered(self.group_id, self.topic, again)
        return ShareFetched(records, acquired, 0, self.log.log_start_offset, self.log.high_watermark)

    async def acknowledge(self, member_id: str, batches: Sequence[AckBatch], now_ms: int) -> int:
        """Applies ``member_id``'s acknowledgements and returns once durable: 0, or Kafka's error code (and then
        nothing changed)."""
        return await self.start_acknowledge(member_id, batches, now_ms)

    def start_acknowledge(self, member_id: str, batches: Sequence[AckBatch], now_ms: int) -> Awaitable[int]:
        """:meth:`acknowledge` in two steps: the records change state and their durable write is issued now (a
        fetch that follows sees the window they freed), and the returned awaitable answers once the write is
        durable: 0, or Kafka's error code. ShareFetch acquires and reads while the write is in flight and awaits
        it before it answers. The awaitable is a task: the write's outcome is counted even if nobody awaits it."""
        if self.log.closed:
            return _done(int(ErrorCode.not_leader_or_follower))
        self._config()
        try:
            counted = self.state.acknowledge(member_id, batches, now_ms)
        except AckError as exc:
            logger.debug("%s/%s: acknowledgement refused: %s", untrusted(self.group_id), self.log.where, exc)
            return _done(int(exc.code))
        return asyncio.ensure_future(self._acknowledged(self._issue(), counted))

    async def _acknowledged(self, pending: Awaitable[None] | None, counted: dict[AcknowledgeType, int]) -> int:
        code = await self._persist(pending)
        for kind, n in counted.items():
            if kind == AcknowledgeType.ACCEPT:
                self._metrics.acknowledged(self.group_id, self.topic, n)
            elif kind == AcknowledgeType.RELEASE:
                self._metrics.released(self.group_id, self.topic, n)
            elif kind == AcknowledgeType.REJECT:
                self._metrics.rejected(self.group_id, self.topic, n)
            elif kind == AcknowledgeType.GAP:
                self._metrics.archived(self.group_id, self.topic, n)
        if counted.get(AcknowledgeType.RELEASE):
            self._changed()
        return code

    async def writes_begun(self) -> None:
        """The durable writes :meth:`start_acknowledge` issued are under way (``Stream.writes_begun``): a ShareFetch
        awaits this before it acquires, so the write runs while it acquires and reads rather than after."""
        await self._store.writes_begun()

    async def release_member(self, member_id: str, now_ms: int) -> None:
        """The member's session closed or it left: what it holds goes back to AVAILABLE (ARCHIVED at the limit)."""
        if self.log.closed:
            return
        self._config()
        released, archived = self.state.release_member(member_id)
        if released or archived:
            await self._persist(self._issue())
            self._metrics.released(self.group_id, self.topic, released)
            self._metrics.archived(self.group_id, self.topic, archived)
            self._changed()

    def expire_locks(self, now_ms: int) -> Awaitable[int] | None:
        """The lock timer's tick: acquisitions past their lock go back. Returns the durable write to await."""
        if self.log.closed:
            return None
        self._config()
        released, archived = self.state.expire_locks(now_ms)
        if not (released or archived):
            return None
        self._metrics.lock_timed_out(self.group_id, self.topic, released + archived)
        self._metrics.archived(self.group_id, self.topic, archived)
        self._changed()
        return self._persist(self._issue())

    # ------------------------------------------------------------------ internals
    async def _acquire(
        self, member_id: str, *, limit: int, read_committed: bool, max_bytes: int, max_records: int, now_ms: int,
        whole_batches: bool, batch_size: int,
    ) -> tuple[list[AcquiredRange], list[memoryview]]:
        """Reads from the fetch offset and acquires, reading on while the read ended before the log did and the
        fetch has room (records under ``max_records``, bytes under ``max_bytes``, the window): the read is sized
        by an estimate (:meth:`_read_budget`), and the batch that reaches ``max_records`` must still be read whole
        in batch-optimized mode, as Kafka's acquisition takes the batch holding the limit's last offset.

        The batches are views of the stored ones and stay so up to the socket (``wire.codec.SplicedRecords``):
        joining them cost a copy of every record per read and another per fetch of several reads, about 1 ms of
        the event loop per 3 MB round trip."""
        acquired: list[AcquiredRange] = []
        parts: list[memoryview] = []
        count = size = largest = 0
        offset = self.state.fetch_offset()
        for _ in range(_MAX_READS):
            wanted = max_records - count
            if wanted <= 0 or size >= max_bytes or not self.state.can_acquire(limit):
                break
            budget = self._read_budget(offset, max_bytes - size, wanted)
            if parts:  # a later read takes at least one batch of the size seen, within what MaxBytes leaves
                budget = min(max(budget, largest + _READ_MARGIN), max_bytes - size)
            result = await self.log.read_views(offset, budget, min_one=not parts, read_committed=read_committed)
            batches = result.batches
            if not batches:
                break
            headers = [h for h, _ in batches]
            spanned = headers[-1].last_offset + 1 - headers[0].base_offset
            self._bytes_per_offset = max(result.size / max(spanned, 1), 1.0)
            largest = max(largest, *(h.size for h in headers))
            kinds = classify(headers, result.aborted_transactions, read_committed=read_committed)
            acquired = self.state.acquire(member_id, kinds, wanted, now_ms, whole_batches=whole_batches,
                                          batch_size=batch_size, taken=acquired)
            parts.extend(view for header, view in batches if _holds(acquired, header))
            count = sum(r.last_offset - r.first_offset + 1 for r in acquired)
            size += result.size
            end = headers[-1].last_offset + 1
            offset = self.state.fetch_offset()
            if end >= limit or offset < end:
                break  # the log's end, or window records released meanwhile: the next fetch starts there
        return acquired, parts

    def _read_budget(self, offset: int, max_bytes: int, max_records: int) -> int:
        """How much of the log one fetch reads: no more than the records it could acquire span (the window from
        ``offset`` on and the room after it, at most ``max_records`` fresh ones), estimated from the bytes per
        offset of the last read, with a margin; never more than ``max_bytes``. Reading a consumer's whole
        ``fetch.max.bytes`` when the lock window admits a few thousand records would copy and parse tens of MB per
        fetch only to hand out one or two."""
        state = self.state
        room = max(state.limits.max_record_locks - state.in_flight(), 0)
        span = state.end_offset - offset + min(room, max_records)
        estimate = int(span * self._bytes_per_offset * 1.25) + _READ_MARGIN
        return max(min(max_bytes, estimate), 1)

    def _issue(self) -> Awaitable[None] | None:
        """Issues the durable write of what just changed; a stream that can no longer be written (the partition
        closed under us, this broker fenced) fails the awaitable rather than the caller's synchronous step."""
        try:
            return self._store.write_update(self.group_id, self.state)
        except (KafkaError, storage_errors.StorageError) as exc:
            return _failed(exc)

    def _follow_log_start(self) -> Awaitable[None] | None:
        """Records below the log start are gone (retention, DeleteRecords): the SPSO moves up to it."""
        if self.state.start_offset < self.log.log_start_offset:
            self.state.move_start(self.log.log_start_offset)
            return self._issue()
        return None

    async def _persist(self, pending: Awaitable[None] | None) -> int:
        if pending is None:
            return 0
        try:
            await pending
        except KafkaError as exc:
            return int(exc.code)
        except storage_errors.StorageError as exc:
            # The partition closed or this broker was fenced: the new leader has only what was durable.
            logger.warning("%s/%s: share state write failed: %s", untrusted(self.group_id), self.log.where, exc)
            return int(ErrorCode.not_leader_or_follower)
        return 0


async def _failed(exc: Exception) -> None:
    raise exc


def _done(code: int) -> Awaitable[int]:
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    future.set_result(code)
    return future


def classify(headers: Sequence[BatchHeader], aborted: Sequence[AbortedTxn], *, read_committed: bool) -> list[LogBatch]:
    """The batches as acquisition sees them: control batches are never handed out, and under read_committed
    neither are the batches of aborted transactions (a ShareFetch response has no aborted-transactions list, so the
    consumer could not drop them itself). A producer's batches are aborted from its aborted transaction's first
    offset up to its ABORT marker, the walk Kafka's consumer does for a read_committed Fetch."""
    pending = sorted(aborted, key=lambda a: a.first_offset)
    active: set[int] = set()
    out: list[LogBatch] = []
    k = 0
    for header in headers:
        while read_committed and k < len(pending) and pending[k].first_offset <= header.last_offset:
            active.add(pending[k].producer_id)
            k += 1
        if header.is_control:
            active.discard(header.producer_id)
            skip = True
        else:
            skip = read_committed and header.is_transactional and header.producer_id in active
        out.append(LogBatch(header.base_offset, header.last_offset, skip))
    return out


def _holds(acquired: Sequence[AcquiredRange], header: BatchHeader) -> bool:
    return any(r.first_offset <= header.last_offset and r.last_offset >= header.base_offset for r in acquired)
