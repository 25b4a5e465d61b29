"""Aborted transactions as a partition records them (Kafka's transaction-index entry) and the read_committed
filter that applies them to a walk over record batches. No I/O.

Two readers need both: the broker (its txn stream and index, the log cleaner, read_committed Fetch) and the Spark
source's direct reads, which read a partition's txn stream from the bucket and filter the log stream's batches the
way a read_committed consumer does. The on-stream format is Kafka's transaction-index entry:
``version i16 (0) | producer id i64 | first offset i64 | last offset i64 | last stable offset i64``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from wire.control_records import ControlRecordError, TxnMarker, decode_marker
from wire.record_batch import BatchHeader, InvalidBatchError, decode_records

__all__ = [
    "AbortedFilter",
    "AbortedTxn",
    "AbortedTxnEntry",
    "TxnIndexFormatError",
    "decode_entry",
    "encode_entry",
    "is_abort_marker",
    "txn_marker",
]

_ENTRY = struct.Struct(">hqqqq")
_VERSION = 0


class TxnIndexFormatError(ValueError):
    """A txn-stream record does not decode."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """What a read_committed Fetch reports per aborted transaction (its ``aborted_transactions`` entries)."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class AbortedTxnEntry:
    """One aborted transaction: data from ``first_offset``, ABORT marker at ``last_offset``, and the partition's
    LSO once it was decided."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_entry(entry: AbortedTxnEntry) -> bytes:
    return _ENTRY.pack(_VERSION, entry.producer_id, entry.first_offset, entry.last_offset, entry.last_stable_offset)


def decode_entry(data: bytes) -> AbortedTxnEntry:
    if len(data) != _ENTRY.size:
        raise TxnIndexFormatError(f"txn index entry of {len(data)} bytes, expected {_ENTRY.size}")
    version, pid, first, last, lso = _ENTRY.unpack(data)
    if version != _VERSION:
        raise TxnIndexFormatError(f"unknown txn index entry version {version}")
    return AbortedTxnEntry(pid, first, last, lso)


class AbortedFilter:
    """Which data batches of a walk in offset order belong to aborted transactions, the way a read_committed
    consumer decides it: a producer is "aborting" from its aborted transaction's first offset until its ABORT
    marker. ``aborted`` is every aborted transaction overlapping the walked range (Kafka's collectAbortedTxns)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._aborting: set[int] = set()

    def is_aborted(self, header: BatchHeader, abort_marker: bool = False) -> bool:
        """For each batch in order: True for a transactional data batch of an aborted transaction.
        ``abort_marker`` says that a control batch is an ABORT marker (it ends its producer's aborted range)."""
        while self._next < len(self._pending) and self._pending[self._next].first_offset <= header.last_offset:
            self._aborting.add(self._pending[self._next].producer_id)
            self._next += 1
        if header.is_control:
            if abort_marker:
                self._aborting.discard(header.producer_id)
            return False
        return header.is_transactional and header.producer_id in self._aborting


def txn_marker(header: BatchHeader, batch: bytes | memoryview) -> TxnMarker | None:
    """The COMMIT or ABORT marker a control batch holds; None for data batches and other control records (and for
    a marker that does not decode: the batch is skipped as control either way)."""
    if not header.is_control:
        return None
    try:
        records = decode_records(batch)
        return decode_marker(records[0].key, records[0].value) if records else None
    except (ControlRecordError, InvalidBatchError):
        return None


def is_abort_marker(header: BatchHeader, batch: bytes | memoryview) -> bool:
    """Whether a batch is a control batch holding an ABORT transaction marker: what :meth:`AbortedFilter.is_aborted`
    is told for each batch, here so the cleaner and the Spark direct reads decide it the same way."""
    marker = txn_marker(header, batch)
    return marker is not None and not marker.commit
