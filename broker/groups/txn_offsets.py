"""Offsets committed inside a transaction (TxnOffsetCommit): pending until the transaction's marker decides them.

A consume-transform-produce application commits its input positions with ``send_offsets_to_transaction``; the
group coordinator appends them to ``__consumer_offsets`` as part of the producer's transaction and keeps them
apart from the group's committed offsets. When the transaction coordinator writes the COMMIT marker on that
``__consumer_offsets`` partition they become the committed offsets; an ABORT drops them. Until then OffsetFetch
with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for those partitions, so a new consumer does not start
from a position that may be rolled back.

Kafka's rule for a commit racing an ordinary OffsetCommit of the same partition is kept: whichever record sits
later in ``__consumer_offsets`` wins, so every committed value remembers the log offset of the batch that
carried it (``AppendedOffset.log_offset``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.groups.offsets import TopicPartition
from broker.groups.offsets_schema import OffsetValue

#: TxnOffsetCommit's first version whose client takes TRANSACTION_ABORTABLE (KIP-890): an older one is answered
#: INVALID_TXN_STATE when its transaction does not hold the group's ``__consumer_offsets`` partition.
TRANSACTION_ABORTABLE_VERSION = 4

#: Asks the transaction coordinator whether a TxnOffsetCommit may write in its transaction: (transactional id,
#: producer id, producer epoch, the group's ``__consumer_offsets`` partition, request version) -> NONE, or the error
#: to answer. The broker wires it in (the transaction coordinator depends on this package, not the reverse).
TxnVerifier = Callable[[str, int, int, TopicPartition, int], Awaitable[ErrorCode]]


async def unverifiable(
    transactional_id: str, producer_id: int, producer_epoch: int, partition: TopicPartition, api_version: int
) -> ErrorCode:
    """The verifier of a group coordinator no transaction coordinator was wired to: nothing transactional is
    written unverified (a write no marker would end would hold the partition's LSO back forever)."""
    return ErrorCode.coordinator_not_available


@dataclass(frozen=True, slots=True)
class AppendedOffset:
    """A committed offset and where its record sits in ``__consumer_offsets`` (-1 when not known)."""

    value: OffsetValue
    log_offset: int


class PendingTxnOffsets:
    """One group's transactional offset commits not yet decided, by producer id."""

    def __init__(self) -> None:
        self._by_producer: dict[int, dict[TopicPartition, AppendedOffset]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_producer)

    def __iter__(self) -> Iterator[tuple[int, TopicPartition, AppendedOffset]]:
        for producer_id, offsets in self._by_producer.items():
            for tp, offset in offsets.items():
                yield producer_id, tp, offset

    def add(self, producer_id: int, tp: TopicPartition, offset: AppendedOffset) -> None:
        """A later commit of the same partition in the same transaction replaces the earlier one."""
        self._by_producer.setdefault(producer_id, {})[tp] = offset

    def remove(self, tp: TopicPartition, *, before: int | None = None) -> None:
        """An offset tombstone of ``tp`` (OffsetDelete, DeleteGroups, expiry, a deleted topic) drops what open
        transactions commit there too, as Kafka's ``OffsetMetadataManager.replay`` does: the cleaner drops their
        records below the tombstone, so keeping them would make the offset reappear at the COMMIT marker live or in
        a full replay but not after compaction. ``before``: the tombstone's log offset, when a commit may have been
        appended after it (that one stays, as a replay keeps it). A producer left with nothing pending is forgotten
        (its marker has nothing to decide here)."""
        for producer_id in list(self._by_producer):
            offsets = self._by_producer[producer_id]
            found = offsets.get(tp)
            if found is not None and (before is None or found.log_offset < before):
                del offsets[tp]
            if not offsets:
                del self._by_producer[producer_id]

    def partitions(self) -> set[TopicPartition]:
        return {tp for offsets in self._by_producer.values() for tp in offsets}

    def has_producer(self, producer_id: int) -> bool:
        return producer_id in self._by_producer

    def is_pending(self, tp: TopicPartition) -> bool:
        return any(tp in offsets for offsets in self._by_producer.values())

    def complete(self, producer_id: int, *, commit: bool) -> dict[TopicPartition, AppendedOffset]:
        """Forgets the producer's pending offsets; returns them when the transaction committed (to be applied with
        :func:`newer`), nothing when it aborted."""
        offsets = self._by_producer.pop(producer_id, {})
        return offsets if commit else {}


def newer(current_log_offset: int | None, candidate: AppendedOffset) -> bool:
    """Whether ``candidate`` replaces the committed value whose record sits at ``current_log_offset`` (None:
    nothing committed): the record later in the log wins."""
    return current_log_offset is None or current_log_offset < candidate.log_offset
