"""Moving a partition's log start forward: DeleteRecords and retention (Kafka's deleteRecords and
deleteOldSegments, over streams).

Records below the log start are gone for every reader. A move trims every stream and index that holds them (the
cleaned and log streams, the time and txn streams, producer state, the leader-epoch cache), takes the deleted
batches' bytes off the partition size, and persists the new log start in the meta stream. DeleteRecords and
retention (broker/partition/retention.py) both go through :func:`trim_log_start`; the deleted prefix's size is read
beforehand, outside the lock, so appends go on meanwhile, and a log start that moved in between (the other one won)
makes the move retry or give up rather than subtract a stale size.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from broker.partition.indexes import encode_epoch_checkpoint
from broker.partition.meta_stream import KEY_LEADER_EPOCH_CHECKPOINT, KEY_PARTITION
from broker.partition.partition_log.checkpoints import partition_record, start_checkpoint
from broker.partition.partition_log.state import PartitionState
from broker.partition.partition_log.time_stream import trim_time_stream
from broker.partition.partition_log.txn_stream import trim_txn_stream
from storage import errors as storage_errors
from wire.errors import KafkaError

logger = logging.getLogger(__name__)

#: DeleteRecords re-reads the deleted prefix when retention moved the log start meanwhile; this bounds the retries.
_TRIM_ATTEMPTS = 5


async def delete_records_before(state: PartitionState, offset: int) -> int:
    """DeleteRecords: moves the log start offset to ``offset`` (-1 = high watermark); returns the new low
    watermark. Offsets beyond the high watermark are OFFSET_OUT_OF_RANGE.

    The headers of the deleted prefix are read first (outside the partition lock, so appends go on) to take
    their bytes off the partition size; a log start that moved meanwhile (retention) means reading again."""
    state.check_open()
    for _ in range(_TRIM_ATTEMPTS):
        hw = state.high_watermark
        target = hw if offset == -1 else offset
        if target < 0 or target > hw:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"cannot delete records of {state.where} before {offset}: high watermark is {hw}",
            )
        start = state.log_start_offset
        if target <= start:
            return start
        freed = await state.stored.bytes_below(start, target)
        if await trim_log_start(state, target, freed, expected_start=start, reason=f"DeleteRecords before {offset}"):
            return target
    raise KafkaError(
        ErrorCode.request_timed_out,
        f"{state.where}: the log start kept moving while deleting records before {offset}",
    )


async def trim_log_start(
    state: PartitionState, target: int, freed_bytes: int, *, expected_start: int, reason: str
) -> bool:
    """Moves the log start offset to ``target`` (at most the high watermark) and persists it: trims the log
    and time streams, producer state, the leader-epoch cache, and takes ``freed_bytes`` (the batches wholly
    below ``target``, as the caller read them) off the partition size. The one path for DeleteRecords and
    retention. Returns False, changing nothing, when the log start is no longer ``expected_start`` (another
    trim won the race and ``freed_bytes`` is stale)."""
    async with state.lock:
        state.check_open()
        if state.log_start_offset != expected_start:
            return False
        hw = state.high_watermark
        if target > hw:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"cannot move the log start of {state.where} to {target}: high watermark is {hw}",
            )
        if target <= state.log_start_offset:
            return True
        state.log_start_offset = target
        state.size_bytes = max(0, state.size_bytes - freed_bytes)
        cleaned = state.stored.cleaned
        if cleaned is not None and target > cleaned.start_offset:
            # The freed batches come from the cleaned prefix first.
            state.cleaned_bytes = max(0, state.cleaned_bytes - freed_bytes) if target < state.cleaner_offset else 0
            await cleaned.trim(min(target, cleaned.next_offset))
        if target > state.log.start_offset:
            await state.log.trim(target)
        state.producers.on_log_start_advanced(target)
        state.epochs.truncate_start(target)
        state.time_index.drop_before(target)  # a load in progress drops them again when it merges
        txn_trim = state.txn_index.drop_before(target)
        if state.txn is not None:
            await trim_txn_stream(state.txn, txn_trim)
        put = state.meta.put(
            {
                KEY_PARTITION: partition_record(state, clean_shutdown=False),
                KEY_LEADER_EPOCH_CHECKPOINT: encode_epoch_checkpoint(state.epochs.entries),
            }
        )
    await put
    # A fresh producer snapshot: one older than the new log start would make a crash recovery drop the
    # producers it cannot vouch for (ProducerStateManager.drop_stale) rather than keep their sequences.
    start_checkpoint(state, force=True)
    # Not under the append lock: the first lookup by timestamp may be reading the time stream (the lock keeps
    # this trim from cutting entries under it), and a produce must not wait for that. A trim that fails here
    # is caught up by the next one, which trims from the stream's start up to the log start.
    async with state.time_load_lock:
        try:
            await trim_time_stream(state.time, target)
        except storage_errors.StorageError as exc:
            logger.warning("trimming the time stream of %s to offset %d failed: %s", state.where, target, exc)
    logger.info(
        "%s: log start offset %d -> %d (%s); %d bytes left",
        state.where,
        expected_start,
        target,
        reason,
        state.size_bytes,
    )
    return True
