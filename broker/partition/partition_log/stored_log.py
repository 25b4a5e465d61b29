"""Which stream holds a Kafka offset, and walks over the stored batches (Kafka's LocalLog, over streams).

With ``cleanup.policy=compact`` the log is two streams, both addressed by Kafka offsets: the cleaned stream holds
the compacted prefix ``[log start, cleaner offset)`` and the log stream the rest (broker/partition/cleaner.py).
Reads, recovery, retention, DeleteRecords and the cleaner itself all walk stored batches through :class:`StoredLog`,
so the rule routing an offset to its stream lives in one place.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from storage.stream_api import Stream, read_batches
from storage.stream_record_batch import StreamRecordBatch
from wire.record_batch import BatchHeader, iter_batches

#: How many bytes one fetch from a stream asks for while walking it.
FETCH_CHUNK = 1 << 20

#: Called with each whole Kafka batch (its header and bytes) of a walk; returns False to stop the walk.
BatchVisitor = Callable[[BatchHeader, memoryview], bool]


class StoredLog:
    """The log stream, the cleaned stream (None without compaction) and the cleaner offset dividing them.

    Mutable on purpose: a cleaner round's switch installs a new cleaned stream and moves the cleaner offset, and a
    walk already under way picks the change up at its next step, as every reader of the partition must."""

    def __init__(self, log: Stream, cleaned: Stream | None, cleaner_offset: int) -> None:
        self.log = log
        self.cleaned = cleaned
        self.cleaner_offset = cleaner_offset

    def piece(self, offset: int, end: int) -> tuple[Stream, int]:
        """The stream holding ``offset`` and where its part of ``[offset, end)`` ends: offsets below the cleaner
        offset live in the cleaned stream, the rest in the log stream (both use Kafka offsets)."""
        if self.cleaned is not None and offset < self.cleaner_offset:
            return self.cleaned, min(end, self.cleaner_offset)
        return self.log, end

    async def iter_stored(self, start: int, end: int) -> AsyncIterator[StreamRecordBatch]:
        """Each stored batch overlapping ``[start, end)`` once, in offset order, across the cleaned and log
        streams (a cleaned-stream batch may hold no Kafka batch: it only covers offsets compaction removed)."""
        offset = start
        while offset < end:
            stream, piece_end = self.piece(offset, end)
            last = offset
            async for stored in read_batches(stream, max(offset, stream.start_offset), piece_end, FETCH_CHUNK):
                last = stored.last_offset
                yield stored
            if last <= offset and piece_end < end:
                last = piece_end  # nothing stored there (only possible below a trimmed start)
            if last <= offset:
                return
            offset = last

    async def scan(self, start: int, end: int, visit: BatchVisitor) -> None:
        """Walks whole batches of the log in ``[start, end)``; ``visit`` returns False to stop."""
        async for stored in self.iter_stored(start, end):
            for header, batch in iter_batches(stored.payload):
                if header.next_offset <= start:
                    continue  # the stored batch straddles ``start``
                if not visit(header, batch):
                    return

    async def bytes_below(self, start: int, target: int) -> int:
        """Bytes of the batches that moving the log start from ``start`` to ``target`` deletes: those wholly below
        ``target`` (a batch ``target`` cuts through stays stored, and counted)."""
        total = 0

        def visit(header: BatchHeader, batch: memoryview) -> bool:
            nonlocal total
            if header.next_offset > target:
                return False
            total += header.size
            return True

        await self.scan(start, target, visit)
        return total
