"""The WAL interface shared by the file and S3 implementations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from storage.errors import WALError
from storage.stream_record_batch import StreamRecordBatch


@dataclass(frozen=True, slots=True)
class WALRecord:
    """A recovered record: its position in the WAL (for trimming) and the batch it holds."""

    offset: int  # logical WAL position of the record; trim(offset_after) removes it
    next_offset: int  # logical position just past the record
    batch: StreamRecordBatch


class WriteAheadLog(Protocol):
    """A node-wide log of StreamRecordBatches from many streams.

    ``append`` returns once the record is durable (fsync'd or PUT to S3), in append order: a record is never
    acknowledged before one appended earlier. When the WAL is full ``append`` waits (backpressure) rather than
    failing. ``trim(offset)`` says every record before logical position ``offset`` has been uploaded and may be
    discarded.
    """

    async def start(self) -> None:
        """Opens the WAL (and fences older writers where the mode supports it)."""
        ...

    def recover(self) -> AsyncIterator[WALRecord]:
        """Yields every durable, untrimmed record in order; stops at a torn or corrupt tail. Call after start and
        before the first append."""
        ...

    async def append(self, batch: StreamRecordBatch) -> WALRecord:
        """Durably appends; returns the record's position."""
        ...

    async def trim(self, offset: int) -> None: ...

    async def reset(self) -> None:
        """Discards everything (after recovery has uploaded it)."""
        ...

    async def close(self) -> None: ...

    @property
    def used_bytes(self) -> int:
        """Untrimmed bytes, for backpressure and metrics."""
        ...

    @property
    def unwritable_seconds(self) -> float:
        """Seconds spent unable to write to its storage (retrying), the episode under way included."""
        ...

    @property
    def unwritable(self) -> bool:
        """Whether writes to its storage are failing now (and being retried)."""
        ...

    @property
    def unwritable_for(self) -> float:
        """Seconds the episode of failing writes under way has lasted (0.0 while writes succeed)."""
        ...

    def refusal(self) -> WALError | None:
        """The error an append made now would fail with at once (failed, fenced, or unwritable for longer than
        its bound), or None."""
        ...

    async def writes_begun(self) -> None:
        """Returns once every append admitted so far is being written (or is durable): a caller with CPU work to
        do while its append becomes durable awaits this first, so the write runs during that work."""
        ...
