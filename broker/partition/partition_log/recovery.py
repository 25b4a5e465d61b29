"""Restoring a partition's in-memory state when it opens, replaying the log tail only when needed (Kafka's
LogLoader).

What the meta stream persisted is trusted where it can be: ``PARTITION`` (log start, cleaner offset and bytes,
clean-shutdown flag ``cs``, max timestamp ``mt``, size checkpoint ``z``), ``LEADER_EPOCH_CHECKPOINT`` and
``PRODUCER_SNAPSHOTS`` (producer state, open transactions included, as of an offset), and the txn stream (the
aborted-transaction index). The log is read only from where that state ends, the *recovery point* (the snapshot's
offset, PARTITION ``r``; ``ti`` is the time stream's end as of it): after an unclean shutdown (``cs``
false) or past an old producer snapshot, producer state, open transactions, the time index and the aborted
transactions the txn stream is missing are rebuilt from the batches that follow (transaction markers included);
the size is completed from the batch headers past its checkpoint. Reading the log is
what an open must avoid, since it lives in object storage; the partition advances the recovery point after every
upload, periodically (:mod:`.checkpoints`) and right after a replay (:mod:`.lifecycle`), so the replay is bounded
whatever the log's size. Each replay logs where it started and how many records, batches and bytes it read.

:func:`recover` returns the rebuilt state as :class:`Recovered`; the partition adopts it before it serves anything.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from broker.partition.indexes import (
    LeaderEpochCache,
    TimeIndex,
    TimeIndexEntry,
    decode_epoch_checkpoint,
    encode_time_entry,
)
from broker.partition.meta_stream import KEY_LEADER_EPOCH_CHECKPOINT, KEY_PARTITION, KEY_PRODUCER_SNAPSHOTS, MetaStream
from broker.partition.partition_log.stored_log import StoredLog
from broker.partition.partition_log.time_stream import read_newest_time_entry
from broker.partition.partition_log.txn_stream import load_txn_index
from broker.partition.producer_state import ProducerStateManager, SnapshotFormatError, decode_snapshot
from broker.partition.txn_index import AbortedTxnEntry, TxnIndex
from storage.stream_api import Stream
from wire.control_records import ControlRecordError, decode_marker
from wire.record_batch import BatchHeader, InvalidBatchError, decode_records

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Recovered:
    """The partition state an open rebuilds: everything the partition keeps in memory about its log."""

    producers: ProducerStateManager
    log_start_offset: int = 0
    cleaned_bytes: int = 0
    size_bytes: int = 0
    max_timestamp: int = -1
    max_timestamp_offset: int = -1
    time_index: TimeIndex = field(default_factory=TimeIndex)
    epochs: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    txn_index: TxnIndex = field(default_factory=TxnIndex)
    #: The time index holds only the time stream's newest entry (and what a replay adds): the stored entries below
    #: this stream offset are read when a lookup by timestamp first needs them (None: nothing left to read).
    time_unloaded_end: int | None = None
    #: Aborted transactions the replay found that the txn stream does not hold yet: the partition stores them.
    unstored_aborts: list[AbortedTxnEntry] = field(default_factory=list)
    #: The persisted recovery point (the producer snapshot's offset) and time-stream position found at open.
    recovery_point: int = 0
    time_checkpoint: int = 0
    #: Where the replay of the log started (None: the persisted state was complete, nothing was replayed) ...
    replayed_from: int | None = None
    #: ... and what it read for producer state and indexes (records, batches, bytes).
    replayed: tuple[int, int, int] = (0, 0, 0)


async def recover(
    *,
    meta: MetaStream,
    stored: StoredLog,
    time_stream: Stream,
    log_info: dict[str, Any],
    where: str,
    txn_stream: Stream | None = None,
) -> Recovered:
    """Rebuilds the state of a partition whose streams were just opened (``meta`` replayed), reading as little of
    the log as the persisted state allows, and appending the time-index entries a replay finds missing."""
    state = Recovered(ProducerStateManager(where))
    raw_info = meta.get(KEY_PARTITION)
    info = json.loads(raw_info) if raw_info is not None else {}
    log = stored.log
    # A partition opened for the first time has nothing to recover.
    clean = bool(info.get("cs", False)) or (raw_info is None and log.confirm_offset == log.start_offset)
    stream_start = stored.cleaned.start_offset if stored.cleaned is not None else log.start_offset
    state.log_start_offset = max(int(info.get("s", 0)), stream_start)
    size_checkpoint = info.get("z")
    if stored.cleaned is not None:
        if int(info.get("c", 0)) == stored.cleaner_offset and "cb" in info:
            state.cleaned_bytes = int(info["cb"])
        else:
            # The LOG switch of a cleaner round is newer than PARTITION: sizes from before the round are stale.
            state.cleaned_bytes = int(log_info.get("cb", 0))
            size_checkpoint = None
    if "mt" in info:
        state.max_timestamp, state.max_timestamp_offset = (int(x) for x in info["mt"])
    raw_epochs = meta.get(KEY_LEADER_EPOCH_CHECKPOINT)
    if raw_epochs is not None:
        state.epochs = LeaderEpochCache(decode_epoch_checkpoint(raw_epochs))
    newest = _newest_at_close(info, time_stream) if clean else None
    if newest is None:
        newest = await read_newest_time_entry(time_stream, where)
    if newest is not None:
        state.time_index.add(newest)
    if time_stream.confirm_offset > time_stream.start_offset:
        state.time_unloaded_end = time_stream.confirm_offset
    if txn_stream is not None:
        await load_txn_index(txn_stream, state.txn_index, where)
    last = state.time_index.last
    if last is not None and last.timestamp > state.max_timestamp:
        state.max_timestamp, state.max_timestamp_offset = last.timestamp, last.offset
    snapshot_offset = state.log_start_offset
    raw_snapshot = meta.get(KEY_PRODUCER_SNAPSHOTS)
    if raw_snapshot is not None:
        try:
            snapshot_offset, entries = decode_snapshot(raw_snapshot)
            state.producers.replace(entries)
        except SnapshotFormatError as exc:
            logger.warning("producer snapshot of %s unreadable (%s); rebuilding from the log", where, exc)
            snapshot_offset = state.log_start_offset
    end = log.confirm_offset  # the high watermark
    state.recovery_point = min(snapshot_offset, end)
    state.time_checkpoint = int(info.get("ti", 0))
    if time_stream.confirm_offset < state.time_checkpoint:
        # Never expected (the checkpoint names only durable entries); ListOffsets by time would miss entries.
        logger.warning(
            "time index of %s ends at %d, before its checkpointed position %d: time-index entries were lost",
            where,
            time_stream.confirm_offset,
            state.time_checkpoint,
        )
        state.time_checkpoint = time_stream.confirm_offset
    size_from = _restore_size(state, size_checkpoint, end, where)
    recover_from: int | None = None
    if not clean or snapshot_offset < end:
        recover_from = max(min(snapshot_offset, end), state.log_start_offset)
        logger.info(
            "recovering %s after %s shutdown: replaying log [%d, %d)",
            where,
            "a clean" if clean else "an unclean",
            recover_from,
            end,
        )
    state.replayed_from = recover_from
    if recover_from is not None or size_from < end:
        await _replay_tail(
            state, stored, time_stream, recover_from=recover_from, size_from=size_from, end=end, where=where
        )
    if recover_from is not None:
        records, batches, size = state.replayed
        logger.log(
            logging.INFO if recover_from < end else logging.DEBUG,  # an empty replay: the line above says it all
            "recovered %s: replayed %d records (%d batches, %d bytes) from offset %d to %d "
            "(recovery point %d, log start %d)",
            where,
            records,
            batches,
            size,
            recover_from,
            end,
            state.recovery_point,
            state.log_start_offset,
        )
    if snapshot_offset < state.log_start_offset:
        state.producers.drop_stale(state.log_start_offset)
    else:
        state.producers.on_log_start_advanced(state.log_start_offset)
    state.txn_index.drop_before(state.log_start_offset)
    return state


def _newest_at_close(info: dict[str, Any], time_stream: Stream) -> TimeIndexEntry | None:
    """The time stream's newest entry as the clean close's PARTITION names it (``tn``), if the stream still ends
    where that close left it (``ti``) and that entry is not trimmed away; None: read it from the stream. A moved
    partition's producer waits for this open, and the read is a round trip to object storage."""
    newest = info.get("tn")
    if not isinstance(newest, list) or len(newest) != 2 or not all(isinstance(x, int) for x in newest):
        return None
    end = time_stream.confirm_offset
    if info.get("ti") != end or end <= time_stream.start_offset:
        return None
    return TimeIndexEntry(newest[0], newest[1])


