"""A batch's delete horizon (Kafka's KIP-534), sans-I/O: when the log cleaner may remove what a batch holds for
deletion, tombstones or the marker of a transaction with no data left.

Consumers must get ``delete.retention.ms`` to see a delete before it goes: a consumer that read a key's value and
then lagged must still find its tombstone, and a read_committed consumer that fetched an aborted transaction's data
its ABORT marker. So, as in Kafka's MemoryRecords.filterTo, the first round that keeps such a batch stamps it with
``now + delete.retention.ms`` (the delete-horizon attribute bit, the horizon in the base timestamp:
:func:`wire.record_batch.set_delete_horizon`), and a round past that horizon removes it. The horizon is counted from
the cleaning, never from the records' own timestamps, which may be far in the past (a mirrored record keeps its
source's CreateTime) or -1. It lives in the batch, so it survives a restart and a leader change with the log.
"""

from __future__ import annotations

from wire.record_batch import BatchHeader, set_delete_horizon


class DeleteHorizons:
    """One round's view of delete horizons at ``now_ms``: which batches are past theirs, the stamp for a batch kept
    with something to delete for the first time, and the earliest horizon still ahead (:attr:`next_ms`), at which a
    round comes due to remove it."""

    def __init__(self, now_ms: int, retention_ms: int) -> None:
        self._now = now_ms
        self._retention = retention_ms
        #: The earliest horizon of a batch this round keeps and a later round is to remove, or None.
        self.next_ms: int | None = None

    def passed(self, header: BatchHeader) -> bool:
        """Whether the batch has a delete horizon and this round is at or past it (Kafka's cleaner removes a
        tombstone only then, and a marker of an empty transaction)."""
        horizon = header.delete_horizon_ms
        return horizon is not None and horizon <= self._now

    def hold(self, header: BatchHeader, batch: bytes | memoryview) -> bytes:
        """The bytes to write for a batch this round keeps while it holds something to delete later: stamped with
        ``now + delete.retention.ms`` the first time (Kafka's ``needToSetDeleteHorizon``), as it was afterwards; its
        horizon, if still ahead, is noted for the round that will remove it."""
        horizon = header.delete_horizon_ms
        if horizon is None:
            horizon = self._now + self._retention
            self._note(horizon)
            return set_delete_horizon(batch, horizon)
        if horizon > self._now:
            self._note(horizon)
        return bytes(batch)

    def _note(self, horizon: int) -> None:
        self.next_ms = horizon if self.next_ms is None else min(self.next_ms, horizon)
