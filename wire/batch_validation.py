"""Checks of one produced record batch on its own, before the partition looks at it: v2 magic, length, CRC-32C, a
record count consistent with the offset delta and with the records, and every record's length and timestamp, after
decompressing a compressed batch.

Stored as-is, a batch failing these would fail every consumer that fetches it (librdkafka and the Java consumer stop
on the partition), long after its producer was told it was written. What Kafka 4 answers for each (its LogValidator
reads a batch's records through DefaultRecordBatch's iterators, and ReplicaManager turns what they throw into a code
with ``Errors.forException``):

- a CRC-32C mismatch: :class:`CorruptBatchError`, CORRUPT_MESSAGE;
- records more or fewer than the header counts, or running past the section: :class:`InvalidBatchError`,
  INVALID_RECORD (``InvalidRecordException``: "Incorrect declared batch size, records still remaining in file",
  "... premature EOF reached");
- a records section that does not decompress with its codec: :class:`UndecompressableBatchError`. The codec's
  stream throws an IOException, DefaultRecordBatch wraps it in a plain KafkaException ("Failed to decompress record
  stream"), which no error code covers: Kafka answers UNKNOWN_SERVER_ERROR;
- records decompressing past :data:`MAX_DECOMPRESSED_BYTES`: :class:`RecordsTooLargeError`. Kafka streams the
  records and has no such bound; here they are decompressed whole, so the bound is what keeps a few KB of zstd
  from claiming gigabytes.

Kafka also parses each record's offset delta, key, value and headers. Here a record is read as far as the checks
need (its length, its timestamp delta, and on a compacted topic its key): reading every field measured about 1.7 ms
per MiB of 1 KiB records against 0.24 ms, and took a compressed produce's broker from 1.8 to 4.2 CPU seconds per GB
(``bench/FIGURES.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.compression import (
    Compression,
    CompressionError,
    DecompressedTooLarge,
    compression_of,
    decompress_bounded,
)
from wire.record_batch import (
    HEADER_SIZE,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    BatchHeader,
    CorruptBatchError,
    InvalidBatchError,
    compute_crc,
    parse_header,
)
from wire.varint import VarintError, read_varint

#: The most a produced batch's records may decompress to. librdkafka's consumers refuse a zstd batch that
#: decompresses past their ``receive.message.max.bytes`` (100 000 000 by default), so a batch past it could not be
#: read by them anyway. A producer's batches are far smaller: librdkafka's ``batch.size`` caps the uncompressed
#: records at 1 MB by default, the Java producer's ``max.request.size`` caps each record at 1 MiB uncompressed and
#: its ``batch.size`` (16 KiB) the batch as compressed. Memory follows the output, not this bound
#: (:func:`wire.compression.decompress_bounded`).
MAX_DECOMPRESSED_BYTES = 100_000_000


class UndecompressableBatchError(InvalidBatchError):
    """The records section does not decompress with the codec the attributes name (Kafka: UNKNOWN_SERVER_ERROR)."""


class RecordsTooLargeError(InvalidBatchError):
    """The records decompress past :data:`MAX_DECOMPRESSED_BYTES`; they may be well formed, only too large."""


@dataclass(frozen=True, slots=True)
class RecordsRead:
    """What walking every record of a batch found: what a compacted topic and the timestamp bounds check.

    ``keyless`` counts the records without a key (None when the keys were not read). ``earliest``/``latest`` are the
    smallest and largest record timestamps (records without one, NO_TIMESTAMP, left out; NO_TIMESTAMP when none
    has one) and ``earliest_at``/``latest_at`` the index of their record, for the refusal's message. In a
    LogAppendTime batch every record carries the batch's max timestamp, as Kafka reads it."""

    keyless: int | None
    earliest: int
    earliest_at: int
    latest: int
    latest_at: int


@dataclass(frozen=True, slots=True)
class CheckedBatch:
    header: BatchHeader
    records: RecordsRead


def validate_batch(batch: bytes | memoryview) -> BatchHeader:
    """The header of a batch that passes :func:`check_batch`'s checks; the errors of those checks otherwise."""
    return check_batch(batch).header


