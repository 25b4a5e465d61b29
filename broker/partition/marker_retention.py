"""Which transaction markers a log cleaner round keeps, and which it removes (Kafka's CleanedTransactionMetadata,
KIP-98, with the delete horizon of KIP-534), sans-I/O.

A COMMIT or ABORT control batch may go once no data of its transaction is left in the log and consumers have had
``delete.retention.ms`` to read it: a read_committed consumer that fetched an aborted transaction's data skips that
producer until it meets the ABORT marker, so the marker must outlive the data by that long. As in Kafka, a round
that finds a marker whose transaction has no data left sets the batch's delete horizon (now + ``delete.retention.ms``,
in the batch itself, :class:`broker.partition.delete_horizon.DeleteHorizons`, which tombstones share), and a later
round past the horizon removes the marker. Kafka sets the horizon only on the pass after the one that removed the
data; here the horizon is set by the round that writes the log without the data, which gives consumers the same
``delete.retention.ms`` after the data is gone (every Fjord round rewrites the whole cleaned prefix, so it knows
what it keeps before the marker).

An ABORT marker of a transaction that wrote data on the partition has an entry in the aborted-transaction index
(the txn stream), and the two go together: an entry without its marker would make read_committed consumers skip
that producer's later, committed data. The txn stream is append-only and can only lose a prefix, so an indexed
ABORT marker is removed only when every indexed one before it is removed in the same round (``droppable`` says
how many leading entries may go at all: those stored in the txn stream); the round then drops the index entries up
to :attr:`MarkerRetention.dropped_through` before it switches to the log without their markers. Horizons are
normally set in marker order (markers enter the cleaned prefix in offset order), so this rarely keeps a marker
longer than Kafka would.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.partition.delete_horizon import DeleteHorizons
from wire.record_batch import BatchHeader


class MarkerRetention:
    """Fed a round's batches in offset order: :meth:`on_data` for each data batch the round keeps, :meth:`on_marker`
    for each COMMIT or ABORT control batch, which answers the bytes to write (None: the marker goes).

    ``indexed_aborts``: marker offsets of the aborted-transaction index entries in the round's range, ascending;
    ``droppable``: how many of them, from the first, may be dropped (stored in the txn stream)."""

    def __init__(self, now_ms: int, retention_ms: int, indexed_aborts: Sequence[int], droppable: int) -> None:
        self._horizons = DeleteHorizons(now_ms, retention_ms)
        self._indexed = list(indexed_aborts)
        self._indexed_set = set(self._indexed)
        self._droppable = min(droppable, len(self._indexed))
        self._next_indexed = 0
        self._prefix_open = True
        #: Producers with a kept transactional data batch since their last marker (the transaction is not empty).
        self._with_data: set[int] = set()
        #: The last indexed ABORT marker removed: index entries up to it are dropped with it.
        self.dropped_through: int | None = None
        self.removed = 0

    @property
    def next_horizon_ms(self) -> int | None:
        """The earliest delete horizon of a kept marker still ahead, for the round that will remove it."""
        return self._horizons.next_ms

    def on_data(self, header: BatchHeader) -> None:
        """A data batch the round keeps (some of its records at least)."""
        if header.is_transactional:
            self._with_data.add(header.producer_id)

    def on_marker(self, header: BatchHeader, batch: bytes | memoryview, *, abort: bool) -> bytes | None:
        """A control batch: its bytes to keep (its horizon set if this round empties its transaction), or None."""
        empty = header.producer_id not in self._with_data
        self._with_data.discard(header.producer_id)
        indexed = abort and header.last_offset in self._indexed_set
        if indexed:
            in_prefix = (
                self._prefix_open
                and self._next_indexed < self._droppable
                and self._indexed[self._next_indexed] == header.last_offset
            )
        else:
            in_prefix = True  # no index entry goes with it
        if empty and self._horizons.passed(header) and in_prefix:
            if indexed:
                self._next_indexed += 1
                self.dropped_through = header.last_offset
            self.removed += 1
            return None
        if indexed:
            self._prefix_open = False  # every later indexed marker stays: the txn stream loses only a prefix
        if not empty:
            return bytes(batch)
        return self._horizons.hold(header, batch)
