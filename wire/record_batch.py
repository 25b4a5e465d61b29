"""The Kafka magic-v2 RecordBatch: header parsing, in-place rewrites, a record codec and a builder (the checks of a
produced batch are ``wire.batch_validation``).

The broker stores produced batches byte for byte (DESIGN.md §4), so most of this module works on the 61-byte
header only and never touches the records. The CRC-32C covers ``attributes`` to the end of the batch: base offset
and partition leader epoch sit before it, which is why the broker may rewrite those two without recomputing it.
Record decoding (and building) is here for the parts of the broker that read their own data back (group
coordinator, compaction, recovery of producer state).

Layout (big-endian)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 | attributes i16 |
    lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 | producerId i64 | producerEpoch i16 |
    baseSequence i32 | recordsCount i32 | records...
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from crc32c import crc32c

from wire.compression import (
    Compression,
    CompressionError,
    compress,
    compression_of,
    decompress,
)
from wire.varint import VarintError, read_varint, varint_size, write_varint

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MAGIC_V2 = 2

BASE_OFFSET_POS = 0
LENGTH_POS = 8
PARTITION_LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
MAX_TIMESTAMP_POS = 35
CRC_START = ATTRIBUTES_POS

TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
#: KIP-534: the base timestamp holds the batch's delete horizon (the log cleaner sets it, Kafka's and Fjord's, on
#: batches it keeps with tombstones and on the markers of transactions with no data left).
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

CREATE_TIME = 0
LOG_APPEND_TIME = 1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_AFTER_CRC = struct.Struct(">hiqqqhii")


class InvalidBatchError(ValueError):
    """A record set is malformed (truncated, wrong magic, inconsistent sizes or counts)."""


class CorruptBatchError(InvalidBatchError):
    """The stored CRC-32C does not match the batch bytes."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch including the 12-byte log overhead."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return compression_of(self.attributes)

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the log cleaner may remove the batch (KIP-534: flagged batches carry it in the base timestamp)."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at 2^31 like Kafka's DefaultRecordBatch."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


@dataclass(frozen=True, slots=True)
class Record:
    """One record. For building, ``timestamp=None`` means "now" and ``offset`` is ignored (records get
    consecutive offsets); decoded records carry their absolute offset and timestamp."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = field(default=())
    timestamp: int | None = None
    offset: int = -1


def parse_header(data: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Parses the header at ``pos``; InvalidBatchError if fewer than 61 bytes remain or the magic is not 2."""
    if len(data) - pos < HEADER_SIZE:
        if len(data) - pos >= MAGIC_POS + 1 and data[pos + MAGIC_POS] != MAGIC_V2:
            raise InvalidBatchError(f"unsupported record batch magic {data[pos + MAGIC_POS]} (only v2 is supported)")
        raise InvalidBatchError(f"truncated record batch header: {len(data) - pos} bytes, need {HEADER_SIZE}")
    header = BatchHeader(*_HEADER.unpack_from(data, pos))
    if header.magic != MAGIC_V2:
        raise InvalidBatchError(f"unsupported record batch magic {header.magic} (only v2 is supported)")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidBatchError(f"record batch length {header.batch_length} is smaller than the v2 header")
    return header


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    return int(crc32c(memoryview(batch)[CRC_START:]))