def check_batch(
    batch: bytes | memoryview, *, keys: bool = False, max_decompressed: int = MAX_DECOMPRESSED_BYTES
) -> CheckedBatch:
    """Checks the structural invariants a producer batch must satisfy (see the module's docstring), walking every
    record (of a compressed batch: decompressed once, into at most ``max_decompressed`` bytes, else
    :class:`RecordsTooLargeError`), with ``keys`` reading each record's key as well. Returns the header and what the
    records hold."""
    header = parse_header(batch)
    if header.size != len(batch):
        raise InvalidBatchError(f"record batch length field says {header.size} bytes, batch has {len(batch)}")
    actual = compute_crc(batch)
    if actual != header.crc:
        raise CorruptBatchError(f"record batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    try:
        codec = compression_of(header.attributes)
    except CompressionError as exc:
        raise InvalidBatchError(f"record batch attributes {header.attributes:#06x}: {exc}") from None
    if header.records_count <= 0:
        raise InvalidBatchError(f"record batch has {header.records_count} records")
    if header.last_offset_delta != header.records_count - 1:
        raise InvalidBatchError(
            f"record batch has {header.records_count} records but last offset delta {header.last_offset_delta}"
        )
    if codec is Compression.NONE:
        return CheckedBatch(header, _walk_records(batch, HEADER_SIZE, header.size, header, keys=keys))
    try:
        records = decompress_bounded(codec, memoryview(batch)[HEADER_SIZE : header.size], max_decompressed)
    except DecompressedTooLarge as exc:
        raise RecordsTooLargeError(f"record batch records: {exc}") from None
    except CompressionError as exc:
        raise UndecompressableBatchError(f"record batch records: {exc}") from None
    return CheckedBatch(header, _walk_records(records, 0, len(records), header, keys=keys))


#: The smallest record body: attributes, timestamp delta, offset delta, key length, value length and header count,
#: one byte each (Kafka's reader runs out of bytes on a shorter one).
_MIN_RECORD_BODY = 6


def _walk_records(
    data: bytes | memoryview, pos: int, end: int, header: BatchHeader, *, keys: bool
) -> RecordsRead:
    """Walks the header's count of records in ``data[pos:end]``, which they must fill exactly (the count first, as
    Kafka's iterators read: a section of zeros is not walked to its end), reading each one's length prefix and
    timestamp delta and, with ``keys``, its key's length.

    Runs once per record of every batch produced, so the one- and two-byte varints (record lengths up to 8 KiB,
    timestamp deltas up to 4 s) are decoded inline: a ``read_varint`` call cost about 0.45 µs a record. The walk
    costs about 0.24 ms per MiB of 1 KiB records (0.19 for the lengths alone)."""
    count = header.records_count
    missing = NO_TIMESTAMP - header.base_timestamp  # the delta of a record without a timestamp
    low, high = 1 << 63, -(1 << 63)
    low_at = high_at = -1
    keyless = 0
    index = 0
    try:
        for index in range(count):
            first = data[pos]
            if first < 0x80:
                length, pos = (first >> 1) ^ -(first & 1), pos + 1
            elif data[pos + 1] < 0x80:
                raw = (first & 0x7F) | (data[pos + 1] << 7)
                length, pos = (raw >> 1) ^ -(raw & 1), pos + 2
            else:
                length, pos = read_varint(data, pos)
            if length < _MIN_RECORD_BODY or pos + length > end:
                raise InvalidBatchError(f"record {index} of {length} bytes does not fit its batch")
            first = data[pos + 1]  # after the record's attributes
            if first < 0x80:
                delta = (first >> 1) ^ -(first & 1)
            elif data[pos + 2] < 0x80:
                raw = (first & 0x7F) | (data[pos + 2] << 7)
                delta = (raw >> 1) ^ -(raw & 1)
            else:
                delta, _ = read_varint(data, pos + 1)
            if delta != missing:
                if delta < low:
                    low, low_at = delta, index
                if delta > high:
                    high, high_at = delta, index
            if keys and _key_length(data, pos) < 0:
                keyless += 1
            pos += length
    except (VarintError, IndexError):
        raise InvalidBatchError(f"record batch says {count} records but record {index} is cut short") from None
    if pos != end:
        raise InvalidBatchError(f"record batch says {count} records but {end - pos} bytes remain after them")
    base = header.base_timestamp
    earliest, latest = (base + low, base + high) if low_at >= 0 else (NO_TIMESTAMP, NO_TIMESTAMP)
    if header.timestamp_type == LOG_APPEND_TIME:
        earliest = latest = header.max_timestamp
    return RecordsRead(keyless if keys else None, earliest, low_at, latest, high_at)


def _key_length(data: bytes | memoryview, pos: int) -> int:
    """The key length of the record whose body starts at ``pos`` (negative: no key): after its attributes byte, its
    timestamp and offset deltas."""
    _, at = read_varint(data, pos + 1)
    _, at = read_varint(data, at)
    return read_varint(data, at)[0]


__all__ = [
    "MAX_DECOMPRESSED_BYTES",
    "CheckedBatch",
    "RecordsRead",
    "RecordsTooLargeError",
    "UndecompressableBatchError",
    "check_batch",
    "validate_batch",
]
