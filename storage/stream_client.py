"""``Stream`` and the stream client over the engine's WAL, caches, upload pipeline and metadata (DESIGN.md §3).

Append: offsets are assigned synchronously when ``append`` is called, then the batch waits for LogCache room
(backpressure), goes to the WAL, and once durable enters the LogCache. Batches enter the cache and advance
``confirm_offset`` strictly in offset order, even if the WAL were to acknowledge out of order, so a reader
never sees a hole. The append's awaitable completes when its batch is confirmed.

Fetch: the LogCache serves the tail; older offsets come from object storage through the read path; a fetch
that starts in objects and continues in the cache is stitched together seamlessly.

The engine supplies the I/O through the small ``StreamIO`` protocol, so this module holds only stream logic.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from storage.errors import (
    OffsetOutOfRangeError,
    StorageError,
    StreamFencedError,
    StreamNotFoundError,
    StreamNotOpenedError,
)
from storage.metadata.api import NodeIdentity, StreamClose, StreamMetadata
from storage.stream_api import CommittedRecords, FetchResult, Stream
from storage.stream_record_batch import StreamRecordBatch
from storage.tail_recovery import RecoveringStreams
from storage.wal.base import WALRecord

logger = logging.getLogger(__name__)


class StreamIO(Protocol):
    """The engine services a stream uses."""

    @property
    def node(self) -> NodeIdentity: ...

    @property
    def metadata(self) -> StreamMetadata: ...

    def refusal(self) -> StorageError | None:
        """Why the WAL would refuse an append now (see ``WriteAheadLog.refusal``), or None."""
        ...

    async def write(self, batch: StreamRecordBatch) -> WALRecord:
        """Waits for cache room, appends to the WAL, returns once durable (gives the room back if it fails)."""
        ...

    async def writes_begun(self) -> None:
        """``WriteAheadLog.writes_begun`` of the engine's WAL."""
        ...

    def cache(self, batch: StreamRecordBatch, record: WALRecord) -> None:
        """Inserts a durable batch into the LogCache (may seal a block for upload)."""
        ...

    def discard(self, record: WALRecord) -> None:
        """A durable record that will never be cached (its stream failed): the WAL may drop it."""
        ...

    def cache_read(self, stream_id: int, start: int, end: int, max_bytes: int) -> list[StreamRecordBatch]: ...

    def cache_hit(self) -> None:
        """A fetch was served from the LogCache alone (a fetch that needed objects is counted by the read path,
        the cache's hand-over included, so it is not also a hit)."""
        ...

    def cache_first_offset(self, stream_id: int) -> int | None: ...

    def cache_end_offset(self, stream_id: int) -> int | None: ...

    def cache_trim(self, stream_id: int, new_start: int) -> None: ...

    def forget(self, stream_id: int) -> None:
        """Stops serving the stream's reads from what this node cached of it (the LogCache's view, the read
        path's read-ahead); its blocks still upload."""
        ...

    async def object_read(self, stream_id: int, start: int, end: int, max_bytes: int) -> list[StreamRecordBatch]: ...

    async def flush(self, stream_id: int | None, closes: Sequence[StreamClose] = ()) -> bool:
        """Uploads and commits everything appended so far (forced upload); True if ``closes`` were closed in its
        commit (``StorageEngine._flush``)."""
        ...

    def stream_closed(self, stream: StorageStream) -> None: ...


_OPEN, _CLOSING, _CLOSED = "open", "closing", "closed"


