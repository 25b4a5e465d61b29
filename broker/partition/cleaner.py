"""The log cleaner: ``cleanup.policy=compact`` keeps the latest record per key (DESIGN.md §10, seed 002).

A partition's log is the cleaned stream (the compacted prefix ``[log start, cleaner offset)``) followed by the log
stream. A round:

1. builds key hash -> last offset over the dirty range ``[cleaner offset, clean limit)`` in a map of bounded size
   (``log.cleaner.dedupe.buffer.size``); when the map fills, the round ends there and the next round goes on from
   that point, so a dirty range with more keys than the map holds converges over several rounds;
2. writes a new cleaned stream from the old cleaned stream plus the dirty range, dropping keyless records, records
   whose key has a later offset and tombstones past their batch's delete horizon. Each retained Kafka batch keeps
   its offsets and is stored as a stream batch whose span starts where the previous one ended, so offsets stay Kafka
   offsets with no gaps and a read at a removed offset returns the next present batch; a final empty stream batch
   covers removed offsets up to the cleaner offset;
3. switches with one LOG meta record (:meth:`PartitionLog.install_cleaned`); the stream being written was named in
   LOG's ``doomed`` list beforehand, so a crash at any point leaves either the old layout or the new one, and the
   next open deletes the leftover stream.

The clean limit stays below the last stable offset (an open transaction's records are not decided yet), leaves the
newest stored batch alone (Kafka's active segment) and everything younger than ``min.compaction.lag.ms``.
Tombstones: the first round that keeps a batch with a tombstone stamps it with a delete horizon, now +
``delete.retention.ms`` (:mod:`broker.partition.delete_horizon`, Kafka's KIP-534), and a round past that horizon
drops the batch's tombstones, whatever the records' own timestamps: a consumer always gets ``delete.retention.ms``
from the first cleaning to see a delete. Transactions: records of aborted transactions never enter the key map, so
an aborted write can never remove the committed value it would have replaced, and a round drops them (Kafka's
cleaner does both). A transaction marker whose transaction has no data left gets a delete horizon the same way and
goes in a round after it, its aborted-transaction index entry with it (:mod:`broker.partition.marker_retention` has
the rules); the LOG's ``th`` is then the earliest of the kept tombstones' and markers' horizons, so a round comes due
to remove them.

:class:`OffsetMap`, :class:`KeyMapBuilder` and :func:`retains` are the pure logic; :func:`clean_partition` is one
round's I/O and :class:`LogCleaner` the per-broker task that picks partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from broker.partition.delete_horizon import DeleteHorizons
from broker.partition.marker_retention import MarkerRetention
from broker.partition.partition_log import PartitionLog
from broker.partition.txn_index import AbortedFilter
from storage import errors as storage_errors
from wire.aborted_txns import is_abort_marker, txn_marker
from wire.errors import KafkaError
from wire.record_batch import BatchHeader, Record, decode_records, filter_batch, iter_batches

logger = logging.getLogger(__name__)

#: What one map entry costs in CPython (a 16-byte digest object, an int offset and the dict slot: about 140 bytes
#: measured, against Kafka's 24 for its packed array), so ``log.cleaner.dedupe.buffer.size`` bounds the memory a
#: round really uses; the buffer size divided by it is how many keys one round tracks.
ENTRY_BYTES = 144
#: Appends to the new cleaned stream in flight at once: bounds memory while still sharing WAL group commits.
_WRITE_WINDOW = 256
#: Shutdown waits this long for a round to reach its next batch before cancelling it.
_STOP_TIMEOUT = 10.0


def key_hash(key: bytes) -> bytes:
    """16-byte digest standing for a key in the map (seed 002: a fixed-size hash instead of the key itself)."""
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Key hash -> offset of the key's latest record in the dirty range, holding at most ``slots`` keys."""

    def __init__(self, buffer_bytes: int) -> None:
        self.slots = max(1, buffer_bytes // ENTRY_BYTES)
        self._offsets: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def room_for(self, new_keys: int) -> bool:
        return len(self._offsets) + new_keys <= self.slots

    def __contains__(self, digest: bytes) -> bool:
        return digest in self._offsets

    def put(self, digest: bytes, offset: int) -> None:
        self._offsets[digest] = offset

    def get(self, digest: bytes) -> int | None:
        return self._offsets.get(digest)


class KeyMapBuilder:
    """Sans-I/O first pass of a round: fed the dirty range's stored batches in offset order, it fills the map and
    decides where the round ends (always at a stored-batch boundary, which is where the log stream can be trimmed).

    A stored batch is taken whole or not at all; the first one is always taken so a round makes progress even when
    one stored batch holds more keys than the map (the map then exceeds its size for that batch only)."""

    def __init__(self, offset_map: OffsetMap, *, start: int, high_watermark: int, lag_cutoff_ms: int | None) -> None:
        self.map = offset_map
        self.start = start
        self.end = start
        self._high_watermark = high_watermark
        self._lag_cutoff_ms = lag_cutoff_ms
        self.map_full = False

    def offer(self, stored_end: int, batches: Sequence[tuple[BatchHeader, Sequence[Record]]]) -> bool:
        """One stored batch ending at ``stored_end``; returns whether the next one is still wanted."""
        if stored_end >= self._high_watermark:
            return False  # the newest batch stays dirty, like Kafka's active segment
        if self._lag_cutoff_ms is not None and any(h.max_timestamp > self._lag_cutoff_ms for h, _ in batches):
            return False  # younger than min.compaction.lag.ms
        latest: dict[bytes, int] = {}
        for header, records in batches:
            if header.is_control:
                continue
            for record in records:
                if record.key is not None:
                    latest[key_hash(record.key)] = record.offset
        new_keys = sum(1 for digest in latest if digest not in self.map)
        if self.end > self.start and not self.map.room_for(new_keys):
            self.map_full = True
            return False
        for digest, offset in latest.items():
            self.map.put(digest, offset)
        self.end = stored_end
        return True


def retains(record: Record, offset_map: OffsetMap, *, horizon_passed: bool) -> bool:
    """Whether a record survives a round (Kafka's Cleaner.shouldRetainRecord): a keyless record goes (Kafka counts it
    as invalid: produce refuses it on a compacted topic, so it can only date from before the topic's policy became
    compact, and no later value would ever replace it), a record whose key has a later offset in the map goes, and
    so does a tombstone once its batch's delete horizon has passed (``horizon_passed``)."""
    if record.key is None:
        return False
    latest = offset_map.get(key_hash(record.key))
    if latest is not None and record.offset < latest:
        return False
    return record.value is not None or not horizon_passed


class CleanerStopped(Exception):
    """The broker is shutting down: the round in progress is abandoned between two batches."""


@dataclass(frozen=True, slots=True)
class CleanResult:
    """One completed round: ``[start, end)`` rewritten from ``read_bytes`` into ``written_bytes``."""

    start: int
    end: int
    read_bytes: int
    written_bytes: int
    kept_batches: int
    map_full: bool


async def clean_partition(
    log: PartitionLog,
    *,
    dedupe_buffer_bytes: int,
    now_ms: int | None = None,
    after_write: Callable[[], Awaitable[None]] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> CleanResult | None:
    """One round on one open partition; None when there was nothing to clean or the partition moved on meanwhile
    (log start moved, leadership lost). ``after_write`` runs between writing the new stream and the switch (tests
    inject crashes there). ``should_stop`` is asked between batches; when it says so the round is abandoned with
    :class:`CleanerStopped`. Stopping is cooperative rather than by cancellation because a cancelled await on a
    stream append cancels the append itself, which fails the stream (the meta stream included) for good."""

    def check_stop() -> None:
        if should_stop is not None and should_stop():
            raise CleanerStopped(f"{log.where}: cleaner round abandoned for shutdown")

    now = int(time.time() * 1000) if now_ms is None else now_ms
    config = log.config
    start = log.log_start_offset
    dirty_start = max(log.cleaner_offset, start)
    lag = config.min_compaction_lag_ms
    stable = log.last_stable_offset
    builder = KeyMapBuilder(
        OffsetMap(dedupe_buffer_bytes),
        start=dirty_start,
        high_watermark=stable,
        lag_cutoff_ms=now - lag if lag > 0 else None,
    )
    aborted = AbortedFilter(log.aborted_transactions(dirty_start, stable))
    async for stored in log.iter_stored(dirty_start, stable):
        check_stop()
        batches = [
            # The filter sees every batch (markers included) in order: a marker ends its producer's aborted range.
            (h, [] if aborted.is_aborted(h, is_abort_marker(h, b)) or h.is_control else decode_records(b))
            for h, b in iter_batches(stored.payload)
            if h.next_offset > dirty_start
        ]
        if not builder.offer(stored.last_offset, batches):
            break
    end = builder.end
    if end <= dirty_start:
        horizon = log.tombstone_horizon_ms
        if horizon is None or now < horizon or log.cleaner_offset <= start:
            return None
        end = log.cleaner_offset  # nothing new to clean, but tombstones in the cleaned prefix have expired
    stream = await log.begin_cleaning()
    try:
        tombstones = DeleteHorizons(now, config.delete_retention_ms)
        # Set for each data batch before it is filtered: whether its tombstones may go, and whether any stayed.
        horizon_passed = kept_tombstone = False

        def keep(record: Record) -> bool:
            nonlocal kept_tombstone
            if not retains(record, builder.map, horizon_passed=horizon_passed):
                return False
            kept_tombstone = kept_tombstone or record.value is None
            return True

        read_bytes = written_bytes = kept = 0
        prev_end = stream.next_offset
        window: list[Awaitable[int]] = []
        aborted_data = AbortedFilter(log.aborted_transactions(start, end))
        markers = MarkerRetention(now, config.delete_retention_ms, *log.aborted_markers(start, end))
        async for stored in log.iter_stored(start, end):
            check_stop()
            for header, batch in iter_batches(stored.payload):
                if header.next_offset <= start:
                    continue
                read_bytes += header.size
                marker = txn_marker(header, batch)
                abort = marker is not None and not marker.commit
                if aborted_data.is_aborted(header, abort):
                    continue  # an aborted transaction's records: nobody may read them as committed
                if marker is not None:
                    filtered = markers.on_marker(header, batch, abort=abort)
                elif header.is_control:
                    filtered = bytes(batch)  # another kind of control record: kept, as Kafka keeps it
                else:
                    horizon_passed, kept_tombstone = tombstones.passed(header), False
                    filtered = filter_batch(batch, keep)
                    if filtered is not None:
                        markers.on_data(header)
                        if kept_tombstone:
                            filtered = tombstones.hold(header, filtered)
                if filtered is None:
                    continue
                # The span starts where the previous one ended: it also covers the removed offsets before it.
                window.append(stream.append(filtered, header.next_offset - prev_end))
                prev_end = header.next_offset
                written_bytes += len(filtered)
                kept += 1
                if len(window) >= _WRITE_WINDOW:
                    await asyncio.gather(*window)
                    window.clear()
        if prev_end < end:
            window.append(stream.append(b"", end - prev_end))  # removed offsets up to the cleaner offset
        await asyncio.gather(*window)
        check_stop()
        if start > stream.start_offset:
            await stream.trim(start)
        if markers.dropped_through is not None:
            # Before the switch: the index entries must not outlive their markers (see forget_aborted_through).
            await log.forget_aborted_through(markers.dropped_through)
        if after_write is not None:
            await after_write()
        horizons = (markers.next_horizon_ms, tombstones.next_ms)
        horizon = min((h for h in horizons if h is not None), default=None)
        installed = await log.install_cleaned(
            stream,
            cleaner_offset=end,
            expected_start=start,
            read_bytes=read_bytes,
            written_bytes=written_bytes,
            tombstone_horizon_ms=horizon,
        )
    except BaseException:
        await log.abandon_cleaning(stream)
        raise
    if not installed:
        await log.abandon_cleaning(stream)
        logger.info("%s: cleaner round over [%d, %d) abandoned: the partition moved on", log.where, start, end)
        return None
    result = CleanResult(start, end, read_bytes, written_bytes, kept, builder.map_full)
    logger.info(
        "%s: cleaned [%d, %d) into stream %d: %d -> %d bytes, %d batches kept, %d markers gone, %d keys in the map%s",
        log.where,
        start,
        end,
        stream.stream_id,
        read_bytes,
        written_bytes,
        kept,
        markers.removed,
        len(builder.map),
        " (map full: the next round continues)" if builder.map_full else "",
    )
    return result


def cleanable(log: PartitionLog, now_ms: int, first_dirty_timestamp: int | None = None) -> bool:
    """Whether ``log`` is due a round: compaction enabled and ``min.cleanable.dirty.ratio`` reached, a dirty
    record older than ``max.compaction.lag.ms`` (``first_dirty_timestamp``, when the caller read it), or a kept
    tombstone or transaction marker past its delete horizon."""
    if not log.config.compact or log.closed:
        return False
    if log.tombstone_horizon_ms is not None and now_ms >= log.tombstone_horizon_ms:
        return True
    if log.dirty_bytes <= 0:
        return False
    if log.size_bytes > 0 and log.dirty_bytes / log.size_bytes >= log.config.min_cleanable_dirty_ratio:
        return True
    return first_dirty_timestamp is not None and 0 <= first_dirty_timestamp < now_ms - log.config.max_compaction_lag_ms


async def first_dirty_timestamp(log: PartitionLog) -> int | None:
    """Max timestamp of the first dirty batch (one read), for ``max.compaction.lag.ms``."""
    start = max(log.cleaner_offset, log.log_start_offset)
    async for stored in log.iter_stored(start, log.high_watermark):
        for header, _ in iter_batches(stored.payload):
            if header.next_offset > start:
                return header.max_timestamp
    return None


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """The broker keys the cleaner task reads (``log.cleaner.*``)."""

    enabled: bool
    backoff_ms: int
    dedupe_buffer_bytes: int


class LogCleaner:
    """The broker's cleaner task: one round at a time over the open compacted partitions, the dirtiest first,
    ``log.cleaner.backoff.ms`` between checks that found nothing to do."""

    def __init__(self, settings: CleanerSettings, partitions: Callable[[], list[PartitionLog]]) -> None:
        self._settings = settings
        self._partitions = partitions
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if not self._settings.enabled:
            logger.info("log cleaner disabled (log.cleaner.enable=false)")
            return
        self._task = asyncio.create_task(self._run(), name="log-cleaner")

    async def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        """Abandons a round in progress at its next batch (its stream is deleted; the partition closes normally);
        cancels only a round that does not get there within ``timeout`` seconds (storage hanging)."""
        self._stop.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            logger.warning("log cleaner round still running %.0fs after shutdown began; cancelling it", timeout)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while not self._stop.is_set():
            cleaned = False
            try:
                cleaned = await self.clean_once()
            except CleanerStopped as exc:
                logger.info("%s", exc)
                return
            except storage_errors.StorageError as exc:  # S3 away: the next round tries again
                logger.warning("log cleaner round failed: %s", exc)
            except Exception:
                logger.exception("log cleaner round failed")
            if not cleaned:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self._settings.backoff_ms / 1000)

    async def clean_once(self, now_ms: int | None = None) -> bool:
        """Cleans the dirtiest due partition; True when a round completed."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        due: list[PartitionLog] = []
        for log in self._partitions():
            if not log.config.compact or log.closed:
                continue
            oldest = None
            if log.config.max_compaction_lag_ms < (1 << 62) and log.dirty_bytes > 0:
                try:
                    oldest = await first_dirty_timestamp(log)
                except (KafkaError, storage_errors.StorageError):
                    continue
            if cleanable(log, now, oldest):
                due.append(log)
        due.sort(key=lambda log: log.dirty_bytes / max(1, log.size_bytes), reverse=True)
        for log in due:
            try:
                result = await clean_partition(
                    log,
                    dedupe_buffer_bytes=self._settings.dedupe_buffer_bytes,
                    now_ms=now,
                    should_stop=self._stop.is_set,
                )
                if result is not None:
                    return True
            except (KafkaError, storage_errors.StorageError) as exc:
                # Typically leadership moved under the round: the partition closed and its streams with it.
                logger.info("cleaner round of %s abandoned: %s", log.where, exc)
        return False
