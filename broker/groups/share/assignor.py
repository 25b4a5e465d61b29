"""The share groups' assignor: Kafka's SimpleAssignor (``group.share.assignors`` = ``simple``).

A share partition is consumed by many members at once, so the assignor's job is not exclusivity but spread:

* every partition of a subscribed topic goes to at least one of its subscribers;
* with at least as many partitions as members, each partition goes to exactly one member and the members' counts
  differ by at most one;
* with more members than partitions, each partition goes to ``ceil(members / partitions)`` members (so ten
  consumers on one partition all consume it), the members' counts again differing by at most one;
* what a member had in the previous target it keeps, as far as that balance allows, so a member joining or
  leaving moves as little as possible (a move costs the member's in-flight records a lock time-out elsewhere).

When all members subscribe to the same topics their partitions are spread together; otherwise each topic's
partitions are spread over that topic's subscribers. A pure function of its inputs, deterministic for equal ones,
so every coordinator that loads the group computes the same target.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from broker.groups.consumer.assignment import Assignment, TopicMetadata

SIMPLE_ASSIGNOR = "simple"

Partition = tuple[uuid.UUID, int]


def _spread(
    members: Sequence[str], partitions: Sequence[Partition], current: Mapping[str, Assignment]
) -> dict[str, set[Partition]]:
    """``partitions`` over ``members`` as Kafka's SimpleHomogeneousAssignmentBuilder spreads them: each partition to
    ``ceil(members / partitions)`` members (one while partitions are enough), the members' counts differing by at
    most one, a member keeping what it had in ``current`` while both quotas allow (balance before stickiness)."""
    out: dict[str, set[Partition]] = {m: set() for m in members}
    if not members or not partitions:
        return out
    sharing = -(-len(members) // len(partitions))
    base, extra = divmod(sharing * len(partitions), len(members))
    holders: dict[Partition, int] = dict.fromkeys(partitions, 0)

    def room(member: str) -> bool:
        have = len(out[member])
        return have < base or (have == base and extra > 0)

    def give(member: str, tp: Partition) -> None:
        nonlocal extra
        if len(out[member]) == base:
            extra -= 1
        out[member].add(tp)
        holders[tp] += 1

    for member in members:
        had = sorted(tp for t, ps in current.get(member, {}).items() for p in ps if (tp := (t, p)) in holders)
        for tp in had:
            if holders[tp] < sharing and room(member):
                give(member, tp)
    order = {m: i for i, m in enumerate(members)}
    for tp in partitions:
        while holders[tp] < sharing:
            candidates = [m for m in members if tp not in out[m] and room(m)]
            if not candidates:
                break  # every member with room holds it already: a slight imbalance, which Kafka tolerates too
            give(min(candidates, key=lambda m: (len(out[m]), order[m])), tp)
    return out


def assign_share(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    topics: Mapping[uuid.UUID, TopicMetadata],
    current: Mapping[str, Assignment],
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """The target assignment: each member id of ``subscriptions`` (member → subscribed topic ids that exist) to
    its partitions by topic id, ``current`` being the previous target (for stickiness)."""
    members = sorted(subscriptions)
    found: dict[str, set[Partition]] = {m: set() for m in members}
    by_name = sorted(topics.values(), key=lambda t: (t.name, t.topic_id.bytes))
    if len({subscriptions[m] for m in members}) <= 1:
        subscribed = subscriptions[members[0]] if members else frozenset()
        partitions = [(t.topic_id, p) for t in by_name if t.topic_id in subscribed for p in range(t.num_partitions)]
        found = _spread(members, partitions, current)
    else:
        for topic in by_name:
            subscribers = [m for m in members if topic.topic_id in subscriptions[m]]
            partitions = [(topic.topic_id, p) for p in range(topic.num_partitions)]
            for member, got in _spread(subscribers, partitions, current).items():
                found[member] |= got
    out: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
    for member, got in found.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, partition in got:
            by_topic.setdefault(topic_id, set()).add(partition)
        out[member] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out
