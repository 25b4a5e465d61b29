"""The stream API the broker programs against (DESIGN.md §3).

A ``Stream`` is opened by exactly one owner at a time. ``append`` assigns the next offsets synchronously, at
the moment it is called, so a caller that reads ``next_offset``, rewrites its payload with that offset and calls
``append`` without awaiting in between gets exactly those offsets; the returned awaitable completes when the
batch is durable in the WAL. Fetches see appended data as soon as it is durable, whether it is still in the
LogCache, in the block cache or only in object storage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from storage.stream_record_batch import StreamRecordBatch


@dataclass(frozen=True, slots=True)
class CommittedRecords:
    """What ``StreamClient.read_committed`` read of a stream: its committed range when the read began, and the
    batches from its start on (all of them if ``complete``)."""

    start_offset: int
    end_offset: int
    batches: Sequence[StreamRecordBatch]

    @property
    def complete(self) -> bool:
        """Whether the batches hold the whole range (a read stops at its byte limit)."""
        end = self.batches[-1].last_offset if self.batches else self.start_offset
        return end >= self.end_offset


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Batches covering ``[start, ...)`` in order; may end before the requested end if ``max_bytes`` was hit.
    The first batch is always returned whole, even if larger than ``max_bytes``; it may start before
    ``start`` when ``start`` falls inside a batch."""

    batches: Sequence[StreamRecordBatch]
    cache_hit: bool = True  # False when any byte came from object storage

    @property
    def next_offset(self) -> int | None:
        return self.batches[-1].last_offset if self.batches else None


class Stream(Protocol):
    @property
    def stream_id(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def start_offset(self) -> int: ...

    @property
    def confirm_offset(self) -> int:
        """End of the durable prefix: fetches can read up to here."""
        ...

    @property
    def next_offset(self) -> int:
        """Offset the next append will get (>= confirm_offset while appends are in flight)."""
        ...

    @property
    def uploaded_offset(self) -> int:
        """End (exclusive) of the prefix this node knows to be committed to object storage: what the controller
        had committed when the stream was opened, raised by every upload of this node since. Readers of the
        bucket (the Spark source's direct path) see only this prefix."""
        ...

    def append(self, payload: bytes, count: int) -> Awaitable[int]:
        """Assigns ``[next_offset, next_offset + count)`` now; the awaitable returns the base offset once the
        batch is durable. Raises StreamNotOpenedError/StreamFencedError if the stream can no longer be
        written."""
        ...

    async def writes_begun(self) -> None:
        """Returns once the appends made so far are being written (or are durable), not yet durable: a caller
        with work to do before it awaits an append's durability awaits this first, so the write runs during that
        work instead of after it (see ``WriteAheadLog.writes_begun``)."""
        ...

    async def fetch(self, start_offset: int, end_offset: int, max_bytes: int) -> FetchResult:
        """Batches from ``start_offset`` up to ``end_offset`` (exclusive, capped at ``confirm_offset``).
        OffsetOutOfRangeError if ``start_offset`` is below ``start_offset`` or above ``confirm_offset``."""
        ...

    async def wait_for_append(self, offset: int, timeout: float) -> bool:
        """Waits until ``confirm_offset > offset`` or ``timeout`` seconds pass; True if data arrived. Fetch long
        polls use this instead of sleeping."""
        ...

    async def trim(self, new_start_offset: int) -> None: ...

    async def close(self) -> None:
        """Waits for in-flight appends, force-uploads this stream's cached data, then closes it at the
        controller so another node may open it with a higher epoch."""
        ...

    async def destroy(self) -> None:
        """Closes and deletes the stream; its objects are reclaimed by compaction and the lifecycle sweep."""
        ...


async def read_batches(
    stream: Stream, start: int | None = None, end: int | None = None, max_bytes: int = 1 << 20
) -> AsyncIterator[StreamRecordBatch]:
    """Each stored batch overlapping ``[start, end)`` exactly once, in order (defaults: the stream's start and its
    confirm offset), fetched ``max_bytes`` at a time.

    The one place that knows how to walk a stream with ``fetch``: a result may begin with a batch that straddles the
    requested offset (or that an earlier result already returned), which is skipped, and an empty result ends the
    walk instead of looping. Readers that stop early just leave the loop."""
    offset = stream.start_offset if start is None else start
    end = stream.confirm_offset if end is None else end
    while offset < end:
        result = await stream.fetch(offset, end, max_bytes)
        if not result.batches:
            return
        for batch in result.batches:
            if batch.last_offset <= offset:
                continue
            yield batch
            offset = batch.last_offset


class StreamClient(Protocol):
    async def create_stream(self, tags: Sequence[tuple[str, str]] = ()) -> int: ...

    async def open_stream(self, stream_id: int, epoch: int) -> Stream: ...

    async def delete_stream(self, stream_id: int, epoch: int) -> None: ...

    async def close_streams(self, closes: Sequence[tuple[Stream, int]]) -> None:
        """Closes several streams with one controller call, each trimmed first to its offset (-1: not trimmed)."""
        ...

    async def read_committed(self, stream_id: int, max_bytes: int) -> CommittedRecords:
        """The batches object storage holds of a stream from its start, about ``max_bytes`` of them at most,
        whether or not this client has it open: what a move's target reads of the meta stream its source closed
        while it opens it. Another owner's uploads may move the stream's end meanwhile: the range is the one
        committed when the read began."""
        ...


#: Told after each upload committed data to object storage: stream id -> the end offset (exclusive) it committed.
UploadListener = Callable[[Mapping[int, int]], None]


class UploadEvents(Protocol):
    """Uploads as an owner of streams sees them: durable in object storage, not only in the WAL. The broker
    advances a partition's recovery point after each one, so a crash replays little (DESIGN.md §4)."""

    def add_upload_listener(self, listener: UploadListener) -> None:
        """``listener`` is called (on the event loop, must not block) after every committed upload."""
        ...


class ObservedStreamClient(StreamClient, UploadEvents, Protocol):
    """A StreamClient that also reports its uploads (``storage.engine.StorageEngine``)."""
