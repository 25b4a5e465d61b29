"""Committed offsets of one group, and Kafka's rules for when they expire.

Expiry follows KIP-211 (Kafka 2.1+): while a consumer group has members, offsets of the topics it subscribes to
never expire; once it is Empty the retention clock starts at the moment it became empty. Groups that only commit
(no group management, no protocol type) expire each offset by its commit time. A commit that asked for an
explicit retention (OffsetCommit v2-v4) expires at that absolute time instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from broker.groups.offsets_schema import OffsetValue

TopicPartition = tuple[str, int]

OffsetAndMetadata = OffsetValue


class GroupOffsets:
    """The committed offsets of one group, keyed by (topic, partition)."""

    def __init__(self) -> None:
        self._offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        #: Where each committed value's record sits in ``__consumer_offsets`` (-1: not known), so a transactional
        #: commit decided later cannot replace an ordinary commit written after it (txn_offsets.py).
        self._log_offsets: dict[TopicPartition, int] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def __iter__(self) -> Iterator[tuple[TopicPartition, OffsetAndMetadata]]:
        return iter(sorted(self._offsets.items()))

    def get(self, topic: str, partition: int) -> OffsetAndMetadata | None:
        return self._offsets.get((topic, partition))

    def put(self, topic: str, partition: int, value: OffsetAndMetadata, log_offset: int = -1) -> None:
        self._offsets[(topic, partition)] = value
        self._log_offsets[(topic, partition)] = log_offset

    def log_offset(self, topic: str, partition: int) -> int | None:
        """The ``__consumer_offsets`` offset of the committed value's record; None when nothing is committed."""
        return self._log_offsets.get((topic, partition))

    def remove(self, topic: str, partition: int) -> OffsetAndMetadata | None:
        self._log_offsets.pop((topic, partition), None)
        return self._offsets.pop((topic, partition), None)

    def topics(self) -> set[str]:
        return {topic for topic, _ in self._offsets}

    def partitions_of(self, topic: str) -> list[int]:
        return sorted(p for t, p in self._offsets if t == topic)

    def expired(
        self,
        now_ms: int,
        retention_ms: int,
        *,
        empty_since_ms: int | None,
        keep: Callable[[str], bool],
    ) -> list[TopicPartition]:
        """The partitions whose offsets have expired at ``now_ms``.

        ``empty_since_ms`` is when a managed group became Empty (None for a group with members or for a
        commit-only group); ``keep(topic)`` is True for topics a live group still subscribes to.
        """
        out: list[TopicPartition] = []
        for tp, value in self._offsets.items():
            if keep(tp[0]):
                continue
            if value.expire_timestamp_ms is not None:
                if now_ms >= value.expire_timestamp_ms:
                    out.append(tp)
                continue
            base = empty_since_ms if empty_since_ms is not None else value.commit_timestamp_ms
            if now_ms - base >= retention_ms:
                out.append(tp)
        return sorted(out)
