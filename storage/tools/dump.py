"""``fjord object dump``: an object's footer, one line per data block and optionally every batch header.

The line formats follow AutoMQ's object dump (seed 000), so output can be compared with dumps of AutoMQ objects::

    indexStartPosition: 5242006
    indexBlockLength: 252
    streamId=3, startOffset=4, endOffset=6, recordCount=2, startPosition=0, size=262
      StreamRecordBatch{streamId=3, epoch=0, baseOffset=4, count=1, size=138}

``size`` of a batch is its payload length, as everywhere in the engine. Two entry points share the rendering:
``dump_bytes`` for an object already in memory (or memory-mapped from a file) and ``dump_object`` for an object in
a store, read through ``ObjectReader`` one block at a time so a large object never has to fit in memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator

from storage.objects import format as fmt
from storage.objects.format import Footer, IndexEntry
from storage.objects.reader import ObjectDump, ObjectReader
from storage.stream_record_batch import StreamRecordBatch

RECORD_INDENT = "  "


def footer_lines(footer: Footer) -> list[str]:
    return [f"indexStartPosition: {footer.index_position}", f"indexBlockLength: {footer.index_length}"]


def batch_line(batch: StreamRecordBatch) -> str:
    return (
        f"{RECORD_INDENT}StreamRecordBatch{{streamId={batch.stream_id}, epoch={batch.epoch}, "
        f"baseOffset={batch.base_offset}, count={batch.count}, size={batch.size}}}"
    )


def block_lines(entry: IndexEntry, block: bytes | memoryview | None, where: str) -> Iterator[str]:
    """The entry's line, then (when ``block`` is given) one line per batch it holds; a block that does not
    match its index entry raises CorruptObjectError after the lines of the batches that did decode."""
    yield entry.describe()
    if block is not None:
        for batch in fmt.parse_block(block, entry, where):
            yield batch_line(batch)


def parse_object(data: bytes | memoryview, where: str) -> ObjectDump:
    """Footer and index of a whole object held in ``data``; ``where`` names it in errors."""
    footer = fmt.parse_footer(data[-fmt.FOOTER_SIZE :], len(data), where)
    index = data[footer.index_position : footer.index_position + footer.index_length]
    return ObjectDump(where, len(data), footer, fmt.parse_index(index, footer, where))


def dump_bytes(data: bytes | memoryview, where: str, *, records: bool = False) -> Iterator[str]:
    """Lines describing the object in ``data``. Lazily produced: a corrupt block raises when reached."""
    dump = parse_object(data, where)
    yield from footer_lines(dump.footer)
    yield from _entry_lines(dump.entries, data if records else None, where)


def _entry_lines(entries: Iterable[IndexEntry], data: bytes | memoryview | None, where: str) -> Iterator[str]:
    for entry in entries:
        block = None if data is None else data[entry.position : entry.position + entry.size]
        yield from block_lines(entry, block, where)


async def dump_object(reader: ObjectReader, key: str, *, records: bool = False) -> AsyncIterator[str]:
    """Lines describing the object at ``key`` in the reader's store, fetching one block at a time."""
    dump = await reader.dump(key)
    for line in footer_lines(dump.footer):
        yield line
    where = reader.where(key)
    for entry in dump.entries:
        block = (await reader.read_blocks_at(key, [entry]))[0] if records else None
        for line in block_lines(entry, block, where):
            yield line