class StorageStream:
    """One opened stream. Create through ``StreamClientImpl.open_stream``."""

    def __init__(
        self, io: StreamIO, stream_id: int, epoch: int, start_offset: int, next_offset: int, *, uploaded_offset: int
    ) -> None:
        self._io = io
        self._stream_id = stream_id
        self._epoch = epoch
        self._start = start_offset
        self._next = next_offset
        self._confirm = next_offset
        self._uploaded = uploaded_offset
        self._state = _OPEN
        self._failure: BaseException | None = None
        self._inflight: set[asyncio.Task[int]] = set()
        self._durable: dict[int, tuple[StreamRecordBatch, WALRecord]] = {}
        self._confirmed: dict[int, asyncio.Future[None]] = {}
        # Resolved (and replaced) when confirm_offset advances: one future shared by every long-polling reader of
        # the stream, created only while someone waits, so an append wakes them all with one set_result.
        self._appended: asyncio.Future[None] | None = None
        self._waiting = 0  # wait_for_append calls waiting on ``_appended``
        self._close_task: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"StorageStream(id={self._stream_id}, epoch={self._epoch}, [{self._start}, {self._confirm}))"

    @property
    def stream_id(self) -> int:
        return self._stream_id

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def confirm_offset(self) -> int:
        return self._confirm

    @property
    def next_offset(self) -> int:
        return self._next

    @property
    def uploaded_offset(self) -> int:
        return self._uploaded

    def committed(self, end_offset: int) -> None:
        """An upload committed this stream up to ``end_offset`` (the engine tells, before its upload listeners)."""
        self._uploaded = max(self._uploaded, end_offset)

    @property
    def closed(self) -> bool:
        return self._state == _CLOSED

    # ---------------------------------------------------------------------------------------------- append

    def append(self, payload: bytes, count: int) -> Awaitable[int]:
        if self._failure is not None:
            raise StreamFencedError(f"stream {self._stream_id}: an earlier append failed: {self._failure}")
        if self._state != _OPEN:
            raise StreamNotOpenedError(f"stream {self._stream_id} is {self._state}, it cannot be appended to")
        if count <= 0:
            raise ValueError(f"stream {self._stream_id}: append count must be positive, got {count}")
        refused = self._io.refusal()
        if refused is not None:
            # Before the offsets are taken: the stream stays writable and the caller may retry the same append.
            raise refused
        batch = StreamRecordBatch(self._stream_id, self._epoch, self._next, count, payload)
        self._next += count
        task = asyncio.ensure_future(self._append(batch))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return task

    async def writes_begun(self) -> None:
        """``Stream.writes_begun``: the appends' tasks take their first step (their batches reach the WAL, unless
        the cache has no room for them yet), then the WAL's writer has taken them up."""
        if self._inflight:
            await asyncio.sleep(0)
        await self._io.writes_begun()

    async def _append(self, batch: StreamRecordBatch) -> int:
        try:
            record = await self._io.write(batch)
        except BaseException as exc:
            self._fail(exc)
            raise
        base = batch.base_offset
        if self._failure is not None:
            # An earlier append failed while this one was in the WAL: it can never be confirmed, and the WAL must
            # not keep waiting for it to reach the cache.
            self._io.discard(record)
            raise StreamFencedError(
                f"stream {self._stream_id}: append at offset {base} lost its predecessor: {self._failure}"
            )
        self._durable[base] = (batch, record)
        self._drain()
        if self._confirm >= batch.last_offset:
            return base  # confirmed by its own drain: the usual case, no future needed
        # An earlier append is still in the WAL: its drain (or its failure) settles this one.
        confirmed = asyncio.get_running_loop().create_future()
        self._confirmed[base] = confirmed
        await confirmed
        return base

    def _drain(self) -> None:
        """Moves durable batches into the cache in offset order and advances ``confirm_offset``."""
        advanced = False
        while self._confirm in self._durable:
            batch, record = self._durable.pop(self._confirm)
            self._io.cache(batch, record)
            self._confirm = batch.last_offset
            future = self._confirmed.pop(batch.base_offset, None)
            if future is not None and not future.done():
                future.set_result(None)
            advanced = True
        if advanced and self._waiting:
            self._wake_waiters()

    def _fail(self, exc: BaseException) -> None:
        """A WAL append failed: offsets after it can never be confirmed, so the stream stops accepting writes."""
        if self._failure is None:
            self._failure = exc
            log = logger.info if isinstance(exc, asyncio.CancelledError) else logger.error
            log("stream %d epoch %d: WAL append failed, stream is unwritable: %r", self._stream_id, self._epoch, exc)
        for offset, future in list(self._confirmed.items()):
            if offset >= self._confirm and not future.done():
                future.set_exception(
                    StreamFencedError(
                        f"stream {self._stream_id}: append at offset {offset} lost its predecessor: {exc}"
                    )
                )
                future.exception()
        for _batch, record in self._durable.values():
            self._io.discard(record)
        self._durable.clear()

    # ----------------------------------------------------------------------------------------------- fetch

    async def fetch(self, start_offset: int, end_offset: int, max_bytes: int) -> FetchResult:
        if start_offset < self._start or start_offset > self._confirm:
            raise OffsetOutOfRangeError(
                f"stream {self._stream_id}: offset {start_offset} is outside [{self._start}, {self._confirm})"
            )
        end = min(end_offset, self._confirm)
        if start_offset >= end:
            return FetchResult([], True)
        max_bytes = max(0, max_bytes)
        first_cached = self._io.cache_first_offset(self._stream_id)
        if first_cached is not None and first_cached <= start_offset:
            cached = self._io.cache_read(self._stream_id, start_offset, end, max_bytes)
            if cached:
                self._io.cache_hit()
            return FetchResult(cached, True)
        object_end = end if first_cached is None else min(end, first_cached)
        batches = await self._io.object_read(self._stream_id, start_offset, object_end, max_bytes)
        if not batches:
            raise StorageError(
                f"stream {self._stream_id}: offset {start_offset} is neither cached nor found in object storage"
            )
        tail = batches[-1].last_offset
        remaining = max_bytes - sum(b.size for b in batches)
        if first_cached is not None and first_cached <= tail < end and remaining > 0:
            # Seamless hand-over: the rest comes from the cache, within what is left of max_bytes.
            for batch in self._io.cache_read(self._stream_id, tail, end, remaining):
                if batch.size > remaining or batch.base_offset < tail:
                    break
                batches.append(batch)
                remaining -= batch.size
        return FetchResult(batches, False)

    async def wait_for_append(self, offset: int, timeout: float) -> bool:
        if self._confirm > offset:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        while self._confirm <= offset and self._state == _OPEN:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            signal = self._appended
            if signal is None or signal.done():
                signal = self._appended = loop.create_future()
            self._waiting += 1
            try:
                # asyncio.wait neither wraps the future in a task (wait_for would) nor cancels it on timeout or
                # cancellation, so the other readers keep waiting on it.
                await asyncio.wait((signal,), timeout=remaining)
            finally:
                self._waiting -= 1
        return self._confirm > offset

    # -------------------------------------------------------------------------------------------- lifecycle

    async def trim(self, new_start_offset: int) -> None:
        if self._state != _OPEN:
            raise StreamNotOpenedError(f"stream {self._stream_id} is {self._state}, it cannot be trimmed")
        if new_start_offset <= self._start:
            return
        if new_start_offset > self._next:
            raise OffsetOutOfRangeError(
                f"stream {self._stream_id}: cannot trim to {new_start_offset}, beyond the end {self._next}"
            )
        await self._io.metadata.trim_stream(self._io.node, self._stream_id, self._epoch, new_start_offset)
        self._start = max(self._start, new_start_offset)
        self._io.cache_trim(self._stream_id, self._start)

    async def close(self) -> None:
        if self._state == _CLOSED:
            return
        if self._close_task is None:
            self._state = _CLOSING  # from now on appends are refused
            self._wake_waiters()
            self._close_task = asyncio.ensure_future(self._close())
            self._close_task.add_done_callback(_retrieve)  # a caller that gave up may not be there to see it
        # Concurrent closers (the partition layer and a shutdown) share one close; shielded so that a caller
        # giving up does not abandon it half way.
        await asyncio.shield(self._close_task)

    @property
    def closing(self) -> bool:
        return self._state == _CLOSING

    async def _close(self) -> None:
        started = time.perf_counter()
        try:
            await self._settle_and_flush()
            flushed = time.perf_counter()
            await self._io.metadata.close_stream(self._io.node, self._stream_id, self._epoch)
        finally:
            self._closed()
        done = time.perf_counter()
        logger.debug("closed stream %d at epoch %d, end offset %d (appends and upload %.1f ms, close %.1f ms)",
                     self._stream_id, self._epoch, self._confirm, (flushed - started) * 1000,
                     (done - flushed) * 1000)

    def _begin_close(self, task: asyncio.Future[None]) -> None:
        """Refuses appends from now on; ``task`` (a close of several streams) finishes the close."""
        self._state = _CLOSING
        self._wake_waiters()
        self._close_task = task

    async def _settle_and_flush(self) -> None:
        """The appends taken settled, and everything durable of this stream committed to object storage."""
        await self._settle()
        await self._io.flush(self._stream_id)

    async def _settle(self) -> None:
        """The appends taken settled (durable or failed)."""
        if self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)

    def _closed(self) -> None:
        self._state = _CLOSED
        self._wake_waiters()
        self._io.stream_closed(self)

    def _wake_waiters(self) -> None:
        signal, self._appended = self._appended, None
        if signal is not None and not signal.done():
            signal.set_result(None)

    def abandon(self) -> None:
        """Stops the stream without flushing or closing it at the controller (engine halt, i.e. a crash)."""
        self._state = _CLOSED
        for task in list(self._inflight):
            task.cancel()
        self._wake_waiters()

    async def destroy(self) -> None:
        await self.close()
        await self._io.metadata.delete_stream(self._io.node, self._stream_id, self._epoch)


