"""The partition's meta stream: a tiny key/value log (DESIGN.md §4).

Each stream record holds one entry (metadata/meta_stream_records.py: ``magic 0x00 | keyLen i32 | key UTF-8 | value``);
replay keeps the last value per key. The stream compacts itself: once most of its records are superseded it
re-appends the live entries and trims everything before them, so reopening a long-lived partition replays a handful
of records, not its whole history. ``MetaState`` is the pure replay/compaction logic; ``MetaStream`` drives it over
a ``storage.stream_api.Stream``.

The trim waits until an upload has committed the re-appended entries to object storage (:meth:`MetaStream.trim_if_due`).
A crash can come first, so an opener's replay trims as well: everything before the oldest live entry, once uploaded.
Readers of the bucket (the Spark source's direct path) find the partition's streams in the meta stream's uploaded
records; trimmed at once, the old entries would be gone while the new ones were still only in the WAL, and for that
window, a second or so under steady produce, such a reader could not find the partition in the bucket at all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from metadata.meta_stream_records import (
    KEY_LEADER_EPOCH_CHECKPOINT,
    KEY_LOG,
    KEY_PARTITION,
    KEY_PRODUCER_SNAPSHOTS,
    META_MAGIC,
    MetaFormatError,
    decode_entry,
    encode_entry,
)
from storage.errors import StorageError
from storage.stream_api import Stream, read_batches
from storage.stream_record_batch import StreamRecordBatch

logger = logging.getLogger(__name__)

# The record format is storage's (the Spark source reads meta streams too); re-exported for the partition code.
__all__ = [
    "COMPACT_MIN_RECORDS",
    "KEY_LEADER_EPOCH_CHECKPOINT",
    "KEY_LOG",
    "KEY_PARTITION",
    "KEY_PRODUCER_SNAPSHOTS",
    "META_MAGIC",
    "MetaFormatError",
    "MetaState",
    "MetaStream",
    "decode_entry",
    "encode_entry",
]

#: Never compact a stream shorter than this: re-appending would cost more than replaying.
COMPACT_MIN_RECORDS = 16
_FETCH_BYTES = 1 << 20


@dataclass(slots=True)
class MetaState:
    """Live entries of a meta stream and how many records it holds since its start offset."""

    live: dict[str, tuple[int, bytes]]
    records: int = 0

    @classmethod
    def empty(cls) -> MetaState:
        return cls({})

    def apply(self, offset: int, key: str, value: bytes) -> None:
        self.live[key] = (offset, value)
        self.records += 1

    def get(self, key: str) -> bytes | None:
        item = self.live.get(key)
        return item[1] if item is not None else None

    def should_compact(self) -> bool:
        """True when more than half of the records are superseded (and the stream is not trivially short)."""
        return self.records >= COMPACT_MIN_RECORDS and self.records > 2 * len(self.live)


class MetaStream:
    """Key/value access to a meta stream opened by this node."""

    def __init__(self, stream: Stream, where: str) -> None:
        self.stream = stream
        self.where = where
        self.state = MetaState.empty()
        self._lock = asyncio.Lock()  # one put (and its compaction) at a time
        self._compacting: asyncio.Task[None] | None = None
        self._last_put = False  # the partition's closing entries are in: nothing is appended after them
        # The trims waiting for the entries they keep to be uploaded (a compaction's, what a replay found
        # superseded): (trim to, uploaded up to). A compaction's trim goes further but waits for a later upload
        # than the replay's, so it does not replace it: in a crash loop whose only uploads are each restart's
        # recovered tail, the replay's is the one that runs.
        self._pending_trims: list[tuple[int, int]] = []
        self._trimming: asyncio.Task[None] | None = None

    async def replay(self, read: Sequence[StreamRecordBatch] | None = None) -> None:
        """Reads the whole stream (from its start) and keeps the last value of each key. ``read``: the whole
        stream's batches, read already (a reassignment's target reads them while it opens the streams)."""
        state = MetaState.empty()

        def apply(batch: StreamRecordBatch) -> None:
            try:
                key, value = decode_entry(batch.payload)
            except MetaFormatError as exc:
                raise MetaFormatError(
                    f"meta stream {self.stream.stream_id} of {self.where} at offset {batch.base_offset}: {exc}"
                ) from exc
            state.apply(batch.base_offset, key, value)

        if read is None:
            async for batch in read_batches(self.stream, max_bytes=_FETCH_BYTES):
                apply(batch)
        else:
            for batch in read:
                apply(batch)
        self.state = state
        # What precedes the oldest live entry is superseded: trimmed once it is all uploaded (:meth:`trim_if_due`).
        # A compaction's own trim can have been lost (a crash before an upload covered its re-appended entries): in
        # a crash loop whose only uploads are each restart's recovered tail, the stream would grow every restart.
        first_live = min((offset for offset, _ in state.live.values()), default=self.stream.start_offset)
        if first_live > self.stream.start_offset:
            self._pending_trims.append((first_live, self.stream.next_offset))
        logger.debug(
            "replayed meta stream %d of %s: %d records from offset %d, keys %s",
            self.stream.stream_id,
            self.where,
            state.records,
            self.stream.start_offset,
            sorted(state.live),
        )

    def get(self, key: str) -> bytes | None:
        return self.state.get(key)

    async def put(self, entries: dict[str, bytes], *, compact: bool = True) -> None:
        """Appends the entries and waits until they are durable; compacts afterwards if worthwhile, unless
        ``compact`` is False (a partition's open: :meth:`compact_later` then does it after the open)."""
        async with self._lock:
            await self._append(entries)
            if compact and self.state.should_compact():
                await self._compact()

    async def put_last(self, entries: dict[str, bytes]) -> int | None:
        """Writes a closing partition's entries, the stream's last before it closes, with every other live entry
        rewritten behind them (a compaction without its trim), and returns the offset the stream may be trimmed to
        (None: nothing before it to trim). The caller trims while the close's upload runs, so the next opener (a
        moved partition's target, whose producer waits for it) replays only these records, from the one object
        the close uploads, instead of entries spread over the objects of earlier uploads. No compaction follows,
        now or in the background: nothing may be appended after these entries."""
        async with self._lock:
            self._last_put = True
            self._pending_trims.clear()  # the caller trims past them
            merged = {key: value for key, (_, value) in self.state.live.items()} | entries
            kept, self.state = self.state, MetaState.empty()
            try:
                first = await self._append(merged)
            except BaseException:
                kept.records += self.state.records
                for key, (offset, value) in self.state.live.items():
                    kept.live[key] = (offset, value)
                self.state = kept
                raise
            return first if first > self.stream.start_offset else None

    def compact_later(self) -> None:
        """Trims and compacts in the background if due: an open's own put leaves both here, so that the partition
        serves first (the stream stays short all the same: this runs right after)."""
        self.trim_if_due()
        if self.state.should_compact() and (self._compacting is None or self._compacting.done()):
            self._compacting = asyncio.create_task(self._compact_if_due(), name=f"compact meta of {self.where}")

    def trim_if_due(self) -> None:
        """Runs the furthest pending trim (a compaction's, or the one replay found) whose entries an upload has
        committed, from the trim point to where the trim was decided, in the background."""
        uploaded = self.stream.uploaded_offset
        due = [to for to, upload_to in self._pending_trims if uploaded >= upload_to]
        if not due or (self._trimming is not None and not self._trimming.done()):
            return
        offset = max(due)
        self._pending_trims = [(to, upload_to) for to, upload_to in self._pending_trims if to > offset]
        self._trimming = asyncio.create_task(self._trim(offset), name=f"trim meta of {self.where}")

    async def _trim(self, offset: int) -> None:
        try:
            if offset > self.stream.start_offset:
                await self.stream.trim(offset)
        except StorageError as exc:  # closed or fenced meanwhile: the next compaction trims further
            logger.info("trimming meta stream %d of %s to %d did not complete: %s", self.stream.stream_id,
                        self.where, offset, exc)

    async def _compact_if_due(self) -> None:
        try:
            async with self._lock:
                if not self._last_put and self.state.should_compact():
                    await self._compact()
        except StorageError as exc:  # closed or fenced meanwhile: the next put (or opener) compacts
            logger.info("compacting meta stream %d of %s did not complete: %s", self.stream.stream_id, self.where,
                        exc)

    async def _append(self, entries: dict[str, bytes]) -> int:
        waits = []
        first = -1
        for key, value in entries.items():
            offset = self.stream.next_offset
            if first < 0:
                first = offset
            waits.append(self.stream.append(encode_entry(key, value), 1))
            self.state.apply(offset, key, value)
        for wait in waits:
            await wait
        return first

    async def _compact(self) -> None:
        """Re-appends every live entry; everything before the first re-appended record is trimmed once an upload
        has committed them (:meth:`trim_if_due`)."""
        live = {k: v for k, (_, v) in sorted(self.state.live.items(), key=lambda kv: kv[1][0])}
        before = self.state.records
        kept, self.state = self.state, MetaState.empty()
        try:
            first = await self._append(live)
        except BaseException:
            kept.records += self.state.records  # what was re-appended only repeats live values
            self.state = kept
            raise
        self._pending_trims.append((first, self.stream.next_offset))
        # DEBUG: a partition under steady produce compacts its meta stream every second or so, routine work.
        logger.debug(
            "compacted meta stream %d of %s: %d records -> %d", self.stream.stream_id, self.where, before, len(live)
        )
