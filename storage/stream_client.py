"""The stream client over the engine's metadata (DESIGN.md §3): creates, opens, closes and deletes streams, and
keeps the ones this node has open. An open takes over a stream a restart recovered into the LogCache at the epoch
it was left at (``storage.tail_recovery``), or else reads the stream from its objects; closes made in one turn of
the event loop go to the controller together, in the upload that carries their last records.

One opened stream, its appends and fetches, is ``storage.opened_stream``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from storage.errors import (
    NodeEpochExpiredError,
    StreamFencedError,
    StreamNotFoundError,
)
from storage.metadata.api import StreamClose
from storage.opened_stream import StorageStream, StreamIO, retrieve_exception
from storage.stream_api import CommittedRecords, Stream
from storage.stream_record_batch import StreamRecordBatch
from storage.tail_recovery import RecoveringStreams

logger = logging.getLogger(__name__)

CLOSE_RETRY_S = 30.0
"""How long ``close_recovered`` retries closing recovered streams the controller does not answer (a controller
failover takes seconds). Bounded so that a restart's background task ends; a stream still not closed then stays
recovering (taken over by its next open here, closed at shutdown)."""
_CLOSE_BACKOFF_START_S = 0.05
_CLOSE_BACKOFF_MAX_S = 2.0


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
                try:
                    result = await self._io.metadata.open_stream(self._io.node, stream_id, at)
                except StreamFencedError as exc:
                    if recovered is None or at != recovered:
                        raise
                    # The controller moved the stream past its recovered epoch: its close was applied though its
                    # answer was lost (``close_recovered`` put it back), and another broker has opened it since.
                    # The take-over can never succeed now; what this node cached of it is that old epoch's.
                    logger.info("node %d: recovered stream %d cannot be taken over at epoch %d (%s); opening it "
                                "at epoch %d", self._io.node.node_id, stream_id, at, exc, epoch)
                    recovered = None
                    self._io.forget(stream_id)
                    if at == epoch:
                        raise
                    at = epoch
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
        first or opens it after the close.

        A close the controller did not answer (a timeout, a controller failover) is retried in rounds with capped
        backoff for :data:`CLOSE_RETRY_S` at most, the stream put back as recovering in between (an open meanwhile
        takes it over). Retrying is safe: a close repeated at the stream's epoch by its opener is answered as done
        when the first was applied, and one refused as fenced or not found means the stream moved on (or is gone)
        after an applied close. One stream's failure never holds up the others' closes, and none is raised: a
        stream left recovering is taken over by its next open here, and closed at shutdown."""
        node = self._io.node.node_id
        closed: list[int] = []
        pending = self.recovering.stream_ids()
        deadline = time.monotonic() + CLOSE_RETRY_S
        delay = _CLOSE_BACKOFF_START_S
        while True:
            failed: dict[int, Exception] = {}
            for stream_id in pending:
                outcome = await self._close_one_recovered(stream_id)
                if outcome is True:
                    closed.append(stream_id)
                elif isinstance(outcome, Exception):
                    failed[stream_id] = outcome
            pending = sorted(failed)
            if not pending:
                return closed
            errors = "; ".join(f"stream {sid}: {exc}" for sid, exc in failed.items())
            if time.monotonic() + delay > deadline:
                logger.error("node %d: recovered streams %s still not closed after %.1f s, left opened at their "
                             "recovered epoch (taken over by their next open here, closed at shutdown): %s",
                             node, pending, CLOSE_RETRY_S, errors)
                return closed
            logger.warning("node %d: closing recovered streams %s failed, retrying in %.2f s: %s",
                           node, pending, delay, errors)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _CLOSE_BACKOFF_MAX_S)

    async def _close_one_recovered(self, stream_id: int) -> bool | Exception:
        """One attempt at closing a recovering stream: True once closed, False when there is nothing (more) to do,
        else the error to retry on (the stream put back as recovering)."""
        node = self._io.node.node_id
        async with self._opening.setdefault(stream_id, asyncio.Lock()):
            epoch = self.recovering.take(stream_id)
            if epoch is None:
                return False  # opened meanwhile
            try:
                await self._io.metadata.close_stream(self._io.node, stream_id, epoch)
            except (StreamFencedError, StreamNotFoundError) as exc:
                # Another broker opened it at a higher epoch (or deleted it): possible only after a close of ours
                # was applied, whose answer was lost. Its cached view is that old epoch's.
                logger.info("node %d: recovered stream %d already moved on: %s", node, stream_id, exc)
                self._io.forget(stream_id)
                return False
            except NodeEpochExpiredError as exc:
                # This incarnation is fenced (or lost the controller while stopping): no close of it will ever
                # be accepted. The stream stays opened; the next start or a failover replay of the WAL closes it.
                self.recovering.put_back(stream_id, epoch)
                logger.error("node %d: recovered stream %d not closed, this node is fenced: %s", node, stream_id, exc)
                return False
            except Exception as exc:
                self.recovering.put_back(stream_id, epoch)
                return exc
            except BaseException:
                self.recovering.put_back(stream_id, epoch)
                raise
            # Its recovered tail is committed: another broker may open the stream and append past it, so
            # the cached view of it must not answer a later open here (``open_stream`` forgets it too).
            self._io.forget(stream_id)
            return True

    async def close_streams(self, closes: Sequence[tuple[Stream, int]]) -> None:
        """Closes the streams as ``close`` does each, with one call to the controller for all of them: a
        partition's close (a moved partition's producer waits for it). Each pair is a stream and where to trim it to
        as it closes (-1: nowhere). A stream closing already is waited for, as ``close`` does, and one whose close
        failed after its records were committed is closed at the controller (``StorageStream.left_open``)."""
        fresh: list[tuple[StorageStream, int]] = []
        waits: list[asyncio.Future[None]] = []
        for stream, trim in closes:
            if not isinstance(stream, StorageStream):
                raise TypeError(f"stream {stream.stream_id} was not opened by this client")
            if stream.closed:
                if stream.left_open:
                    waits.append(asyncio.ensure_future(stream.close()))
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
        done.add_done_callback(retrieve_exception)
        if self._closing is None:
            self._closing = []
            loop.call_soon(self._close_batch)
        self._closing.append((closing, done))
        return done

    def _close_batch(self) -> None:
        batch, self._closing = self._closing or [], None
        task = asyncio.ensure_future(_close_together(self._io, batch))
        task.add_done_callback(retrieve_exception)

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
    closed = cancelled = committed = False
    try:
        await asyncio.gather(*(stream._settle() for stream, _ in streams))
        closed = await io.flush(streams[0][0].stream_id, [close for group in closes for close in group])
        committed = True  # every record the streams confirmed is in object storage
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
            # A controller call refused after the upload committed their records leaves the streams opened there:
            # ``left_open``, a later ``close_streams`` closes them.
            stream._closed(left_open=result is not None and committed)
        if result is None:
            done.set_result(None)
        else:
            done.set_exception(result)
    if cancelled:
        raise asyncio.CancelledError
    logger.debug("closed streams %s (appends and upload %.1f ms, close %.1f ms%s)",
                 [stream.stream_id for stream, _ in streams], (flushed - started) * 1000,
                 (time.perf_counter() - flushed) * 1000, ", in the upload's commit" if closed else "")


if TYPE_CHECKING:  # mypy proves the implementation satisfies the protocol the broker programs against
    from storage.stream_api import StreamClient

    def _client_conforms(client: StreamClientImpl) -> StreamClient:
        return client
