"""The produce path's stateful half (DESIGN.md §6): producer-state checks, offset assignment and the stream append.

:mod:`.append` checks the batches and rewrites their headers (pure); this module does what needs the partition:
under the lock, the batches' checks (a large compressed batch's decompression in the one checking thread), the
producer-state checks (a retried batch is answered with its first append's offsets, an old
producer epoch is fenced, a marker's coordinator epoch is checked), then offsets are assigned and the bytes handed
to ``Stream.append``, which assigns offsets at call time, so the offsets are exactly the ones checked. Waiting for
durability happens outside the lock, so concurrent producers share WAL group commits. Transaction markers come
this way too (:mod:`.txn_markers` applies them); each append also feeds the time index and the checkpoint's bytes
bound (:mod:`.checkpoints`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from broker.partition.indexes import TimeIndexEntry, encode_time_entry
from broker.partition.partition_log.append import (
    AppendResult,
    DecompressesFurther,
    assign_offsets,
    validate_produce,
    validation_bytes,
)
from broker.partition.partition_log.checkpoints import checkpoint_due, start_checkpoint
from broker.partition.partition_log.state import PartitionState
from broker.partition.partition_log.txn_markers import complete_txn, marker_of
from storage import errors as storage_errors
from storage.offload import INLINE_BYTES
from wire.batch_validation import MAX_DECOMPRESSED_BYTES
from wire.control_records import TxnMarker
from wire.errors import KafkaError
from wire.record_batch import BatchHeader

logger = logging.getLogger(__name__)


async def append(
    state: PartitionState,
    records: bytes,
    *,
    origin: str = "client",
    transactional_id: str | None = None,
    verified_markers: int | None = None,
) -> AppendResult:
    """Validates, assigns offsets and appends; returns once the records are durable in the WAL.
    ``transactional_id`` is the produce request's (transactional batches need one).

    ``verified_markers``: how many markers of the batch's producer the partition had applied when the produce
    handler verified its transaction. A marker applied since ended that transaction while the batch waited for its
    turn: the batch would open a transaction its coordinator does not know, which nothing would ever end (the LSO
    stuck), so it is refused with INVALID_TXN_STATE, as Kafka's verification guard refuses it."""
    state.check_open()
    async with state.lock:
        state.check_open()
        # Checked under the lock: a compressed batch's decompression may run in a thread, and a connection's appends
        # must still take their offsets in the order they started (``broker.handlers.append_order``).
        headers = await _validated(functools.partial(
            validate_produce,
            records,
            state.config,
            where=state.where,
            origin=origin,
            now_ms=int(time.time() * 1000),
            transactional_id=transactional_id,
        ), validation_bytes(records))
        state.check_open()
        marker = marker_of(records, headers[0], state.where) if headers[0].is_control else None
        log_append_ms = int(time.time() * 1000) if state.config.log_append_time else -1
        duplicate = None
        if marker is not None:
            state.producers.check_marker(headers[0].producer_id, headers[0].producer_epoch, marker.coordinator_epoch)
        elif headers[0].has_producer_id:
            duplicate = state.producers.check(headers[0], client=origin == "client")
            first = headers[0]
            if (duplicate is None and verified_markers is not None and first.is_transactional
                    and state.producers.markers_applied(first.producer_id) != verified_markers):
                raise KafkaError(
                    ErrorCode.invalid_txn_state,
                    f"{state.where}: the transaction of producer {first.producer_id} ended (a marker was written) "
                    "before its batch was appended",
                )
        if duplicate is None:
            base, next_offset, pending, size = _append_locked(state, records, headers, log_append_ms, marker)
    if duplicate is not None:
        # A retry of a batch already appended: answer with its offsets once it is durable, append nothing.
        logger.debug(
            "%s: duplicate batch from producer %d seq %d answered with offset %d",
            state.where,
            headers[0].producer_id,
            headers[0].base_sequence,
            duplicate.first_offset,
        )
        if state.high_watermark <= duplicate.last_offset:
            await state.log.wait_for_append(duplicate.last_offset, 30.0)
            if state.high_watermark <= duplicate.last_offset:
                raise KafkaError(ErrorCode.request_timed_out, f"{state.where}: original batch is not durable yet")
        # On a LogAppendTime topic the retry learns the time its first append was stamped with, as from Kafka.
        append_time = duplicate.timestamp if state.config.log_append_time else -1
        return AppendResult(duplicate.first_offset, duplicate.last_offset, append_time, state.log_start_offset)
    state.checkpoint.bytes_since += size
    try:
        await pending
    except storage_errors.StorageError as exc:
        logger.error("append to %s failed at offset %d: %s", state.where, base, exc)
        raise
    if checkpoint_due(state):
        start_checkpoint(state)
    return AppendResult(base, next_offset - 1, log_append_ms, state.log_start_offset)


