"""The LogCache: durable appends not yet in object storage, and the recent tail for readers (DESIGN.md §6.2-3).

Appended batches go into the *active block*. A block is sealed (and handed to the upload pipeline) when it
holds ``wal_upload_threshold`` payload bytes, when the upload interval passes, or when an upload is forced. An
uploaded block stays readable until the cache holds more than ``wal_cache_size`` bytes, then the oldest uploaded
blocks are evicted first. Data that is not uploaded yet is never evicted: when it alone fills the cache,
``reserve`` makes appends wait until an upload frees room (backpressure instead of unbounded memory).

Readers see each stream through a per-stream view (base offsets + batches in offset order) so a lookup is one
binary search, never a scan. All sizes are payload bytes. Sans-I/O: no tasks, no timers, only state and the
futures that backpressure hands out.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import logging
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

from storage.errors import StorageError
from storage.stream_record_batch import StreamRecordBatch

logger = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class CacheBlock:
    """A group of appended batches uploaded together. Per stream the batches are in offset order."""

    block_id: int
    streams: dict[int, list[StreamRecordBatch]] = field(default_factory=dict)
    size: int = 0
    min_wal_offset: int | None = None  # smallest WAL position of a record in the block
    wal_end: int = 0  # WAL position just past the block's last record: trim target once uploaded
    created: float = field(default_factory=time.monotonic)
    sealed: bool = False
    uploaded: bool = False

    def add(self, batch: StreamRecordBatch, wal_offset: int, wal_next: int) -> None:
        streams = self.streams
        batches = streams.get(batch.stream_id)
        if batches is not None:
            batches.append(batch)
        else:
            if not streams:
                self.created = time.monotonic()  # age counts from the first append, for the upload interval
            streams[batch.stream_id] = [batch]
        self.size += len(batch.payload)
        if self.min_wal_offset is None or wal_offset < self.min_wal_offset:
            self.min_wal_offset = wal_offset
        self.wal_end = max(self.wal_end, wal_next)

    @property
    def empty(self) -> bool:
        return not self.streams

    def stream_sizes(self) -> dict[int, int]:
        return {sid: sum(b.size for b in batches) for sid, batches in self.streams.items()}

    def sorted_streams(self) -> Iterator[tuple[int, list[StreamRecordBatch]]]:
        """(stream id, batches) by stream id, as objects are laid out."""
        for stream_id in sorted(self.streams):
            yield stream_id, self.streams[stream_id]


class _StreamView:
    """One stream's cached batches in offset order (parallel lists, so lookups bisect the offsets)."""

    __slots__ = ("batches", "block_ids", "head", "offsets")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.batches: list[StreamRecordBatch] = []
        self.block_ids: list[int] = []
        self.head = 0

    def append(self, batch: StreamRecordBatch, block_id: int) -> None:
        if self.head < len(self.batches) and self.batches[-1].last_offset != batch.base_offset:
            # Not a continuation (the stream was reopened elsewhere and moved on): older entries would leave a
            # hole in what the view claims to cover, so forget them for reading.
            self.clear()
        self.offsets.append(batch.base_offset)
        self.batches.append(batch)
        self.block_ids.append(block_id)

    def clear(self) -> None:
        self.offsets.clear()
        self.batches.clear()
        self.block_ids.clear()
        self.head = 0

    def evict_through(self, block_id: int) -> None:
        n = len(self.block_ids)
        while self.head < n and self.block_ids[self.head] <= block_id:
            self.head += 1
        self._compact()

    def _compact(self) -> None:
        # Evicted batches must not stay referenced here, or the cache would hold more than it accounts for.
        # Evictions are per block (megabytes), so shifting the lists then costs little.
        if self.head:
            del self.offsets[: self.head]
            del self.batches[: self.head]
            del self.block_ids[: self.head]
            self.head = 0

    def drop_before(self, offset: int) -> None:
        n = len(self.batches)
        while self.head < n and self.batches[self.head].last_offset <= offset:
            self.head += 1
        self._compact()

    @property
    def empty(self) -> bool:
        return self.head >= len(self.batches)

    def first_offset(self) -> int | None:
        return None if self.empty else self.offsets[self.head]

    def end_offset(self) -> int | None:
        return None if self.empty else self.batches[-1].last_offset

    def read(self, start: int, end: int, max_bytes: int) -> list[StreamRecordBatch]:
        i = bisect.bisect_right(self.offsets, start, lo=self.head) - 1
        if i < self.head:
            return []
        if self.batches[i].last_offset <= start:
            i += 1
        out: list[StreamRecordBatch] = []
        budget = max_bytes
        n = len(self.batches)
        while i < n:
            batch = self.batches[i]
            if batch.base_offset >= end or (out and batch.size > budget):
                break
            out.append(batch)
            budget -= batch.size
            i += 1
        return out


