"""The read path from object storage: bounded LRU block cache, read-ahead that grows for sequential catch-up
reads and shrinks when wasted, shared loads, max_bytes rules, and identical bytes whatever the source."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from storage.cache.block_cache import BlockCache, CachedBlock
from storage.engine import StorageEngine
from storage.objects.format import IndexEntry
from storage.stream_api import Stream
from storage.stream_record_batch import StreamRecordBatch
from tests.storage.engine_support import make_engine, payload, small_config

KiB = 1024


async def filled(tmp_path: Path, appends: int = 64, **overrides: object) -> tuple[StorageEngine, Stream]:
    """One stream of ``appends`` 1000-byte batches, all uploaded; the LogCache no longer serves it."""
    config = small_config(
        tmp_path, wal_upload_threshold=64 * KiB, wal_cache_size=64 * KiB, object_block_size=2 * KiB, **overrides
    )
    engine = make_engine(config)
    await engine.start()
    stream = await engine.open_stream(await engine.create_stream(), epoch=0)
    for i in range(appends):
        await stream.append(payload(stream.stream_id, i), 1)
    await engine.force_upload()
    engine.log_cache.forget(stream.stream_id)  # as if evicted: every read below goes to objects
    return engine, stream


async def test_sequential_catch_up_grows_read_ahead_and_saves_gets(tmp_path: Path) -> None:
    engine, stream = await filled(tmp_path, block_cache_size=256 * KiB, readahead_max=16 * KiB)
    try:
        gets = engine.store.stats.gets
        offset, windows = 0, []
        while offset < 64:
            result = await stream.fetch(offset, 64, 1000)  # one block per fetch
            assert not result.cache_hit
            assert [b.payload for b in result.batches] == [payload(stream.stream_id, offset)]
            windows.append(engine.read_path.readahead_window(stream.stream_id))
            offset = result.next_offset or offset
        block_gets = engine.store.stats.gets - gets
        # 22 blocks of 3 batches: the window grew by a block per sequential miss, so few ranged GETs were needed.
        assert windows == sorted(windows) and max(windows) >= 3 * 2 * KiB
        assert block_gets <= 8, block_gets
        await stream.fetch(3, 64, 1000)  # a jump backwards is not sequential: read-ahead starts over
        await stream.fetch(40, 64, 1000)
        assert engine.read_path.readahead_window(stream.stream_id) == 0
    finally:
        await engine.shutdown()


async def test_without_room_in_the_cache_there_is_no_read_ahead(tmp_path: Path) -> None:
    engine, stream = await filled(tmp_path, block_cache_size=4 * KiB, readahead_max=16 * KiB)
    try:
        offset = 0
        while offset < 64:
            result = await stream.fetch(offset, 64, 1000)
            offset = result.next_offset or offset
            assert engine.block_cache.size <= 4 * KiB
        assert engine.read_path.stats.readahead_blocks == 0
        assert engine.read_path.stats.blocks_loaded >= 22
    finally:
        await engine.shutdown()


def test_block_cache_is_a_bounded_lru_and_reports_wasted_read_ahead() -> None:
    wasted: list[int] = []
    cache = BlockCache(capacity=3 * 100, on_readahead_evicted=wasted.append)

    def block(object_id: int, position: int, stream_id: int = 7, readahead: bool = False) -> CachedBlock:
        entry = IndexEntry(stream_id, position, position + 1, 1, position, 100)
        b = CachedBlock(object_id, entry, [StreamRecordBatch(stream_id, 0, position, 1, b"x")])
        b.readahead = readahead
        return b

    cache.put(block(1, 0))
    cache.put(block(1, 100, readahead=True))
    cache.put(block(1, 200))
    assert cache.get(1, 0) is not None  # now most recently used
    cache.put(block(2, 0))  # evicts (1, 100): least recently used, and never read
    assert not cache.contains(1, 100) and cache.contains(1, 0)
    assert wasted == [7] and cache.size == 300
    cache.put(block(3, 0))
    assert not cache.contains(1, 200) and wasted == [7]  # a block that was read is not "wasted"
    huge = CachedBlock(9, IndexEntry(1, 0, 1, 1, 0, 10_000), [])
    cache.put(huge)
    assert not cache.contains(9, 0) and cache.size == 300


async def test_wasted_read_ahead_shrinks_the_window(tmp_path: Path) -> None:
    engine, stream = await filled(tmp_path, block_cache_size=24 * KiB, readahead_max=16 * KiB)
    try:
        for offset in range(6):
            await stream.fetch(offset, 64, 1000)
        assert engine.read_path.readahead_window(stream.stream_id) > 0
        other = await engine.open_stream(await engine.create_stream(), epoch=0)
        for i in range(40):
            await other.append(payload(other.stream_id, i), 1)
        await engine.force_upload()
        engine.log_cache.forget(other.stream_id)
        await other.fetch(0, 40, 40_000)  # floods the cache: the first stream's unread read-ahead is evicted
        assert engine.block_cache.stats().readahead_wasted > 0
        assert engine.read_path.readahead_window(stream.stream_id) == 0
    finally:
        await engine.shutdown()


async def test_concurrent_cold_reads_share_one_load(tmp_path: Path) -> None:
    engine, stream = await filled(tmp_path, block_cache_size=256 * KiB, readahead_max=2 * KiB)
    try:
        await stream.fetch(0, 1, 1)  # loads the object index
        gets = engine.store.stats.gets
        results = await asyncio.gather(*(stream.fetch(20, 22, 2000) for _ in range(8)))
        assert all([b.base_offset for b in r.batches] == [20, 21] for r in results)
        assert engine.store.stats.gets - gets <= 2
    finally:
        await engine.shutdown()


async def test_cold_reads_return_identical_bytes_and_respect_max_bytes(tmp_path: Path) -> None:
    engine, stream = await filled(tmp_path, appends=100)
    try:
        whole = await stream.fetch(0, 100, 10**9)
        assert [b.payload for b in whole.batches] == [payload(stream.stream_id, i) for i in range(100)]
        assert [b.base_offset for b in whole.batches] == list(range(100))
        capped = await stream.fetch(10, 100, 3_500)
        assert [b.base_offset for b in capped.batches] == [10, 11, 12]
        bounded = await stream.fetch(10, 13, 10**9)
        assert [b.base_offset for b in bounded.batches] == [10, 11, 12]
        tiny = await stream.fetch(50, 100, 1)
        assert [b.base_offset for b in tiny.batches] == [50]
    finally:
        await engine.shutdown()


async def test_random_fetches_match_what_was_appended(tmp_path: Path) -> None:
    """Model check: whatever mix of stream-set objects, stream objects, evicted and cached tail a stream's data
    lives in, a fetch returns exactly the appended batches from the one holding the start offset on."""
    rng = random.Random(20261121)
    engine = make_engine(
        small_config(
            tmp_path,
            wal_cache_size=24 * KiB,
            wal_upload_threshold=12 * KiB,
            stream_object_split_size=6 * KiB,
            object_block_size=1 * KiB,
            block_cache_size=8 * KiB,
            readahead_max=4 * KiB,
        )
    )
    await engine.start()
    try:
        streams = [await engine.open_stream(await engine.create_stream(), 0) for _ in range(3)]
        model: dict[int, list[tuple[int, int, bytes]]] = {s.stream_id: [] for s in streams}
        for step in range(400):
            stream = rng.choice(streams)
            count = rng.randint(1, 4)
            data = rng.randbytes(rng.choice([10, 200, 900, 2500]))
            base = await stream.append(data, count)
            model[stream.stream_id].append((base, count, data))
            if step % 97 == 0:
                await engine.force_upload()
        for _ in range(300):
            stream = rng.choice(streams)
            batches = model[stream.stream_id]
            end_all = batches[-1][0] + batches[-1][1]
            start = rng.randrange(0, end_all)
            end = rng.randint(start + 1, end_all)
            max_bytes = rng.choice([1, 500, 3000, 10**6])
            if rng.random() < 0.2:
                await engine.force_upload()
                engine.log_cache.forget(stream.stream_id)  # as if evicted: objects only
            got = (await stream.fetch(start, end, max_bytes)).batches
            first = next(i for i, (b, c, _) in enumerate(batches) if b + c > start)
            expected: list[tuple[int, int, bytes]] = []
            budget = max_bytes
            for base, count, data in batches[first:]:
                if base >= end or (expected and len(data) > budget):
                    break
                expected.append((base, count, data))
                budget -= len(data)
            assert [(b.base_offset, b.count, b.payload) for b in got] == expected, (stream.stream_id, start, end)
    finally:
        await engine.shutdown()
