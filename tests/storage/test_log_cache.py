"""The LogCache: ordered per-stream reads, sealing at the threshold, FIFO eviction of uploaded blocks only,
backpressure while unuploaded data fills it."""

from __future__ import annotations

import asyncio
import sys

import pytest

from storage.cache.log_cache import CacheBlock, LogCache
from storage.stream_record_batch import StreamRecordBatch


def batch(stream_id: int, offset: int, size: int = 100, count: int = 1) -> StreamRecordBatch:
    return StreamRecordBatch(stream_id, 0, offset, count, bytes([offset % 256]) * size)


class Wal:
    """Hands out increasing WAL positions like a real WAL would."""

    def __init__(self) -> None:
        self.position = 0

    def put(self, cache: LogCache, b: StreamRecordBatch) -> CacheBlock | None:
        start = self.position
        self.position += b.size + 57
        return cache.put(b, start, self.position, reserved=False)


def test_reads_by_offset_across_blocks_with_max_bytes() -> None:
    cache = LogCache(capacity=10_000, block_threshold=1_000)
    wal = Wal()
    for i in range(30):
        wal.put(cache, batch(1, i * 2, count=2))
        wal.put(cache, batch(2, i))
    assert cache.first_offset(1) == 0 and cache.end_offset(1) == 60
    got = cache.read(1, 5, 60, 350)
    assert [b.base_offset for b in got] == [4, 6, 8]  # starts at the batch holding 5; 350 bytes fit 3
    assert [b.base_offset for b in cache.read(1, 58, 100, 10)] == [58]  # first batch even if over budget
    assert cache.read(1, 60, 100, 1000) == []
    assert [b.base_offset for b in cache.read(2, 0, 3, 10_000)] == [0, 1, 2]
    assert cache.read(3, 0, 10, 100) == []


def test_blocks_seal_at_threshold_and_carry_wal_positions() -> None:
    cache = LogCache(capacity=10_000, block_threshold=1_000)
    wal = Wal()
    sealed = [s for i in range(25) if (s := wal.put(cache, batch(1, i))) is not None]
    assert len(sealed) == 2
    first = sealed[0]
    assert first.size == 1_000 and first.sealed and not first.uploaded
    assert first.min_wal_offset == 0 and first.wal_end == 10 * 157
    assert cache.min_unuploaded_wal_offset() == 0
    assert cache.active.size == 500
    assert cache.seal() is not None and cache.seal() is None  # forced seal; an empty block is not sealed


def test_only_uploaded_blocks_are_evicted_oldest_first() -> None:
    cache = LogCache(capacity=2_000, block_threshold=1_000)
    wal = Wal()
    blocks = [s for i in range(20) if (s := wal.put(cache, batch(1, i))) is not None]
    assert cache.size == 2_000
    cache.mark_uploaded(blocks[1])  # the newer one: the older is not uploaded, nothing may be evicted
    assert cache.first_offset(1) == 0
    cache.mark_uploaded(blocks[0])
    wal.put(cache, batch(1, 20))
    assert cache.first_offset(1) == 10  # the oldest block went first
    assert cache.size == 1_100
    assert cache.min_unuploaded_wal_offset() == 20 * 157
    assert [b.base_offset for b in cache.read(1, 0, 100, 10**6)] == []
    assert [b.base_offset for b in cache.read(1, 10, 12, 10**6)] == [10, 11]


async def test_appends_wait_while_unuploaded_data_fills_the_cache() -> None:
    full: list[int] = []
    cache = LogCache(capacity=1_000, block_threshold=500, on_full=lambda: full.append(1))
    wal = Wal()
    sealed = []
    for i in range(10):
        await cache.reserve(100)
        b = cache.put(batch(1, i), wal.position, wal.position + 1)
        wal.position += 1
        if b is not None:
            sealed.append(b)
    assert len(sealed) == 2
    waiter = asyncio.ensure_future(cache.reserve(100))
    second = asyncio.ensure_future(cache.reserve(50))
    await asyncio.sleep(0.01)
    assert not waiter.done() and not second.done()
    assert cache.stats().waiting_appends == 2
    cache.mark_uploaded(sealed[0])
    await asyncio.wait_for(asyncio.gather(waiter, second), 1)
    assert cache.stats().unuploaded == 650


async def test_backpressure_asks_the_owner_to_seal_a_partial_block() -> None:
    sealed = []
    cache = LogCache(capacity=1_000, block_threshold=1_000)

    def on_full() -> None:
        block = cache.seal()
        if block is not None:
            sealed.append(block)

    cache = LogCache(capacity=1_000, block_threshold=1_000, on_full=on_full)
    for i in range(9):
        await cache.reserve(100)
        assert cache.put(batch(1, i), i, i + 1) is None
    waiter = asyncio.ensure_future(cache.reserve(200))
    await asyncio.sleep(0)
    assert [b.size for b in sealed] == [900]  # without this the append would wait forever
    cache.mark_uploaded(sealed[0])
    await asyncio.wait_for(waiter, 1)


