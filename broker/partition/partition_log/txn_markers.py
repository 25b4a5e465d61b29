"""Transaction markers on a partition (KIP-98): the coordinator's COMMIT and ABORT control batches, what they do
to producer state, and the aborted-transaction index they feed.

A marker goes through the same append path as produced batches (:mod:`.produce`), so it gets an offset in order
with them and is durable with them; applying it closes its producer's open transaction, which moves the last
stable offset read_committed reads stop at. An abort of a transaction that wrote here becomes an entry of the
aborted-transaction index, appended to the txn stream right after the marker (same WAL, so durable with it); the
txn stream is created on the partition's first abort. The log cleaner removes old markers only after their
entries (:func:`forget_aborted_through`).

The produce path calls into this module while it appends a marker, so this module does not import it back: the
marker's append comes in as an argument of :func:`write_txn_marker`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from broker.partition.partition_log.append import AppendResult
from broker.partition.partition_log.opening import open_stream
from broker.partition.partition_log.state import PartitionState
from broker.partition.partition_log.txn_stream import trim_txn_stream
from broker.partition.txn_index import AbortedTxnEntry, encode_entry
from metadata.stream_tags import partition_stream_tags
from storage.stream_api import Stream
from wire.control_records import ControlRecordError, TxnMarker, decode_marker, encode_marker_key, encode_marker_value
from wire.errors import KafkaError
from wire.record_batch import BatchHeader, InvalidBatchError, Record, build_batch, decode_records

logger = logging.getLogger(__name__)

#: Appends one batch written by the coordinator through the produce path and answers once it is durable.
AppendBatch = Callable[[bytes], Awaitable[AppendResult]]


async def write_txn_marker(
    state: PartitionState,
    append: AppendBatch,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    transaction_version: int = 0,
) -> int:
    """Appends the coordinator's COMMIT or ABORT marker for ``producer_id`` (a control batch, through
    ``append``, the normal append path) and returns its offset once durable. A marker with an older producer
    epoch is fenced (INVALID_PRODUCER_EPOCH) and appends nothing; one for a producer with no open transaction
    here is written all the same and completes nothing, as Kafka does.

    A transactions v2 marker (``transaction_version`` 2, KIP-1228) carries the epoch its transaction's end bumped
    to, so it must be newer than the producer's epoch here; one at that epoch with no transaction open is the
    retry of a marker already written (KAFKA-19999), answered with -1 and not written again."""
    state.check_open()
    entry = state.producers.get(producer_id)
    if transaction_version >= 2 and entry is not None and producer_epoch <= entry.producer_epoch:
        if producer_epoch == entry.producer_epoch and not state.producers.has_ongoing_txn(producer_id):
            return -1
        raise KafkaError(ErrorCode.invalid_producer_epoch,
                         f"transactions v2 marker of producer {producer_id} at epoch {producer_epoch} is not newer "
                         f"than its epoch {entry.producer_epoch} on {state.where}")
    if not commit:
        await ensure_txn_stream(state)
    batch = build_batch(
        [Record(encode_marker_key(commit), encode_marker_value(coordinator_epoch))],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_control=True,
        is_transactional=True,
    )
    result = await append(batch)
    state.producers.first_unstable_offset(state.high_watermark)  # forgets the transactions decided by now
    logger.debug(
        "%s: %s marker of producer %d epoch %d (coordinator epoch %d) at offset %d",
        state.where,
        "COMMIT" if commit else "ABORT",
        producer_id,
        producer_epoch,
        coordinator_epoch,
        result.base_offset,
    )
    return result.base_offset


def marker_of(records: bytes, header: BatchHeader, where: str) -> TxnMarker:
    """The transaction marker a control batch written by the broker carries (INVALID_RECORD otherwise)."""
    try:
        decoded = decode_records(records[: header.size])
        marker = decode_marker(decoded[0].key, decoded[0].value) if len(decoded) == 1 else None
    except (InvalidBatchError, ControlRecordError) as exc:
        raise KafkaError(ErrorCode.invalid_record, f"{where}: bad control batch: {exc}") from exc
    if marker is None or not header.has_producer_id or not header.is_transactional:
        raise KafkaError(ErrorCode.invalid_record, f"{where}: a control batch must be one transactional marker record")
    return marker


def complete_txn(
    state: PartitionState, header: BatchHeader, offset: int, marker: TxnMarker, pending: Awaitable[int]
) -> Awaitable[int]:
    """Applies a marker appended at ``offset`` to producer state; an abort of a transaction that wrote here is
    added to the aborted index and appended to the txn stream right after the marker (same WAL, so it is
    durable with it). Returns what to wait for: the marker, and its index entry. Called under the lock."""
    completed = state.producers.complete_txn(
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
        state.producers.stable_offset_after(completed),
    )
    state.txn_index.add(entry)
    if state.txn is None:  # write_txn_marker creates it before an abort; recovery would store the entry
        logger.warning("%s: no txn stream for the abort at offset %d; recovery will store it", state.where, offset)
        return pending
    stream_offset = state.txn.next_offset
    state.txn_index.mark_stored(entry.last_offset, stream_offset)
    return _both(pending, state.txn.append(encode_entry(entry), 1))


async def _both(first: Awaitable[int], second: Awaitable[int]) -> int:
    """Waits for two appends issued in this order; the first one's result (the marker's offset) is the answer."""
    result = await first
    await second
    return result


async def store_recovered_aborts(state: PartitionState, entries: list[AbortedTxnEntry]) -> None:
    """Appends to the txn stream the aborted transactions recovery found in the log but not in the stream (a
    crash between an abort marker and its entry), so the next open need not find them again."""
    txn = await ensure_txn_stream(state)
    waits = [(e, txn.append(encode_entry(e), 1)) for e in entries]
    for entry, wait in waits:
        state.txn_index.mark_stored(entry.last_offset, await wait)
    logger.info("%s: stored %d aborted transactions found in recovery", state.where, len(waits))


async def ensure_txn_stream(state: PartitionState) -> Stream:
    """The txn stream, created (and named in LOG) on the partition's first abort."""
    async with state.txn_create_lock:
        if state.txn is not None:
            return state.txn
        state.check_open()
        tags = partition_stream_tags(state.topic, state.topic_id, state.partition, "txn")
        stream_id = await state.streams.create_stream(tags)
        stream_map = dict(state.log_info.get("streamMap", {}), txn=stream_id)
        await state.put_log_info(streamMap=stream_map)
        stream = await open_stream(state.streams, stream_id, state.leader_epoch, state.where)
        if state.closed:  # closed while we were opening it: close() did not see it
            await stream.close()
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{state.where} is no longer led by this broker")
        state.txn = stream
        logger.info("%s: created txn stream %d for aborted transactions", state.where, stream_id)
        return stream


def aborted_markers(state: PartitionState, start: int, end: int) -> tuple[list[int], int]:
    """The marker offsets of the aborted-transaction index entries in ``[start, end)``, and how many of them,
    from the first, the txn stream holds durably: the log cleaner may remove only those markers, with their
    entries (:func:`forget_aborted_through`)."""
    entries = state.txn_index.markers_in(start, end)
    confirmed = state.txn.confirm_offset if state.txn is not None else 0
    droppable = 0
    for _, stream_offset in entries:
        if not 0 <= stream_offset < confirmed:
            break
        droppable += 1
    return [marker for marker, _ in entries], droppable


async def forget_aborted_through(state: PartitionState, marker_offset: int) -> None:
    """Drops the aborted-transaction index entries whose ABORT marker is at or before ``marker_offset`` and
    trims them off the txn stream. The log cleaner calls it before switching to a log without those markers:
    an entry left behind by a crash in between would make read_committed consumers skip the producer's later
    data (the marker that ends the skip is gone), while a marker outliving its entry is harmless."""
    async with state.lock:
        state.check_open()
        txn_trim = state.txn_index.drop_before(marker_offset + 1)
        if state.txn is not None:
            await trim_txn_stream(state.txn, txn_trim)
