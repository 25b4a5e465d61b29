"""The txn stream (DESIGN.md §4): the partition's aborted-transaction index, one entry per stream record.

It is created on the partition's first abort (most partitions never see one) and named in the LOG meta entry's
``streamMap["txn"]`` (-1 until then); an open reads it whole into a :class:`TxnIndex`, and a log-start move trims
the entries wholly below the new log start. The entries' format lives in broker/partition/txn_index.py.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.partition.partition_log.stored_log import FETCH_CHUNK
from broker.partition.txn_index import TxnIndex, TxnIndexFormatError, decode_entry
from storage.stream_api import Stream, read_batches

logger = logging.getLogger(__name__)


def txn_stream_id(log_info: dict[str, Any]) -> int:
    """The txn stream's id from the LOG meta entry, -1 when the partition has none yet."""
    return int(log_info.get("streamMap", {}).get("txn", -1))


async def load_txn_index(txn_stream: Stream, index: TxnIndex, where: str) -> None:
    """Adds every entry of the txn stream to ``index``. An undecodable record is skipped with a warning: losing
    it would show an aborted transaction's records to read_committed consumers, so the log says which one."""
    async for batch in read_batches(txn_stream, max_bytes=FETCH_CHUNK):
        try:
            index.add(decode_entry(batch.payload), batch.base_offset)
        except TxnIndexFormatError as exc:
            logger.warning("skipping bad aborted-transaction record %d of %s: %s", batch.base_offset, where, exc)


async def trim_txn_stream(txn_stream: Stream, trim_to: int | None) -> None:
    """Trims the txn stream to ``trim_to`` (what :meth:`TxnIndex.drop_before` answered), if that moves it."""
    if trim_to is not None and trim_to > txn_stream.start_offset:
        await txn_stream.trim(min(trim_to, txn_stream.confirm_offset))