class StreamClientImpl:
    """The StreamClient: creates, opens and deletes streams, and keeps the streams this node has open."""

    def __init__(self, io: StreamIO) -> None:
        self._io = io
        self._open: dict[int, StorageStream] = {}
        self._opening: dict[int, asyncio.Lock] = {}
        #: Streams a restart recovered into the LogCache (``storage.tail_recovery``), still opened at their old epoch.
        self.recovering = RecoveringStreams()
        #: stream id -> the epoch a partition asked for, for a recovering stream it was given at its old epoch.
        self._asked: dict[int, int] = {}
        #: The ``close_streams`` calls of this turn of the event loop, closed together at the next (None: none).
        self._closing: list[tuple[list[tuple[StorageStream, int]], asyncio.Future[None]]] | None = None
        #: stream id -> the end an upload committed while the stream's open was waiting for the controller, whose
        #: answer may predate that commit (a restart's recovered tail uploads while its partitions open).
        self._committed_while_opening: dict[int, int] = {}

    @property
    def open_streams(self) -> dict[int, StorageStream]:
        return self._open

    async def create_stream(self, tags: Sequence[tuple[str, str]] = ()) -> int:
        return await self._io.metadata.create_stream(self._io.node, tags)

    async def open_stream(self, stream_id: int, epoch: int) -> StorageStream:
        # One open at a time per stream: two concurrent opens must not produce two writers of one stream.
        lock = self._opening.setdefault(stream_id, asyncio.Lock())
        async with lock:
            existing = self._open.get(stream_id)
            if existing is not None and existing.closing:
                await existing.close()  # reopening right after a close: let that close finish first
            elif existing is not None and not existing.closed:
                if existing.epoch == epoch or self._asked.get(stream_id) == epoch:
                    return existing
                raise StreamFencedError(
                    f"stream {stream_id} is already open here at epoch {existing.epoch}; close it before opening "
                    f"it at epoch {epoch}"
                )
            recovered = self.recovering.take(stream_id)
            # A recovering stream is taken over at the epoch it is opened at (``storage.tail_recovery``): its
            # recovered tail in the LogCache is committed under that epoch, without waiting for the upload.
            at = recovered if recovered is not None and recovered <= epoch else epoch
            try:
                result = await self._io.metadata.open_stream(self._io.node, stream_id, at)
            except BaseException:
                if recovered is not None:
                    self.recovering.put_back(stream_id, recovered)
                raise
            finally:
                committed_meanwhile = self._committed_while_opening.pop(stream_id, 0)
            next_offset = result.next_offset
            if recovered is not None and at == recovered:
                cached_end = self._io.cache_end_offset(stream_id)
                next_offset = max(next_offset, cached_end if cached_end is not None else next_offset)
                self._asked[stream_id] = epoch
            else:
                self._asked.pop(stream_id, None)
                # Whatever this node cached of the stream is from an epoch before another broker's: a tail it
                # recovered and closed without reopening, which that broker has since appended past (and maybe
                # trimmed). Reads served from that view would end at its last offset, and a partition replaying
                # its meta stream would find nothing: the stream is read from its objects instead.
                self._io.forget(stream_id)
            uploaded = max(result.next_offset, committed_meanwhile)
            stream = StorageStream(self._io, stream_id, at, result.start_offset, next_offset, uploaded_offset=uploaded)
            self._open[stream_id] = stream
        logger.debug("opened stream %d at epoch %d: [%d, %d)", stream_id, at, result.start_offset, next_offset)
        return stream

    async def read_committed(self, stream_id: int, max_bytes: int) -> CommittedRecords:
        started = time.perf_counter()
        found = await self._io.metadata.get_streams([stream_id])
        located = time.perf_counter()
        if not found:
            raise StreamNotFoundError(stream_id)
        start = offset = found[0].start_offset
        end = found[0].end_offset
        batches: list[StreamRecordBatch] = []
        size = 0
        while offset < end and size < max_bytes:
            read = [b for b in await self._io.object_read(stream_id, offset, end, max_bytes - size)
                    if b.last_offset > offset]
            if not read:
                break
            batches += read
            size += sum(b.size for b in read)
            offset = read[-1].last_offset
        logger.debug("read stream %d's committed [%d, %d) in %.1f ms (%.1f ms its metadata)", stream_id, start, end,
                     (time.perf_counter() - started) * 1000, (located - started) * 1000)
        return CommittedRecords(start, end, batches)

    def committed(self, ends: Mapping[int, int]) -> None:
        """An upload committed these streams up to these ends (exclusive): their ``uploaded_offset`` follows,
        including a stream whose open is waiting for the controller right now."""
        for stream_id, end in ends.items():
            stream = self._open.get(stream_id)
            if stream is not None:
                stream.committed(end)
            opening = self._opening.get(stream_id)
            if opening is not None and opening.locked():
                self._committed_while_opening[stream_id] = max(end, self._committed_while_opening.get(stream_id, 0))

    async def close_recovered(self) -> list[int]:
        """Closes at the controller every recovering stream no partition has reopened (their recovered tail is
        committed); returns their ids. Each under its open lock, so a concurrent open either takes the stream
        first or opens it after the close."""
        closed = []
        for stream_id in self.recovering.stream_ids():
            async with self._opening.setdefault(stream_id, asyncio.Lock()):
                epoch = self.recovering.take(stream_id)
                if epoch is None:
                    continue  # opened meanwhile
                try:
                    await self._io.metadata.close_stream(self._io.node, stream_id, epoch)
                except StreamFencedError as exc:
                    logger.info("recovered stream %d already moved on: %s", stream_id, exc)
                    self._io.forget(stream_id)
                    continue
                except BaseException:
                    self.recovering.put_back(stream_id, epoch)
                    raise
                # Its recovered tail is committed: another broker may open the stream and append past it, so
                # the cached view of it must not answer a later open here (``open_stream`` forgets it too).
                self._io.forget(stream_id)
                closed.append(stream_id)
        return closed

    async def close_streams(self, closes: Sequence[tuple[Stream, int]]) -> None:
        """Closes the streams as ``close`` does each, with one call to the controller for all of them: a
        partition's close (a moved partition's producer waits for it). Each pair is a stream and where to trim it to
        as it closes (-1: nowhere). A stream closing already is waited for, as ``close`` does."""
        fresh: list[tuple[StorageStream, int]] = []
        waits: list[asyncio.Future[None]] = []
        for stream, trim in closes:
            if not isinstance(stream, StorageStream):
                raise TypeError(f"stream {stream.stream_id} was not opened by this client")
            if stream.closed:
                continue
            if stream._close_task is None:
                fresh.append((stream, trim))
            else:
                waits.append(stream._close_task)
        if fresh:
            task = self._close_soon(fresh)
            for stream, _ in fresh:
                stream._begin_close(task)
            waits.append(task)
        # Shielded as ``close`` is: a caller giving up does not abandon the close half way.
        for result in await asyncio.gather(*(asyncio.shield(w) for w in waits), return_exceptions=True):
            if isinstance(result, BaseException):
                raise result

    def _close_soon(self, closing: list[tuple[StorageStream, int]]) -> asyncio.Future[None]:
        """Closes ``closing`` with the streams of every other ``close_streams`` call made in this turn of the event
        loop (a round's partitions closing together), in one upload of their last records whose commit closes them
        all; the future is this call's part."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        done.add_done_callback(_retrieve)
        if self._closing is None:
            self._closing = []
            loop.call_soon(self._close_batch)
        self._closing.append((closing, done))
        return done

    def _close_batch(self) -> None:
        batch, self._closing = self._closing or [], None
        task = asyncio.ensure_future(_close_together(self._io, batch))
        task.add_done_callback(_retrieve)

    async def delete_stream(self, stream_id: int, epoch: int) -> None:
        stream = self._open.get(stream_id)
        if (stream is None or stream.closed) and stream_id in self.recovering:
            # Still opened here at its old epoch with its recovered tail in the LogCache (a cleaner round's output
            # a crash left behind, say): taken over like any reopening, then destroyed as an open stream is.
            stream = await self.open_stream(stream_id, epoch)
        if stream is not None and not stream.closed:
            await stream.destroy()
        else:
            await self._io.metadata.delete_stream(self._io.node, stream_id, epoch)
        self._opening.pop(stream_id, None)

    def discard(self, stream: StorageStream) -> None:
        if self._open.get(stream.stream_id) is stream:
            del self._open[stream.stream_id]
            self._asked.pop(stream.stream_id, None)


async def _close_together(
    io: StreamIO, batch: list[tuple[list[tuple[StorageStream, int]], asyncio.Future[None]]]
) -> None:
    """Settles each stream of ``batch`` (``close_streams`` calls, each with its future), then uploads their last
    records and closes them all (trimming those asked) in that upload's commit, or with one controller call per
    ``close_streams`` call after it (so that one call's refusal fails that call alone, as it would on its own)."""
    started = time.perf_counter()
    streams = [pair for closing, _ in batch for pair in closing]
    closes = [[StreamClose(stream.stream_id, stream.epoch, trim) for stream, trim in closing] for closing, _ in batch]
    results: list[BaseException | None] = [None] * len(batch)
    closed = cancelled = False
    try:
        await asyncio.gather(*(stream._settle() for stream, _ in streams))
        closed = await io.flush(streams[0][0].stream_id, [close for group in closes for close in group])
        flushed = time.perf_counter()
        if not closed:
            results = list(await asyncio.gather(*(io.metadata.close_streams(io.node, group) for group in closes),
                                                return_exceptions=True))
    except BaseException as exc:  # the upload failed (or the engine stops): every call fails with it
        results = [exc] * len(batch)
        cancelled = isinstance(exc, asyncio.CancelledError)
        flushed = time.perf_counter()
    for (closing, done), result in zip(batch, results, strict=True):
        for stream, trim in closing:
            if result is None:
                stream._start = max(stream._start, trim)
            stream._closed()
        if result is None:
            done.set_result(None)
        else:
            done.set_exception(result)
    if cancelled:
        raise asyncio.CancelledError
    logger.debug("closed streams %s (appends and upload %.1f ms, close %.1f ms%s)",
                 [stream.stream_id for stream, _ in streams], (flushed - started) * 1000,
                 (time.perf_counter() - flushed) * 1000, ", in the upload's commit" if closed else "")


def _retrieve(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()


if TYPE_CHECKING:  # mypy proves the implementations satisfy the protocols the broker programs against
    from storage.stream_api import Stream, StreamClient

    def _stream_conforms(stream: StorageStream) -> Stream:
        return stream

    def _client_conforms(client: StreamClientImpl) -> StreamClient:
        return client
