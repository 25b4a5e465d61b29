"""``PartitionLog``: one open partition led by this broker, the object that owns its state (Kafka's UnifiedLog).

It holds the partition's streams and everything kept in memory about them (log start, sizes, producer state and
open transactions, time index, aborted-transaction index, leader epochs) and is the one place that changes that
state, under a per-partition lock. The ideas it coordinates live next to it: :mod:`.opening` and :mod:`.recovery`
(open), :mod:`.append` (produce), :mod:`.reads` (fetch, ListOffsets), :mod:`.stored_log` (which stream holds an
offset), :mod:`.time_stream`, :mod:`.txn_stream` and :mod:`.cleaned_stream` (LOG bookkeeping of the cleaner's
streams).

Transactions (KIP-98): transaction markers written by the coordinator (:meth:`PartitionLog.write_txn_marker`) go
through the same append path as produced batches; the last stable offset bounds read_committed reads.

Appends run under the lock only up to the synchronous ``Stream.append`` (which assigns offsets at call time), then
wait for durability outside it, so concurrent producers share WAL group commits. The log start moves (DeleteRecords,
retention) and a cleaner round's switch also take the lock, and persist what they change in the meta stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.partition.indexes import (
    LeaderEpochCache,
    TimeIndex,
    TimeIndexEntry,
    encode_epoch_checkpoint,
    encode_time_entry,
)
from broker.partition.log_config import LogConfig
from broker.partition.meta_stream import (
    KEY_LEADER_EPOCH_CHECKPOINT,
    KEY_LOG,
    KEY_PARTITION,
    KEY_PRODUCER_SNAPSHOTS,
    MetaStream,
)
from broker.partition.partition_log.append import AppendResult, assign_offsets, validate_produce
from broker.partition.partition_log.cleaned_stream import cleaning_stream_tags, doomed_ids, switched_log_info
from broker.partition.partition_log.opening import delete_doomed, open_stream, open_streams
from broker.partition.partition_log.reads import (
    OffsetAndTimestamp,
    ReadResult,
    find_offset_for_timestamp,
    read_records,
)
from broker.partition.partition_log.recovery import recover
from broker.partition.partition_log.stored_log import BatchVisitor, StoredLog
from broker.partition.partition_log.time_stream import read_time_entries, trim_time_stream
from broker.partition.partition_log.txn_stream import trim_txn_stream
from broker.partition.producer_state import ProducerStateManager, encode_snapshot
from broker.partition.txn_index import AbortedTxn, AbortedTxnEntry, TxnIndex, encode_entry
from storage import errors as storage_errors
from storage.metadata.api import StreamMetadata
from storage.stream_api import Stream, StreamClient
from storage.stream_record_batch import StreamRecordBatch
from wire.control_records import ControlRecordError, TxnMarker, decode_marker, encode_marker_key, encode_marker_value
from wire.errors import KafkaError
from wire.record_batch import BatchHeader, InvalidBatchError, Record, build_batch, decode_records

logger = logging.getLogger(__name__)

#: DeleteRecords re-reads the deleted prefix when retention moved the log start meanwhile; this bounds the retries.
_TRIM_ATTEMPTS = 5
#: How often an idle partition looks for producers to expire (Kafka's producer.id.expiration.check.interval.ms).
_EXPIRY_CHECK_INTERVAL_S = 600.0


class PartitionLog:
    """One open partition. Create with ``await PartitionLog.open(...)``; ``close`` persists a clean shutdown."""

    def __init__(
        self,
        *,
        topic: str,
        partition: int,
        topic_id: uuid.UUID,
        leader_epoch: int,
        config: LogConfig,
        meta: MetaStream,
        log: Stream,
        time_stream: Stream,
        streams: StreamClient,
        kv: StreamMetadata,
        kv_key: str,
        log_info: dict[str, Any] | None = None,
        cleaned: Stream | None = None,
        txn_stream: Stream | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.leader_epoch = leader_epoch
        self.config = config
        self.where = f"{topic}-{partition}"
        self._meta = meta
        self._log = log
        self._time = time_stream
        self._streams = streams
        self._kv = kv
        self._kv_key = kv_key
        self._lock = asyncio.Lock()
        self.producers = ProducerStateManager(self.where)
        self.time_index = TimeIndex()
        #: The stream offset below which the time stream's entries are not in ``time_index`` yet (an open reads
        #: only the newest, :mod:`.time_stream`); None once they are. The lock makes one lookup read them.
        self._time_unloaded_end: int | None = None
        self._time_load_lock = asyncio.Lock()
        self.txn_index = TxnIndex()
        self._txn = txn_stream
        self._txn_create_lock = asyncio.Lock()
        self.epochs = LeaderEpochCache()
        self.log_start_offset = log.start_offset
        self._max_timestamp = -1
        self._max_timestamp_offset = -1
        self._size_bytes = 0
        self._bytes_since_index = 0
        self._bytes_since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        self._next_expiry_check = time.monotonic() + _EXPIRY_CHECK_INTERVAL_S
        #: The recovery point (DESIGN §4): the log end as of the last checkpoint (PARTITION ``r``, the producer
        #: snapshot's offset), and the time stream's end then (``ti``). Only durable data is ever named here.
        self._recovery_point = 0
        self._time_checkpoint = 0
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._closed = False
        # Compaction (DESIGN §10): [log start, cleaner offset) lives in the cleaned stream, the rest in the log
        # stream; ``_log_info`` is the LOG meta entry both are named in.
        self._log_info: dict[str, Any] = dict(log_info or {})
        self._stored = StoredLog(log, cleaned, int(self._log_info.get("co", 0)) if cleaned is not None else 0)
        self._cleaned_bytes = 0
        self._cleaning: Stream | None = None
        #: When the oldest tombstone kept in the cleaned stream outlives delete.retention.ms (LOG ``th``): from then
        #: on a round is due even without new writes, so tombstones vanish on their own as Kafka's do.
        horizon = self._log_info.get("th") if cleaned is not None else None
        self.tombstone_horizon_ms: int | None = int(horizon) if horizon is not None else None

    # ------------------------------------------------------------------ offsets
    @property
    def log_end_offset(self) -> int:
        return self._log.next_offset

    @property
    def high_watermark(self) -> int:
        """Single replica: everything durable in the WAL is committed."""
        return self._log.confirm_offset

    @property
    def last_stable_offset(self) -> int:
        """First offset of the oldest transaction not decided yet (open, or its marker not durable), else the high
        watermark: read_committed consumers read only below it. Never below the log start: an open transaction
        may have begun in records a log-start move deleted (Kafka clamps it the same way)."""
        return max(self.log_start_offset, self.producers.first_unstable_offset(self.high_watermark))

    def has_ongoing_txn(self, producer_id: int) -> bool:
        """The producer has an open transaction on this partition."""
        return self.producers.has_ongoing_txn(producer_id)

    def ongoing_txn_start_offsets(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction (DescribeProducers, DescribeTransactions)."""
        return self.producers.ongoing_txn_start_offsets()

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Every aborted transaction overlapping ``[start, end)``, as a read_committed Fetch reports them."""
        return self.txn_index.collect(start, end)

    def aborted_markers(self, start: int, end: int) -> tuple[list[int], int]:
        """The marker offsets of the aborted-transaction index entries in ``[start, end)``, and how many of them,
        from the first, the txn stream holds durably: the log cleaner may remove only those markers, with their
        entries (:meth:`forget_aborted_through`)."""
        entries = self.txn_index.markers_in(start, end)
        confirmed = self._txn.confirm_offset if self._txn is not None else 0
        droppable = 0
        for _, stream_offset in entries:
            if not 0 <= stream_offset < confirmed:
                break
            droppable += 1
        return [marker for marker, _ in entries], droppable

    async def forget_aborted_through(self, marker_offset: int) -> None:
        """Drops the aborted-transaction index entries whose ABORT marker is at or before ``marker_offset`` and
        trims them off the txn stream. The log cleaner calls it before switching to a log without those markers:
        an entry left behind by a crash in between would make read_committed consumers skip the producer's later
        data (the marker that ends the skip is gone), while a marker outliving its entry is harmless."""
        async with self._lock:
            self._check_open()
            txn_trim = self.txn_index.drop_before(marker_offset + 1)
            if self._txn is not None:
                await trim_txn_stream(self._txn, txn_trim)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def recovery_point(self) -> int:
        """The offset an unclean restart would replay from: the last checkpoint's log end."""
        return self._recovery_point

    @property
    def log_stream_id(self) -> int:
        """The stream holding the log's tail, what an upload names (:meth:`uploaded`)."""
        return self._log.stream_id

    @property
    def cleaner_offset(self) -> int:
        """Where the compacted prefix (the cleaned stream) ends and the log stream takes over; 0 without one."""
        return self._stored.cleaner_offset

    @property
    def _cleaned(self) -> Stream | None:
        return self._stored.cleaned

    @property
    def cleaned_bytes(self) -> int:
        """Bytes of the compacted prefix (the cleaned stream's batches not below the log start)."""
        return self._cleaned_bytes

    @property
    def dirty_bytes(self) -> int:
        """Bytes written since the last cleaner round: what ``min.cleanable.dirty.ratio`` weighs."""
        return max(0, self._size_bytes - self._cleaned_bytes)

    @property
    def size_bytes(self) -> int:
        """Bytes of the stored batches not wholly below the log start (what retention.bytes limits); appends add
        to it when their offsets are assigned, log-start moves subtract the batches they delete."""
        return self._size_bytes

    @property
    def max_timestamp(self) -> int:
        """The largest record timestamp appended so far (-1: none yet), what ListOffsets' -3 looks for."""
        return self._max_timestamp

    @property
    def max_timestamp_offset(self) -> int:
        """The base offset of the batch that carried :attr:`max_timestamp`."""
        return self._max_timestamp_offset

    # ------------------------------------------------------------------ open
    @classmethod
    async def open(
        cls,
        *,
        streams: StreamClient,
        kv: StreamMetadata,
        namespace: str,
        topic: str,
        partition: int,
        topic_id: uuid.UUID,
        leader_epoch: int,
        config: LogConfig,
    ) -> PartitionLog:
        """Opens the partition's streams (:mod:`.opening`), restores its state (:mod:`.recovery`) and flips the
        clean-shutdown flag to false, so a crash is detected next time."""
        where = f"{topic}-{partition}"
        opened: list[Stream] = []
        try:
            found = await open_streams(
                streams=streams,
                kv=kv,
                namespace=namespace,
                topic=topic,
                partition=partition,
                topic_id=topic_id,
                leader_epoch=leader_epoch,
                opened=opened,
            )
            self = cls(
                topic=topic,
                partition=partition,
                topic_id=topic_id,
                leader_epoch=leader_epoch,
                config=config,
                meta=found.meta,
                log=found.log,
                time_stream=found.time_stream,
                streams=streams,
                kv=kv,
                kv_key=found.kv_key,
                log_info=found.log_info,
                cleaned=found.cleaned,
                txn_stream=found.txn_stream,
            )
            await self._restore()
        except BaseException:
            # Leave nothing half-open: the next attempt (or another node) must be able to open these streams.
            for stream in reversed(opened):
                try:
                    await stream.close()
                except Exception as exc:
                    logger.warning("closing stream %d of %s after a failed open: %s", stream.stream_id, where, exc)
            raise
        return self

    async def _restore(self) -> None:
        """Adopts the state recovery rebuilt, starts this leader epoch, and persists PARTITION with ``cs=false``."""
        state = await recover(
            meta=self._meta,
            stored=self._stored,
            time_stream=self._time,
            log_info=self._log_info,
            where=self.where,
            txn_stream=self._txn,
        )
        self.producers = state.producers
        self.time_index, self._time_unloaded_end = state.time_index, state.time_unloaded_end
        self.txn_index = state.txn_index
        if state.unstored_aborts:
            txn = await self._ensure_txn_stream()
            waits = [(e, txn.append(encode_entry(e), 1)) for e in state.unstored_aborts]
            for entry, wait in waits:
                self.txn_index.mark_stored(entry.last_offset, await wait)
            logger.info("%s: stored %d aborted transactions found in recovery", self.where, len(waits))
        self.epochs = state.epochs
        self.log_start_offset = state.log_start_offset
        self._cleaned_bytes = state.cleaned_bytes
        self._size_bytes = state.size_bytes
        self._max_timestamp, self._max_timestamp_offset = state.max_timestamp, state.max_timestamp_offset
        self._recovery_point, self._time_checkpoint = state.recovery_point, state.time_checkpoint
        if self.epochs.assign(self.leader_epoch, self.log_end_offset):
            logger.info("%s leader epoch %d starts at offset %d", self.where, self.leader_epoch, self.log_end_offset)
        entries: dict[str, bytes] = {}
        if state.replayed_from is not None:
            # Everything below the log end was just uploaded (WAL recovery) or was already in object storage, and
            # the state rebuilt from it is complete: that is the new recovery point, so the next crash replays
            # only what is written from now on (a crash loop must not replay a growing log).
            self._recovery_point, self._time_checkpoint = self.log_end_offset, self._time.confirm_offset
            entries[KEY_PRODUCER_SNAPSHOTS] = encode_snapshot(self.log_end_offset, self.producers)
        entries[KEY_LEADER_EPOCH_CHECKPOINT] = encode_epoch_checkpoint(self.epochs.entries)
        entries[KEY_PARTITION] = self._partition_record(clean_shutdown=False)
        await self._meta.put(entries)
        logger.info(
            "opened %s (topic id %s) at leader epoch %d: log [%d, %d), %d producers (%d open transactions), "
            "%d time-index entries stored, %d aborted transactions",
            self.where,
            self.topic_id,
            self.leader_epoch,
            self.log_start_offset,
            self.log_end_offset,
            len(self.producers),
            len(self.producers.ongoing_txn_start_offsets()),
            self._time.confirm_offset - self._time.start_offset,
            len(self.txn_index),
        )

    async def _ensure_txn_stream(self) -> Stream:
        """The txn stream, created (and named in LOG) on the partition's first abort."""
        async with self._txn_create_lock:
            if self._txn is not None:
                return self._txn
            self._check_open()
            tags = (("topic", self.topic), ("partition", str(self.partition)), ("type", "txn"))
            stream_id = await self._streams.create_stream(tags)
            stream_map = dict(self._log_info.get("streamMap", {}), txn=stream_id)
            await self._put_log_info(streamMap=stream_map)
            stream = await open_stream(self._streams, stream_id, self.leader_epoch, self.where)
            if self._closed:  # closed while we were opening it: close() did not see it
                await stream.close()
                raise KafkaError(ErrorCode.not_leader_or_follower, f"{self.where} is no longer led by this broker")
            self._txn = stream
            logger.info("%s: created txn stream %d for aborted transactions", self.where, stream_id)
            return stream

    def iter_stored(self, start: int, end: int) -> AsyncIterator[StreamRecordBatch]:
        """Each stored batch overlapping ``[start, end)`` once, in offset order, across the cleaned and log
        streams (a cleaned-stream batch may hold no Kafka batch: it only covers offsets compaction removed)."""
        return self._stored.iter_stored(start, end)

    # ------------------------------------------------------------------ append
    def _check_open(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{self.where} is no longer led by this broker")

    async def append(
        self,
        records: bytes,
        *,
        required_acks: int = -1,
        origin: str = "client",
        transactional_id: str | None = None,
    ) -> AppendResult:
        """Validates, assigns offsets and appends; returns once the records are durable in the WAL.
        ``transactional_id`` is the produce request's (transactional batches need one)."""
        self._check_open()
        headers = validate_produce(
            records,
            self.config,
            where=self.where,
            origin=origin,
            now_ms=int(time.time() * 1000),
            transactional_id=transactional_id,
        )
        marker = self._marker_of(records, headers[0]) if headers[0].is_control else None
        log_append_ms = int(time.time() * 1000) if self.config.log_append_time else -1
        async with self._lock:
            self._check_open()
            duplicate = None
            if marker is not None:
                self.producers.check_marker(headers[0].producer_id, headers[0].producer_epoch, marker.coordinator_epoch)
            elif headers[0].has_producer_id:
                duplicate = self.producers.check(headers[0], client=origin == "client")
            if duplicate is None:
                base, next_offset, pending, size = self._append_locked(records, headers, log_append_ms, marker)
        if duplicate is not None:
            # A retry of a batch already appended: answer with its offsets once it is durable, append nothing.
            logger.debug(
                "%s: duplicate batch from producer %d seq %d answered with offset %d",
                self.where,
                headers[0].producer_id,
                headers[0].base_sequence,
                duplicate.first_offset,
            )
            if self.high_watermark <= duplicate.last_offset:
                await self._log.wait_for_append(duplicate.last_offset, 30.0)
                if self.high_watermark <= duplicate.last_offset:
                    raise KafkaError(ErrorCode.request_timed_out, f"{self.where}: original batch is not durable yet")
            return AppendResult(duplicate.first_offset, duplicate.last_offset, -1, self.log_start_offset)
        self._bytes_since_checkpoint += size
        try:
            await pending
        except storage_errors.StorageError as exc:
            logger.error("append to %s failed at offset %d: %s", self.where, base, exc)
            raise
        if self._checkpoint_due():
            self._start_checkpoint()
        return AppendResult(base, next_offset - 1, log_append_ms, self.log_start_offset)

    def _marker_of(self, records: bytes, header: BatchHeader) -> TxnMarker:
        """The transaction marker a control batch written by the broker carries (INVALID_RECORD otherwise)."""
        try:
            decoded = decode_records(records[: header.size])
            marker = decode_marker(decoded[0].key, decoded[0].value) if len(decoded) == 1 else None
        except (InvalidBatchError, ControlRecordError) as exc:
            raise KafkaError(ErrorCode.invalid_record, f"{self.where}: bad control batch: {exc}") from exc
        if marker is None or not header.has_producer_id or not header.is_transactional:
            raise KafkaError(
                ErrorCode.invalid_record, f"{self.where}: a control batch must be one transactional marker record"
            )
        return marker

    def _append_locked(
        self, records: bytes, headers: list[BatchHeader], log_append_ms: int, marker: TxnMarker | None = None
    ) -> tuple[int, int, Awaitable[int], int]:
        """Rewrites offsets and epochs, records producer state (a marker closes its producer's transaction) and
        hands the bytes to the stream (synchronously, so offsets are exactly the ones assigned here)."""
        base = self._log.next_offset
        assigned = assign_offsets(
            records, headers, base_offset=base, leader_epoch=self.leader_epoch, log_append_ms=log_append_ms
        )
        index_entries: list[TimeIndexEntry] = []
        for header, offset in zip(headers, assigned.base_offsets, strict=True):
            self.producers.record(header, offset)
            max_ts = log_append_ms if log_append_ms >= 0 else header.max_timestamp
            entry = self._note_timestamp(max_ts, offset, header.size)
            if entry is not None:
                index_entries.append(entry)
        payload = assigned.payload
        next_offset = assigned.next_offset
        pending = self._log.append(payload, next_offset - base)
        self._size_bytes += len(payload)
        if marker is not None:
            pending = self._complete_txn(headers[0], base, marker, pending)
        for entry in index_entries:
            # The index's durability follows the log's (same WAL, appended right after); a lost tail entry is
            # rebuilt by recovery, so nobody waits for it.
            future = asyncio.ensure_future(self._time.append(encode_time_entry(entry), 1))
            future.add_done_callback(self._index_append_done)
        return base, next_offset, pending, len(payload)

    def _complete_txn(
        self, header: BatchHeader, offset: int, marker: TxnMarker, pending: Awaitable[int]
    ) -> Awaitable[int]:
        """Applies a marker appended at ``offset`` to producer state; an abort of a transaction that wrote here is
        added to the aborted index and appended to the txn stream right after the marker (same WAL, so it is
        durable with it). Returns what to wait for: the marker, and its index entry."""
        completed = self.producers.complete_txn(
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            coordinator_epoch=marker.coordinator_epoch,
            commit=marker.commit,
            marker_offset=offset,
            timestamp=header.max_timestamp,
        )
        if completed is None or not completed.aborted:
            return pending
        entry = AbortedTxnEntry(
            completed.producer_id,
            completed.first_offset,
            completed.last_offset,
            self.producers.stable_offset_after(completed),
        )
        self.txn_index.add(entry)
        if self._txn is None:  # write_txn_marker creates it before an abort; recovery would store the entry
            logger.warning("%s: no txn stream for the abort at offset %d; recovery will store it", self.where, offset)
            return pending
        stream_offset = self._txn.next_offset
        self.txn_index.mark_stored(entry.last_offset, stream_offset)
        return _both(pending, self._txn.append(encode_entry(entry), 1))

    async def write_txn_marker(
        self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> int:
        """Appends the coordinator's COMMIT or ABORT marker for ``producer_id`` (a control batch, through the
        normal append path) and returns its offset once durable. A marker with an older producer epoch is fenced
        (INVALID_PRODUCER_EPOCH) and appends nothing; one for a producer with no open transaction here is written
        all the same and completes nothing, as Kafka does."""
        self._check_open()
        if not commit:
            await self._ensure_txn_stream()
        batch = build_batch(
            [Record(encode_marker_key(commit), encode_marker_value(coordinator_epoch))],
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_control=True,
            is_transactional=True,
        )
        result = await self.append(batch, origin="coordinator")
        self.producers.first_unstable_offset(self.high_watermark)  # forgets the transactions decided by now
        logger.debug(
            "%s: %s marker of producer %d epoch %d (coordinator epoch %d) at offset %d",
            self.where,
            "COMMIT" if commit else "ABORT",
            producer_id,
            producer_epoch,
            coordinator_epoch,
            result.base_offset,
        )
        return result.base_offset

    def _index_append_done(self, future: asyncio.Future[int]) -> None:
        if not future.cancelled() and future.exception() is not None:
            logger.warning("time-index append of %s failed: %s", self.where, future.exception())

    def _note_timestamp(self, max_ts: int, offset: int, size: int) -> TimeIndexEntry | None:
        """Tracks the max timestamp; returns a new time-index entry when it grows, at most every index interval."""
        self._bytes_since_index += size
        if max_ts <= self._max_timestamp:
            return None
        self._max_timestamp, self._max_timestamp_offset = max_ts, offset
        if self._bytes_since_index < self.config.index_interval_bytes and len(self.time_index) > 0:
            return None
        entry = TimeIndexEntry(max_ts, offset)
        if not self.time_index.add(entry):
            return None
        self._bytes_since_index = 0
        return entry

    # ------------------------------------------------------------------ checkpoint (the recovery point)
    def _checkpoint_due(self) -> bool:
        """Bytes or time bound (``log.flush.offset.checkpoint.interval.bytes`` / ``.ms``) reached with appends."""
        if self._bytes_since_checkpoint >= self.config.checkpoint_interval_bytes:
            return True
        elapsed_ms = (time.monotonic() - self._last_checkpoint) * 1000
        return self._bytes_since_checkpoint > 0 and elapsed_ms >= self.config.checkpoint_interval_ms

    def maybe_checkpoint(self) -> None:
        """The periodic check (the partition manager's timer): a partition written to less than the bytes bound
        still gets a checkpoint within the time bound, even when no append comes to notice it; and one with
        producers idle past ``producer.id.expiration.ms`` gets one that expires them, every
        ``_EXPIRY_CHECK_INTERVAL_S`` (Kafka's ``producer.id.expiration.check.interval.ms``), appends or not."""
        if self._checkpoint_due():
            self._start_checkpoint()
        elif time.monotonic() >= self._next_expiry_check:
            self._next_expiry_check = time.monotonic() + _EXPIRY_CHECK_INTERVAL_S
            if self.producers.any_expired(int(time.time() * 1000), self.config.producer_id_expiration_ms):
                self._start_checkpoint(force=True)

    def uploaded(self, end_offset: int) -> None:
        """An upload committed the log up to ``end_offset`` to object storage: the recovery point may follow."""
        if end_offset > self._recovery_point:
            self._start_checkpoint()

    def _start_checkpoint(self, *, force: bool = False) -> None:
        """One checkpoint at a time per partition, in the background; ``force`` even with nothing appended since
        the last one (the cleaner's switch changes what a replay would read)."""
        if self._closed or self._checkpoint_task is not None:
            return
        if not force and self._bytes_since_checkpoint == 0 and self._recovery_point >= self._log.next_offset:
            return
        self._checkpoint_task = asyncio.create_task(self._checkpoint(), name=f"checkpoint {self.where}")

    async def _checkpoint(self) -> None:
        """Persists the recovery point: producer state (open transactions too), the leader-epoch cache, and
        PARTITION with the recovery offset, size, max timestamp and time-index position, all as of the log end,
        so a crash replays only the log written after it."""
        try:
            async with self._lock:
                if self._closed:
                    return
                # The snapshot must hold only durable batches: a crash loses non-durable ones, and a snapshot
                # naming them would turn the producer's retry into a false duplicate. The time-index entries of
                # those batches are appended right after them; the checkpoint names them too, so it waits for both.
                end = self._log.next_offset
                time_end = self._time.next_offset
                if not await _durable(self._log, end) or not await _durable(self._time, time_end):
                    logger.warning("%s: checkpoint at offset %d skipped: appends not durable in time", self.where, end)
                    return
                self._bytes_since_checkpoint = 0
                self._last_checkpoint = time.monotonic()
                expired = self.producers.expire(int(time.time() * 1000), self.config.producer_id_expiration_ms)
                if expired:
                    logger.info("%s: expired %d idle producers", self.where, len(expired))
                previous = self._recovery_point
                self._recovery_point, self._time_checkpoint = end, time_end
                entries = {
                    KEY_PRODUCER_SNAPSHOTS: encode_snapshot(end, self.producers),
                    KEY_LEADER_EPOCH_CHECKPOINT: encode_epoch_checkpoint(self.epochs.entries),
                    KEY_PARTITION: self._partition_record(clean_shutdown=False),
                }
                put = self._meta.put(entries)
            await put
            logger.debug("%s: recovery point %d -> %d", self.where, previous, end)
        except Exception:
            logger.exception("checkpoint of %s failed", self.where)
        finally:
            self._checkpoint_task = None

    def _partition_record(self, *, clean_shutdown: bool) -> bytes:
        """The PARTITION meta entry; :mod:`.recovery` reads it back. ``r`` is the recovery point and ``ti`` the
        time stream's end with it; a clean shutdown's record names the log end for both."""
        if clean_shutdown:
            self._recovery_point, self._time_checkpoint = self.log_end_offset, self._time.next_offset
        return json.dumps(
            {
                "s": self.log_start_offset,
                "c": self.cleaner_offset,
                "cb": self._cleaned_bytes,
                "r": self._recovery_point,
                "ti": self._time_checkpoint,
                "cs": clean_shutdown,
                "mt": [self._max_timestamp, self._max_timestamp_offset],
                "z": [self.log_end_offset, self._size_bytes],
            }
        ).encode()

    # ------------------------------------------------------------------ read (broker/partition/partition_log/reads.py)
    async def read(
        self, offset: int, max_bytes: int, *, min_one: bool = True, read_committed: bool = False
    ) -> ReadResult:
        """Whole batches from ``offset`` up to ``max_bytes`` (the first one even if larger, when ``min_one``);
        ``read_committed`` reads only below the last stable offset and lists the aborted transactions of the
        range read."""
        self._check_open()
        return await read_records(self, self._stored, offset, max_bytes, min_one=min_one, read_committed=read_committed)

    async def wait_for_data(self, offset: int, timeout: float) -> bool:
        """Long poll: True once records at ``offset`` or later are readable."""
        if self._closed:
            return False
        if self.high_watermark > offset:
            return True
        return await self._log.wait_for_append(offset, timeout)

    async def offset_for_timestamp(self, timestamp: int, *, read_committed: bool = False) -> OffsetAndTimestamp | None:
        """ListOffsets: -2 earliest, -1 latest, -3 max timestamp, else the first record with ts >= timestamp;
        ``read_committed`` (isolation level 1) answers only offsets below the last stable offset."""
        self._check_open()
        if timestamp >= 0:
            await self._load_time_index()
        return await find_offset_for_timestamp(self, self._stored, timestamp, read_committed=read_committed)

    async def _load_time_index(self) -> None:
        """Reads the time stream's stored entries into the index, once, when a lookup by timestamp first needs them
        (appends and the open's replay have been adding the newer ones meanwhile)."""
        if self._time_unloaded_end is None:
            return
        async with self._time_load_lock:
            if self._time_unloaded_end is None:
                return
            older = await read_time_entries(self._time, self._time_unloaded_end, self.where)
            self.time_index.prepend(older)
            self.time_index.drop_before(self.log_start_offset)
            self._time_unloaded_end = None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(leader epoch, end offset)`` or (-1, -1) when the epoch is unknown."""
        self._check_open()
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    # ------------------------------------------------------------------ log start (DeleteRecords, retention)
    async def scan_batches(self, start: int, end: int, visit: BatchVisitor) -> None:
        """Walks whole stored batches overlapping ``[start, end)`` in offset order; ``visit`` returns False to stop
        (retention reads the headers of the oldest batches with it)."""
        await self._stored.scan(start, end, visit)

    async def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: moves the log start offset to ``offset`` (-1 = high watermark); returns the new low
        watermark. Offsets beyond the high watermark are OFFSET_OUT_OF_RANGE.

        The headers of the deleted prefix are read first (outside the partition lock, so appends go on) to take
        their bytes off the partition size; a log start that moved meanwhile (retention) means reading again."""
        self._check_open()
        for _ in range(_TRIM_ATTEMPTS):
            hw = self.high_watermark
            target = hw if offset == -1 else offset
            if target < 0 or target > hw:
                raise KafkaError(
                    ErrorCode.offset_out_of_range,
                    f"cannot delete records of {self.where} before {offset}: high watermark is {hw}",
                )
            start = self.log_start_offset
            if target <= start:
                return start
            freed = await self._stored.bytes_below(start, target)
            if await self.trim_log_start(target, freed, expected_start=start, reason=f"DeleteRecords before {offset}"):
                return target
        raise KafkaError(
            ErrorCode.request_timed_out,
            f"{self.where}: the log start kept moving while deleting records before {offset}",
        )

    async def trim_log_start(self, target: int, freed_bytes: int, *, expected_start: int, reason: str) -> bool:
        """Moves the log start offset to ``target`` (at most the high watermark) and persists it: trims the log
        and time streams, producer state, the leader-epoch cache, and takes ``freed_bytes`` (the batches wholly
        below ``target``, as the caller read them) off the partition size. The one path for DeleteRecords and
        retention. Returns False, changing nothing, when the log start is no longer ``expected_start`` (another
        trim won the race and ``freed_bytes`` is stale)."""
        async with self._lock:
            self._check_open()
            if self.log_start_offset != expected_start:
                return False
            hw = self.high_watermark
            if target > hw:
                raise KafkaError(
                    ErrorCode.offset_out_of_range,
                    f"cannot move the log start of {self.where} to {target}: high watermark is {hw}",
                )
            if target <= self.log_start_offset:
                return True
            self.log_start_offset = target
            self._size_bytes = max(0, self._size_bytes - freed_bytes)
            cleaned = self._stored.cleaned
            if cleaned is not None and target > cleaned.start_offset:
                # The freed batches come from the cleaned prefix first.
                self._cleaned_bytes = max(0, self._cleaned_bytes - freed_bytes) if target < self.cleaner_offset else 0
                await cleaned.trim(min(target, cleaned.next_offset))
            if target > self._log.start_offset:
                await self._log.trim(target)
            self.producers.on_log_start_advanced(target)
            self.epochs.truncate_start(target)
            self.time_index.drop_before(target)  # a load in progress drops them again when it merges
            txn_trim = self.txn_index.drop_before(target)
            if self._txn is not None:
                await trim_txn_stream(self._txn, txn_trim)
            put = self._meta.put(
                {
                    KEY_PARTITION: self._partition_record(clean_shutdown=False),
                    KEY_LEADER_EPOCH_CHECKPOINT: encode_epoch_checkpoint(self.epochs.entries),
                }
            )
        await put
        # A fresh producer snapshot: one older than the new log start would make a crash recovery drop the
        # producers it cannot vouch for (ProducerStateManager.drop_stale) rather than keep their sequences.
        self._start_checkpoint(force=True)
        # Not under the append lock: the first lookup by timestamp may be reading the time stream (the lock keeps
        # this trim from cutting entries under it), and a produce must not wait for that. A trim that fails here
        # is caught up by the next one, which trims from the stream's start up to the log start.
        async with self._time_load_lock:
            try:
                await trim_time_stream(self._time, target)
            except storage_errors.StorageError as exc:
                logger.warning("trimming the time stream of %s to offset %d failed: %s", self.where, target, exc)
        logger.info(
            "%s: log start offset %d -> %d (%s); %d bytes left",
            self.where,
            expected_start,
            target,
            reason,
            self._size_bytes,
        )
        return True

    # ------------------------------------------------------------------ log cleaner (broker/partition/cleaner.py)
    async def begin_cleaning(self) -> Stream:
        """Creates and opens the stream a cleaner round writes, after naming it in LOG's ``doomed`` list: a round
        interrupted by a crash or a leadership change leaves a stream the next open deletes."""
        self._check_open()
        stream_id = await self._streams.create_stream(cleaning_stream_tags(self.topic, self.partition))
        await self._put_log_info(doomed=[*self._doomed(), stream_id])
        stream = await open_stream(self._streams, stream_id, self.leader_epoch, self.where)
        self._cleaning = stream
        if self._closed:  # closed while we were opening it: close() did not see it
            await stream.close()
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{self.where} is no longer led by this broker")
        return stream

    async def abandon_cleaning(self, stream: Stream) -> None:
        """Deletes an unfinished round's stream (best effort: the ``doomed`` entry covers a failure). A stream the
        switch already installed (the round was interrupted after it) belongs to the partition and stays."""
        if stream is self._stored.cleaned:
            return
        self._cleaning = None
        try:
            await stream.destroy()
            if not self._closed:
                await self._put_log_info(doomed=[x for x in self._doomed() if x != stream.stream_id])
        except storage_errors.StorageError as exc:
            logger.warning("deleting cleaner stream %d of %s failed: %s", stream.stream_id, self.where, exc)

    async def install_cleaned(
        self,
        stream: Stream,
        *,
        cleaner_offset: int,
        expected_start: int,
        read_bytes: int,
        written_bytes: int,
        tombstone_horizon_ms: int | None = None,
    ) -> bool:
        """Switches the partition to a round's output: ``stream`` holds ``[expected_start, cleaner_offset)``
        compacted, built from ``read_bytes`` of stored batches into ``written_bytes``. The switch is one LOG
        meta record (new cleaned stream, cleaner offset, the replaced stream doomed); then the log stream is
        trimmed to the cleaner offset and the replaced cleaned stream deleted. Returns False, changing nothing,
        when the partition moved on meanwhile (log start moved, closed)."""
        async with self._lock:
            if self._closed or self.log_start_offset != expected_start or cleaner_offset < self.cleaner_offset:
                return False
            old = self._stored.cleaned
            info = switched_log_info(
                self._log_info,
                stream_id=stream.stream_id,
                cleaner_offset=cleaner_offset,
                written_bytes=written_bytes,
                tombstone_horizon_ms=tombstone_horizon_ms,
                replaced=old.stream_id if old is not None else None,
            )
            doomed = doomed_ids(info)
            self.tombstone_horizon_ms = tombstone_horizon_ms
            self._size_bytes = max(0, self._size_bytes - read_bytes + written_bytes)
            self._cleaned_bytes = written_bytes
            self._stored.cleaned = stream
            self._cleaning = None
            self._stored.cleaner_offset = cleaner_offset
            self._log_info = info
            put = self._meta.put(
                {
                    KEY_LOG: json.dumps(info).encode(),
                    KEY_PARTITION: self._partition_record(clean_shutdown=False),
                }
            )
        await put
        # A producer snapshot at the log end means a crash never rebuilds producer state from the cleaned
        # prefix, where compaction may have removed a producer's last batch.
        self._start_checkpoint(force=True)
        await self._log.trim(cleaner_offset)
        if old is not None:
            try:
                await old.destroy()
            except storage_errors.StorageError as exc:
                logger.warning("deleting replaced cleaned stream %d of %s failed: %s", old.stream_id, self.where, exc)
                return True
        if not self._closed:
            await self._put_log_info(doomed=[x for x in doomed if old is None or x != old.stream_id])
        return True

    def _doomed(self) -> list[int]:
        return doomed_ids(self._log_info)

    async def _put_log_info(self, **changes: object) -> None:
        self._log_info = dict(self._log_info, **changes)
        await self._meta.put({KEY_LOG: json.dumps(self._log_info).encode()})

    # ------------------------------------------------------------------ close / delete
    async def close(self) -> None:
        """Clean close: waits for in-flight appends, force-uploads, and persists PARTITION(cs=true), producer
        snapshots and the leader-epoch checkpoint so the next open skips recovery."""
        if self._closed:
            return
        async with self._lock:
            self._closed = True
            task = self._checkpoint_task
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        try:
            if self._max_timestamp >= 0:
                last = self.time_index.last
                if last is None or last.timestamp < self._max_timestamp:
                    entry = TimeIndexEntry(self._max_timestamp, self._max_timestamp_offset)
                    if self.time_index.add(entry):
                        await self._time.append(encode_time_entry(entry), 1)
            await self._log.close()
            await self._time.close()
            for extra in (self._stored.cleaned, self._cleaning, self._txn):
                if extra is not None:
                    await extra.close()
            await self._meta.put(
                {
                    KEY_PRODUCER_SNAPSHOTS: encode_snapshot(self.log_end_offset, self.producers),
                    KEY_LEADER_EPOCH_CHECKPOINT: encode_epoch_checkpoint(self.epochs.entries),
                    KEY_PARTITION: self._partition_record(clean_shutdown=True),
                }
            )
            await self._meta.stream.close()
            logger.info("closed %s cleanly at offset %d", self.where, self.log_end_offset)
        except storage_errors.StorageError as exc:
            # Fenced or storage down: a newer owner (or recovery) takes over; the next open will recover.
            logger.warning("closing %s did not complete cleanly: %s", self.where, exc)

    async def delete(self) -> None:
        """Destroys the partition's streams and its KV entry (topic deletion)."""
        async with self._lock:
            self._closed = True
        extra = [s for s in (self._stored.cleaned, self._cleaning) if s is not None]
        txn = [self._txn] if self._txn is not None else []
        for stream in (self._log, self._time, *txn, *extra, self._meta.stream):
            try:
                await stream.destroy()
            except storage_errors.StorageError as exc:
                logger.warning("deleting stream %d of %s failed: %s", stream.stream_id, self.where, exc)
        # Streams of interrupted or replaced cleaner rounds not deleted yet would otherwise outlive the topic.
        doomed = [x for x in self._doomed() if all(x != s.stream_id for s in extra)]
        left = await delete_doomed(self._streams, doomed, self.leader_epoch, self.where)
        if left:
            logger.warning("streams %s of deleted %s could not be deleted", left, self.where)
        await self._kv.delete_kv(self._kv_key)
        logger.info("deleted the streams of %s", self.where)


async def _durable(stream: Stream, end: int) -> bool:
    """Waits (bounded) until everything appended to ``stream`` below ``end`` is durable; False on timeout."""
    if stream.confirm_offset < end:
        await stream.wait_for_append(end - 1, 10.0)
    return stream.confirm_offset >= end


async def _both(first: Awaitable[int], second: Awaitable[int]) -> int:
    """Waits for two appends issued in this order; the first one's result (the marker's offset) is the answer."""
    result = await first
    await second
    return result
