"""The time stream (DESIGN.md §4): one time-index entry per record, trimmed behind the log start so it does not
outgrow the log. The entries' format lives in broker/partition/indexes.py.

An open reads only the stream's newest entry (:func:`read_newest_time_entry`): reading every entry is work that
grows with the partition (about 10,000 entries and 0.2 s for 10 GB), and only a lookup by timestamp needs them, so
the partition reads them (:func:`read_time_entries`) when the first such lookup comes, as Kafka maps its index
files lazily (:func:`load_time_index`).
"""

from __future__ import annotations

import logging

from broker.partition.indexes import IndexFormatError, TimeIndexEntry, decode_time_entry
from broker.partition.partition_log.state import PartitionState
from broker.partition.partition_log.stored_log import FETCH_CHUNK
from storage.stream_api import Stream, read_batches

logger = logging.getLogger(__name__)

#: How many undecodable records at the stream's end :func:`read_newest_time_entry` steps back over.
_NEWEST_LOOKBACK = 8


async def read_time_entries(time_stream: Stream, end: int, where: str) -> list[TimeIndexEntry]:
    """The readable entries of the time stream below stream offset ``end``, oldest first; an undecodable record is
    skipped (the index only bounds timestamp searches, it never decides their answer)."""
    entries: list[TimeIndexEntry] = []
    async for batch in read_batches(time_stream, end=end, max_bytes=FETCH_CHUNK):
        try:
            entries.append(decode_time_entry(batch.payload))
        except IndexFormatError as exc:
            logger.warning("skipping bad time-index record %d of %s: %s", batch.base_offset, where, exc)
    return entries


async def load_time_index(state: PartitionState) -> None:
    """Reads the time stream's stored entries into the partition's index, once, when a lookup by timestamp first
    needs them (appends and the open's replay have been adding the newer ones meanwhile)."""
    if state.time_unloaded_end is None:
        return
    async with state.time_load_lock:
        if state.time_unloaded_end is None:
            return
        older = await read_time_entries(state.time, state.time_unloaded_end, state.where)
        state.time_index.prepend(older)
        state.time_index.drop_before(state.log_start_offset)
        state.time_unloaded_end = None


async def read_newest_time_entry(time_stream: Stream, where: str) -> TimeIndexEntry | None:
    """The newest readable entry of the time stream (None when it has none): what an open needs to extend the
    index without writing an entry twice, and to know the newest timestamp the index covers."""
    end = time_stream.confirm_offset
    start = max(time_stream.start_offset, end - _NEWEST_LOOKBACK)
    newest: TimeIndexEntry | None = None
    async for batch in read_batches(time_stream, start, end, max_bytes=FETCH_CHUNK):
        try:
            newest = decode_time_entry(batch.payload)
        except IndexFormatError as exc:
            logger.warning("skipping bad time-index record %d of %s: %s", batch.base_offset, where, exc)
    return newest


async def trim_time_stream(time_stream: Stream, log_start_offset: int) -> None:
    """Trims time-index records that point below the log start, so the time stream does not outgrow the log."""
    trim_to = time_stream.start_offset
    async for batch in read_batches(time_stream, max_bytes=FETCH_CHUNK):
        try:
            if decode_time_entry(batch.payload).offset >= log_start_offset:
                break  # the first entry to keep
        except IndexFormatError:
            pass
        trim_to = batch.last_offset
    if trim_to > time_stream.start_offset:
        await time_stream.trim(trim_to)