def iter_batches(records: bytes | memoryview) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Yields ``(header, batch bytes)`` for each batch of a record set; raises InvalidBatchError if the set does
    not split exactly into whole batches. CRCs are not checked here (see ``wire.batch_validation``)."""
    view = memoryview(records)
    pos = 0
    end = len(view)
    while pos < end:
        header = parse_header(view, pos)
        stop = pos + header.size
        if stop > end:
            raise InvalidBatchError(
                f"record batch at byte {pos} claims {header.size} bytes but only {end - pos} remain"
            )
        yield header, view[pos:stop]
        pos = stop


def set_base_offset(buf: bytearray | memoryview, base_offset: int, pos: int = 0) -> None:
    """Rewrites the base offset in place; outside the CRC, so the batch stays valid."""
    struct.pack_into(">q", buf, pos + BASE_OFFSET_POS, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, pos: int = 0) -> None:
    """Rewrites the partition leader epoch in place; outside the CRC."""
    struct.pack_into(">i", buf, pos + PARTITION_LEADER_EPOCH_POS, epoch)


def set_log_append_time(buf: bytearray | memoryview, timestamp_ms: int, pos: int = 0) -> None:
    """Marks the batch LogAppendTime with ``timestamp_ms`` as its max timestamp and recomputes the CRC, which
    covers both fields (one of the two rewrites that change checksummed bytes)."""
    (attributes,) = struct.unpack_from(">h", buf, pos + ATTRIBUTES_POS)
    struct.pack_into(">h", buf, pos + ATTRIBUTES_POS, attributes | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", buf, pos + MAX_TIMESTAMP_POS, timestamp_ms)
    _reseal(buf, pos)


def set_create_time(buf: bytearray | memoryview, pos: int = 0) -> None:
    """Marks the batch CreateTime, keeping its timestamps, and recomputes the CRC: a producer's batch that claimed
    LogAppendTime on a CreateTime topic is stored as the topic's type, as Kafka's LogValidator stores it."""
    (attributes,) = struct.unpack_from(">h", buf, pos + ATTRIBUTES_POS)
    struct.pack_into(">h", buf, pos + ATTRIBUTES_POS, attributes & ~TIMESTAMP_TYPE_MASK)
    _reseal(buf, pos)


def _reseal(buf: bytearray | memoryview, pos: int) -> None:
    """Recomputes the CRC of the batch at ``pos`` after a rewrite of bytes it covers."""
    (length,) = struct.unpack_from(">i", buf, pos + LENGTH_POS)
    view = memoryview(buf)[pos : pos + length + LOG_OVERHEAD]
    struct.pack_into(">I", buf, pos + CRC_POS, compute_crc(view))


def _read_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise InvalidBatchError("record field runs past the end of the batch")
    return bytes(buf[pos : pos + length]), pos + length


def _decode_record(buf: bytes | memoryview, pos: int, header: BatchHeader) -> tuple[Record, int]:
    length, pos = read_varint(buf, pos)
    end = pos + length
    if length < 0 or end > len(buf):
        raise InvalidBatchError(f"record of {length} bytes runs past the end of the batch")
    pos += 1  # record attributes: unused in v2
    ts_delta, pos = read_varint(buf, pos)
    offset_delta, pos = read_varint(buf, pos)
    key, pos = _read_bytes(buf, pos)
    value, pos = _read_bytes(buf, pos)
    n_headers, pos = read_varint(buf, pos)
    if n_headers < 0:
        raise InvalidBatchError(f"record has a negative header count {n_headers}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(n_headers):
        hkey, pos = _read_bytes(buf, pos)
        if hkey is None:
            raise InvalidBatchError("record header with a null key")
        hvalue, pos = _read_bytes(buf, pos)
        headers.append((hkey.decode("utf-8", errors="replace"), hvalue))
    if pos != end:
        raise InvalidBatchError(f"record length {length} does not match its fields")
    log_append = header.timestamp_type == LOG_APPEND_TIME
    timestamp = header.max_timestamp if log_append else header.base_timestamp + ts_delta
    record = Record(key, value, tuple(headers), timestamp, header.base_offset + offset_delta)
    return record, pos


def records_section(batch: bytes | memoryview, header: BatchHeader | None = None) -> bytes:
    """The batch's records, decompressed."""
    header = header or parse_header(batch)
    raw = bytes(memoryview(batch)[HEADER_SIZE : header.size])
    try:
        return decompress(header.compression, raw)
    except CompressionError as exc:
        raise InvalidBatchError(str(exc)) from exc


def decode_records(batch: bytes | memoryview) -> list[Record]:
    """Decodes every record of one batch (any codec). InvalidBatchError on malformed records."""
    header = parse_header(batch)
    data = records_section(batch, header)
    out: list[Record] = []
    pos = 0
    try:
        for _ in range(header.records_count):
            record, pos = _decode_record(data, pos, header)
            out.append(record)
    except VarintError as exc:
        raise InvalidBatchError(f"malformed record varint: {exc}") from exc
    if pos != len(data):
        raise InvalidBatchError(f"{len(data) - pos} trailing bytes after {header.records_count} records")
    return out


