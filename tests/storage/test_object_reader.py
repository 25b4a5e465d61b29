"""The async object reader: what it returns, how many GETs it costs, and how it reports broken objects."""

from __future__ import annotations

import asyncio
import struct

import pytest

from storage.config import BucketURL, StorageConfig
from storage.errors import CorruptObjectError, ObjectNotFoundError
from storage.objects import format as fmt
from storage.objects.reader import ObjectReader
from storage.objectstore.factory import open_object_store
from storage.objectstore.faulty import FaultyObjectStore
from storage.objectstore.memory import MemoryObjectStore
from storage.stream_record_batch import StreamRecordBatch

NS = "_fjord_test"


def _batches(stream_id: int, start: int, n: int, size: int = 100, count: int = 2) -> list[StreamRecordBatch]:
    return [
        StreamRecordBatch(stream_id, 1, start + i * count, count, bytes([(stream_id + i) % 251]) * size)
        for i in range(n)
    ]


async def _put(store: MemoryObjectStore, object_id: int, batches: list[StreamRecordBatch], block_size: int) -> int:
    data = fmt.build_object(batches, block_size=block_size)
    await store.put(fmt.object_key(object_id, NS), data)
    return len(data)


async def test_small_index_costs_one_get_and_is_cached() -> None:
    store = MemoryObjectStore()
    size = await _put(store, 1, _batches(3, 0, 50), block_size=1000)
    reader = ObjectReader(store, NS)
    entries = await reader.index(1, size)
    assert [e.stream_id for e in entries] == [3] * len(entries)
    assert entries[0].start_offset == 0 and entries[-1].end_offset == 100
    assert store.stats.gets == 1
    assert await reader.index(1, size) == entries
    assert store.stats.gets == 1


async def test_index_larger_than_the_guess_costs_exactly_one_more_get() -> None:
    store = MemoryObjectStore()
    # ~600 one-batch blocks: a 21 KiB index in a 70 KiB object, beyond the 8 KiB tail guess.
    size = await _put(store, 2, _batches(9, 0, 600, size=60), block_size=1)
    reader = ObjectReader(store, NS, whole_object_bytes=0)
    entries = await reader.index(2, size)
    assert len(entries) == 600
    assert store.stats.gets == 2
    assert await reader.read_range(2, 9, 1001, 1003, 1) == [_batches(9, 0, 600, size=60)[500]]


async def test_concurrent_callers_share_one_index_request_and_cancelling_one_spares_the_rest() -> None:
    inner = MemoryObjectStore()
    size = await _put(inner, 3, _batches(1, 0, 20), block_size=500)
    store = FaultyObjectStore(inner)
    store.add_latency(0.05, op="get_tail")
    reader = ObjectReader(store, NS)
    tasks = [asyncio.create_task(reader.index(3, size)) for _ in range(10)]
    await asyncio.sleep(0.01)
    tasks[0].cancel()
    results = await asyncio.gather(*tasks[1:])
    assert tasks[0].cancelled()
    assert all(r == results[0] for r in results) and results[0]
    assert store.calls["get_tail"] == 1


async def test_index_cache_is_bounded_lru_and_invalidate_forgets() -> None:
    store = MemoryObjectStore()
    sizes = {oid: await _put(store, oid, _batches(oid, 0, 3), block_size=1000) for oid in (10, 11, 12)}
    reader = ObjectReader(store, NS, index_cache_entries=2)
    await reader.index(10, sizes[10])
    await reader.index(11, sizes[11])
    await reader.index(10, sizes[10])  # 10 is now the most recently used
    await reader.index(12, sizes[12])  # evicts 11
    gets = store.stats.gets
    await reader.index(10, sizes[10])
    assert store.stats.gets == gets
    await reader.index(11, sizes[11])
    assert store.stats.gets == gets + 1
    reader.invalidate(11)
    await store.delete([fmt.object_key(11, NS)])
    with pytest.raises(ObjectNotFoundError):
        await reader.index(11, sizes[11])


async def test_invalidate_during_a_load_does_not_cache_the_deleted_object() -> None:
    inner = MemoryObjectStore()
    size = await _put(inner, 4, _batches(1, 0, 5), block_size=1000)
    store = FaultyObjectStore(inner)
    store.add_latency(0.05, op="get_tail")
    reader = ObjectReader(store, NS)
    loading = asyncio.create_task(reader.index(4, size))
    await asyncio.sleep(0.01)
    reader.invalidate(4)
    await loading
    await reader.index(4, size)
    assert store.calls["get_tail"] == 2


async def test_an_object_invalidated_while_fetched_whole_is_not_kept() -> None:
    inner = MemoryObjectStore()
    batches = _batches(1, 0, 5)
    size = await _put(inner, 5, batches, block_size=1000)
    store = FaultyObjectStore(inner)
    store.add_latency(0.05, op="get_tail")
    reader = ObjectReader(store, NS)
    loading = asyncio.create_task(reader.read_range(5, 1, 0, 10, 1 << 20, size))
    await asyncio.sleep(0.01)
    reader.invalidate(5)  # deleted or replaced meanwhile: what the load fetched whole is not kept
    assert await loading == batches
    assert await reader.read_range(5, 1, 0, 10, 1 << 20, size) == batches
    assert store.calls["get_tail"] == 2 and store.calls["get"] == 1  # its blocks came by a GET of their own


