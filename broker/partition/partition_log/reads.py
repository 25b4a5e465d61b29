"""The read path of a partition (DESIGN.md §7): Fetch reads, and ListOffsets' offset for a timestamp.

Fetch returns whole Kafka batches exactly as produced (offsets and leader epoch rewritten at append, CRC
untouched), across the cleaned stream and the log stream (:class:`StoredLog`). read_committed reads stop at the
last stable offset and carry the aborted transactions of the range they return (Kafka's collectAbortedTxns).
Everything here only reads: the partition's live state comes in through :class:`ReadableLog`, read as the walk
goes (a trim or an append running meanwhile is seen, as it was when this code was part of the partition class).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from broker.partition.indexes import LeaderEpochCache, TimeIndex
from broker.partition.partition_log.stored_log import StoredLog
from broker.partition.txn_index import AbortedTxn
from storage import errors as storage_errors
from wire.errors import KafkaError
from wire.record_batch import BatchHeader, decode_records, iter_batches

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
#: KIP-405/1005/1023's tiered-storage lookups (ListOffsets v8, v9, v11). Fjord keeps every offset of a partition in
#: one log (its object storage is the log itself, not Kafka's remote tier), so it answers them as Kafka answers for a
#: topic without ``remote.storage.enable``: the earliest local offset is the log start offset, and nothing has
#: been tiered or is pending upload (offset -1, no timestamp, epoch -1).
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: bytes
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    #: read_committed only: the aborted transactions overlapping the returned records.
    aborted_transactions: tuple[AbortedTxn, ...] = ()
    #: Offsets the returned batches span (each batch's last offset delta + 1), counted while they are walked so
    #: the fetch metrics need not parse the headers again.
    record_count: int = 0


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    offset: int
    timestamp: int
    leader_epoch: int


class ReadableLog(Protocol):
    """What the read path needs to know of the partition (``PartitionLog`` satisfies it)."""

    @property
    def where(self) -> str: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def epochs(self) -> LeaderEpochCache: ...

    @property
    def time_index(self) -> TimeIndex: ...

    @property
    def max_timestamp(self) -> int: ...

    @property
    def max_timestamp_offset(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]: ...


def check_offset(log: ReadableLog, offset: int) -> int:
    """The high watermark, after checking that ``offset`` is readable (OFFSET_OUT_OF_RANGE otherwise)."""
    hw = log.high_watermark
    if offset < log.log_start_offset or offset > hw:
        raise KafkaError(
            ErrorCode.offset_out_of_range,
            f"offset {offset} of {log.where} is outside [{log.log_start_offset}, {hw}]",
        )
    return hw


async def read_records(
    log: ReadableLog, stored: StoredLog, offset: int, max_bytes: int, *, min_one: bool, read_committed: bool = False
) -> ReadResult:
    """Whole batches from ``offset`` up to ``max_bytes`` (the first one even if larger, when ``min_one``), below
    the high watermark, or below the last stable offset when ``read_committed``."""
    read = await read_batch_views(log, stored, offset, max_bytes, min_one=min_one, read_committed=read_committed)
    # The batches are views into the stored payloads, joined once: the record bytes are copied exactly one time on
    # their way to the response.
    return ReadResult(b"".join(view for _, view in read.batches), read.high_watermark, read.log_start_offset,
                      read.last_stable_offset, read.aborted_transactions, read.record_count)


@dataclass(frozen=True, slots=True)
class BatchViews:
    """A read as its batches, each a view into the stored payload that holds it, never joined: for a reader that
    hands out only some of them (ShareFetch keeps the batches it acquired) and writes them into its response by
    reference. The views keep their payloads alive; stored payloads are immutable."""

    batches: list[tuple[BatchHeader, memoryview]]
    size: int
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    aborted_transactions: tuple[AbortedTxn, ...] = ()
    record_count: int = 0


async def read_batch_views(
    log: ReadableLog, stored: StoredLog, offset: int, max_bytes: int, *, min_one: bool, read_committed: bool = False
) -> BatchViews:
    """:func:`read_records` without the join."""
    hw = check_offset(log, offset)
    lso = log.last_stable_offset
    limit = lso if read_committed else hw
    batches: list[tuple[BatchHeader, memoryview]] = []
    size = 0
    record_count = 0
    cursor = offset
    done = not (offset < limit and (max_bytes > 0 or min_one))
    read_end = offset
    # A read below the cleaner offset starts in the cleaned stream and continues into the log stream while
    # max_bytes allows; an offset compaction removed is covered by the stored batch after it, so the read
    # returns the next present batch.
    while not done and cursor < limit:
        stream, piece_end = stored.piece(cursor, limit)
        try:
            result = await stream.fetch(cursor, piece_end, max(max_bytes - size, 1))
        except storage_errors.OffsetOutOfRangeError as exc:
            raise KafkaError(ErrorCode.offset_out_of_range, f"{log.where}: {exc}") from exc
        if not result.batches:
            break
        for stored_batch in result.batches:
            for header, batch in iter_batches(stored_batch.payload):
                if header.next_offset <= offset:
                    continue
                if header.base_offset >= limit or ((batches or not min_one) and size + header.size > max_bytes):
                    done = True
                    break
                batches.append((header, batch))
                size += header.size
                record_count += header.last_offset_delta + 1
                read_end = header.next_offset
            if done:
                break
        reached = result.batches[-1].last_offset
        done = done or reached <= cursor or (reached < piece_end and bool(batches)) or size >= max_bytes
        cursor = reached
    aborted = tuple(log.aborted_transactions(offset, read_end)) if read_committed else ()
    return BatchViews(batches, size, hw, log.log_start_offset, lso, aborted, record_count)


async def find_offset_for_timestamp(
    log: ReadableLog, stored: StoredLog, timestamp: int, *, read_committed: bool = False
) -> OffsetAndTimestamp | None:
    """ListOffsets: -2 earliest, -1 latest, -3 max timestamp, -4/-5/-6 the tiered-storage lookups (see
    :data:`EARLIEST_LOCAL_TIMESTAMP`), else the first record with ts >= timestamp. With ``read_committed`` the
    latest offset is the last stable offset and later records are not found (Kafka's lastFetchableOffset)."""
    hw = log.last_stable_offset if read_committed else log.high_watermark
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        return OffsetAndTimestamp(-1, -1, -1)
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return OffsetAndTimestamp(log.log_start_offset, -1, epoch_at(log, log.log_start_offset))
    if timestamp == LATEST_TIMESTAMP:
        return OffsetAndTimestamp(hw, -1, epoch_at(log, hw))
    if timestamp == MAX_TIMESTAMP:
        if log.max_timestamp_offset < log.log_start_offset or hw == log.log_start_offset:
            return OffsetAndTimestamp(-1, -1, -1)
        found_max = await _max_timestamp_record(log, stored)
        # As Kafka: a record at or past what the isolation level may read (an open transaction's under
        # read_committed) is not answered, even if an earlier one carries the next highest timestamp.
        return found_max if found_max.offset < hw else OffsetAndTimestamp(-1, -1, -1)
    if timestamp < 0:
        raise KafkaError(ErrorCode.invalid_request, f"{log.where}: unsupported list-offsets timestamp {timestamp}")
    found: list[OffsetAndTimestamp] = []

    def visit(header: BatchHeader, batch: memoryview) -> bool:
        if header.max_timestamp < timestamp:
            return True
        for record in decode_records(batch):
            if record.offset < log.log_start_offset:
                continue  # deleted (DeleteRecords) but still inside the first stored batch
            if record.timestamp is not None and record.timestamp >= timestamp:
                found.append(OffsetAndTimestamp(record.offset, record.timestamp, header.partition_leader_epoch))
                return False
        return True

    await stored.scan(log.time_index.scan_start(timestamp, log.log_start_offset), hw, visit)
    return found[0] if found and found[0].offset < hw else None


async def _max_timestamp_record(log: ReadableLog, stored: StoredLog) -> OffsetAndTimestamp:
    """The record carrying the max timestamp (within the batch we tracked), as Kafka's -3 lookup returns."""
    found: list[OffsetAndTimestamp] = []
    target = log.max_timestamp

    def visit(header: BatchHeader, batch: memoryview) -> bool:
        for record in decode_records(batch):
            if record.timestamp == target and record.offset >= log.log_start_offset:
                found.append(OffsetAndTimestamp(record.offset, target, header.partition_leader_epoch))
                return False
        return False

    start = max(log.max_timestamp_offset, log.log_start_offset)
    await stored.scan(start, log.high_watermark, visit)
    if found:
        return found[0]
    return OffsetAndTimestamp(log.max_timestamp_offset, target, epoch_at(log, log.max_timestamp_offset))


def epoch_at(log: ReadableLog, offset: int) -> int:
    """The leader epoch that wrote ``offset`` (the current one when the checkpoint does not go back that far)."""
    epoch = -1
    for entry in log.epochs.entries:
        if entry.start_offset <= offset:
            epoch = entry.epoch
    return epoch if epoch >= 0 else log.leader_epoch
