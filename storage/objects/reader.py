"""The async object reader: decides which byte ranges of an object to fetch and hands them to the sans-I/O
parsers in ``storage.objects.format``.

An object's index is read with one tail GET that guesses the index size; if the index starts before the
fetched window, one more GET fetches exactly the missing index bytes. Parsed indexes are kept in a bounded LRU
because every read of an object needs them and they never change (objects are immutable until deleted).
An object of at most :data:`WHOLE_OBJECT_BYTES` that a fetch is about to read is fetched whole by that one GET (not
when compaction plans over many objects: it bounds its own memory), and its bytes are kept a while
(a bounded LRU of :data:`KEPT_BYTES`) for the block reads that follow: a cold read of a small object, such as the
one a moved partition's source uploads as it closes, which its target's open reads at once, costs one round trip
instead of two.
Concurrent readers of the same object share one in-flight index request, so a burst of fetches that all land on
a freshly committed object costs one GET, not one per fetch.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from storage.errors import CorruptObjectError
from storage.objects import format as fmt
from storage.objects.format import Footer, IndexEntry
from storage.objectstore.base import ObjectStore
from storage.stream_record_batch import StreamRecordBatch

logger = logging.getLogger(__name__)

#: Objects up to this size are fetched whole when their index is read (one GET for the index and the blocks).
WHOLE_OBJECT_BYTES = 1024 * 1024
#: How many bytes of objects fetched whole are kept for the block reads that follow.
KEPT_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ObjectDump:
    """What ``fjord object dump`` shows of an object: where it is, its footer and its index."""

    key: str
    size: int
    footer: Footer
    entries: list[IndexEntry]


class ObjectReader:
    """Reads objects of one namespace from ``store``. Safe to share between tasks of one event loop."""

    def __init__(
        self,
        store: ObjectStore,
        namespace: str,
        index_cache_entries: int = 4096,
        *,
        whole_object_bytes: int | None = None,
    ) -> None:
        """``whole_object_bytes``: objects up to this size are fetched whole with their index (0: never; None:
        :data:`WHOLE_OBJECT_BYTES`)."""
        if index_cache_entries < 0:
            raise ValueError(f"index_cache_entries must not be negative, got {index_cache_entries}")
        self._store = store
        self._namespace = namespace
        self._capacity = index_cache_entries
        self._whole_object_bytes = WHOLE_OBJECT_BYTES if whole_object_bytes is None else whole_object_bytes
        self._indexes: OrderedDict[int, list[IndexEntry]] = OrderedDict()
        self._loading: dict[int, asyncio.Task[list[IndexEntry]]] = {}
        #: Small objects fetched whole by their index read, by key, least recently used first.
        self._kept: OrderedDict[str, bytes] = OrderedDict()
        self._kept_bytes = 0

    @property
    def store(self) -> ObjectStore:
        return self._store

    def key(self, object_id: int) -> str:
        return fmt.object_key(object_id, self._namespace)

    def where(self, key: str) -> str:
        """How errors and logs name the object at ``key``."""
        return f"object {key} in {self._store.name}"

    async def index(self, object_id: int, object_size: int | None = None, *, whole: bool = False) -> list[IndexEntry]:
        """The object's index entries, sorted by (stream, start offset).

        ``object_size`` is the size recorded in metadata; when given, an object of any other size is reported
        as truncated or corrupt instead of being parsed. ``whole``: a reader about to read blocks of this one object
        (a fetch, not compaction's planning over many) has a small object fetched whole and kept for them.
        """
        cached = self._indexes.get(object_id)
        if cached is not None:
            self._indexes.move_to_end(object_id)
            return cached
        task = self._loading.get(object_id)
        if task is None:
            task = asyncio.ensure_future(self._load_index(object_id, object_size, whole))
            self._loading[object_id] = task
            task.add_done_callback(lambda done: self._index_loaded(object_id, done))
        # shield: one caller giving up (a fetch timing out) must not cancel the load the others wait for.
        return await asyncio.shield(task)

    def _index_loaded(self, object_id: int, task: asyncio.Task[list[IndexEntry]]) -> None:
        # Retrieving the exception here also keeps asyncio from logging it when every waiter gave up.
        failed = task.cancelled() or task.exception() is not None
        if self._loading.get(object_id) is not task:
            return  # invalidated while loading: the object is gone, do not cache what was read
        del self._loading[object_id]
        if failed or self._capacity == 0:
            return
        self._indexes[object_id] = task.result()
        self._indexes.move_to_end(object_id)
        while len(self._indexes) > self._capacity:
            self._indexes.popitem(last=False)

    async def _load_index(self, object_id: int, object_size: int | None, whole: bool) -> list[IndexEntry]:
        key = self.key(object_id)
        _footer, entries, _size, body = await self._read_index(key, object_size, keep=whole)
        if body is not None and self._loading.get(object_id) is asyncio.current_task():
            self._keep(key, body)  # not once invalidated meanwhile: the object is gone
        return entries

    def _keep(self, key: str, body: bytes) -> None:
        old = self._kept.pop(key, None)
        self._kept_bytes += len(body) - (len(old) if old is not None else 0)
        self._kept[key] = body
        while self._kept_bytes > KEPT_BYTES and self._kept:
            _, dropped = self._kept.popitem(last=False)
            self._kept_bytes -= len(dropped)

    async def _read_index(
        self, key: str, object_size: int | None, *, keep: bool = False
    ) -> tuple[Footer, list[IndexEntry], int, bytes | None]:
        """The object's footer, index and size, and with ``keep`` a small object's (its size known) whole bytes,
        fetched in the same GET for the block reads that follow (None: not fetched whole)."""
        where = self.where(key)
        whole = keep and object_size is not None and object_size <= self._whole_object_bytes
        if whole and object_size is not None:
            guess = object_size
        else:
            guess = fmt.index_tail_guess(object_size) if object_size is not None else fmt.index_tail_guess(1 << 30)
        tail, size = await self._store.get_tail(key, max(guess, fmt.FOOTER_SIZE))
        if object_size is not None and size != object_size:
            raise CorruptObjectError(
                f"{where}: object is {size} bytes but its metadata says {object_size}; it is truncated or was "
                f"overwritten"
            )
        footer = fmt.parse_footer(tail, size, where)
        window_start = size - len(tail)
        body = tail if whole and window_start == 0 else None
        index_end = footer.index_position + footer.index_length
        if footer.index_position >= window_start:
            index_bytes = tail[footer.index_position - window_start : index_end - window_start]
        else:
            logger.debug(
                "%s: index of %d bytes starts before the %d-byte tail read; fetching it exactly",
                where,
                footer.index_length,
                len(tail),
            )
            index_bytes = await self._store.get(key, footer.index_position, index_end)
        return footer, fmt.parse_index(index_bytes, footer, where), size, body

    def invalidate(self, object_id: int) -> None:
        """Forgets the object's index (the object was deleted or replaced by compaction)."""
        self._indexes.pop(object_id, None)
        self._loading.pop(object_id, None)
        body = self._kept.pop(self.key(object_id), None)
        if body is not None:
            self._kept_bytes -= len(body)

    async def read_blocks(self, object_id: int, entries: Sequence[IndexEntry]) -> list[bytes]:
        """Each entry's block bytes, in the order given; runs of adjacent blocks are fetched with one GET."""
        return await self.read_blocks_at(self.key(object_id), entries)

    async def read_blocks_at(self, key: str, entries: Sequence[IndexEntry]) -> list[bytes]:
        """``read_blocks`` for an object addressed by key (objects outside this reader's namespace, the CLI)."""
        where = self.where(key)
        runs: list[list[IndexEntry]] = []
        for entry in entries:
            if runs and runs[-1][-1].position + runs[-1][-1].size == entry.position:
                runs[-1].append(entry)
            else:
                runs.append([entry])
        body = self._kept.get(key)
        if body is not None:
            self._kept.move_to_end(key)
        fetched = await asyncio.gather(*(
            _slice(body, run[0].position, _run_end(run)) if body is not None and _run_end(run) <= len(body)
            else self._store.get(key, run[0].position, _run_end(run))
            for run in runs
        ))
        out: list[bytes] = []
        for run, data in zip(runs, fetched, strict=True):
            start, end = run[0].position, _run_end(run)
            if len(data) != end - start:
                raise CorruptObjectError(
                    f"{where}: expected {end - start} bytes of data blocks at byte {start}, got {len(data)}; "
                    f"the object is truncated"
                )
            if len(run) == 1:
                out.append(data)
                continue
            view = memoryview(data)
            out.extend(bytes(view[e.position - start : e.position - start + e.size]) for e in run)
        return out

    async def read_range(  # noqa: PLR0917 - positional signature other modules already call
        self,
        object_id: int,
        stream_id: int,
        start_offset: int,
        end_offset: int,
        max_bytes: int,
        object_size: int | None = None,
    ) -> list[StreamRecordBatch]:
        """The batches of ``stream_id`` from the one containing ``start_offset`` up to ``end_offset``, reading
        whole blocks until ``max_bytes`` of blocks (the first block always counts as progress).

        Callers ask for offsets that metadata says the object holds, so an index without a block of the stream
        at ``start_offset`` is damaged: that raises CorruptObjectError instead of answering "no data".
        """
        if start_offset >= end_offset:
            return []
        entries = await self.index(object_id, object_size, whole=True)
        blocks = fmt.find_blocks(entries, stream_id, start_offset, end_offset, max_bytes)
        where = self.where(self.key(object_id))
        if not blocks:
            raise CorruptObjectError(
                f"{where}: the index holds no block of stream {stream_id} containing offset {start_offset}"
            )
        datas = await self.read_blocks(object_id, blocks)
        out: list[StreamRecordBatch] = []
        for entry, data in zip(blocks, datas, strict=True):
            for batch in fmt.parse_block(data, entry, where):
                if batch.last_offset <= start_offset:
                    continue
                if batch.base_offset >= end_offset:
                    return out
                out.append(batch)
        return out

    async def dump(self, key: str) -> ObjectDump:
        """Footer and index of the object at ``key`` (any key, not only this namespace's); not cached."""
        footer, entries, size, _ = await self._read_index(key, None)
        return ObjectDump(key, size, footer, entries)


async def _slice(body: bytes, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of an object kept whole, in place of its GET."""
    return body[start:end]


def _run_end(run: Sequence[IndexEntry]) -> int:
    return run[-1].position + run[-1].size
