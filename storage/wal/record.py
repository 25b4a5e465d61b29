"""The WAL record framing of DESIGN.md §5, sans-I/O.

Every record is a 24-byte header followed by its body, an encoded StreamRecordBatch (storage/stream_record_batch.py)::

    magic u32 0x87654321 | bodyLength i32 | bodyOffset i64 | bodyCRC u32 | headerCRC u32

``bodyOffset`` is the logical WAL position of the body (record position + 24). Storing it lets the scanner reject
a well-formed record that sits at the wrong place — stale bytes left behind in a reused region, or a segment file
renamed to the wrong base offset — instead of replaying it. Both CRCs are CRC-32C; ``headerCRC`` covers the first
20 header bytes, so a torn header is caught before its length is trusted.

Both WAL modes share this framing: the file WAL writes records back to back into segment files, the S3 WAL into
the body of each WAL object. ``RecordScanner`` walks a buffer of them and says exactly where and why it stopped,
which is what recovery needs to keep the intact prefix and cut off a torn or corrupt tail.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import crc32c

from storage import stream_record_batch
from storage.errors import CorruptObjectError
from storage.stream_record_batch import StreamRecordBatch
from storage.wal.base import WALRecord

MAGIC = 0x87654321
HEADER = struct.Struct(">IiqII")
HEADER_SIZE = HEADER.size  # 24
_CRC_COVERED = 20  # headerCRC covers every header byte before it
HEADER_CRC = struct.Struct(">I")

# Largest body a record may declare. A header whose CRC happens to match garbage is astronomically unlikely, but a
# bound keeps a corrupt length from making recovery try to read gigabytes.
MAX_BODY_SIZE = 1 << 30


def record_size(batch: StreamRecordBatch) -> int:
    """Bytes the record for ``batch`` occupies in the WAL: how far it advances the logical offset."""
    return HEADER_SIZE + batch.encoded_size


_PREFIX = struct.Struct(">IiqI")  # the header bytes headerCRC covers: magic | bodyLength | bodyOffset | bodyCRC


def encode_record_parts(batches: Sequence[StreamRecordBatch], offset: int) -> list[bytes]:
    """Encodes consecutive records starting at logical position ``offset`` as buffers to write in order: for each
    record its headers (WAL header + StreamRecordBatch header, one small ``bytes``) and then the payload itself,
    uncopied. Writing these with one ``pwritev`` saves copying every payload into a group buffer first."""
    parts: list[bytes] = []
    append = parts.append
    pack_batch_header = stream_record_batch.HEADER.pack
    pack_prefix = _PREFIX.pack
    pack_crc = HEADER_CRC.pack
    crc = crc32c.crc32c
    position = offset
    for batch in batches:
        payload = batch.payload
        length = len(payload)
        batch_header = pack_batch_header(
            stream_record_batch.MAGIC, batch.stream_id, batch.epoch, batch.base_offset, batch.count, length
        )
        body_length = stream_record_batch.HEADER_SIZE + length
        prefix = pack_prefix(MAGIC, body_length, position + HEADER_SIZE, crc(payload, crc(batch_header)))
        append(prefix + pack_crc(crc(prefix)) + batch_header)
        append(payload)
        position += HEADER_SIZE + body_length
    return parts


def encode_records(batches: Sequence[StreamRecordBatch], offset: int, *, reserve: int = 0) -> bytearray:
    """Encodes consecutive records starting at logical position ``offset`` into one buffer (one write, one PUT).

    Every payload is copied into the buffer exactly once. ``reserve`` leaves that many zero bytes in front of the
    records for a container header (the S3 WAL object header).
    """
    return bytearray().join([bytes(reserve), *encode_record_parts(batches, offset)])


def encode(batch: StreamRecordBatch, offset: int) -> bytes:
    """One record at logical position ``offset``."""
    return bytes(encode_records([batch], offset))


class StopReason(enum.Enum):
    """Why a scan ended. Only END means the buffer held nothing but whole, intact records."""

    END = "end of data"
    TRUNCATED_HEADER = "truncated record header"
    TRUNCATED_BODY = "truncated record body"
    BAD_MAGIC = "bad record magic"
    BAD_HEADER_CRC = "record header CRC mismatch"
    BAD_LENGTH = "impossible record body length"
    BAD_POSITION = "record body offset does not match its position"
    BAD_BODY_CRC = "record body CRC mismatch"
    BAD_BODY = "record body is not a valid StreamRecordBatch"
    #: Not an error: a record whose body is ``large_body`` bytes or more, its header checked, left to the caller.
    LARGE_BODY = "record body to be read on its own"

    @property
    def truncated(self) -> bool:
        """The buffer ended inside a record: more bytes may complete it (a torn tail if there are none)."""
        return self in (StopReason.TRUNCATED_HEADER, StopReason.TRUNCATED_BODY)


@dataclass(frozen=True, slots=True)
class ScanStop:
    reason: StopReason
    position: int  # byte position in the scanned buffer where the first bad or incomplete record starts
    offset: int  # the same place as a logical WAL offset
    detail: str = ""

    def describe(self, where: str) -> str:
        extra = f": {self.detail}" if self.detail else ""
        return f"{where}: {self.reason.value} at byte {self.position} (WAL offset {self.offset}){extra}"


class RecordScanner:
    """Walks WAL records in ``buf``, whose first byte is at logical position ``base_offset``.

    Iterating yields intact records in order and stops at the first record that is incomplete or corrupt; ``stop``
    then says why and where (``StopReason.END`` with ``position == len(buf)`` for a clean end). ``position`` is
    always the end of the intact prefix, i.e. where a torn tail should be cut.

    Records before ``skip_below`` are checked only for framing (header CRC) and not decoded, so recovery can walk
    past trimmed records cheaply. A record at or past ``skip_below`` whose body is ``large_body`` bytes or more
    stops the scan (``StopReason.LARGE_BODY``) once its header is checked: decoding it from ``buf`` would copy its
    payload out, which file WAL recovery avoids by reading such a body straight into its own buffer.
    """

    def __init__(
        self,
        buf: bytes | bytearray | memoryview,
        base_offset: int,
        *,
        where: str = "WAL",
        skip_below: int = 0,
        verify_skipped_bodies: bool = False,
        large_body: int = MAX_BODY_SIZE + 1,
    ) -> None:
        self._buf = memoryview(buf)
        self._base = base_offset
        self._where = where
        self._skip_below = skip_below
        self._verify_skipped = verify_skipped_bodies
        self._large_body = large_body
        self.position = 0
        self.stop: ScanStop | None = None

    def __iter__(self) -> Iterator[WALRecord]:
        buf = self._buf
        size = len(buf)
        while True:
            pos = self.position
            offset = self._base + pos
            if pos == size:
                self._stopped(StopReason.END)
                return
            if size - pos < HEADER_SIZE:
                self._stopped(StopReason.TRUNCATED_HEADER, f"{size - pos} of {HEADER_SIZE} header bytes present")
                return
            magic, body_length, body_offset, body_crc, header_crc = HEADER.unpack_from(buf, pos)
            if magic != MAGIC:
                self._stopped(StopReason.BAD_MAGIC, f"found {magic:#010x}")
                return
            if crc32c.crc32c(buf[pos : pos + _CRC_COVERED]) != header_crc:
                self._stopped(StopReason.BAD_HEADER_CRC)
                return
            if body_length < stream_record_batch.HEADER_SIZE or body_length > MAX_BODY_SIZE:
                self._stopped(StopReason.BAD_LENGTH, f"{body_length} bytes")
                return
            if body_offset != offset + HEADER_SIZE:
                self._stopped(StopReason.BAD_POSITION, f"header says body at {body_offset}")
                return
            skipped = offset < self._skip_below
            if body_length >= self._large_body and not skipped:
                self._stopped(StopReason.LARGE_BODY, f"{body_length} bytes")
                return
            body_start = pos + HEADER_SIZE
            body_end = body_start + body_length
            if body_end > size:
                self._stopped(
                    StopReason.TRUNCATED_BODY, f"{size - body_start} of {body_length} body bytes present"
                )
                return
            if skipped and not self._verify_skipped:
                self.position = body_end
                continue
            body = buf[body_start:body_end]
            if crc32c.crc32c(body) != body_crc:
                self._stopped(StopReason.BAD_BODY_CRC)
                return
            if skipped:
                self.position = body_end
                continue
            try:
                batch, used = stream_record_batch.decode(body, 0, f"{self._where} record at WAL offset {offset}")
            except CorruptObjectError as exc:
                self._stopped(StopReason.BAD_BODY, str(exc))
                return
            if used != body_length:
                self._stopped(StopReason.BAD_BODY, f"batch uses {used} of {body_length} body bytes")
                return
            self.position = body_end
            yield WALRecord(offset, self._base + body_end, batch)

    def _stopped(self, reason: StopReason, detail: str = "") -> None:
        self.stop = ScanStop(reason, self.position, self._base + self.position, detail)


def scan(
    buf: bytes | bytearray | memoryview, base_offset: int, *, where: str = "WAL", skip_below: int = 0
) -> tuple[list[WALRecord], ScanStop]:
    """Every intact record of ``buf`` and where the scan stopped (see RecordScanner)."""
    scanner = RecordScanner(buf, base_offset, where=where, skip_below=skip_below)
    records = list(scanner)
    assert scanner.stop is not None
    return records, scanner.stop