@dataclass(slots=True)
class LogCacheStats:
    size: int  # payload bytes held (uploaded and not)
    unuploaded: int  # payload bytes not yet in object storage (including reservations)
    blocks: int
    waiting_appends: int


class LogCache:
    """See the module docstring. ``capacity`` is ``wal_cache_size``, ``block_threshold`` ``wal_upload_threshold``."""

    def __init__(
        self,
        capacity: int,
        block_threshold: int,
        max_streams_per_block: int = 20_000,
        on_full: Callable[[], None] | None = None,
    ) -> None:
        """``on_full`` is called when an append has to wait for room and nothing else is about to land in the
        active block: the owner must seal and upload it, or the waiting append could never be admitted."""
        if capacity < block_threshold or block_threshold <= 0:
            raise ValueError(
                f"LogCache capacity {capacity} must be at least the block threshold {block_threshold} (> 0)"
            )
        self._capacity = capacity
        self._threshold = block_threshold
        self._max_streams = max_streams_per_block
        self._on_full = on_full
        self._error: StorageError | None = None
        self._next_block_id = 0
        self._blocks: collections.deque[CacheBlock] = collections.deque()
        self._active = self._new_block()
        self._views: dict[int, _StreamView] = {}
        self._size = 0
        self._unuploaded = 0
        self._reserved = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    def _new_block(self) -> CacheBlock:
        block = CacheBlock(self._next_block_id)
        self._next_block_id += 1
        self._blocks.append(block)
        return block

    # ----------------------------------------------------------------------------------------- backpressure

    def try_reserve(self, size: int) -> bool:
        """Reserves ``size`` at once if it fits and nobody waits before it (the append path's usual case, without
        a coroutine); False if the caller must ``await reserve(size)``."""
        if self._error is None and not self._waiters and self._fits(size):
            self._reserved += size
            return True
        return False

    async def reserve(self, size: int) -> None:
        """Waits until ``size`` more unuploaded bytes fit, in FIFO order. A batch larger than the whole cache
        is admitted once nothing else is pending, so it cannot wait forever."""
        if self._error is not None:
            raise self._error
        if self.try_reserve(size):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((size, future))
        if self._reserved == 0 and self._on_full is not None:
            self._on_full()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.exception() is None:
                self._reserved -= size  # admitted just as we were cancelled: give the room back
            else:
                self._waiters = collections.deque(w for w in self._waiters if w[1] is not future)
            self._wake()
            raise

    def _fits(self, size: int) -> bool:
        pending = self._unuploaded + self._reserved
        return pending == 0 or pending + size <= self._capacity

    def _wake(self) -> None:
        while self._waiters:
            size, future = self._waiters[0]
            if future.done():
                self._waiters.popleft()
                continue
            if not self._fits(size):
                return
            self._waiters.popleft()
            self._reserved += size
            future.set_result(None)

    def fail(self, error: StorageError) -> None:
        """Uploads can no longer happen (the node is fenced): waiting and future appends fail with ``error``
        instead of waiting for room that will never come."""
        self._error = error
        while self._waiters:
            _size, future = self._waiters.popleft()
            if not future.done():
                future.set_exception(error)

    def release(self, size: int) -> None:
        """Gives back a reservation whose append failed."""
        self._reserved -= size
        self._wake()

    # --------------------------------------------------------------------------------------------- writing

    def put(
        self, batch: StreamRecordBatch, wal_offset: int, wal_next: int, *, reserved: bool = True
    ) -> CacheBlock | None:
        """Adds a durable batch; returns the block it sealed if the active block reached the threshold."""
        size = len(batch.payload)
        if reserved:
            self._reserved -= size
        active = self._active
        active.add(batch, wal_offset, wal_next)
        self._size += size
        self._unuploaded += size
        view = self._views.get(batch.stream_id)
        if view is None:
            view = self._views[batch.stream_id] = _StreamView()
        view.append(batch, active.block_id)
        if self._size > self._capacity:
            self._evict()
        if active.size >= self._threshold or len(active.streams) >= self._max_streams:
            return self.seal()
        if self._waiters and self._reserved == 0:
            return self.seal()  # appends wait for room and none is in flight: upload what there is
        return None

    def seal(self) -> CacheBlock | None:
        """Seals the active block (if it holds anything) and starts a new one; returns the sealed block."""
        active = self._active
        if active.empty:
            return None
        active.sealed = True
        self._active = self._new_block()
        return active

    def seal_streams(self, stream_ids: Collection[int]) -> CacheBlock | None:
        """Seals the active block's batches of ``stream_ids`` alone (streams closing, which take no more appends)
        into a block of their own, the rest staying in the active block; returns that block (None: they have
        nothing there). A closing partition's upload, which its producer waits for, then carries its own records
        rather than every partition's since the last upload. The new block takes the active block's place in the
        order and its id, which the closing streams' cached batches name (evicting it evicts only theirs); the
        active block takes a new id, which evicts the others' batches it holds when its turn comes. Both keep the
        active block's WAL bounds, so the WAL is trimmed past neither before both are uploaded."""
        active = self._active
        moved = {sid: active.streams.pop(sid) for sid in stream_ids if sid in active.streams}
        if not moved:
            return None
        if active.empty:
            active.streams.update(moved)
            return self.seal()
        size = sum(len(b.payload) for batches in moved.values() for b in batches)
        block = CacheBlock(active.block_id, moved, size, min_wal_offset=active.min_wal_offset,
                           wal_end=active.wal_end, created=active.created, sealed=True)
        active.size -= size
        active.block_id = self._next_block_id
        self._next_block_id += 1
        self._blocks.insert(len(self._blocks) - 1, block)  # the active block is the last
        return block

    @property
    def active(self) -> CacheBlock:
        return self._active

    def mark_uploaded(self, block: CacheBlock) -> None:
        """The block is committed in object storage: it may now be evicted, and its bytes no longer count
        against backpressure."""
        if block.uploaded:
            return
        block.uploaded = True
        self._unuploaded -= block.size
        self._evict()
        self._wake()

    def _evict(self) -> None:
        while self._size > self._capacity and self._blocks and self._blocks[0].uploaded:
            block = self._blocks.popleft()
            self._size -= block.size
            for stream_id in block.streams:
                view = self._views.get(stream_id)
                if view is not None:
                    view.evict_through(block.block_id)
                    if view.empty:
                        del self._views[stream_id]
            logger.debug("evicted uploaded cache block %d (%d bytes)", block.block_id, block.size)

    def min_unuploaded_wal_offset(self) -> int | None:
        """The smallest WAL position still needed (its record is not in object storage yet)."""
        floors = [b.min_wal_offset for b in self._blocks if not b.uploaded and b.min_wal_offset is not None]
        return min(floors) if floors else None

    def unuploaded_blocks(self) -> list[CacheBlock]:
        return [b for b in self._blocks if not b.uploaded and not b.empty]

    # --------------------------------------------------------------------------------------------- reading

    def first_offset(self, stream_id: int) -> int | None:
        """The first offset of ``stream_id`` the cache can serve, or None if it holds none."""
        view = self._views.get(stream_id)
        return view.first_offset() if view is not None else None

    def end_offset(self, stream_id: int) -> int | None:
        view = self._views.get(stream_id)
        return view.end_offset() if view is not None else None

    def read(self, stream_id: int, start: int, end: int, max_bytes: int) -> list[StreamRecordBatch]:
        """Batches from the one containing ``start`` up to ``end`` within ``max_bytes`` (the first batch is
        always included). Empty if the cache does not hold ``start``."""
        view = self._views.get(stream_id)
        if view is None or view.empty:
            return []
        return view.read(start, end, max_bytes)

    def trim(self, stream_id: int, new_start: int) -> None:
        """Stops serving the stream's batches that end at or before ``new_start`` (they are trimmed). Blocks
        still upload them: commits must continue each stream's committed end without a hole."""
        view = self._views.get(stream_id)
        if view is not None:
            view.drop_before(new_start)
            if view.empty:
                del self._views[stream_id]

    def forget(self, stream_id: int) -> None:
        """Stops serving reads for the stream (closed or deleted here); blocks still upload its data."""
        self._views.pop(stream_id, None)

    # ----------------------------------------------------------------------------------------------- stats

    @property
    def size(self) -> int:
        return self._size

    @property
    def capacity(self) -> int:
        return self._capacity

    def stats(self) -> LogCacheStats:
        return LogCacheStats(
            self._size,
            self._unuploaded + self._reserved,
            sum(1 for b in self._blocks if not b.empty),
            len(self._waiters),
        )
