"""``PartitionLog``: one open partition led by this broker, the object the rest of the broker uses (Kafka's
UnifiedLog).

It owns the partition's :class:`~.state.PartitionState` (its streams and everything kept in memory about them)
and composes the modules that each do one thing with it: :mod:`.produce` (appends and their producer-state
checks), :mod:`.txn_markers` (transaction markers, the aborted-transaction index), :mod:`.reads` (Fetch,
ListOffsets), :mod:`.checkpoints` (the recovery point), :mod:`.log_start` (DeleteRecords, retention) and
:mod:`.cleaner_switch` (a cleaner round's output), and its life: :meth:`PartitionLog.open` (:mod:`.opening` finds
the streams, :mod:`.recovery` rebuilds the state, :mod:`.lifecycle` adopts it), the clean close and deletion
(:mod:`.lifecycle`). Only what other packages call is here; how each call is answered lives in those modules, so
this class is the partition's one public face and keeps no logic of its own beyond routing.

What changes the partition's state does it under the state's lock; appends hold it only up to the synchronous
``Stream.append`` (which assigns offsets at call time), so concurrent producers share WAL group commits.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Sequence

from broker.partition.indexes import LeaderEpochCache, TimeIndex
from broker.partition.log_config import LogConfig
from broker.partition.partition_log import (
    checkpoints,
    cleaner_switch,
    lifecycle,
    log_start,
    produce,
    share_stream,
    txn_markers,
)
from broker.partition.partition_log.append import AppendResult
from broker.partition.partition_log.opening import open_streams, read_meta_id
from broker.partition.partition_log.phases import Phases
from broker.partition.partition_log.reads import (
    BatchViews,
    OffsetAndTimestamp,
    ReadResult,
    find_offset_for_timestamp,
    read_batch_views,
    read_records,
)
from broker.partition.partition_log.state import PartitionState
from broker.partition.partition_log.stored_log import BatchVisitor
from broker.partition.partition_log.time_stream import load_time_index
from broker.partition.producer_state import ProducerStateManager
from broker.partition.txn_index import AbortedTxn, TxnIndex
from storage.metadata.api import StreamMetadata
from storage.stream_api import Stream, StreamClient
from storage.stream_record_batch import StreamRecordBatch

logger = logging.getLogger(__name__)


class PartitionLog:
    """One open partition. Create with ``await PartitionLog.open(...)``; ``close`` persists a clean shutdown."""

    def __init__(self, state: PartitionState) -> None:
        """The partition over ``state`` (its opened streams and what is kept in memory of them)."""
        self._state = state

    # ------------------------------------------------------------------ identity and config
    @property
    def topic(self) -> str:
        return self._state.topic

    @property
    def partition(self) -> int:
        return self._state.partition

    @property
    def topic_id(self) -> uuid.UUID:
        return self._state.topic_id

    @property
    def leader_epoch(self) -> int:
        return self._state.leader_epoch

    @property
    def where(self) -> str:
        """``topic-partition``, as logs and errors name the partition."""
        return self._state.where

    @property
    def config(self) -> LogConfig:
        return self._state.config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """The topic's config changed (the partition manager applies it; the next append or round reads it)."""
        self._state.config = config

    @property
    def closed(self) -> bool:
        return self._state.closed

    # ------------------------------------------------------------------ offsets and sizes
    @property
    def log_start_offset(self) -> int:
        return self._state.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._state.log_end_offset

    @property
    def high_watermark(self) -> int:
        """Single replica: everything durable in the WAL is committed."""
        return self._state.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """First offset of the oldest transaction not decided yet (open, or its marker not durable), else the high
        watermark: read_committed consumers read only below it. Never below the log start: an open transaction
        may have begun in records a log-start move deleted (Kafka clamps it the same way)."""
        return max(self.log_start_offset, self.producers.first_unstable_offset(self.high_watermark))

    @property
    def recovery_point(self) -> int:
        """The offset an unclean restart would replay from: the last checkpoint's log end."""
        return self._state.checkpoint.recovery_point

    @property
    def log_stream_id(self) -> int:
        """The stream holding the log's tail, what an upload names (:meth:`uploaded`)."""
        return self._state.log.stream_id

    @property
    def cleaner_offset(self) -> int:
        """Where the compacted prefix (the cleaned stream) ends and the log stream takes over; 0 without one."""
        return self._state.cleaner_offset

    @property
    def tombstone_horizon_ms(self) -> int | None:
        """The earliest delete horizon of a batch kept in the cleaned stream (tombstones, a marker): from then on a
        round is due even without new writes (None: nothing kept expires)."""
        return self._state.tombstone_horizon_ms

    @property
    def cleaned_bytes(self) -> int:
        """Bytes of the compacted prefix (the cleaned stream's batches not below the log start)."""
        return self._state.cleaned_bytes

    @property
    def dirty_bytes(self) -> int:
        """Bytes written since the last cleaner round: what ``min.cleanable.dirty.ratio`` weighs."""
        return max(0, self._state.size_bytes - self._state.cleaned_bytes)

    @property
    def size_bytes(self) -> int:
        """Bytes of the stored batches not wholly below the log start (what retention.bytes limits); appends add
        to it when their offsets are assigned, log-start moves subtract the batches they delete."""
        return self._state.size_bytes

    @property
    def max_timestamp(self) -> int:
        """The largest record timestamp appended so far (-1: none yet), what ListOffsets' -3 looks for."""
        return self._state.max_timestamp

    @property
    def max_timestamp_offset(self) -> int:
        """The base offset of the batch that carried :attr:`max_timestamp`."""
        return self._state.max_timestamp_offset

    # ------------------------------------------------------------------ indexes and producer state
    @property
    def producers(self) -> ProducerStateManager:
        return self._state.producers

    @property
    def epochs(self) -> LeaderEpochCache:
        return self._state.epochs

    @property
    def time_index(self) -> TimeIndex:
        return self._state.time_index

    @property
    def txn_index(self) -> TxnIndex:
        return self._state.txn_index

    def has_ongoing_txn(self, producer_id: int, producer_epoch: int | None = None) -> bool:
        """The producer has an open transaction on this partition (at ``producer_epoch``, when given: a batch of
        a newer epoch belongs to another transaction, as Kafka's ``hasOngoingTransaction`` reads it)."""
        if producer_epoch is not None:
            entry = self.producers.get(producer_id)
            if entry is None or entry.producer_epoch != producer_epoch:
                return False
        return self.producers.has_ongoing_txn(producer_id)

    def ongoing_txn_start_offsets(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction (DescribeProducers, DescribeTransactions)."""
        return self.producers.ongoing_txn_start_offsets()

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Every aborted transaction overlapping ``[start, end)``, as a read_committed Fetch reports them."""
        return self.txn_index.collect(start, end)

    def aborted_markers(self, start: int, end: int) -> tuple[list[int], int]:
        """The aborted markers in ``[start, end)`` and how many the cleaner may remove
        (:func:`.txn_markers.aborted_markers`)."""
        return txn_markers.aborted_markers(self._state, start, end)

    async def forget_aborted_through(self, marker_offset: int) -> None:
        """Drops the aborted index entries up to an ABORT marker the cleaner removes
        (:func:`.txn_markers.forget_aborted_through`)."""
        await txn_markers.forget_aborted_through(self._state, marker_offset)

    # ------------------------------------------------------------------ share groups (share_stream.py)
    @property
    def share_stream(self) -> Stream | None:
        """The share groups' state stream (broker/share/), None until a share group first touches the partition."""
        return self._state.share

    async def ensure_share_stream(self) -> Stream:
        """The share stream, created on first use (:func:`.share_stream.ensure_share_stream`)."""
        return await share_stream.ensure_share_stream(self._state)

    # ------------------------------------------------------------------ open
    @staticmethod
    async def read_ahead(kv: StreamMetadata, namespace: str, topic_id: uuid.UUID, partition: int) -> int | None:
        """What :meth:`open` reads first (the partition's meta stream id), read before the partition is this
        broker's to open: a reassignment's target reads it while the source still closes the partition."""
        return await read_meta_id(kv, namespace, topic_id, partition)

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
        meta_id: int | None = None,
    ) -> PartitionLog:
        """Opens the partition's streams (:mod:`.opening`), restores its state (:mod:`.recovery`) and flips the
        clean-shutdown flag to false, so a crash is detected next time. ``meta_id``: what :meth:`read_ahead`
        returned, if the caller read it ahead (a move's target: :func:`.opening.open_streams` then reads the meta
        stream while opening it)."""
        where = f"{topic}-{partition}"
        opened: list[Stream] = []
        marks = Phases()
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
                meta_id=meta_id,
                marks=marks,
            )
            self = cls(PartitionState(
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
                share_stream=found.share_stream,
            ))
            await lifecycle.restore(self._state, marks)
        except BaseException:
            # Leave nothing half-open: the next attempt (or another node) must be able to open these streams.
            for stream in reversed(opened):
                try:
                    await stream.close()
                except Exception as exc:
                    logger.warning("closing stream %d of %s after a failed open: %s", stream.stream_id, where, exc)
            raise
        return self

    # ------------------------------------------------------------------ append (produce.py, txn_markers.py)
    async def append(
        self,
        records: bytes,
        *,
        required_acks: int = -1,
        origin: str = "client",
        transactional_id: str | None = None,
        verified_markers: int | None = None,
    ) -> AppendResult:
        """Validates, assigns offsets and appends; returns once the records are durable in the WAL
        (:func:`.produce.append`). ``transactional_id`` is the produce request's (transactional batches need
        one); ``verified_markers``: :meth:`markers_applied` when its transaction was verified."""
        return await produce.append(
            self._state, records, origin=origin, transactional_id=transactional_id, verified_markers=verified_markers
        )

    def markers_applied(self, producer_id: int) -> int:
        """The producer's COMMIT/ABORT markers applied here so far: noted when a transactional produce is verified
        (its transaction open here, or added at the coordinator), and compared at its append."""
        return self.producers.markers_applied(producer_id)

    async def write_txn_marker(
        self, *, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
        transaction_version: int = 0,
    ) -> int:
        """Appends the coordinator's COMMIT or ABORT marker for ``producer_id`` through the normal append path and
        returns its offset once durable (:func:`.txn_markers.write_txn_marker`)."""
        return await txn_markers.write_txn_marker(
            self._state,
            self._append_from_coordinator,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            commit=commit,
            transaction_version=transaction_version,
        )

    async def _append_from_coordinator(self, batch: bytes) -> AppendResult:
        return await self.append(batch, origin="coordinator")

    # ------------------------------------------------------------------ checkpoints (checkpoints.py)
    def maybe_checkpoint(self) -> None:
        """The periodic check of the partition manager's timer (:func:`.checkpoints.maybe_checkpoint`)."""
        checkpoints.maybe_checkpoint(self._state)

    def uploaded(self, end_offset: int) -> None:
        """An upload committed the log up to ``end_offset`` to object storage: the recovery point may follow."""
        checkpoints.uploaded(self._state, end_offset)

    @property
    def meta_stream_id(self) -> int:
        """The partition's meta stream, which uploads also name (:meth:`meta_uploaded`)."""
        return self._state.meta.stream.stream_id

    def meta_uploaded(self) -> None:
        """An upload committed some of the meta stream: a trim waiting for it may follow."""
        self._state.meta.trim_if_due()

    # ------------------------------------------------------------------ read (reads.py)
    async def read(
        self, offset: int, max_bytes: int, *, min_one: bool = True, read_committed: bool = False
    ) -> ReadResult:
        """Whole batches from ``offset`` up to ``max_bytes`` (the first one even if larger, when ``min_one``);
        ``read_committed`` reads only below the last stable offset and lists the aborted transactions of the
        range read."""
        self._state.check_open()
        return await read_records(
            self, self._state.stored, offset, max_bytes, min_one=min_one, read_committed=read_committed
        )

    async def read_views(
        self, offset: int, max_bytes: int, *, min_one: bool = True, read_committed: bool = False
    ) -> BatchViews:
        """:meth:`read` as views of the stored batches, not joined (a share fetch keeps only the ones it acquired)."""
        self._state.check_open()
        return await read_batch_views(
            self, self._state.stored, offset, max_bytes, min_one=min_one, read_committed=read_committed
        )

    async def wait_for_data(self, offset: int, timeout: float) -> bool:
        """Long poll: True once records at ``offset`` or later are readable."""
        if self._state.closed:
            return False
        if self.high_watermark > offset:
            return True
        return await self._state.log.wait_for_append(offset, timeout)

    async def offset_for_timestamp(self, timestamp: int, *, read_committed: bool = False) -> OffsetAndTimestamp | None:
        """ListOffsets: -2 earliest, -1 latest, -3 max timestamp, else the first record with ts >= timestamp;
        ``read_committed`` (isolation level 1) answers only offsets below the last stable offset."""
        self._state.check_open()
        if timestamp >= 0:
            await load_time_index(self._state)
        return await find_offset_for_timestamp(self, self._state.stored, timestamp, read_committed=read_committed)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(leader epoch, end offset)`` or (-1, -1) when the epoch is unknown."""
        self._state.check_open()
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    def iter_stored(self, start: int, end: int) -> AsyncIterator[StreamRecordBatch]:
        """Each stored batch overlapping ``[start, end)`` once, in offset order, across the cleaned and log
        streams (a cleaned-stream batch may hold no Kafka batch: it only covers offsets compaction removed)."""
        return self._state.stored.iter_stored(start, end)

    async def scan_batches(self, start: int, end: int, visit: BatchVisitor) -> None:
        """Walks whole stored batches overlapping ``[start, end)`` in offset order; ``visit`` returns False to stop
        (retention reads the headers of the oldest batches with it)."""
        await self._state.stored.scan(start, end, visit)

    # ------------------------------------------------------------------ log start (log_start.py)
    async def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: moves the log start offset to ``offset`` (-1 = high watermark); returns the new low
        watermark (:func:`.log_start.delete_records_before`)."""
        return await log_start.delete_records_before(self._state, offset)

    async def trim_log_start(self, target: int, freed_bytes: int, *, expected_start: int, reason: str) -> bool:
        """Moves the log start offset to ``target`` unless it is no longer ``expected_start`` (retention's way in,
        :func:`.log_start.trim_log_start`)."""
        return await log_start.trim_log_start(
            self._state, target, freed_bytes, expected_start=expected_start, reason=reason
        )

    # ------------------------------------------------------------------ log cleaner (cleaner_switch.py)
    async def begin_cleaning(self) -> Stream:
        """The stream a cleaner round writes, named doomed first (:func:`.cleaner_switch.begin_cleaning`)."""
        return await cleaner_switch.begin_cleaning(self._state)

    async def abandon_cleaning(self, stream: Stream) -> None:
        """Deletes an unfinished round's stream (:func:`.cleaner_switch.abandon_cleaning`)."""
        await cleaner_switch.abandon_cleaning(self._state, stream)

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
        """Switches the partition to a round's output unless it moved on meanwhile
        (:func:`.cleaner_switch.install_cleaned`)."""
        return await cleaner_switch.install_cleaned(
            self._state,
            stream,
            cleaner_offset=cleaner_offset,
            expected_start=expected_start,
            read_bytes=read_bytes,
            written_bytes=written_bytes,
            tombstone_horizon_ms=tombstone_horizon_ms,
        )

    # ------------------------------------------------------------------ close / delete
    async def close(self) -> None:
        """Clean close: persists what lets the next open skip recovery (:func:`.lifecycle.close`)."""
        await lifecycle.close(self._state)

    @staticmethod
    async def close_together(logs: Sequence[PartitionLog]) -> list[BaseException | None]:
        """Closes the partitions with one upload for all (:func:`.lifecycle.close_together`); per partition, what
        its close raised."""
        return await lifecycle.close_together([log._state for log in logs])

    async def delete(self) -> None:
        """Destroys the partition's streams and its KV entry (topic deletion, :func:`.lifecycle.delete`)."""
        await lifecycle.delete(self._state)