async def test_a_batch_bigger_than_the_cache_is_admitted_when_nothing_is_pending() -> None:
    cache = LogCache(capacity=1_000, block_threshold=500)
    await asyncio.wait_for(cache.reserve(5_000), 1)
    block = cache.put(batch(1, 0, size=5_000), 0, 1)
    assert block is not None and block.size == 5_000


async def test_cancelled_waiter_gives_its_place_back() -> None:
    cache = LogCache(capacity=1_000, block_threshold=1_000)
    await cache.reserve(1_000)
    waiter = asyncio.ensure_future(cache.reserve(500))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    cache.release(1_000)
    await asyncio.wait_for(cache.reserve(1_000), 1)


def test_a_reopened_stream_that_moved_on_is_not_served_with_a_hole() -> None:
    cache = LogCache(capacity=10_000, block_threshold=5_000)
    wal = Wal()
    for i in range(5):
        wal.put(cache, batch(1, i))
    wal.put(cache, batch(1, 50))  # another owner wrote 5..50 meanwhile
    assert cache.first_offset(1) == 50
    assert cache.read(1, 2, 60, 10_000) == []


def test_trim_stops_serving_trimmed_batches_but_keeps_them_for_upload() -> None:
    cache = LogCache(capacity=10_000, block_threshold=5_000)
    wal = Wal()
    for i in range(10):
        wal.put(cache, batch(1, i))
    cache.trim(1, 4)
    assert cache.first_offset(1) == 4
    assert [b.base_offset for b in cache.read(1, 4, 6, 10_000)] == [4, 5]
    block = cache.seal()
    assert block is not None and [b.base_offset for b in block.streams[1]] == list(range(10))
    cache.trim(1, 10)
    assert cache.first_offset(1) is None


def test_evicted_batches_are_released() -> None:
    cache = LogCache(capacity=2_000, block_threshold=1_000)
    wal = Wal()
    payloads = [bytes([i]) * 100 for i in range(30)]
    baseline = [sys.getrefcount(payloads[i]) for i in range(30)]
    blocks = []
    for i, p in enumerate(payloads):
        sealed = wal.put(cache, StreamRecordBatch(1, 0, i, 1, p))
        if sealed is not None:
            blocks.append(sealed)
            cache.mark_uploaded(sealed)
    del sealed
    blocks.clear()
    assert cache.size <= 2_000
    # Whatever the cache evicted is no longer referenced by it: memory is bounded by what it accounts for.
    first = cache.first_offset(1)
    assert first is not None and first >= 10
    now = [sys.getrefcount(payloads[i]) for i in range(30)]
    assert now[:first] == baseline[:first]
    assert all(n > b for n, b in zip(now[first:], baseline[first:], strict=True))


async def test_try_reserve_admits_at_once_only_what_reserve_would_without_waiting() -> None:
    cache = LogCache(capacity=1_000, block_threshold=500)
    assert cache.try_reserve(600)
    assert not cache.try_reserve(500)  # would overfill the cache
    waiter = asyncio.ensure_future(cache.reserve(500))
    await asyncio.sleep(0)
    assert not cache.try_reserve(100)  # it fits, but an earlier append is waiting: no overtaking
    cache.release(600)
    await asyncio.wait_for(waiter, 1)
    assert cache.try_reserve(100)
    assert cache.stats().unuploaded == 600


def test_closing_streams_seal_alone_and_the_rest_stays_active_and_readable() -> None:
    cache = LogCache(capacity=1_000, block_threshold=1_000)
    wal = Wal()
    for i in range(3):
        for stream_id in (1, 2, 3):
            wal.put(cache, batch(stream_id, i))
    floor = cache.min_unuploaded_wal_offset()
    closing = cache.seal_streams({1, 3, 9})
    assert closing is not None and sorted(closing.streams) == [1, 3] and closing.size == 600
    assert sorted(cache.active.streams) == [2] and cache.active.size == 300
    assert cache.seal_streams({1}) is None  # nothing of it left in the active block
    # Until both are uploaded the WAL keeps every record of either.
    cache.mark_uploaded(closing)
    assert cache.min_unuploaded_wal_offset() == floor
    for i in range(3, 9):  # past the capacity: the uploaded block is evicted, the active one is not
        wal.put(cache, batch(2, i))
    assert cache.read(1, 0, 3, 10**6) == [] and cache.first_offset(3) is None
    assert [b.base_offset for b in cache.read(2, 0, 9, 10**6)] == list(range(9))
    rest = cache.seal()
    assert rest is not None and sorted(rest.streams) == [2] and rest.block_id != closing.block_id
    # A block of nothing but closing streams is the active block sealed as it is.
    wal.put(cache, batch(4, 0))
    alone = cache.seal_streams({4})
    assert alone is not None and sorted(alone.streams) == [4] and cache.active.empty
