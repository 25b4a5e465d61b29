"""Reading committed stream data from object storage through the block cache (DESIGN.md §7).

The stream fetch path asks the LogCache first; whatever it cannot serve comes from here: the metadata says
which objects hold the offsets, the object reader supplies each object's index and whole data blocks (adjacent
blocks in one ranged GET), and decoded blocks are kept in the ``BlockCache``.

Read-ahead: a stream that keeps reading where its previous read ended is catching up sequentially. Each such
read that misses the cache, or is the first to use blocks loaded ahead, doubles the stream's read-ahead window
(from one block up to ``readahead_max``), so a long catch-up soon reads in few large GETs. A miss then also
loads that many bytes of the following blocks, and after each sequential read a background task keeps the
next window loading (into the following object too), but only while the cache has room for it. A random read,
or read-ahead blocks evicted before anyone read them, shrink the window back to nothing.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from storage.cache.block_cache import BlockCache, CachedBlock
from storage.errors import CorruptObjectError, ObjectNotFoundError
from storage.metadata.api import S3ObjectMetadata, StreamMetadata
from storage.objects import format as fmt
from storage.objects.format import IndexEntry
from storage.stream_record_batch import StreamRecordBatch

logger = logging.getLogger(__name__)

_OBJECTS_PER_LOOKUP = 4
_STALE_RETRIES = 2
_NO_END = 2**63 - 1


class BlockSource(Protocol):
    """What the read path needs from ``storage.objects.reader.ObjectReader``."""

    async def index(self, object_id: int, object_size: int | None = None, *, whole: bool = False) -> list[IndexEntry]:
        ...

    async def read_blocks(self, object_id: int, entries: Sequence[IndexEntry]) -> list[bytes]: ...

    def invalidate(self, object_id: int) -> None: ...

    def key(self, object_id: int) -> str: ...


@dataclass(slots=True)
class _ReadAhead:
    next_offset: int = -1
    window: int = 0  # bytes beyond the needed blocks to load on a miss


@dataclass(slots=True)
class ReadStats:
    object_reads: int = 0  # reads that needed object storage
    blocks_loaded: int = 0
    readahead_blocks: int = 0


class ObjectReadPath:
    def __init__(
        self,
        metadata: StreamMetadata,
        source: BlockSource,
        cache: BlockCache,
        *,
        block_size: int,
        readahead_max: int,
    ) -> None:
        self._metadata = metadata
        self._source = source
        self._cache = cache
        self._block_size = block_size
        self._readahead_max = readahead_max
        self._readahead: dict[int, _ReadAhead] = {}
        self._loading: dict[tuple[int, int], asyncio.Future[CachedBlock]] = {}
        self._prefetching: dict[int, asyncio.Task[None]] = {}
        self.stats = ReadStats()

    def readahead_evicted(self, stream_id: int) -> None:
        """Block-cache callback: read-ahead for ``stream_id`` loaded more than the cache could hold."""
        state = self._readahead.get(stream_id)
        if state is not None:
            state.window = 0

    def forget(self, stream_id: int) -> None:
        self._readahead.pop(stream_id, None)
        task = self._prefetching.pop(stream_id, None)
        if task is not None:
            task.cancel()

    def readahead_window(self, stream_id: int) -> int:
        state = self._readahead.get(stream_id)
        return state.window if state is not None else 0

    async def read(self, stream_id: int, start: int, end: int, max_bytes: int) -> list[StreamRecordBatch]:
        """Batches of ``stream_id`` from the one containing ``start`` towards ``end``, within ``max_bytes`` of
        payload (the first batch always). Stops early where committed objects end."""
        for attempt in range(_STALE_RETRIES + 1):
            try:
                return await self._read(stream_id, start, end, max_bytes)
            except ObjectNotFoundError as exc:
                # Compaction replaced an object between the metadata lookup and the GET: look up again.
                if attempt == _STALE_RETRIES:
                    raise
                logger.info("stream %d: %s; looking the objects up again", stream_id, exc)
        raise AssertionError("unreachable")

    async def _read(self, stream_id: int, start: int, end: int, max_bytes: int) -> list[StreamRecordBatch]:
        state = self._readahead.setdefault(stream_id, _ReadAhead())
        sequential = state.next_offset == start
        out: list[StreamRecordBatch] = []
        budget = max_bytes
        cursor = start
        grow = False  # a miss, or the first use of read-ahead blocks: reading ahead pays off, do more
        while cursor < end and (not out or budget > 0):
            objects = await self._metadata.get_objects(stream_id, cursor, end, _OBJECTS_PER_LOOKUP)
            if not objects:
                break
            before = cursor
            for obj in objects:
                obj_end = next((r.end_offset for r in obj.ranges if r.stream_id == stream_id), end)
                while cursor < min(end, obj_end) and (not out or budget > 0):
                    # Never past the object's committed range: an S3 WAL object committed in place may hold
                    # more of the stream than its range (storage/failover_copy.py).
                    batches, grow_here = await self._read_object(
                        stream_id, obj, cursor, min(end, obj_end), budget, not out, sequential
                    )
                    grow = grow or grow_here
                    if not batches and out:
                        break  # the next batch does not fit in what is left of max_bytes
                    if not batches:
                        raise CorruptObjectError(
                            f"object {obj.object_id} ({self._source.key(obj.object_id)}): metadata says it holds "
                            f"stream {stream_id} from offset {cursor} but its index has no such block"
                        )
                    for batch in batches:
                        budget -= batch.size
                    out.extend(batches)
                    cursor = out[-1].last_offset
                if cursor < min(end, obj_end):
                    break  # max_bytes reached inside this object
            if cursor == before:
                break  # the objects listed do not reach the cursor: nothing more is committed here
        if out:
            self.stats.object_reads += 1
            state.next_offset = out[-1].last_offset
        if not sequential:
            state.window = 0
        elif grow:
            state.window = min(self._readahead_max, max(self._block_size, 2 * state.window))
        if sequential and out and state.window > 0 and stream_id not in self._prefetching:
            task = asyncio.ensure_future(self._prefetch(stream_id, state.next_offset, state.window))
            self._prefetching[stream_id] = task
            task.add_done_callback(lambda done: self._prefetched(stream_id, done))
        return out

    async def _prefetch(self, stream_id: int, start: int, window: int) -> None:
        """Loads the next ``window`` bytes of blocks after ``start`` in the background (also from the following
        object), so a catch-up reader finds them cached instead of waiting for a GET on every miss."""
        cursor = start
        remaining = window
        for obj in await self._metadata.get_objects(stream_id, start, -1, 2):
            entries = await self._source.index(obj.object_id, obj.object_size)
            blocks = fmt.find_blocks(entries, stream_id, cursor, _NO_END, remaining)
            if not blocks:
                return
            wanted = [
                e
                for e in blocks
                if not self._cache.contains(obj.object_id, e.position)
                and (obj.object_id, e.position) not in self._loading
            ]
            if sum(e.size for e in wanted) > self._cache.free:
                return  # no room: read-ahead would only evict what the readers need
            if wanted:
                await self._load(obj.object_id, [], wanted)
            remaining -= sum(e.size for e in blocks)
            cursor = blocks[-1].end_offset
            if remaining <= 0:
                return

    def _prefetched(self, stream_id: int, task: asyncio.Task[None]) -> None:
        if self._prefetching.get(stream_id) is task:
            del self._prefetching[stream_id]
        if not task.cancelled() and task.exception() is not None:
            logger.debug(
                "stream %d: read-ahead failed (the reader will fetch on demand): %r", stream_id, task.exception()
            )

    async def close(self) -> None:
        """Cancels background read-ahead."""
        tasks = list(self._prefetching.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _read_object(  # noqa: PLR0917
        self,
        stream_id: int,
        obj: S3ObjectMetadata,
        cursor: int,
        end: int,
        budget: int,
        first: bool,
        sequential: bool,
    ) -> tuple[list[StreamRecordBatch], bool]:
        entries = await self._source.index(obj.object_id, obj.object_size, whole=True)
        # Payload budget -> block budget: blocks carry headers, so never undershoot what max_bytes allows.
        needed = fmt.find_blocks(entries, stream_id, cursor, end, budget)
        if not needed:
            return [], False
        blocks: dict[int, CachedBlock] = {}
        missing: list[IndexEntry] = []
        ahead_used = False
        for entry in needed:
            cached = self._cache.get(obj.object_id, entry.position)
            if cached is not None:
                blocks[entry.position] = cached
                ahead_used = ahead_used or cached.readahead_hit
            else:
                missing.append(entry)
        missed = bool(missing)
        if missing:
            room = self._cache.free - sum(e.size for e in missing)
            extra = self._readahead_entries(
                stream_id, obj.object_id, entries, needed[-1], sequential=sequential, room=room
            )
            loaded = await self._load(obj.object_id, missing, extra)
            blocks.update(loaded)
        result: list[StreamRecordBatch] = []
        remaining = budget
        for entry in needed:
            block = blocks[entry.position]
            for batch in block.batches[block.index_of(cursor) :]:
                if batch.base_offset >= end:
                    return result, missed or ahead_used
                if not (first and not result) and batch.size > remaining:
                    return result, missed or ahead_used
                result.append(batch)
                remaining -= batch.size
                cursor = batch.last_offset
        return result, missed or ahead_used

    def _readahead_entries(
        self,
        stream_id: int,
        object_id: int,
        entries: list[IndexEntry],
        last: IndexEntry,
        *,
        sequential: bool,
        room: int,
    ) -> list[IndexEntry]:
        """Blocks after ``last`` in the same object to load along with a miss, if read-ahead is on."""
        state = self._readahead.get(stream_id)
        window = state.window if state is not None and sequential else 0
        window = min(window + (self._block_size if sequential else 0), self._readahead_max)
        if window <= 0 or room < window:
            return []
        extra: list[IndexEntry] = []
        total = 0
        i = bisect.bisect_right(entries, (last.stream_id, last.start_offset), key=_entry_start)
        while i < len(entries) and total < window:
            entry = entries[i]
            if entry.stream_id != stream_id:
                break
            if not self._cache.contains(object_id, entry.position):
                extra.append(entry)
                total += entry.size
            i += 1
        return extra

    async def _load(self, object_id: int, missing: list[IndexEntry], extra: list[IndexEntry]) -> dict[int, CachedBlock]:
        """Loads ``missing`` (and ``extra`` read-ahead) blocks with one reader call, sharing loads in flight."""
        out: dict[int, CachedBlock] = {}
        waits: list[tuple[int, asyncio.Future[CachedBlock]]] = []
        to_fetch: list[IndexEntry] = []
        for entry in missing:
            pending = self._loading.get((object_id, entry.position))
            if pending is not None:
                waits.append((entry.position, pending))
            else:
                to_fetch.append(entry)
        ahead = [e for e in extra if (object_id, e.position) not in self._loading]
        fetch_all = sorted(to_fetch + ahead, key=lambda e: e.position)
        loop = asyncio.get_running_loop()
        futures = {e.position: loop.create_future() for e in fetch_all}
        for position, future in futures.items():
            self._loading[(object_id, position)] = future
        try:
            if fetch_all:
                datas = await self._source.read_blocks(object_id, fetch_all)
                where = f"object {object_id} ({self._source.key(object_id)})"
                readahead_positions = {e.position for e in ahead}
                for i, entry in enumerate(fetch_all):
                    data, datas[i] = datas[i], b""  # drop each raw block once decoded: peak ~ one copy, not two
                    block = CachedBlock(object_id, entry, list(fmt.parse_block(data, entry, where)))
                    block.readahead = entry.position in readahead_positions
                    self._cache.put(block)
                    futures[entry.position].set_result(block)
                    if not block.readahead:
                        out[entry.position] = block
                self.stats.blocks_loaded += len(fetch_all)
                self.stats.readahead_blocks += len(ahead)
        except BaseException as exc:
            for future in futures.values():
                if not future.done():
                    future.set_exception(exc)
                    future.exception()
            if isinstance(exc, ObjectNotFoundError):
                self._source.invalidate(object_id)
            raise
        finally:
            for position in futures:
                self._loading.pop((object_id, position), None)
        for position, pending in waits:
            out[position] = await asyncio.shield(pending)
        return out


def _entry_start(entry: IndexEntry) -> tuple[int, int]:
    return entry.stream_id, entry.start_offset
