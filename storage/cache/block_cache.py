"""The block cache: a bounded LRU of decoded object data blocks for reads that miss the LogCache (DESIGN.md §7).

Keys are ``(object id, block position)``; objects are immutable, so an entry never goes stale (a deleted
object's blocks simply age out). A block is decoded once when loaded and kept as its batches plus their base
offsets, so a consumer reading a block in small pieces costs one binary search per fetch, not a re-parse.

Blocks loaded ahead of the reader (read-ahead) are flagged until first read; evicting one unread means the
read-ahead outran the cache, and ``on_readahead_evicted`` tells the reader so it can shrink its window.
Sizes are the blocks' encoded sizes (what a GET costs and roughly what they occupy).
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from storage.objects.format import IndexEntry
from storage.stream_record_batch import StreamRecordBatch

BlockKey = tuple[int, int]


@dataclass(eq=False, slots=True)
class CachedBlock:
    object_id: int
    entry: IndexEntry
    batches: list[StreamRecordBatch]
    offsets: list[int] = field(init=False)
    readahead: bool = False  # loaded ahead of its reader and not read yet
    readahead_hit: bool = False  # the latest ``get`` was the first read of a read-ahead block

    def __post_init__(self) -> None:
        self.offsets = [b.base_offset for b in self.batches]

    @property
    def size(self) -> int:
        return self.entry.size

    def index_of(self, offset: int) -> int:
        """Index of the first batch ending after ``offset``."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        if i < 0:
            return 0
        return i if self.batches[i].last_offset > offset else i + 1


@dataclass(slots=True)
class BlockCacheStats:
    size: int
    capacity: int
    blocks: int
    hits: int
    misses: int
    evictions: int
    readahead_wasted: int
    readahead_used: int


class BlockCache:
    def __init__(self, capacity: int, on_readahead_evicted: Callable[[int], None] | None = None) -> None:
        if capacity < 0:
            raise ValueError(f"block cache capacity must not be negative, got {capacity}")
        self._capacity = capacity
        self._blocks: OrderedDict[BlockKey, CachedBlock] = OrderedDict()
        self._size = 0
        self._on_readahead_evicted = on_readahead_evicted
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._wasted = 0
        self._readahead_used = 0

    def get(self, object_id: int, position: int) -> CachedBlock | None:
        block = self._blocks.get((object_id, position))
        if block is None:
            self._misses += 1
            return None
        self._hits += 1
        self._blocks.move_to_end((object_id, position))
        block.readahead_hit = block.readahead  # this read is the first use of a read-ahead block
        if block.readahead:
            self._readahead_used += 1
            block.readahead = False
        return block

    def contains(self, object_id: int, position: int) -> bool:
        return (object_id, position) in self._blocks

    def put(self, block: CachedBlock) -> None:
        """Adds (or refreshes) a block, evicting least recently used ones beyond the capacity. A block larger
        than the whole cache is not kept (the caller still has it for the current read)."""
        key = (block.object_id, block.entry.position)
        old = self._blocks.pop(key, None)
        if old is not None:
            self._size -= old.size
        if block.size > self._capacity:
            return
        self._blocks[key] = block
        self._size += block.size
        while self._size > self._capacity:
            _key, victim = self._blocks.popitem(last=False)
            self._size -= victim.size
            self._evictions += 1
            if victim.readahead:
                self._wasted += 1
                if self._on_readahead_evicted is not None:
                    self._on_readahead_evicted(victim.entry.stream_id)

    @property
    def free(self) -> int:
        return max(0, self._capacity - self._size)

    @property
    def size(self) -> int:
        return self._size

    @property
    def capacity(self) -> int:
        return self._capacity

    def stats(self) -> BlockCacheStats:
        return BlockCacheStats(
            self._size,
            self._capacity,
            len(self._blocks),
            self._hits,
            self._misses,
            self._evictions,
            self._wasted,
            self._readahead_used,
        )
