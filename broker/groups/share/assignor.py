"""The share groups' assignor: Kafka's SimpleAssignor (``group.share.assignors`` = ``simple``).

A share partition is consumed by many members at once, so the assignor's job is not exclusivity but spread:

* every partition of a subscribed topic goes to at least one of its subscribers;
* with at least as many partitions as members, each partition goes to exactly one member and the members' counts
  differ by at most one;
* with more members than partitions, each member gets exactly one partition and each partition goes to several
  members, their numbers differing by at most one (so ten consumers on one partition all consume it);
* what a member had in the previous target it keeps, as far as that balance allows, so a member joining or
  leaving moves as little as possible (a move costs the member's in-flight records a lock time-out elsewhere).

When all members subscribe to the same topics their partitions are spread together; otherwise each topic's
partitions are spread over that topic's subscribers. A pure function of its inputs, deterministic for equal ones,
so every coordinator that loads the group computes the same target.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from broker.groups.consumer.assignment import Assignment, TopicMetadata

SIMPLE_ASSIGNOR = "simple"

_Item = TypeVar("_Item", bound=Hashable)
_Bin = TypeVar("_Bin", bound=Hashable)
Partition = tuple[uuid.UUID, int]


def _balance(
    items: Sequence[_Item], bins: Sequence[_Bin], previous: Mapping[_Item, Sequence[_Bin]]
) -> dict[_Item, _Bin]:
    """Each item to one bin, the bins' loads differing by at most one; an item stays in a bin it was in while that
    bin has room. Deterministic in the order of ``items`` and ``bins``."""
    if not bins:
        return {}
    base, extra = divmod(len(items), len(bins))
    load = dict.fromkeys(bins, 0)
    placed: dict[_Item, _Bin] = {}
    for item in items:
        for was in previous.get(item, ()):
            if was not in load:
                continue
            if load[was] < base or (load[was] == base and extra > 0):
                if load[was] == base:
                    extra -= 1
                load[was] += 1
                placed[item] = was
                break
    heap = [(load[b], i, b) for i, b in enumerate(bins)]
    heapq.heapify(heap)
    for item in items:
        if item in placed:
            continue
        count, index, target = heapq.heappop(heap)
        if count == base:
            extra -= 1
        placed[item] = target
        heapq.heappush(heap, (count + 1, index, target))
    return placed


def _spread(
    members: Sequence[str], partitions: Sequence[Partition], current: Mapping[str, Assignment]
) -> dict[str, set[Partition]]:
    """``partitions`` over ``members``: one member per partition when there are enough partitions, else one
    partition per member (see the module docstring)."""
    out: dict[str, set[Partition]] = {m: set() for m in members}
    if not members or not partitions:
        return out
    wanted = set(partitions)
    had: dict[str, list[Partition]] = {
        m: sorted(tp for t, ps in current.get(m, {}).items() for p in ps if (tp := (t, p)) in wanted) for m in members
    }
    if len(partitions) >= len(members):
        holders: dict[Partition, list[str]] = {}
        for member in members:
            for tp in had[member]:
                holders.setdefault(tp, []).append(member)
        for tp, member in _balance(partitions, members, holders).items():
            out[member].add(tp)
    else:
        for member, tp in _balance(members, partitions, had).items():
            out[member].add(tp)
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