async def test_read_blocks_fetches_adjacent_blocks_with_one_get() -> None:
    store = MemoryObjectStore()
    batches = _batches(5, 0, 40, size=200)
    size = await _put(store, 6, batches, block_size=1000)
    reader = ObjectReader(store, NS, whole_object_bytes=0)
    entries = await reader.index(6, size)
    assert len(entries) >= 6
    data = fmt.build_object(batches, block_size=1000)
    gets = store.stats.gets
    blocks = await reader.read_blocks(6, entries[1:4])
    assert store.stats.gets == gets + 1
    assert blocks == [data[e.position : e.position + e.size] for e in entries[1:4]]
    gets = store.stats.gets
    apart = [entries[0], entries[2], entries[3], entries[5]]
    blocks = await reader.read_blocks(6, apart)
    assert store.stats.gets == gets + 3
    assert blocks == [data[e.position : e.position + e.size] for e in apart]


async def test_a_small_object_is_read_with_one_get_for_its_index_and_blocks() -> None:
    """A moved partition's target reads the object its source uploaded as it closed: one round trip, not two."""
    store = MemoryObjectStore()
    batches = _batches(5, 0, 40, size=200)
    size = await _put(store, 7, batches, block_size=1000)
    reader = ObjectReader(store, NS, whole_object_bytes=size)
    assert await reader.read_range(7, 5, 10, 60, 1 << 20, size) == batches[5:30]
    assert store.stats.gets == 1
    assert await reader.read_range(7, 5, 0, 80, 1 << 20, size) == batches
    assert store.stats.gets == 1
    reader.invalidate(7)  # deleted or replaced by compaction: nothing of it is kept
    assert await reader.read_range(7, 5, 0, 80, 1 << 20, size) == batches
    assert store.stats.gets == 2
    larger = ObjectReader(store, NS, whole_object_bytes=size - 1)
    assert await larger.read_range(7, 5, 0, 80, 1 << 20, size) == batches
    assert store.stats.gets == 4  # its tail with the index, then its blocks


async def test_compaction_planning_over_many_objects_reads_only_their_indexes() -> None:
    """Compaction reads the indexes of all its sources before any block and bounds its own memory: only a fetch about
    to read an object's blocks has it fetched whole."""
    store = MemoryObjectStore()
    batches = _batches(5, 0, 40, size=2000)
    size = await _put(store, 9, batches, block_size=1000)
    reader = ObjectReader(store, NS)
    await reader.index(9, size)
    assert store.stats.gets == 1 and store.stats.bytes_got < size // 4
    assert await reader.read_range(9, 5, 0, 80, 1 << 20, size) == batches
    assert store.stats.gets == 2  # the index was cached: its blocks by one ranged GET


async def test_objects_kept_whole_are_bounded_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryObjectStore()
    sizes = {oid: await _put(store, oid, _batches(oid, 0, 10, size=300), block_size=1000) for oid in (40, 41, 42)}
    monkeypatch.setattr("storage.objects.reader.KEPT_BYTES", sizes[40] + sizes[41])
    reader = ObjectReader(store, NS)
    for oid in (40, 41, 42):
        await reader.read_range(oid, oid, 0, 20, 1 << 20, sizes[oid])
    assert store.stats.gets == 3
    await reader.read_range(42, 42, 0, 20, 1 << 20, sizes[42])  # the index is cached, the body kept
    await reader.read_range(41, 41, 0, 20, 1 << 20, sizes[41])
    assert store.stats.gets == 3
    await reader.read_range(40, 40, 0, 20, 1 << 20, sizes[40])  # the oldest, dropped: its blocks read again
    assert store.stats.gets == 4


async def test_read_range_trims_to_the_requested_offsets() -> None:
    store = MemoryObjectStore()
    s3 = _batches(3, 4, 2, size=50, count=1)
    s4 = _batches(4, 100, 30, size=300, count=3)  # offsets 100..190, three per batch
    size = await _put(store, 7, s3 + s4, block_size=1000)
    reader = ObjectReader(store, NS)
    assert await reader.read_range(7, 3, 4, 6, 1 << 20, size) == s3
    # Offset 107 lies inside the batch [106, 109); the batch ending at 106 is dropped; 121 stops before [121, ...).
    got = await reader.read_range(7, 4, 107, 121, 1 << 20, size)
    assert [b.base_offset for b in got] == [106, 109, 112, 115, 118]
    assert got == s4[2:7]
    assert await reader.read_range(7, 4, 150, 150, 1 << 20, size) == []  # an empty window


