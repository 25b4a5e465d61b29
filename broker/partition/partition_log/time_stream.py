"""The time stream (DESIGN.md §4): one time-index entry per record, read into a :class:`TimeIndex` at open and
trimmed behind the log start so it does not outgrow the log. The entries' format lives in broker/partition/indexes.py.
"""

from __future__ import annotations

import logging

from broker.partition.indexes import IndexFormatError, TimeIndex, decode_time_entry
from broker.partition.partition_log.stored_log import FETCH_CHUNK
from storage.stream_api import Stream, read_batches

logger = logging.getLogger(__name__)


async def load_time_index(time_stream: Stream, index: TimeIndex, where: str) -> None:
    """Adds every readable entry of the time stream to ``index``; an undecodable record is skipped (the index only
    bounds timestamp searches, it never decides their answer)."""
    async for batch in read_batches(time_stream, max_bytes=FETCH_CHUNK):
        try:
            index.add(decode_time_entry(batch.payload))
        except IndexFormatError as exc:
            logger.warning("skipping bad time-index record %d of %s: %s", batch.base_offset, where, exc)


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
