"""Property tests: objects built by ObjectBuilder read back exactly through ObjectReader, for any mix of streams,
batch sizes and block sizes; a truncated or corrupted object never reads back as different data.

The format carries no checksum over batch payloads or epochs (the Kafka RecordBatch CRC inside the payload covers
the data at the broker layer), so a flipped byte inside one of those fields may read back flipped. Every other
byte is structure, and damage to it must surface as CorruptObjectError. Nor is the index checksummed: a damaged
stream id on a stream's last block makes the index end that stream early, which the reader cannot know; the
stream layer's next read (at the offset metadata says the object still holds) then gets CorruptObjectError. The
corruption test reads the way the stream layer does to cover that case.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.errors import CorruptObjectError
from storage.objects import format as fmt
from storage.objects.reader import ObjectReader
from storage.objectstore.memory import MemoryObjectStore
from storage.stream_record_batch import HEADER_SIZE, StreamRecordBatch

NS = "_fjord_props"
OBJECT_ID = 42
T = TypeVar("T")

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@dataclass(frozen=True)
class Layout:
    batches: list[StreamRecordBatch]
    block_size: int

    def stream_ids(self) -> list[int]:
        return sorted({b.stream_id for b in self.batches})

    def of(self, stream_id: int) -> list[StreamRecordBatch]:
        return [b for b in self.batches if b.stream_id == stream_id]


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    stream_ids = sorted(draw(st.sets(st.integers(0, 2**40), min_size=1, max_size=4)))
    batches: list[StreamRecordBatch] = []
    for stream_id in stream_ids:
        offset = draw(st.integers(0, 10**9))
        for _ in range(draw(st.integers(1, 12))):
            count = draw(st.integers(1, 6))
            payload = draw(st.binary(min_size=0, max_size=200))
            batches.append(StreamRecordBatch(stream_id, draw(st.integers(0, 3)), offset, count, payload))
            offset += count
    return Layout(batches, draw(st.integers(1, 1500)))


async def _reader_over(data: bytes) -> ObjectReader:
    store = MemoryObjectStore()
    await store.put(fmt.object_key(OBJECT_ID, NS), data)
    return ObjectReader(store, NS)


async def _read_stream(reader: ObjectReader, batches: list[StreamRecordBatch], size: int) -> list[StreamRecordBatch]:
    first, last = batches[0].base_offset, batches[-1].last_offset
    return await reader.read_range(OBJECT_ID, batches[0].stream_id, first, last, 1 << 30, size)


@PROPS
@given(layouts())
def test_every_stream_reads_back_exactly(layout: Layout) -> None:
    data = fmt.build_object(layout.batches, layout.block_size)

    async def check() -> None:
        reader = await _reader_over(data)
        for stream_id in layout.stream_ids():
            expected = layout.of(stream_id)
            assert await _read_stream(reader, expected, len(data)) == expected
        # An unknown object size (no metadata at hand) reads the same.
        fresh = await _reader_over(data)
        assert [e.describe() for e in await fresh.index(OBJECT_ID)] == [
            e.describe() for e in await reader.index(OBJECT_ID, len(data))
        ]

    _run(check())


@PROPS
@given(layouts(), st.data())
def test_any_offset_window_returns_the_batches_overlapping_it(layout: Layout, data: st.DataObject) -> None:
    obj = fmt.build_object(layout.batches, layout.block_size)
    stream_id = data.draw(st.sampled_from(layout.stream_ids()))
    batches = layout.of(stream_id)
    start = data.draw(st.integers(batches[0].base_offset, batches[-1].last_offset - 1))
    end = data.draw(st.integers(start + 1, batches[-1].last_offset + 5))
    max_bytes = data.draw(st.integers(1, 5000))
    overlapping = [b for b in batches if b.last_offset > start and b.base_offset < end]

    got = _run(_read_window(obj, stream_id, start, end, max_bytes))
    # Never empty (the block holding ``start`` is always read), always a prefix of the overlapping batches,
    # and complete whenever the budget covers all of the stream's blocks.
    assert got and got == overlapping[: len(got)]
    stream_bytes = sum(b.encoded_size for b in batches) + fmt.BLOCK_HEADER_SIZE * len(batches)
    if max_bytes >= stream_bytes:
        assert got == overlapping


async def _read_window(obj: bytes, stream_id: int, start: int, end: int, max_bytes: int) -> list[StreamRecordBatch]:
    reader = await _reader_over(obj)
    return await reader.read_range(OBJECT_ID, stream_id, start, end, max_bytes, len(obj))


@PROPS
@given(layouts(), st.data())
def test_truncation_is_always_reported(layout: Layout, data: st.DataObject) -> None:
    obj = fmt.build_object(layout.batches, layout.block_size)
    cut = data.draw(st.integers(0, len(obj) - 1))
    truncated = obj[:cut]
    for known_size in (None, len(obj)):
        outcome = _run(_read_all_or_error(truncated, layout, known_size))
        assert isinstance(outcome, CorruptObjectError)
        assert fmt.object_key(OBJECT_ID, NS) in str(outcome)


@PROPS
@given(layouts(), st.data())
def test_a_corrupted_byte_never_reads_back_as_other_data(layout: Layout, data: st.DataObject) -> None:
    obj = fmt.build_object(layout.batches, layout.block_size)
    position = data.draw(st.integers(0, len(obj) - 1))
    flip = data.draw(st.integers(1, 255))
    damaged = bytearray(obj)
    damaged[position] ^= flip
    outcome = _run(_read_all_or_error(bytes(damaged), layout, None))
    if isinstance(outcome, CorruptObjectError):
        assert fmt.object_key(OBJECT_ID, NS) in str(outcome)
        return
    expected = b"".join(b.encode() for b in layout.batches)
    got = b"".join(b.encode() for b in outcome)
    assert len(got) == len(expected)
    differing = [i for i in range(len(got)) if got[i] != expected[i]]
    assert len(differing) <= 1
    if differing:
        assert _is_unchecked_field(layout.batches, differing[0]), f"structure byte {differing[0]} misread"


def _is_unchecked_field(batches: list[StreamRecordBatch], index: int) -> bool:
    """Whether byte ``index`` of the concatenated encoded batches lies in an epoch or a payload."""
    base = 0
    for batch in batches:
        if index < base + batch.encoded_size:
            within = index - base
            return 9 <= within < 17 or within >= HEADER_SIZE
        base += batch.encoded_size
    return False


async def _read_all_or_error(
    obj: bytes, layout: Layout, known_size: int | None
) -> list[StreamRecordBatch] | CorruptObjectError:
    """Reads every stream's range the way the stream layer does: from where the previous read ended until
    the end metadata records, so an index that ends a range early is caught by the next read."""
    reader = await _reader_over(obj)
    out: list[StreamRecordBatch] = []
    try:
        for stream_id in layout.stream_ids():
            batches = layout.of(stream_id)
            start, end = batches[0].base_offset, batches[-1].last_offset
            for _ in range(len(batches)):
                if start >= end:
                    break
                got = await reader.read_range(OBJECT_ID, stream_id, start, end, 1 << 30, known_size)
                out += got
                start = got[-1].last_offset
            assert start >= end, f"stream {stream_id}: no progress at offset {start}"
    except CorruptObjectError as exc:
        return exc
    return out
