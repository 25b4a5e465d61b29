"""One opened stream (``StorageStream``) over the engine's WAL, caches and read path (DESIGN.md §3), and the small
``StreamIO`` protocol through which the engine supplies its I/O, so this module holds only stream logic.

Append: offsets are assigned synchronously when ``append`` is called, then the batch waits for LogCache room
(backpressure), goes to the WAL, and once durable enters the LogCache. Batches enter the cache and advance
``confirm_offset`` strictly in offset order, even if the WAL were to acknowledge out of order, so a reader
never sees a hole. The append's awaitable completes when its batch is confirmed.

Fetch: the LogCache serves the tail; older offsets come from object storage through the read path; a fetch
that starts in objects and continues in the cache is stitched together seamlessly.

Opening, closing and deleting streams is the client's (``storage.stream_client``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Protocol

from storage.errors import (
    OffsetOutOfRangeError,
    StorageError,
    StreamFencedError,
    StreamNotFoundError,
    StreamNotOpenedError,
)
from storage.metadata.api import NodeIdentity, StreamClose, StreamMetadata
from storage.stream_api import FetchResult, Stream
from storage.stream_record_batch import StreamRecordBatch
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
        #: Closed here by a close whose records were all committed but whose close at the controller failed: the
        #: controller may still have it opened at this epoch (``close`` closes it there).
        self._left_open = False

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

    @property
    def left_open(self) -> bool:
        """Closed here, every record it confirmed committed, but not (known to be) closed at the controller: its
        close's controller call failed. ``close`` tries that call again."""
        return self._left_open

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
            if self._left_open:
                await self._close_left_open()
            return
        if self._close_task is None:
            self._state = _CLOSING  # from now on appends are refused
            self._wake_waiters()
            self._close_task = asyncio.ensure_future(self._close())
            self._close_task.add_done_callback(retrieve_exception)  # a caller that gave up may not be there to see it
        # Concurrent closers (the partition layer and a shutdown) share one close; shielded so that a caller
        # giving up does not abandon it half way.
        await asyncio.shield(self._close_task)

    @property
    def closing(self) -> bool:
        return self._state == _CLOSING

    async def _close(self) -> None:
        started = time.perf_counter()
        flushed: float | None = None
        try:
            await self._settle_and_flush()
            flushed = time.perf_counter()
            await self._io.metadata.close_stream(self._io.node, self._stream_id, self._epoch)
        except BaseException:
            self._closed(left_open=flushed is not None)
            raise
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

    async def _close_left_open(self) -> None:
        """The controller call of a close that failed after its records were committed, again (``left_open``).

        Repeating it is safe: a close at the stream's epoch by its owner is answered as done once one was applied,
        and one refused as fenced or not found means the stream moved on (another broker opened it at a higher
        epoch, or it was deleted) after a close of ours was applied whose answer was lost. Nothing is uploaded: its
        records were committed before the first call, and the stream takes no appends."""
        try:
            await self._io.metadata.close_stream(self._io.node, self._stream_id, self._epoch)
        except (StreamFencedError, StreamNotFoundError) as exc:
            logger.info("stream %d epoch %d already moved on: %s", self._stream_id, self._epoch, exc)
        self._left_open = False
        logger.debug("closed stream %d at epoch %d at the controller after its close failed", self._stream_id,
                     self._epoch)

    def _closed(self, *, left_open: bool = False) -> None:
        """The stream takes nothing more here. ``left_open``: a close failed after the stream's records were
        committed (its controller call), so ``close`` may close it at the controller still. A close that failed
        before (its upload) leaves its records in the WAL and the stream opened at the controller: the WAL's
        recovery at this node's next start (or a failover's replay) commits them at this epoch and closes it, which
        a close now would fence."""
        self._left_open = left_open
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


def retrieve_exception(task: asyncio.Future[None]) -> None:
    """A done callback: marks the future's exception retrieved, for a close whose caller gave up (asyncio would
    log it as never retrieved)."""
    if not task.cancelled():
        task.exception()


if TYPE_CHECKING:  # mypy proves the implementation satisfies the protocol the broker programs against

    def _stream_conforms(stream: StorageStream) -> Stream:
        return stream
