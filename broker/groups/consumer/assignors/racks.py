"""Which members share a rack with which partitions, and whether that is worth acting on.

A consumer fetching from a broker in its own rack (availability zone) costs nothing in cross-zone traffic, so the
uniform assignor prefers such a member for a partition, but never at the price of balance. Rack-awareness applies
under the rule Kafka's rack-aware uniform assignment used (Kafka 3.7; its 4.x assignors dropped it): some member
has a rack, some member's rack serves some partition, and the partitions do not all have the same racks (if they
did, every member would be equally near every partition and there would be nothing to prefer).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from broker.groups.consumer.assignment import TopicMetadata

_NO_RACKS: frozenset[str] = frozenset()


class RackPlacement:
    """The racks of the members (by number) and of the subscribed topics' partitions; ``enabled`` is the rule above.

    A member without a rack, or a partition without one, matches nothing and mismatches nothing: rack-awareness
    only ever moves a partition towards a member in one of its racks.
    """

    __slots__ = ("_topics", "enabled", "member_racks", "members_by_rack")

    def __init__(
        self,
        member_racks: Sequence[str | None],
        topics: Mapping[uuid.UUID, TopicMetadata],
        partition_counts: Mapping[uuid.UUID, int],
    ) -> None:
        self.member_racks = [rack or None for rack in member_racks]
        self.members_by_rack: dict[str, list[int]] = {}
        for index, rack in enumerate(self.member_racks):
            if rack is not None:
                self.members_by_rack.setdefault(rack, []).append(index)
        self._topics = topics
        self.enabled = bool(self.members_by_rack) and self._racks_differ(partition_counts)

    def _racks_differ(self, partition_counts: Mapping[uuid.UUID, int]) -> bool:
        all_racks: set[str] = set()
        first: frozenset[str] | None = None
        uniform = True
        for topic_id, count in partition_counts.items():
            racks_of = self._topics[topic_id].partition_racks
            for partition in range(count):
                racks = racks_of.get(partition, _NO_RACKS)
                all_racks |= racks
                if first is None:
                    first = racks
                elif uniform and racks != first:
                    uniform = False
        return not uniform and not all_racks.isdisjoint(self.members_by_rack)

    def racks(self, topic_id: uuid.UUID, partition: int) -> frozenset[str]:
        """The racks serving the partition (empty when unknown)."""
        return self._topics[topic_id].partition_racks.get(partition, _NO_RACKS)

    def matches(self, index: int, topic_id: uuid.UUID, partition: int) -> bool:
        """Member ``index`` is in one of the partition's racks."""
        rack = self.member_racks[index]
        return rack is not None and rack in self.racks(topic_id, partition)

    def mismatches(self, index: int, topic_id: uuid.UUID, partition: int) -> bool:
        """Member ``index`` and the partition both have racks, and none is shared."""
        rack = self.member_racks[index]
        if rack is None:
            return False
        racks = self.racks(topic_id, partition)
        return bool(racks) and rack not in racks

    def rack_members(self, topic_id: uuid.UUID, partition: int) -> int:
        """How many members are in one of the partition's racks (the fewer, the sooner it must be placed)."""
        return sum(len(self.members_by_rack.get(rack, ())) for rack in self.racks(topic_id, partition))