def _append_locked(
    state: PartitionState,
    records: bytes,
    headers: list[BatchHeader],
    log_append_ms: int,
    marker: TxnMarker | None = None,
) -> tuple[int, int, Awaitable[int], int]:
    """Rewrites offsets and epochs, records producer state (a marker closes its producer's transaction) and
    hands the bytes to the stream (synchronously, so offsets are exactly the ones assigned here)."""
    base = state.log.next_offset
    assigned = assign_offsets(
        records, headers, base_offset=base, leader_epoch=state.leader_epoch, log_append_ms=log_append_ms
    )
    payload = assigned.payload
    next_offset = assigned.next_offset
    # First, so that an append the WAL refuses outright (S3 unwritable for too long: a retriable error) leaves no
    # producer state behind: the producer's retry of the batch is then appended, not taken for a duplicate.
    pending = state.log.append(payload, next_offset - base)
    index_entries: list[TimeIndexEntry] = []
    for header, offset in zip(headers, assigned.base_offsets, strict=True):
        if log_append_ms >= 0:
            # As stored: the producer's state (its idle time, a retry's answer) follows the broker's clock here.
            header = dataclasses.replace(header, max_timestamp=log_append_ms)
        state.producers.record(header, offset)
        max_ts = header.max_timestamp
        entry = _note_timestamp(state, max_ts, offset, header.size)
        if entry is not None:
            index_entries.append(entry)
    state.size_bytes += len(payload)
    if marker is not None:
        pending = complete_txn(state, headers[0], base, marker, pending)
    for entry in index_entries:
        # The index's durability follows the log's (same WAL, appended right after); a lost tail entry is
        # rebuilt by recovery, so nobody waits for it.
        future = asyncio.ensure_future(state.time.append(encode_time_entry(entry), 1))
        future.add_done_callback(lambda done: _index_append_done(state.where, done))
    return base, next_offset, pending, len(payload)


def _index_append_done(where: str, future: asyncio.Future[int]) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.warning("time-index append of %s failed: %s", where, future.exception())


def _note_timestamp(state: PartitionState, max_ts: int, offset: int, size: int) -> TimeIndexEntry | None:
    """Tracks the max timestamp; returns a new time-index entry when it grows, at most every index interval."""
    state.bytes_since_index += size
    if max_ts <= state.max_timestamp:
        return None
    state.max_timestamp, state.max_timestamp_offset = max_ts, offset
    if state.bytes_since_index < state.config.index_interval_bytes and len(state.time_index) > 0:
        return None
    entry = TimeIndexEntry(max_ts, offset)
    if not state.time_index.add(entry):
        return None
    state.bytes_since_index = 0
    return entry


#: The one thread that checks the batches too large to check on the event loop. One, node-wide: a compressed batch
#: may decompress to MAX_DECOMPRESSED_BYTES, and a few KB of zstd do, so a hostile client's batches cost the node
#: that much memory once, not once per connection (and they do not take the threads uploads and reads share).
_LARGE_CHECKS = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fjord-produce-checks")


async def _validated(validate: Callable[..., list[BatchHeader]], size: int) -> list[BatchHeader]:
    """``validate`` (``validate_produce`` of one request) on the event loop when what it works through is small
    (``storage.offload``'s bound: a plain batch, or a compressed one decompressing into at most INLINE_BYTES), else
    in the checking thread: a batch's compressed size does not say how far it decompresses, so a small one is
    decompressed here into that much room at most, and checked again in the thread if it needs more."""
    if size <= INLINE_BYTES:
        try:
            return validate(max_decompressed=INLINE_BYTES)
        except DecompressesFurther:
            pass
    checked = functools.partial(validate, max_decompressed=MAX_DECOMPRESSED_BYTES)
    return await asyncio.get_running_loop().run_in_executor(_LARGE_CHECKS, checked)
