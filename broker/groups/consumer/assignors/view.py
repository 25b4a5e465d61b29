"""The group as both built-in assignors see it: members numbered in a fixed order, each with the subscribed topics
that exist, and each topic with its subscribers.

Members are numbered so the assignors work on small integers and plain lists (the heartbeat path runs them at every
group epoch, for groups of a thousand members); the numbering is the assignor's tie-breaker, which is what makes
an assignment deterministic for equal inputs whatever order the group's dict has.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from broker.groups.consumer.assignment import MemberSubscription, TopicMetadata

#: An assignor's result: member id to its partitions by topic id.
GroupAssignment = dict[str, dict[uuid.UUID, frozenset[int]]]


@dataclass(frozen=True, slots=True)
class GroupView:
    """``member_ids[i]`` is member ``i``; ``subscriptions[i]`` its subscribed topics that ``partition_counts`` knows;
    ``subscribers[t]`` the members of topic ``t`` in ascending number; ``homogeneous`` when every member
    subscribes to the same (known) topics."""

    member_ids: Sequence[str]
    subscriptions: Sequence[frozenset[uuid.UUID]]
    partition_counts: Mapping[uuid.UUID, int]
    subscribers: Mapping[uuid.UUID, list[int]]
    homogeneous: bool


def view_of(
    members: Mapping[str, MemberSubscription],
    topics: Mapping[uuid.UUID, TopicMetadata],
    order: Sequence[str] | None = None,
) -> GroupView:
    """The view with members numbered in ``order`` (member ids ascending unless given).

    A topic a member subscribes to but ``topics`` lacks (not created yet, or deleted) is left out: the assignment
    is for the topics that exist, and the group assigns again when the metadata changes.
    """
    member_ids = sorted(members) if order is None else list(order)
    # Members sharing a subscription are handled together: a frozenset hashes once (its hash is cached) while each
    # topic id hashes in Python, so a group of a thousand members on a thousand topics costs a thousand, not a
    # million, topic lookups.
    known: dict[frozenset[uuid.UUID], frozenset[uuid.UUID]] = {}
    by_subscription: dict[frozenset[uuid.UUID], list[int]] = {}
    subscriptions = []
    for index, member_id in enumerate(member_ids):
        subscribed = members[member_id].subscribed_topic_ids
        existing = known.get(subscribed)
        if existing is None:
            existing = known[subscribed] = subscribed.intersection(topics)
        subscriptions.append(existing)
        by_subscription.setdefault(existing, []).append(index)
    subscribers: dict[uuid.UUID, list[int]] = {}
    for subscribed, indexes in by_subscription.items():
        for topic_id in subscribed:
            subscribers.setdefault(topic_id, []).extend(indexes)
    if len(by_subscription) > 1:
        for indexes in subscribers.values():
            indexes.sort()
    partition_counts = {t: max(0, topics[t].num_partitions) for t in sorted(subscribers)}
    homogeneous = len(by_subscription) <= 1
    return GroupView(member_ids, subscriptions, partition_counts, subscribers, homogeneous)


def current_partitions(view: GroupView, index: int, member: MemberSubscription) -> Iterator[tuple[uuid.UUID, int]]:
    """Member ``index``'s current partitions it may keep: of topics it still subscribes to, and that still exist
    (a partition number past the topic's count is dropped), topic by topic in ascending order."""
    subscribed = view.subscriptions[index]
    for topic_id in sorted(member.current):
        if topic_id not in subscribed:
            continue
        count = view.partition_counts[topic_id]
        for partition in sorted(member.current[topic_id]):
            if 0 <= partition < count:
                yield topic_id, partition


def empty_assignment(members: Mapping[str, MemberSubscription]) -> GroupAssignment:
    """Every member given nothing (an empty group, or no subscribed topic exists)."""
    return {member_id: {} for member_id in members}


def as_assignment(view: GroupView, owned: Sequence[Mapping[uuid.UUID, list[int]]]) -> GroupAssignment:
    """The result from each member's partition lists, by member number; a topic with none is left out."""
    return {
        member_id: {t: frozenset(ps) for t, ps in owned[index].items() if ps}
        for index, member_id in enumerate(view.member_ids)
    }