async def test_asking_for_offsets_the_index_does_not_hold_is_reported() -> None:
    """Metadata sends readers only to objects holding the range; an index that disagrees is damaged."""
    store = MemoryObjectStore()
    size = await _put(store, 7, _batches(4, 100, 30, size=300, count=3), block_size=1000)
    reader = ObjectReader(store, NS)
    key = fmt.object_key(7, NS)
    with pytest.raises(CorruptObjectError, match=f"{key}.*no block of stream 4 containing offset 190"):
        await reader.read_range(7, 4, 190, 200, 1 << 20, size)
    with pytest.raises(CorruptObjectError, match="no block of stream 5 containing offset 0"):
        await reader.read_range(7, 5, 0, 10, 1 << 20, size)


async def test_read_range_reads_at_least_one_block_and_stops_at_max_bytes() -> None:
    store = MemoryObjectStore()
    batches = _batches(2, 0, 30, size=400, count=1)
    size = await _put(store, 8, batches, block_size=1000)  # three batches per block
    reader = ObjectReader(store, NS)
    first = await reader.read_range(8, 2, 0, 30, 1, size)
    assert first == batches[:3]
    # Blocks are ~1.3 KB: a 2500-byte budget admits the block holding offset 4 and one more, never the rest.
    some = await reader.read_range(8, 2, 4, 30, 2500, size)
    assert some == batches[4 : 4 + len(some)]
    assert 3 <= len(some) <= 5


async def test_size_mismatch_and_garbage_raise_corrupt_object_naming_the_object() -> None:
    store = MemoryObjectStore("named")
    size = await _put(store, 9, _batches(1, 0, 5), block_size=1000)
    reader = ObjectReader(store, NS)
    key = fmt.object_key(9, NS)
    with pytest.raises(CorruptObjectError, match=f"{key}.*metadata says {size + 10}"):
        await reader.index(9, size + 10)
    await store.put(fmt.object_key(20, NS), b"this is not an object at all, just some text" * 3)
    with pytest.raises(CorruptObjectError, match=f"{fmt.object_key(20, NS)}.*footer magic"):
        await reader.index(20)
    with pytest.raises(ObjectNotFoundError, match="mem://named"):
        await reader.index(21)


async def test_object_shrunk_after_its_index_was_cached_is_reported_truncated() -> None:
    store = MemoryObjectStore()
    batches = _batches(1, 0, 20, size=500)
    size = await _put(store, 22, batches, block_size=2000)
    reader = ObjectReader(store, NS, whole_object_bytes=0)
    await reader.index(22, size)
    data = fmt.build_object(batches, block_size=2000)
    await store.put(fmt.object_key(22, NS), data[:1500])
    with pytest.raises(CorruptObjectError, match="truncated"):
        await reader.read_range(22, 1, 0, 40, 1 << 20, size)


async def test_reads_an_object_written_byte_by_byte_to_the_published_layout() -> None:
    """An object produced by another tool (here: hand-packed with struct, not ObjectBuilder) reads back."""
    payloads = [b"k" * 138, b"p" * 48]
    block = bytearray()
    for offset, payload in zip((4, 5), payloads, strict=True):
        block += struct.pack(">bqqqii", 0x22, 3, 0, offset, 1, len(payload)) + payload
    data = struct.pack(">BBii", 0x5A, 0x02, 2, len(block)) + block
    index = struct.pack(">qqiiqi", 3, 4, 2, 2, 0, len(data))
    obj = data + index + struct.pack(">qi28xQ", len(data), len(index), 0x88E241B785F4CFF7)
    assert len(data) == 262  # the block size of seed 000's dump for the same two batches
    store = MemoryObjectStore()
    await store.put(fmt.object_key(78, NS), obj)
    reader = ObjectReader(store, NS)
    got = await reader.read_range(78, 3, 4, 6, 1 << 20)
    assert [(b.stream_id, b.base_offset, b.count, b.payload) for b in got] == [
        (3, 4, 1, payloads[0]),
        (3, 5, 1, payloads[1]),
    ]
    dump = await reader.dump(fmt.object_key(78, NS))
    assert dump.footer == fmt.Footer(262, 36) and dump.size == len(obj)
    assert [e.describe() for e in dump.entries] == [
        "streamId=3, startOffset=4, endOffset=6, recordCount=2, startPosition=0, size=262"
    ]


async def test_reader_over_s3(s3_bucket_url: BucketURL) -> None:
    store = open_object_store(s3_bucket_url, StorageConfig())
    try:
        batches = _batches(7, 0, 100, size=1000)
        data = fmt.build_object(batches, block_size=8000)
        await store.put(fmt.object_key(30, NS), data)
        reader = ObjectReader(store, NS, whole_object_bytes=0)
        gets = store.stats.gets
        got = await reader.read_range(30, 7, 51, 200, 1 << 20, len(data))
        assert got == batches[25:]
        assert store.stats.gets == gets + 2  # the tail with the index, then one ranged GET for all blocks
        whole = ObjectReader(store, NS)
        gets = store.stats.gets
        assert await whole.read_range(30, 7, 51, 200, 1 << 20, len(data)) == batches[25:]
        assert store.stats.gets == gets + 1  # a small object: fetched whole with its index
    finally:
        await store.close()