def _restore_size(state: Recovered, checkpoint: object, end: int, where: str) -> int:
    """Takes the partition size from PARTITION's ``z`` = [offset, bytes] (the size of the batches below that
    offset) and returns the offset from which the tail's batch sizes must still be added.

    Persisting the size is what keeps an open cheap: rebuilding it means reading every batch header of the
    partition, which lives in object storage. The checkpoint is trusted only where it is consistent with the
    log: an offset beyond the recovered end (a tail lost in a crash had been counted) or below the log start
    falls back to that full rebuild, as does a partition written before sizes were persisted."""
    if isinstance(checkpoint, list) and len(checkpoint) == 2:
        offset, size = (int(x) for x in checkpoint)
        if state.log_start_offset <= offset <= end and size >= 0:
            state.size_bytes = size
            return offset
    state.size_bytes = 0
    if end > state.log_start_offset:
        logger.info("rebuilding the size of %s from the batch headers of [%d, %d)", where, state.log_start_offset, end)
    return state.log_start_offset


async def _replay_tail(
    state: Recovered,
    stored: StoredLog,
    time_stream: Stream,
    *,
    recover_from: int | None,
    size_from: int,
    end: int,
    where: str,
) -> None:
    """One walk over the log tail: adds the sizes of batches from ``size_from`` and, when ``recover_from`` is
    set (unclean shutdown or an old snapshot), rebuilds producer state (open transactions too), the time index
    and the aborted-transaction entries from there."""
    new_entries: list[TimeIndexEntry] = []
    start = size_from if recover_from is None else min(recover_from, size_from)
    records = batches = size = 0

    def visit(header: BatchHeader, batch: memoryview) -> bool:
        nonlocal records, batches, size
        if header.next_offset > size_from:
            state.size_bytes += header.size
        if recover_from is None or header.next_offset <= recover_from:
            return True
        records += header.records_count
        batches += 1
        size += header.size
        if header.is_control and header.has_producer_id:
            _replay_marker(state, header, batch, where)
        state.producers.record(header, header.base_offset)
        if header.max_timestamp > state.max_timestamp:
            state.max_timestamp, state.max_timestamp_offset = header.max_timestamp, header.base_offset
            entry = TimeIndexEntry(header.max_timestamp, header.base_offset)
            if state.time_index.add(entry):
                new_entries.append(entry)
        return True

    await stored.scan(start, end, visit)
    state.replayed = (records, batches, size)
    waits = [time_stream.append(encode_time_entry(e), 1) for e in new_entries]
    for wait in waits:
        await wait


def _replay_marker(state: Recovered, header: BatchHeader, batch: memoryview, where: str) -> None:
    """Applies a transaction marker met in the replay: it closes the producer's open transaction, and an abort the
    txn stream does not hold yet (the crash came between the marker and its index entry) is queued to be stored."""
    try:
        records = decode_records(batch)
        marker = decode_marker(records[0].key, records[0].value) if records else None
    except (InvalidBatchError, ControlRecordError) as exc:
        logger.warning(
            "%s: unreadable control batch at offset %d skipped in recovery: %s", where, header.base_offset, exc
        )
        return
    if marker is None:
        return
    producers = state.producers
    completed = producers.complete_txn(
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        coordinator_epoch=marker.coordinator_epoch,
        commit=marker.commit,
        marker_offset=header.base_offset,
        timestamp=header.max_timestamp,
    )
    if completed is None or not completed.aborted:
        return
    entry = AbortedTxnEntry(
        completed.producer_id, completed.first_offset, completed.last_offset, producers.stable_offset_after(completed)
    )
    if state.txn_index.add(entry):
        state.unstored_aborts.append(entry)
