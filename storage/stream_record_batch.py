"""StreamRecordBatch: the unit every stream stores (DESIGN.md §5).

Layout, big-endian, 33-byte header then the payload::

    magic u8 0x22 | streamId i64 | epoch i64 | baseOffset i64 | count i32 | payloadLength i32 | payload

``count`` is the number of offsets the batch covers, so the batch spans ``[base_offset, base_offset + count)``.
The payload is opaque here (for Kafka partitions it is a RecordBatch exactly as produced).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from storage.errors import CorruptObjectError

MAGIC = 0x22
HEADER = struct.Struct(">bqqqii")
HEADER_SIZE = HEADER.size  # 33


@dataclass(frozen=True, slots=True)
class StreamRecordBatch:
    stream_id: int
    epoch: int
    base_offset: int
    count: int
    payload: bytes

    @property
    def last_offset(self) -> int:
        """Exclusive end offset."""
        return self.base_offset + self.count

    @property
    def size(self) -> int:
        """Payload bytes: what every size limit and cache accounting in the engine counts."""
        return len(self.payload)

    @property
    def encoded_size(self) -> int:
        return HEADER_SIZE + len(self.payload)

    def encode(self) -> bytes:
        return (
            HEADER.pack(MAGIC, self.stream_id, self.epoch, self.base_offset, self.count, len(self.payload))
            + self.payload
        )

    def encode_into(self, out: bytearray) -> None:
        out += HEADER.pack(MAGIC, self.stream_id, self.epoch, self.base_offset, self.count, len(self.payload))
        out += self.payload


def decode_header(buf: bytes | memoryview, pos: int, where: str) -> tuple[int, int, int, int, int]:
    """Returns (stream_id, epoch, base_offset, count, payload_length) of the batch at ``pos``.

    ``where`` names the object or WAL segment for the error message.
    """
    if pos + HEADER_SIZE > len(buf):
        raise CorruptObjectError(f"{where}: truncated StreamRecordBatch header at byte {pos}")
    magic, stream_id, epoch, base_offset, count, length = HEADER.unpack_from(buf, pos)
    if magic != MAGIC:
        raise CorruptObjectError(f"{where}: bad StreamRecordBatch magic {magic & 0xFF:#04x} at byte {pos}")
    if length < 0 or pos + HEADER_SIZE + length > len(buf):
        raise CorruptObjectError(
            f"{where}: StreamRecordBatch at byte {pos} (stream {stream_id}, offset {base_offset}) "
            f"declares {length} payload bytes but only {len(buf) - pos - HEADER_SIZE} remain"
        )
    return stream_id, epoch, base_offset, count, length


def decode(buf: bytes | memoryview, pos: int = 0, where: str = "buffer") -> tuple[StreamRecordBatch, int]:
    """Decodes one batch at ``pos``; returns it and the position after it."""
    stream_id, epoch, base_offset, count, length = decode_header(buf, pos, where)
    start = pos + HEADER_SIZE
    payload = bytes(buf[start : start + length])
    return StreamRecordBatch(stream_id, epoch, base_offset, count, payload), start + length


def decode_all(buf: bytes | memoryview, where: str = "buffer") -> list[StreamRecordBatch]:
    out: list[StreamRecordBatch] = []
    pos = 0
    while pos < len(buf):
        batch, pos = decode(buf, pos, where)
        out.append(batch)
    return out
