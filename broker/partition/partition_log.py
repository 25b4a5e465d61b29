"""A Kafka partition led by this broker, on s3stream streams (DESIGN.md §4, §6-7).

Opening a partition: the controller KV entry ``<namespace>/<topicId>/<partition>`` names the meta stream (created
on first open); the meta stream's ``LOG`` entry names the log and time streams; everything is opened with the
partition's leader epoch so an older leader can no longer make data visible. The meta stream is replayed, the
clean-shutdown flag in ``PARTITION`` decides whether producer state and the time index must be rebuilt from the
log tail, and the flag is flipped to false so a crash is detected next time.

With ``cleanup.policy=compact`` the log is two streams (broker/partition/cleaner.py): the cleaned stream holds the
compacted prefix ``[log start, cleaner offset)`` and the log stream the rest, both addressed by Kafka offsets. LOG
names them: ``streamMap`` (log/time/txn), ``cleaned`` (stream id or -1), ``co`` (cleaner offset, also PARTITION's
``c``), ``cb`` (the cleaned stream's bytes) and ``doomed`` (streams of interrupted or replaced rounds, deleted on the
next open). Reads, scans and trims route each offset to the stream holding it.

Appends run under a per-partition lock only up to the synchronous ``Stream.append`` (which assigns offsets at
call time), then wait for durability outside it, so concurrent producers share WAL group commits. Fetch reads
return whole Kafka batches exactly as produced (offsets and leader epoch rewritten, CRC untouched).
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from broker.partition.indexes import (
    EpochEntry,
    IndexFormatError,
    LeaderEpochCache,
    TimeIndex,
    TimeIndexEntry,
    decode_epoch_checkpoint,
    decode_time_entry,
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
from broker.partition.producer_state import ProducerStateManager, SnapshotFormatError, decode_snapshot, encode_snapshot
from controller.kv_keys import partition_kv_key
from storage import errors as storage_errors
from storage.metadata.api import StreamMetadata
from storage.stream_api import Stream, StreamClient, read_batches
from storage.stream_record_batch import StreamRecordBatch
from wire.errors import KafkaError
from wire.record_batch import (
    LOG_APPEND_TIME,
    MAGIC_POS,
    BatchHeader,
    CorruptBatchError,
    InvalidBatchError,
    decode_records,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)

logger = logging.getLogger(__name__)

_FETCH_CHUNK = 1 << 20
_OPEN_RETRIES = 50
_OPEN_RETRY_DELAY = 0.1
#: DeleteRecords re-reads the deleted prefix when retention moved the log start meanwhile; this bounds the retries.
_TRIM_ATTEMPTS = 5

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time_ms: int  # -1 for CreateTime
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: bytes
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int
    leader_epoch: int


async def _open_stream(streams: StreamClient, stream_id: int, epoch: int, where: str) -> Stream:
    """Opens a stream, waiting while its previous owner is still closing it (reassignment, crash recovery)."""
    for attempt in range(_OPEN_RETRIES):
        try:
            return await streams.open_stream(stream_id, epoch)
        except storage_errors.StreamNotClosedError:
            if attempt == _OPEN_RETRIES - 1:
                raise
            logger.info("stream %d of %s is still open elsewhere; retrying", stream_id, where)
            await asyncio.sleep(_OPEN_RETRY_DELAY)
    raise AssertionError("unreachable")


async def _delete_doomed(streams: StreamClient, stream_ids: list[int], epoch: int, where: str) -> list[int]:
    """Deletes streams a cleaner round left behind (an interrupted round's output, or a replaced cleaned stream
    whose deletion did not finish); one already gone is fine. Returns the ids that could not be deleted yet."""
    left: list[int] = []
    for stream_id in stream_ids:
        try:
            await streams.delete_stream(stream_id, epoch)
            logger.info("deleted stream %d of %s left by an earlier cleaner round", stream_id, where)
        except storage_errors.StreamNotFoundError:
            pass
        except storage_errors.StorageError as exc:
            logger.warning("stream %d of %s left by a cleaner round is not deletable yet: %s", stream_id, where, exc)
            left.append(stream_id)
    return left


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
        self.epochs = LeaderEpochCache()
        self.log_start_offset = log.start_offset
        self._max_timestamp = -1
        self._max_timestamp_offset = -1
        self._size_bytes = 0
        self._bytes_since_index = 0
        self._bytes_since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._closed = False
        # Compaction (DESIGN §10): [log start, cleaner offset) lives in the cleaned stream, the rest in the log
        # stream; ``_log_info`` is the LOG meta entry both are named in.
        self._log_info: dict[str, Any] = dict(log_info or {})
        self._cleaned = cleaned
        self.cleaner_offset = int(self._log_info.get("co", 0)) if cleaned is not None else 0
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
    def closed(self) -> bool:
        return self._closed

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
        where = f"{topic}-{partition}"
        key = partition_kv_key(namespace, topic_id, partition)
        raw = await kv.get_kv(key)
        tags = (("topic", topic), ("partition", str(partition)))
        if raw is None:
            meta_id = await streams.create_stream((*tags, ("type", "meta")))
            await kv.put_kv(key, struct.pack(">q", meta_id))
            logger.info("created meta stream %d for %s (kv %s)", meta_id, where, key)
        else:
            if len(raw) != 8:
                raise KafkaError(ErrorCode.kafka_storage_error, f"kv entry {key} of {where} is {len(raw)} bytes")
            (meta_id,) = struct.unpack(">q", raw)
        opened: list[Stream] = []
        try:
            meta_stream = await _open_stream(streams, meta_id, leader_epoch, where)
            opened.append(meta_stream)
            meta = MetaStream(meta_stream, where)
            await meta.replay()
            log_entry = meta.get(KEY_LOG)
            if log_entry is None:
                log_id = await streams.create_stream((*tags, ("type", "log")))
                time_id = await streams.create_stream((*tags, ("type", "time")))
                log_info: dict[str, Any] = {"streamMap": {"log": log_id, "tim": time_id, "txn": -1}}
                await meta.put({KEY_LOG: json.dumps(log_info).encode()})
            else:
                log_info = json.loads(log_entry)
            stream_map = log_info["streamMap"]
            log = await _open_stream(streams, int(stream_map["log"]), leader_epoch, where)
            opened.append(log)
            time_stream = await _open_stream(streams, int(stream_map["tim"]), leader_epoch, where)
            opened.append(time_stream)
            doomed = log_info.get("doomed")
            if isinstance(doomed, list) and doomed:
                log_info["doomed"] = await _delete_doomed(streams, [int(x) for x in doomed], leader_epoch, where)
                await meta.put({KEY_LOG: json.dumps(log_info).encode()})
            cleaned: Stream | None = None
            cleaned_id = int(log_info.get("cleaned", -1))
            if cleaned_id >= 0:
                cleaned = await _open_stream(streams, cleaned_id, leader_epoch, where)
                opened.append(cleaned)
                cleaner_offset = int(log_info.get("co", 0))
                if log.start_offset < cleaner_offset:
                    # A crash between a round's switch and its trim: the prefix now lives in the cleaned stream.
                    await log.trim(min(cleaner_offset, log.next_offset))
            self = cls(
                topic=topic,
                partition=partition,
                topic_id=topic_id,
                leader_epoch=leader_epoch,
                config=config,
                meta=meta,
                log=log,
                time_stream=time_stream,
                streams=streams,
                kv=kv,
                kv_key=key,
                log_info=log_info,
                cleaned=cleaned,
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
        raw_info = self._meta.get(KEY_PARTITION)
        info = json.loads(raw_info) if raw_info is not None else {}
        # A partition opened for the first time has nothing to recover.
        clean = bool(info.get("cs", False)) or (raw_info is None and self._log.confirm_offset == self._log.start_offset)
        stream_start = self._cleaned.start_offset if self._cleaned is not None else self._log.start_offset
        self.log_start_offset = max(int(info.get("s", 0)), stream_start)
        size_checkpoint = info.get("z")
        if self._cleaned is not None:
            if int(info.get("c", 0)) == self.cleaner_offset and "cb" in info:
                self._cleaned_bytes = int(info["cb"])
            else:
                # The LOG switch of a cleaner round is newer than PARTITION: sizes from before the round are stale.
                self._cleaned_bytes = int(self._log_info.get("cb", 0))
                size_checkpoint = None
        if "mt" in info:
            self._max_timestamp, self._max_timestamp_offset = (int(x) for x in info["mt"])
        raw_epochs = self._meta.get(KEY_LEADER_EPOCH_CHECKPOINT)
        if raw_epochs is not None:
            self.epochs = LeaderEpochCache(decode_epoch_checkpoint(raw_epochs))
        await self._load_time_index()
        snapshot_offset = self.log_start_offset
        raw_snapshot = self._meta.get(KEY_PRODUCER_SNAPSHOTS)
        if raw_snapshot is not None:
            try:
                snapshot_offset, entries = decode_snapshot(raw_snapshot)
                self.producers.replace(entries)
            except SnapshotFormatError as exc:
                logger.warning("producer snapshot of %s unreadable (%s); rebuilding from the log", self.where, exc)
                snapshot_offset = self.log_start_offset
        end = self.high_watermark
        size_from = self._restore_size(size_checkpoint, end)
        recover_from: int | None = None
        if not clean or snapshot_offset < end:
            recover_from = max(min(snapshot_offset, end), self.log_start_offset)
            logger.info(
                "recovering %s after %s shutdown: replaying log [%d, %d)",
                self.where,
                "a clean" if clean else "an unclean",
                recover_from,
                end,
            )
        if recover_from is not None or size_from < end:
            await self._replay_tail(recover_from, size_from, end)
        self.producers.evict_before(self.log_start_offset)
        if self.epochs.assign(self.leader_epoch, self.log_end_offset):
            logger.info("%s leader epoch %d starts at offset %d", self.where, self.leader_epoch, self.log_end_offset)
        await self._meta.put(
            {
                KEY_PARTITION: self._partition_record(clean_shutdown=False),
                KEY_LEADER_EPOCH_CHECKPOINT: encode_epoch_checkpoint(self.epochs.entries),
            }
        )
        logger.info(
            "opened %s (topic id %s) at leader epoch %d: log [%d, %d), %d producers, %d time-index entries",
            self.where,
            self.topic_id,
            self.leader_epoch,
            self.log_start_offset,
            self.log_end_offset,
            len(self.producers),
            len(self.time_index),
        )

    async def _load_time_index(self) -> None:
        async for batch in read_batches(self._time, max_bytes=_FETCH_CHUNK):
            try:
                self.time_index.add(decode_time_entry(batch.payload))
            except IndexFormatError as exc:
                logger.warning("skipping bad time-index record %d of %s: %s", batch.base_offset, self.where, exc)
        last = self.time_index.last
        if last is not None and last.timestamp > self._max_timestamp:
            self._max_timestamp, self._max_timestamp_offset = last.timestamp, last.offset

    def _piece(self, offset: int, end: int) -> tuple[Stream, int]:
        """The stream holding ``offset`` and where its part of ``[offset, end)`` ends: offsets below the cleaner
        offset live in the cleaned stream, the rest in the log stream (both use Kafka offsets)."""
        if self._cleaned is not None and offset < self.cleaner_offset:
            return self._cleaned, min(end, self.cleaner_offset)
        return self._log, end

    async def iter_stored(self, start: int, end: int) -> AsyncIterator[StreamRecordBatch]:
        """Each stored batch overlapping ``[start, end)`` once, in offset order, across the cleaned and log
        streams (a cleaned-stream batch may hold no Kafka batch: it only covers offsets compaction removed)."""
        offset = start
        while offset < end:
            stream, piece_end = self._piece(offset, end)
            last = offset
            async for stored in read_batches(stream, max(offset, stream.start_offset), piece_end, _FETCH_CHUNK):
                last = stored.last_offset
                yield stored
            if last <= offset and piece_end < end:
                last = piece_end  # nothing stored there (only possible below a trimmed start)
            if last <= offset:
                return
            offset = last

    async def _scan(self, start: int, end: int, visit: Callable[[BatchHeader, memoryview], bool]) -> None:
        """Walks whole batches of the log in ``[start, end)``; ``visit`` returns False to stop."""
        async for stored in self.iter_stored(start, end):
            for header, batch in iter_batches(stored.payload):
                if header.next_offset <= start:
                    continue  # the stored batch straddles ``start``
                if not visit(header, batch):
                    return

    def _restore_size(self, checkpoint: object, end: int) -> int:
        """Takes the partition size from PARTITION's ``z`` = [offset, bytes] (the size of the batches below that
        offset) and returns the offset from which the tail's batch sizes must still be added.

        Persisting the size is what keeps an open cheap: rebuilding it means reading every batch header of the
        partition, which lives in object storage. The checkpoint is trusted only where it is consistent with the
        log: an offset beyond the recovered end (a tail lost in a crash had been counted) or below the log start
        falls back to that full rebuild, as does a partition written before sizes were persisted."""
        if isinstance(checkpoint, list) and len(checkpoint) == 2:
            offset, size = (int(x) for x in checkpoint)
            if self.log_start_offset <= offset <= end and size >= 0:
                self._size_bytes = size
                return offset
        self._size_bytes = 0
        if end > self.log_start_offset:
            logger.info(
                "rebuilding the size of %s from the batch headers of [%d, %d)", self.where, self.log_start_offset, end
            )
        return self.log_start_offset

    async def _replay_tail(self, recover_from: int | None, size_from: int, end: int) -> None:
        """One walk over the log tail: adds the sizes of batches from ``size_from`` and, when ``recover_from`` is
        set (unclean shutdown or an old snapshot), rebuilds producer state and the time index from there."""
        new_entries: list[TimeIndexEntry] = []
        start = size_from if recover_from is None else min(recover_from, size_from)

        def visit(header: BatchHeader, batch: memoryview) -> bool:
            if header.next_offset > size_from:
                self._size_bytes += header.size
            if recover_from is None or header.next_offset <= recover_from:
                return True
            self.producers.record(header, header.base_offset)
            if header.max_timestamp > self._max_timestamp:
                self._max_timestamp, self._max_timestamp_offset = header.max_timestamp, header.base_offset
                entry = TimeIndexEntry(header.max_timestamp, header.base_offset)
                if self.time_index.add(entry):
                    new_entries.append(entry)
            return True

        await self._scan(start, end, visit)
        waits = [self._time.append(encode_time_entry(e), 1) for e in new_entries]
        for wait in waits:
            await wait

    # ------------------------------------------------------------------ append
    def _check_open(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{self.where} is no longer led by this broker")

    def _validate(self, records: bytes, origin: str) -> list[BatchHeader]:
        try:
            batches = list(iter_batches(records))
        except InvalidBatchError as exc:
            raise KafkaError(ErrorCode.corrupt_message, f"{self.where}: {exc}") from exc
        if not batches:
            raise KafkaError(ErrorCode.invalid_record, f"{self.where}: produce request has no record batches")
        headers: list[BatchHeader] = []
        now = int(time.time() * 1000)
        for _, view in batches:
            if len(view) > self.config.max_message_bytes:
                raise KafkaError(
                    ErrorCode.message_too_large,
                    f"{self.where}: record batch of {len(view)} bytes exceeds max.message.bytes "
                    f"{self.config.max_message_bytes}",
                )
            try:
                header = validate_batch(view)
            except CorruptBatchError as exc:
                raise KafkaError(ErrorCode.corrupt_message, f"{self.where}: {exc}") from exc
            except InvalidBatchError as exc:
                raise KafkaError(ErrorCode.invalid_record, f"{self.where}: {exc}") from exc
            if header.is_control and origin == "client":
                raise KafkaError(ErrorCode.invalid_record, f"{self.where}: clients may not write control batches")
            if self.config.compact and origin == "client":
                self._require_keys(view)
            if not self.config.log_append_time and header.timestamp_type != LOG_APPEND_TIME:
                for ts in (header.base_timestamp, header.max_timestamp):
                    if ts < 0:
                        continue
                    if ts < now - self.config.timestamp_before_max_ms or ts > now + self.config.timestamp_after_max_ms:
                        raise KafkaError(
                            ErrorCode.invalid_timestamp,
                            f"{self.where}: timestamp {ts} is out of range (now {now}, "
                            f"message.timestamp.before/after.max.ms)",
                        )
            headers.append(header)
        if len(headers) > 1 and any(h.has_producer_id for h in headers):
            raise KafkaError(
                ErrorCode.invalid_record,
                f"{self.where}: idempotent produce requests must contain exactly one record batch per partition",
            )
        return headers

    def _require_keys(self, batch: memoryview) -> None:
        """Compaction keeps the latest record per key, so a compacted topic refuses records without one (as
        Kafka does)."""
        try:
            records = decode_records(batch)
        except InvalidBatchError as exc:
            raise KafkaError(ErrorCode.corrupt_message, f"{self.where}: {exc}") from exc
        for record in records:
            if record.key is None:
                raise KafkaError(
                    ErrorCode.invalid_record,
                    f"{self.where}: compacted topic cannot accept a record without a key (cleanup.policy=compact)",
                )

    async def append(self, records: bytes, *, required_acks: int = -1, origin: str = "client") -> AppendResult:
        """Validates, assigns offsets and appends; returns once the records are durable in the WAL."""
        self._check_open()
        headers = self._validate(records, origin)
        log_append_ms = int(time.time() * 1000) if self.config.log_append_time else -1
        async with self._lock:
            self._check_open()
            duplicate = self.producers.check(headers[0]) if headers[0].has_producer_id else None
            if duplicate is None:
                base, next_offset, pending, size = self._append_locked(records, headers, log_append_ms)
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
        if self._checkpoint_due() and self._checkpoint_task is None:
            self._checkpoint_task = asyncio.create_task(self._checkpoint(), name=f"checkpoint {self.where}")
        return AppendResult(base, next_offset - 1, log_append_ms, self.log_start_offset)

    def _append_locked(
        self, records: bytes, headers: list[BatchHeader], log_append_ms: int
    ) -> tuple[int, int, Awaitable[int], int]:
        """Rewrites offsets and epochs, records producer state and hands the bytes to the stream (synchronously,
        so offsets are exactly the ones assigned here)."""
        # The payload is assembled by one join, so every produced byte is copied once: only each batch's first
        # MAGIC_POS bytes (base offset, length, leader epoch: outside the CRC) are rewritten, in a small copy,
        # unless LogAppendTime changes checksummed bytes and the batch is copied whole to be rewritten.
        view = memoryview(records)
        pieces: list[bytes | bytearray | memoryview] = []
        index_entries: list[TimeIndexEntry] = []
        base = self._log.next_offset
        next_offset = base
        pos = 0
        for header in headers:
            end = pos + header.size
            head = bytearray(view[pos : end if log_append_ms >= 0 else pos + MAGIC_POS])
            set_base_offset(head, next_offset)
            set_partition_leader_epoch(head, self.leader_epoch)
            if log_append_ms >= 0:
                set_log_append_time(head, log_append_ms)
                pieces.append(head)
            else:
                pieces += (head, view[pos + MAGIC_POS : end])
            self.producers.record(header, next_offset)
            max_ts = log_append_ms if log_append_ms >= 0 else header.max_timestamp
            entry = self._note_timestamp(max_ts, next_offset, header.size)
            if entry is not None:
                index_entries.append(entry)
            next_offset += header.records_count
            pos = end
        if pos < len(records):
            pieces.append(view[pos:])
        payload = b"".join(pieces)
        pending = self._log.append(payload, next_offset - base)
        self._size_bytes += len(payload)
        for entry in index_entries:
            # The index's durability follows the log's (same WAL, appended right after); a lost tail entry is
            # rebuilt by recovery, so nobody waits for it.
            future = asyncio.ensure_future(self._time.append(encode_time_entry(entry), 1))
            future.add_done_callback(self._index_append_done)
        return base, next_offset, pending, len(payload)

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

    def _checkpoint_due(self) -> bool:
        if self._bytes_since_checkpoint >= self.config.checkpoint_interval_bytes:
            return True
        elapsed_ms = (time.monotonic() - self._last_checkpoint) * 1000
        return self._bytes_since_checkpoint > 0 and elapsed_ms >= self.config.checkpoint_interval_ms

    async def _checkpoint(self) -> None:
        """Persists producer state and PARTITION so a crash replays only the log written since."""
        try:
            async with self._lock:
                if self._closed:
                    return
                # The snapshot must hold only durable batches: a crash loses non-durable ones, and a snapshot
                # naming them would turn the producer's retry into a false duplicate.
                end = self._log.next_offset
                if self._log.confirm_offset < end:
                    await self._log.wait_for_append(end - 1, 10.0)
                    if self._log.confirm_offset < end:
                        return
                self._bytes_since_checkpoint = 0
                self._last_checkpoint = time.monotonic()
                expired = self.producers.expire(int(time.time() * 1000), self.config.producer_id_expiration_ms)
                if expired:
                    logger.info("%s: expired %d idle producers", self.where, len(expired))
                entries = {
                    KEY_PRODUCER_SNAPSHOTS: encode_snapshot(self.log_end_offset, self.producers),
                    KEY_PARTITION: self._partition_record(clean_shutdown=False),
                }
                put = self._meta.put(entries)
            await put
        except Exception:
            logger.exception("checkpoint of %s failed", self.where)
        finally:
            self._checkpoint_task = None

    def _partition_record(self, *, clean_shutdown: bool) -> bytes:
        return json.dumps(
            {
                "s": self.log_start_offset,
                "c": self.cleaner_offset,
                "cb": self._cleaned_bytes,
                "r": self.log_end_offset,
                "cs": clean_shutdown,
                "mt": [self._max_timestamp, self._max_timestamp_offset],
                "z": [self.log_end_offset, self._size_bytes],
            }
        ).encode()

    # ------------------------------------------------------------------ read
    def _check_offset(self, offset: int) -> int:
        hw = self.high_watermark
        if offset < self.log_start_offset or offset > hw:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} of {self.where} is outside [{self.log_start_offset}, {hw}]",
            )
        return hw

    async def read(self, offset: int, max_bytes: int, *, min_one: bool = True) -> ReadResult:
        """Whole batches from ``offset`` up to ``max_bytes`` (the first one even if larger, when ``min_one``)."""
        self._check_open()
        hw = self._check_offset(offset)
        # The batches are collected as views into the stored payloads and joined once: the record bytes are copied
        # exactly one time on their way to the response.
        parts: list[bytes | memoryview] = []
        size = 0
        cursor = offset
        done = not (offset < hw and (max_bytes > 0 or min_one))
        # A read below the cleaner offset starts in the cleaned stream and continues into the log stream while
        # max_bytes allows; an offset compaction removed is covered by the stored batch after it, so the read
        # returns the next present batch.
        while not done and cursor < hw:
            stream, piece_end = self._piece(cursor, hw)
            try:
                result = await stream.fetch(cursor, piece_end, max(max_bytes - size, 1))
            except storage_errors.OffsetOutOfRangeError as exc:
                raise KafkaError(ErrorCode.offset_out_of_range, f"{self.where}: {exc}") from exc
            if not result.batches:
                break
            for stored in result.batches:
                for header, batch in iter_batches(stored.payload):
                    if header.next_offset <= offset:
                        continue
                    if (parts or not min_one) and size + header.size > max_bytes:
                        done = True
                        break
                    parts.append(batch)
                    size += header.size
                if done:
                    break
            reached = result.batches[-1].last_offset
            done = done or reached <= cursor or (reached < piece_end and bool(parts)) or size >= max_bytes
            cursor = reached
        return ReadResult(b"".join(parts), hw, self.log_start_offset, hw)

    async def wait_for_data(self, offset: int, timeout: float) -> bool:
        """Long poll: True once records at ``offset`` or later are readable."""
        if self._closed:
            return False
        if self.high_watermark > offset:
            return True
        return await self._log.wait_for_append(offset, timeout)

    # ------------------------------------------------------------------ offsets by time / epoch
    async def offset_for_timestamp(self, timestamp: int) -> OffsetAndTimestamp | None:
        """ListOffsets: -2 earliest, -1 latest, -3 max timestamp, else the first record with ts >= timestamp."""
        self._check_open()
        hw = self.high_watermark
        if timestamp == EARLIEST_TIMESTAMP:
            return OffsetAndTimestamp(self.log_start_offset, -1, self._epoch_at(self.log_start_offset))
        if timestamp == LATEST_TIMESTAMP:
            return OffsetAndTimestamp(hw, -1, self._epoch_at(hw))
        if timestamp == MAX_TIMESTAMP:
            if self._max_timestamp_offset < self.log_start_offset or hw == self.log_start_offset:
                return OffsetAndTimestamp(-1, -1, -1)
            return await self._max_timestamp_record()
        if timestamp < 0:
            raise KafkaError(ErrorCode.invalid_request, f"{self.where}: unsupported list-offsets timestamp {timestamp}")
        found: list[OffsetAndTimestamp] = []

        def visit(header: BatchHeader, batch: memoryview) -> bool:
            if header.max_timestamp < timestamp:
                return True
            for record in decode_records(batch):
                if record.offset < self.log_start_offset:
                    continue  # deleted (DeleteRecords) but still inside the first stored batch
                if record.timestamp is not None and record.timestamp >= timestamp:
                    found.append(OffsetAndTimestamp(record.offset, record.timestamp, header.partition_leader_epoch))
                    return False
            return True

        await self._scan(self.time_index.scan_start(timestamp, self.log_start_offset), hw, visit)
        return found[0] if found else None

    async def _max_timestamp_record(self) -> OffsetAndTimestamp:
        """The record carrying the max timestamp (within the batch we tracked), as Kafka's -3 lookup returns."""
        found: list[OffsetAndTimestamp] = []
        target = self._max_timestamp

        def visit(header: BatchHeader, batch: memoryview) -> bool:
            for record in decode_records(batch):
                if record.timestamp == target and record.offset >= self.log_start_offset:
                    found.append(OffsetAndTimestamp(record.offset, target, header.partition_leader_epoch))
                    return False
            return False

        start = max(self._max_timestamp_offset, self.log_start_offset)
        await self._scan(start, self.high_watermark, visit)
        if found:
            return found[0]
        return OffsetAndTimestamp(self._max_timestamp_offset, target, self._epoch_at(self._max_timestamp_offset))

    def _epoch_at(self, offset: int) -> int:
        epoch = -1
        for entry in self.epochs.entries:
            if entry.start_offset <= offset:
                epoch = entry.epoch
        return epoch if epoch >= 0 else self.leader_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(leader epoch, end offset)`` or (-1, -1) when the epoch is unknown."""
        self._check_open()
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    # ------------------------------------------------------------------ delete records
    async def scan_batches(self, start: int, end: int, visit: Callable[[BatchHeader, memoryview], bool]) -> None:
        """Walks whole stored batches overlapping ``[start, end)`` in offset order; ``visit`` returns False to stop
        (retention reads the headers of the oldest batches with it)."""
        await self._scan(start, end, visit)

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
            freed = await self._bytes_deleted(start, target)
            if await self.trim_log_start(target, freed, expected_start=start, reason=f"DeleteRecords before {offset}"):
                return target
        raise KafkaError(
            ErrorCode.request_timed_out,
            f"{self.where}: the log start kept moving while deleting records before {offset}",
        )

    async def _bytes_deleted(self, start: int, target: int) -> int:
        """Bytes of the batches that moving the log start from ``start`` to ``target`` deletes: those wholly below
        ``target`` (a batch ``target`` cuts through stays stored, and counted)."""
        total = 0

        def visit(header: BatchHeader, batch: memoryview) -> bool:
            nonlocal total
            if header.next_offset > target:
                return False
            total += header.size
            return True

        await self._scan(start, target, visit)
        return total

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
            if self._cleaned is not None and target > self._cleaned.start_offset:
                # The freed batches come from the cleaned prefix first.
                self._cleaned_bytes = max(0, self._cleaned_bytes - freed_bytes) if target < self.cleaner_offset else 0
                await self._cleaned.trim(min(target, self._cleaned.next_offset))
            if target > self._log.start_offset:
                await self._log.trim(target)
            self.producers.evict_before(target)
            self.epochs.truncate_start(target)
            self.time_index.drop_before(target)
            await self._trim_time_stream(target)
            put = self._meta.put(
                {
                    KEY_PARTITION: self._partition_record(clean_shutdown=False),
                    KEY_LEADER_EPOCH_CHECKPOINT: encode_epoch_checkpoint(self.epochs.entries),
                }
            )
        await put
        logger.info(
            "%s: log start offset %d -> %d (%s); %d bytes left",
            self.where,
            expected_start,
            target,
            reason,
            self._size_bytes,
        )
        return True

    async def _trim_time_stream(self, log_start_offset: int) -> None:
        """Trims time-index records that point below the log start, so the time stream does not outgrow the log."""
        trim_to = self._time.start_offset
        async for batch in read_batches(self._time, max_bytes=_FETCH_CHUNK):
            try:
                if decode_time_entry(batch.payload).offset >= log_start_offset:
                    break  # the first entry to keep
            except IndexFormatError:
                pass
            trim_to = batch.last_offset
        if trim_to > self._time.start_offset:
            await self._time.trim(trim_to)

    # ------------------------------------------------------------------ log cleaner (broker/partition/cleaner.py)
    async def begin_cleaning(self) -> Stream:
        """Creates and opens the stream a cleaner round writes, after naming it in LOG's ``doomed`` list: a round
        interrupted by a crash or a leadership change leaves a stream the next open deletes."""
        self._check_open()
        tags = (("topic", self.topic), ("partition", str(self.partition)), ("type", "cleaned"))
        stream_id = await self._streams.create_stream(tags)
        await self._put_log_info(doomed=[*self._doomed(), stream_id])
        stream = await _open_stream(self._streams, stream_id, self.leader_epoch, self.where)
        self._cleaning = stream
        if self._closed:  # closed while we were opening it: close() did not see it
            await stream.close()
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{self.where} is no longer led by this broker")
        return stream

    async def abandon_cleaning(self, stream: Stream) -> None:
        """Deletes an unfinished round's stream (best effort: the ``doomed`` entry covers a failure). A stream the
        switch already installed (the round was interrupted after it) belongs to the partition and stays."""
        if stream is self._cleaned:
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
            old = self._cleaned
            doomed = [x for x in self._doomed() if x != stream.stream_id]
            if old is not None:
                doomed.append(old.stream_id)
            info = dict(
                self._log_info,
                cleaned=stream.stream_id,
                co=cleaner_offset,
                cb=written_bytes,
                th=tombstone_horizon_ms,
                doomed=doomed,
            )
            self.tombstone_horizon_ms = tombstone_horizon_ms
            self._size_bytes = max(0, self._size_bytes - read_bytes + written_bytes)
            self._cleaned_bytes = written_bytes
            self._cleaned = stream
            self._cleaning = None
            self.cleaner_offset = cleaner_offset
            self._log_info = info
            put = self._meta.put(
                {
                    KEY_LOG: json.dumps(info).encode(),
                    KEY_PARTITION: self._partition_record(clean_shutdown=False),
                }
            )
        await put
        if self._checkpoint_task is None and not self._closed:
            # A producer snapshot at the log end means a crash never rebuilds producer state from the cleaned
            # prefix, where compaction may have removed a producer's last batch.
            self._checkpoint_task = asyncio.create_task(self._checkpoint(), name=f"checkpoint {self.where}")
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
        doomed = self._log_info.get("doomed")
        return [int(x) for x in doomed] if isinstance(doomed, list) else []

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
            for extra in (self._cleaned, self._cleaning):
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
        extra = [s for s in (self._cleaned, self._cleaning) if s is not None]
        for stream in (self._log, self._time, *extra, self._meta.stream):
            try:
                await stream.destroy()
            except storage_errors.StorageError as exc:
                logger.warning("deleting stream %d of %s failed: %s", stream.stream_id, self.where, exc)
        # Streams of interrupted or replaced cleaner rounds not deleted yet would otherwise outlive the topic.
        doomed = [x for x in self._doomed() if all(x != s.stream_id for s in extra)]
        left = await _delete_doomed(self._streams, doomed, self.leader_epoch, self.where)
        if left:
            logger.warning("streams %s of deleted %s could not be deleted", left, self.where)
        await self._kv.delete_kv(self._kv_key)
        logger.info("deleted the streams of %s", self.where)


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "AppendResult",
    "EpochEntry",
    "OffsetAndTimestamp",
    "PartitionLog",
    "ReadResult",
    "partition_kv_key",
]
