"""The ``range`` assignor, as Kafka 4.2's server-side RangeAssignor (KIP-848 flavour).

Per topic, the partitions are cut into contiguous ranges over the topic's subscribers in order: ``n // s`` each,
the first ``n % s`` one more. Every member holds the same place in that order for every topic, so topics with the
same partition count and the same subscribers are co-partitioned (a member gets partitions 0-2 of both): what
joins of streams need.

Kafka's is not sticky beyond that order, and neither is this one: the ranges are recomputed from the order at every
assignment, so a member joining or leaving shifts the ranges after it. The order is static members by
``group.instance.id`` first (a rolling bounce gives each instance its ranges back although its member id changed),
then dynamic members by member id. Kafka 4.2's range assignor is not rack-aware (rack-awareness would break the
contiguous ranges this assignor exists for), so ``rack_id`` plays no part.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from broker.groups.consumer.assignment import MemberSubscription, TopicMetadata
from broker.groups.consumer.assignors.view import GroupAssignment, empty_assignment, view_of


class RangeAssignor:
    """Kafka's ``range`` server-side assignor (``org.apache.kafka.coordinator.group.assignor.RangeAssignor``)."""

    @property
    def name(self) -> str:
        return "range"

    def assign(
        self, members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, TopicMetadata]
    ) -> GroupAssignment:
        view = view_of(members, topics, order=sorted(members, key=lambda m: _order_key(m, members[m])))
        result = empty_assignment(members)
        for topic_id, count in view.partition_counts.items():
            subscribers = view.subscribers[topic_id]
            quota, extra = divmod(count, len(subscribers))
            start = 0
            for position, index in enumerate(subscribers):
                end = start + quota + (1 if position < extra else 0)
                if end > start:
                    result[view.member_ids[index]][topic_id] = frozenset(range(start, end))
                start = end
        return result


def _order_key(member_id: str, member: MemberSubscription) -> tuple[bool, str, str]:
    """Static members first, by instance id; then dynamic members, by member id."""
    if member.instance_id is not None:
        return False, member.instance_id, member_id
    return True, member_id, ""
