"""The share groups' assignor (Kafka's SimpleAssignor) as a pure function: every partition goes to at least one
subscriber, balanced; with more members than partitions each partition goes to ceil(members / partitions) of
them; and what a member had it keeps where balance allows."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from broker.groups.consumer.assignment import TopicMetadata
from broker.groups.share.assignor import assign_share

A, B = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = {A: TopicMetadata(A, "a", 4), B: TopicMetadata(B, "b", 2)}


def _owners(result: dict[str, dict[uuid.UUID, frozenset[int]]]) -> Counter[tuple[uuid.UUID, int]]:
    return Counter((t, p) for a in result.values() for t, ps in a.items() for p in ps)


@pytest.mark.parametrize("members", [1, 2, 3, 6])
def test_enough_partitions_each_goes_to_exactly_one_member(members: int) -> None:
    subs = {f"m{i}": frozenset((A, B)) for i in range(members)}
    result = assign_share(subs, TOPICS, {})
    owners = _owners(result)
    assert set(owners) == {(A, p) for p in range(4)} | {(B, p) for p in range(2)}
    assert set(owners.values()) == {1}
    counts = [sum(len(ps) for ps in a.values()) for a in result.values()]
    assert max(counts) - min(counts) <= 1


@pytest.mark.parametrize(("members", "counts"), [(7, [1] * 6 + [2]), (8, [1] * 8), (3, [1, 1, 2])])
def test_more_members_than_partitions_share_every_partition_evenly(members: int, counts: list[int]) -> None:
    subs = {f"m{i}": frozenset((B,)) for i in range(members)}
    result = assign_share(subs, TOPICS, {})
    assert sorted(sum(len(ps) for ps in a.values()) for a in result.values()) == counts
    sharing = -(-members // 2)
    assert _owners(result) == {(B, 0): sharing, (B, 1): sharing}


def test_a_partition_shared_by_a_leaving_member_stays_with_the_others() -> None:
    subs = {f"m{i}": frozenset((B,)) for i in range(4)}
    before = assign_share(subs, TOPICS, {})
    del subs["m3"]
    after = assign_share(subs, TOPICS, before)
    for member in subs:
        assert before[member][B] <= after[member][B]


def test_members_keep_what_they_had_when_one_joins() -> None:
    subs = {"m0": frozenset((A,)), "m1": frozenset((A,))}
    before = assign_share(subs, TOPICS, {})
    after = assign_share({**subs, "m2": frozenset((A,))}, TOPICS, before)
    for member in ("m0", "m1"):
        assert len(after[member][A] & before[member][A]) >= 1
    assert set(_owners(after).values()) == {1} and len(after["m2"][A]) >= 1


def test_heterogeneous_subscriptions_spread_each_topic_over_its_subscribers() -> None:
    result = assign_share({"x": frozenset((A,)), "y": frozenset((A, B)), "z": frozenset()}, TOPICS, {})
    assert result["z"] == {}
    assert result["y"][B] == frozenset((0, 1))
    assert result["x"][A] | result["y"][A] == frozenset(range(4)) and not result["x"][A] & result["y"][A]


def test_no_topics_or_members() -> None:
    assert assign_share({}, TOPICS, {}) == {}
    assert assign_share({"m": frozenset((uuid.UUID(int=9),))}, TOPICS, {}) == {"m": {}}
