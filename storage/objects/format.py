"""The one object-format module: DataBlock, IndexBlock, Footer and object keys (DESIGN.md §5).

Sans-I/O: ``ObjectBuilder`` turns sorted StreamRecordBatches into object bytes; the ``parse_*`` functions turn
bytes fetched by the caller back into index entries and batches. The async reader in ``storage.objects.reader``
decides which byte ranges to fetch.

Layout, big-endian::

    [DataBlock]* [IndexBlock] [Footer]
    DataBlock   magic u8 0x5A | flag u8 0x02 | recordCount i32 | dataLength i32 | StreamRecordBatch*   (one stream)
    IndexEntry  streamId i64 | startOffset i64 | endOffset-startOffset i32 | recordCount i32
                | blockPosition i64 | blockSize i32                                                   (36 bytes)
    Footer      indexStartPosition i64 | indexBlockLength i32 | 28 zero bytes | magic i64 0x88e241b785f4cff7
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from storage import stream_record_batch
from storage.errors import CorruptObjectError
from storage.stream_record_batch import StreamRecordBatch

BLOCK_MAGIC = 0x5A
BLOCK_FLAG = 0x02
BLOCK_HEADER = struct.Struct(">BBii")
BLOCK_HEADER_SIZE = BLOCK_HEADER.size  # 10

INDEX_ENTRY = struct.Struct(">qqiiqi")
INDEX_ENTRY_SIZE = INDEX_ENTRY.size  # 36

FOOTER_MAGIC = 0x88E241B785F4CFF7
FOOTER = struct.Struct(">qi28xQ")
FOOTER_SIZE = FOOTER.size  # 48

DEFAULT_BLOCK_SIZE = 512 * 1024


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """Where one data block of one stream lies in an object."""

    stream_id: int
    start_offset: int
    end_offset: int
    record_count: int
    position: int
    size: int  # including the 10-byte block header

    def encode(self) -> bytes:
        return INDEX_ENTRY.pack(
            self.stream_id,
            self.start_offset,
            self.end_offset - self.start_offset,
            self.record_count,
            self.position,
            self.size,
        )

    def describe(self) -> str:
        return (
            f"streamId={self.stream_id}, startOffset={self.start_offset}, endOffset={self.end_offset}, "
            f"recordCount={self.record_count}, startPosition={self.position}, size={self.size}"
        )


@dataclass(frozen=True, slots=True)
class Footer:
    index_position: int
    index_length: int

    def encode(self) -> bytes:
        return FOOTER.pack(self.index_position, self.index_length, FOOTER_MAGIC)


@dataclass(frozen=True, slots=True)
class StreamRange:
    """The contiguous offsets ``[start_offset, end_offset)`` of one stream held by an object."""

    stream_id: int
    start_offset: int
    end_offset: int


class ObjectBuilder:
    """Accumulates batches sorted by (stream, offset) and produces one object's bytes.

    A data block holds one stream and is closed once its payload reaches ``block_size``; blocks never span
    streams. Batches of one stream must be contiguous (each starts where the previous ended).

    Nothing is copied while adding: the builder keeps the packed headers and the payloads themselves as the
    object's *parts*, in order, and ``finish`` joins them once. Python copies of each batch into a growing buffer
    used to cost about a millisecond of GIL per MiB in the upload thread, which stalled the event loop; a single
    ``bytes.join`` over ``bytes`` parts of 1 MiB or more runs without the GIL (CPython's join drops it for large
    results when every part is immutable), and ``finish_parts`` lets a store write the parts without joining.

    ``base_position`` is where the first data block will lie in the stored object: an S3 WAL object (v2) puts its
    own header before the blocks, and positions counted from the object's first byte make the WAL object, copied
    whole, a stream-set object (storage/wal/s3_format.py). The caller writes those leading bytes itself.
    """

    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE, base_position: int = 0) -> None:
        if block_size <= 0:
            raise ValueError(f"block size must be positive, got {block_size}")
        if base_position < 0:
            raise ValueError(f"base position must not be negative, got {base_position}")
        self._block_size = block_size
        self._base = base_position
        self._parts: list[bytes] = []
        self._written = base_position  # the object's bytes before the open block (leading bytes, closed blocks)
        self._entries: list[IndexEntry] = []
        self._ranges: list[StreamRange] = []
        self._block_header_at = -1  # index in ``_parts`` of the open block's header, filled in when it closes
        self._block_length = 0  # encoded batch bytes of the open block
        self._block_stream = -1
        self._block_start = 0
        self._block_end = 0
        self._block_records = 0
        self._block_payload = 0

    @property
    def size(self) -> int:
        """Bytes written so far (data blocks only, including the open block)."""
        return self._written - self._base + (BLOCK_HEADER_SIZE + self._block_length if self._block_records else 0)

    @property
    def ranges(self) -> list[StreamRange]:
        return list(self._ranges)

    @property
    def empty(self) -> bool:
        return not self._entries and not self._block_records

    def add(self, batch: StreamRecordBatch) -> None:
        stream_id = batch.stream_id
        base_offset = batch.base_offset
        last_offset = base_offset + batch.count
        ranges = self._ranges
        last = ranges[-1] if ranges else None
        if last is not None and stream_id == last.stream_id:
            if base_offset != last.end_offset:
                raise ValueError(
                    f"stream {stream_id}: batch at offset {base_offset} does not continue "
                    f"the object's range ending at {last.end_offset}"
                )
            ranges[-1] = StreamRange(stream_id, last.start_offset, last_offset)
        else:
            if last is not None and stream_id < last.stream_id:
                raise ValueError(f"stream {stream_id} added after stream {last.stream_id}: sort by stream")
            ranges.append(StreamRange(stream_id, base_offset, last_offset))
        if self._block_records and stream_id != self._block_stream:
            self._close_block()
        parts = self._parts
        if not self._block_records:
            self._block_stream = stream_id
            self._block_start = base_offset
            self._block_header_at = len(parts)
            parts.append(b"")  # the block header, once its length and count are known
        payload = batch.payload
        length = len(payload)
        parts.append(
            stream_record_batch.HEADER.pack(stream_record_batch.MAGIC, stream_id, batch.epoch, base_offset, batch.count,
                                            length)
        )
        parts.append(payload)
        self._block_length += stream_record_batch.HEADER_SIZE + length
        self._block_end = last_offset
        self._block_records += 1
        self._block_payload += length
        if self._block_payload >= self._block_size:
            self._close_block()

    def add_all(self, batches: Iterable[StreamRecordBatch]) -> None:
        for batch in batches:
            self.add(batch)

    def _close_block(self) -> None:
        if not self._block_records:
            return
        position = self._written
        length = self._block_length
        self._parts[self._block_header_at] = BLOCK_HEADER.pack(BLOCK_MAGIC, BLOCK_FLAG, self._block_records, length)
        self._written += BLOCK_HEADER_SIZE + length
        self._entries.append(
            IndexEntry(
                stream_id=self._block_stream,
                start_offset=self._block_start,
                end_offset=self._block_end,
                record_count=self._block_records,
                position=position,
                size=BLOCK_HEADER_SIZE + length,
            )
        )
        self._block_header_at = -1
        self._block_length = 0
        self._block_records = 0
        self._block_payload = 0

    def add_raw_block(self, entry: IndexEntry, block: bytes) -> None:
        """Copies an already encoded data block (compaction moves blocks without re-encoding them)."""
        self._close_block()
        last = self._ranges[-1] if self._ranges else None
        if last is not None and last.stream_id == entry.stream_id:
            if entry.start_offset != last.end_offset:
                raise ValueError(
                    f"stream {entry.stream_id}: block at offset {entry.start_offset} does not continue "
                    f"the object's range ending at {last.end_offset}"
                )
            self._ranges[-1] = StreamRange(last.stream_id, last.start_offset, entry.end_offset)
        else:
            if last is not None and entry.stream_id < last.stream_id:
                raise ValueError(f"stream {entry.stream_id} added after stream {last.stream_id}: sort by stream")
            self._ranges.append(StreamRange(entry.stream_id, entry.start_offset, entry.end_offset))
        position = self._written
        self._parts.append(block)
        self._written += len(block)
        self._entries.append(
            IndexEntry(
                entry.stream_id, entry.start_offset, entry.end_offset, entry.record_count, position, len(block)
            )
        )

    def finish(self) -> bytes:
        """Closes the open block and returns the whole object (data blocks, index, footer) as one buffer."""
        return b"".join(self.finish_parts())

    def finish_parts(self) -> list[bytes]:
        """Closes the open block and returns the object as its parts in order, without joining them (a store
        can write them as they are). The builder is empty afterwards."""
        self._close_block()
        index_position = self._written
        index = b"".join(entry.encode() for entry in self._entries)
        parts = self._parts
        parts.append(index)
        parts.append(Footer(index_position, len(index)).encode())
        self._parts = []
        self._written = self._base
        return parts

    @property
    def entries(self) -> list[IndexEntry]:
        return list(self._entries)


def build_object(batches: Iterable[StreamRecordBatch], block_size: int = DEFAULT_BLOCK_SIZE) -> bytes:
    builder = ObjectBuilder(block_size)
    builder.add_all(batches)
    return builder.finish()


def parse_footer(tail: bytes | memoryview, object_size: int, where: str) -> Footer:
    """Parses the footer from the last bytes of an object of ``object_size`` bytes."""
    if object_size < FOOTER_SIZE or len(tail) < FOOTER_SIZE:
        raise CorruptObjectError(f"{where}: {object_size} bytes is too short to hold the 48-byte footer")
    index_position, index_length, magic = FOOTER.unpack_from(tail, len(tail) - FOOTER_SIZE)
    if magic != FOOTER_MAGIC:
        raise CorruptObjectError(f"{where}: bad footer magic {magic:#018x} (not an object, or truncated)")
    if index_length < 0 or index_length % INDEX_ENTRY_SIZE:
        raise CorruptObjectError(f"{where}: index length {index_length} is not a multiple of 36")
    if index_position < 0 or index_position + index_length != object_size - FOOTER_SIZE:
        raise CorruptObjectError(
            f"{where}: index at {index_position}+{index_length} does not end where the footer starts "
            f"({object_size - FOOTER_SIZE}); the object is truncated or corrupt"
        )
    return Footer(index_position, index_length)


def parse_index(buf: bytes | memoryview, footer: Footer, where: str) -> list[IndexEntry]:
    """Parses the index block; ``buf`` must hold exactly the index bytes."""
    if len(buf) != footer.index_length:
        raise CorruptObjectError(f"{where}: expected {footer.index_length} index bytes, got {len(buf)}")
    entries: list[IndexEntry] = []
    previous: IndexEntry | None = None
    for pos in range(0, footer.index_length, INDEX_ENTRY_SIZE):
        stream_id, start, delta, count, position, size = INDEX_ENTRY.unpack_from(buf, pos)
        entry = IndexEntry(stream_id, start, start + delta, count, position, size)
        if stream_id < 0 or start < 0 or delta < 0 or count < 0 or size < BLOCK_HEADER_SIZE or position < 0:
            raise CorruptObjectError(f"{where}: index entry {pos // INDEX_ENTRY_SIZE} is invalid: {entry}")
        if position + size > footer.index_position:
            raise CorruptObjectError(
                f"{where}: index entry {pos // INDEX_ENTRY_SIZE} points past the data ({position}+{size} > "
                f"{footer.index_position})"
            )
        if previous is not None and (stream_id, start) < (previous.stream_id, previous.start_offset):
            raise CorruptObjectError(f"{where}: index entries are not sorted by (stream, offset) at {entry}")
        # Data blocks tile the bytes before the index, in index order, and one stream's blocks hold one
        # contiguous offset range. Checking both turns any damaged position, size or offset field into an
        # error here instead of a read of the wrong bytes (or a silently shortened range) later. The first block
        # may follow leading bytes that are not the object format's (an S3 WAL object's header).
        expected_position = position if previous is None else previous.position + previous.size
        if position != expected_position:
            raise CorruptObjectError(
                f"{where}: index entry {pos // INDEX_ENTRY_SIZE} puts its block at byte {position}, but the "
                f"previous block ends at byte {expected_position}"
            )
        if previous is not None and stream_id == previous.stream_id and start != previous.end_offset:
            raise CorruptObjectError(
                f"{where}: index entry {pos // INDEX_ENTRY_SIZE} of stream {stream_id} starts at offset {start}, "
                f"but the stream's previous block ends at offset {previous.end_offset}"
            )
        entries.append(entry)
        previous = entry
    data_end = footer.index_position if previous is None else previous.position + previous.size
    if data_end != footer.index_position:
        raise CorruptObjectError(
            f"{where}: data blocks end at byte {data_end}, but the index starts at byte {footer.index_position}"
        )
    return entries


def find_blocks(
    entries: Sequence[IndexEntry], stream_id: int, start_offset: int, end_offset: int, max_bytes: int
) -> list[IndexEntry]:
    """The contiguous blocks of ``stream_id`` covering ``start_offset`` onward, up to ``end_offset`` and
    ``max_bytes`` (the first block is never counted against ``max_bytes``, so a reader always makes progress).
    """
    # First entry whose (stream, end) is beyond (stream_id, start_offset): it may contain start_offset.
    i = bisect.bisect_right(entries, (stream_id, start_offset), key=_entry_end_key)
    out: list[IndexEntry] = []
    budget = max_bytes
    expected = None
    while i < len(entries):
        entry = entries[i]
        if entry.stream_id != stream_id or entry.start_offset >= end_offset:
            break
        if not out and entry.start_offset > start_offset:
            # A gap: the object does not hold start_offset.
            break
        if expected is not None and entry.start_offset != expected:
            break
        if out and budget <= 0:
            break
        out.append(entry)
        budget -= entry.size
        expected = entry.end_offset
        i += 1
    return out


def _entry_end_key(entry: IndexEntry) -> tuple[int, int]:
    return entry.stream_id, entry.end_offset


def parse_block(buf: bytes | memoryview, entry: IndexEntry, where: str) -> Iterator[StreamRecordBatch]:
    """Decodes the batches of one data block (``buf`` is exactly the block's bytes)."""
    if len(buf) != entry.size:
        raise CorruptObjectError(
            f"{where}: block at {entry.position} should be {entry.size} bytes, got {len(buf)}"
        )
    magic, _flag, count, length = BLOCK_HEADER.unpack_from(buf, 0)
    if magic != BLOCK_MAGIC:
        raise CorruptObjectError(f"{where}: bad data block magic {magic:#04x} at byte {entry.position}")
    if length != entry.size - BLOCK_HEADER_SIZE:
        raise CorruptObjectError(
            f"{where}: data block at byte {entry.position} declares {length} bytes, index says "
            f"{entry.size - BLOCK_HEADER_SIZE}"
        )
    if count != entry.record_count:
        raise CorruptObjectError(
            f"{where}: data block at byte {entry.position} holds {count} batches, index says {entry.record_count}"
        )
    view = memoryview(buf)[BLOCK_HEADER_SIZE:]
    pos = 0
    seen = 0
    next_offset = entry.start_offset
    while pos < len(view):
        batch, pos = stream_record_batch.decode(view, pos, f"{where} block@{entry.position}")
        if batch.stream_id != entry.stream_id or batch.base_offset != next_offset:
            raise CorruptObjectError(
                f"{where}: block at byte {entry.position} holds stream {batch.stream_id} offset "
                f"{batch.base_offset}, expected stream {entry.stream_id} offset {next_offset}"
            )
        next_offset = batch.last_offset
        seen += 1
        yield batch
    if seen != count or next_offset != entry.end_offset:
        raise CorruptObjectError(
            f"{where}: block at byte {entry.position} ends at offset {next_offset} after {seen} batches, "
            f"index says {entry.end_offset} after {count}"
        )


def index_tail_guess(object_size: int) -> int:
    """How many tail bytes to fetch so that the footer and (usually) the whole index arrive in one GET."""
    return min(object_size, FOOTER_SIZE + 8192 + (object_size // (1024 * 1024)) * INDEX_ENTRY_SIZE)


def object_key(object_id: int, namespace: str) -> str:
    """``reverse(hex8(id))/namespace/id``: the reversed hex prefix spreads keys across S3 partitions."""
    return f"{f'{object_id:08x}'[::-1]}/{namespace}/{object_id}"


def object_id_from_key(key: str) -> int | None:
    """The object id of a data-object key, or None if the key is not one."""
    parts = key.split("/")
    if len(parts) != 3 or not parts[2].isdigit():
        return None
    object_id = int(parts[2])
    return object_id if f"{object_id:08x}"[::-1] == parts[0] else None