def filter_batch(batch: bytes | memoryview, keep: Callable[[Record], bool]) -> bytes | None:
    """Rebuilds one batch with only the records ``keep`` accepts (log compaction); None when it keeps none.

    Everything a consumer or producer-state rebuild relies on stays as it was: base offset and last offset delta
    (so the batch still ends where the producer's batch ended), the records' own offset and timestamp deltas (their
    bytes are copied unchanged), timestamps, producer id/epoch/base sequence, attributes and the codec. Only the
    record count, the records section (re-compressed with the same codec), the length and the CRC-32C change. A
    batch that keeps every record is returned as it was, byte for byte."""
    header = parse_header(batch)
    data = records_section(batch, header)
    kept: list[bytes] = []
    pos = 0
    try:
        for _ in range(header.records_count):
            start = pos
            record, pos = _decode_record(data, pos, header)
            if keep(record):
                kept.append(data[start:pos])
    except VarintError as exc:
        raise InvalidBatchError(f"malformed record varint: {exc}") from exc
    if len(kept) == header.records_count:
        return bytes(batch)
    if not kept:
        return None
    try:
        return _assemble(
            header.compression,
            b"".join(kept),
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            attributes=header.attributes,
            last_offset_delta=header.last_offset_delta,
            base_timestamp=header.base_timestamp,
            max_timestamp=header.max_timestamp,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            records_count=len(kept),
        )
    except CompressionError as exc:
        raise InvalidBatchError(str(exc)) from exc


def set_delete_horizon(batch: bytes | memoryview, horizon_ms: int) -> bytes:
    """Rebuilds one batch with its delete horizon set, as Kafka's cleaner does (KIP-534): the delete-horizon
    attribute bit on and the horizon in the base timestamp, every record's timestamp delta re-based on it so each
    record keeps its timestamp (deltas may go negative). Offsets, producer fields, max timestamp and codec stay."""
    header = parse_header(batch)
    body = bytearray()
    for record in decode_records(batch):
        ts = header.base_timestamp if record.timestamp is None else record.timestamp
        delta = 0 if header.timestamp_type == LOG_APPEND_TIME else ts - horizon_ms
        _encode_record(body, record, record.offset - header.base_offset, delta)
    try:
        return _assemble(
            header.compression,
            bytes(body),
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            attributes=header.attributes | DELETE_HORIZON_MASK,
            last_offset_delta=header.last_offset_delta,
            base_timestamp=horizon_ms,
            max_timestamp=header.max_timestamp,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            records_count=header.records_count,
        )
    except CompressionError as exc:
        raise InvalidBatchError(str(exc)) from exc


def iter_records(records: bytes | memoryview) -> Iterator[tuple[BatchHeader, Record]]:
    """Every record of a record set, with the header of the batch it belongs to."""
    for header, batch in iter_batches(records):
        for record in decode_records(batch):
            yield header, record


def _encode_record(out: bytearray, record: Record, offset_delta: int, timestamp_delta: int) -> None:
    body = bytearray()
    body.append(0)
    write_varint(body, timestamp_delta)
    write_varint(body, offset_delta)
    for part in (record.key, record.value):
        if part is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(part))
            body += part
    write_varint(body, len(record.headers))
    for hkey, hvalue in record.headers:
        encoded = hkey.encode("utf-8")
        write_varint(body, len(encoded))
        body += encoded
        if hvalue is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(hvalue))
            body += hvalue
    write_varint(out, len(body))
    out += body


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_control: bool = False,
    is_transactional: bool = False,
    compression: Compression = Compression.NONE,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Builds one v2 batch with a valid CRC. Records get consecutive offsets from ``base_offset``; a record
    without a timestamp gets the current wall-clock time."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    now = int(time.time() * 1000)
    timestamps = [now if r.timestamp is None else r.timestamp for r in records]
    base_ts = timestamps[0]
    max_ts = max(timestamps)
    body = bytearray()
    for delta, (record, ts) in enumerate(zip(records, timestamps, strict=True)):
        _encode_record(body, record, delta, ts - base_ts)
    attributes = int(compression)
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    return _assemble(
        compression,
        bytes(body),
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=len(records) - 1,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=len(records),
    )


def _assemble(
    codec: Compression,
    records: bytes,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> bytes:
    """One v2 batch from its encoded records and header fields: the records compressed with ``codec``, the length
    and the CRC-32C computed. The one place a batch's bytes are laid out (build, compaction filter, delete horizon),
    so they cannot drift apart. Raises CompressionError from the codec."""
    payload = compress(codec, records)
    after_crc = _AFTER_CRC.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    crc = crc32c(after_crc + payload)
    length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    prefix = struct.pack(">qiibI", base_offset, length, partition_leader_epoch, MAGIC_V2, crc)
    return prefix + after_crc + payload


__all__ = [
    "CREATE_TIME",
    "HEADER_SIZE",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "MAGIC_V2",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "BatchHeader",
    "Compression",
    "CorruptBatchError",
    "InvalidBatchError",
    "Record",
    "build_batch",
    "compute_crc",
    "decode_records",
    "filter_batch",
    "iter_batches",
    "iter_records",
    "parse_header",
    "records_section",
    "set_base_offset",
    "set_delete_horizon",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "varint_size",
]
