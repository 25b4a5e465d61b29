"""The aborted-transaction index of a partition (DESIGN.md §4, the txn stream), sans-I/O: the in-memory index
with Kafka's ``collectAbortedTxns`` query. The entries, their codec and the read_committed filter the log cleaner
uses live in wire/aborted_txns.py (re-exported here), since the Spark source's direct reads apply them too.

An entry is appended when an ABORT marker closes a transaction that wrote data on the partition, so entries come in
marker (``last_offset``) order. A read_committed Fetch returns, next to its records, every aborted transaction
overlapping the fetched range; the consumer drops those producers' batches from the transaction's first offset
until it meets the abort marker. The on-stream format is Kafka's transaction-index entry:
``version i16 (0) | producer id i64 | first offset i64 | last offset i64 | last stable offset i64``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from wire.aborted_txns import (
    AbortedFilter,
    AbortedTxn,
    AbortedTxnEntry,
    TxnIndexFormatError,
    decode_entry,
    encode_entry,
)

__all__ = [
    "AbortedFilter",
    "AbortedTxn",
    "AbortedTxnEntry",
    "TxnIndex",
    "TxnIndexFormatError",
    "decode_entry",
    "encode_entry",
]


class TxnIndex:
    """The partition's aborted transactions in marker order, each with the txn-stream offset that stores it (-1
    while it is not stored), so trimming the index says how far the stream may be trimmed."""

    def __init__(self) -> None:
        self._entries: list[AbortedTxnEntry] = []
        self._last_offsets: list[int] = []
        self._stream_offsets: list[int] = []

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> Sequence[AbortedTxnEntry]:
        return self._entries

    @property
    def last_marker_offset(self) -> int:
        """The marker offset of the newest entry, -1 when empty (recovery adds only markers after it)."""
        return self._last_offsets[-1] if self._last_offsets else -1

    def add(self, entry: AbortedTxnEntry, stream_offset: int = -1) -> bool:
        """Appends ``entry``; False (nothing added) for an entry not newer than the last one (a replay seeing a
        marker the stream already holds)."""
        if entry.last_offset <= self.last_marker_offset:
            return False
        self._entries.append(entry)
        self._last_offsets.append(entry.last_offset)
        self._stream_offsets.append(stream_offset)
        return True

    def mark_stored(self, last_offset: int, stream_offset: int) -> None:
        """Notes where the txn stream stored the entry whose marker is at ``last_offset`` (added unstored)."""
        i = bisect.bisect_left(self._last_offsets, last_offset)
        if i < len(self._last_offsets) and self._last_offsets[i] == last_offset:
            self._stream_offsets[i] = stream_offset

    def collect(self, start: int, end: int) -> list[AbortedTxn]:
        """Every aborted transaction overlapping ``[start, end)``: its marker at or after ``start`` and its data
        starting before ``end`` (Kafka's collectAbortedTxns). Entries are in marker order, so only those from the
        first marker at ``start`` on are looked at."""
        if end <= start:
            return []
        found: list[AbortedTxn] = []
        for i in range(bisect.bisect_left(self._last_offsets, start), len(self._entries)):
            entry = self._entries[i]
            if entry.first_offset < end:
                found.append(AbortedTxn(entry.producer_id, entry.first_offset))
        return found

    def markers_in(self, start: int, end: int) -> list[tuple[int, int]]:
        """``(marker offset, txn-stream offset)`` of the entries whose marker lies in ``[start, end)``, in marker
        order (the log cleaner removes a marker only together with its entry)."""
        lo = bisect.bisect_left(self._last_offsets, start)
        hi = bisect.bisect_left(self._last_offsets, end)
        return list(zip(self._last_offsets[lo:hi], self._stream_offsets[lo:hi], strict=True))

    def drop_before(self, log_start_offset: int) -> int | None:
        """Forgets entries wholly below the log start (marker before it); returns the txn-stream offset to trim
        to (the first kept entry's, or one past the last dropped one), None when nothing stored was dropped."""
        cut = bisect.bisect_left(self._last_offsets, log_start_offset)
        if cut == 0:
            return None
        stored = [o for o in self._stream_offsets[:cut] if o >= 0]
        kept = [o for o in self._stream_offsets[cut:] if o >= 0]
        del self._entries[:cut], self._last_offsets[:cut], self._stream_offsets[:cut]
        if kept:
            return kept[0]
        return stored[-1] + 1 if stored else None
