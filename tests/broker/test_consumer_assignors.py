"""The KIP-848 server-side assignors ``uniform`` and ``range`` as pure functions: what a consumer group's members
would notice (who reads which partition, how many move when one of them joins or leaves, whether it stays in its
rack), checked on hand-made groups and on seeded random ones."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Mapping

import pytest

from broker.groups.consumer.assignment import MemberSubscription, TopicMetadata
from broker.groups.consumer.assignors import ASSIGNORS, DEFAULT_ASSIGNOR_NAMES, assignor_named
from broker.groups.consumer.assignors.range import RangeAssignor
from broker.groups.consumer.assignors.uniform import UniformAssignor

Result = dict[str, dict[uuid.UUID, frozenset[int]]]
Topics = dict[uuid.UUID, TopicMetadata]
Members = dict[str, MemberSubscription]

UNIFORM = UniformAssignor()
RANGE = RangeAssignor()


def tid(n: int) -> uuid.UUID:
    return uuid.UUID(int=n)


def topics_of(*counts: int, racks: Mapping[int, Mapping[int, frozenset[str]]] | None = None) -> Topics:
    """Topics ``tid(1)``, ``tid(2)``, ... with the given partition counts (and racks by topic number)."""
    return {tid(i): TopicMetadata(tid(i), f"t{i}", n, (racks or {}).get(i, {})) for i, n in enumerate(counts, start=1)}


def sub(
    *topic_numbers: int,
    current: Mapping[uuid.UUID, frozenset[int]] | None = None,
    rack: str | None = None,
    instance: str | None = None,
) -> MemberSubscription:
    return MemberSubscription(rack, frozenset(tid(i) for i in topic_numbers), current or {}, instance)


def with_current(members: Members, result: Result) -> Members:
    """The group at its next epoch: each member's current assignment is its share of ``result``."""
    return {
        m: MemberSubscription(s.rack_id, s.subscribed_topic_ids, result.get(m, {}), s.instance_id)
        for m, s in members.items()
    }


def size(assignment: Mapping[uuid.UUID, frozenset[int]]) -> int:
    return sum(len(ps) for ps in assignment.values())


def owners(result: Result) -> dict[tuple[uuid.UUID, int], str]:
    return {(t, p): m for m, a in result.items() for t, ps in a.items() for p in ps}


def moved(before: Result, after: Result) -> int:
    """Partitions taken from a member that is still in the group (a leaver's partitions must move)."""
    old, new = owners(before), owners(after)
    return sum(1 for tp, m in old.items() if m in after and tp in new and new[tp] != m)


def check_complete(members: Members, topics: Topics, result: Result) -> None:
    """Every member is answered; every partition of a subscribed, existing topic goes to exactly one of its
    subscribers; nothing else is assigned."""
    assert set(result) == set(members)
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for member_id, assignment in result.items():
        for topic_id, partitions in assignment.items():
            assert partitions, "an empty partition set is left out"
            assert topic_id in members[member_id].subscribed_topic_ids and topic_id in topics
            for p in partitions:
                assert 0 <= p < topics[topic_id].num_partitions
                assert (topic_id, p) not in seen, f"{topic_id}/{p} given to {seen.get((topic_id, p))} and {member_id}"
                seen[(topic_id, p)] = member_id
    subscribed = {t for s in members.values() for t in s.subscribed_topic_ids if t in topics}
    assert len(seen) == sum(topics[t].num_partitions for t in subscribed)


def check_topic_balance(members: Members, result: Result) -> None:
    """Kafka's heterogeneous balance: for each topic, no member holding one of its partitions has two or more
    partitions more than another of its subscribers (moving one would improve balance)."""
    load = {m: size(a) for m, a in result.items()}
    topic_ids = {t for a in result.values() for t in a}
    for topic_id in topic_ids:
        subscribers = [m for m, s in members.items() if topic_id in s.subscribed_topic_ids]
        lowest = min(load[m] for m in subscribers)
        for m in subscribers:
            if topic_id in result[m]:
                assert load[m] - lowest <= 1, (topic_id, m, load[m], lowest)


def test_registry_names_kafka_defaults() -> None:
    assert set(ASSIGNORS) == {"uniform", "range"}
    assert DEFAULT_ASSIGNOR_NAMES == ("uniform", "range")
    assert assignor_named(DEFAULT_ASSIGNOR_NAMES[0]) is ASSIGNORS["uniform"]
    ranged = assignor_named("range")
    assert ranged is not None and ranged.name == "range"
    assert assignor_named("cooperative-sticky") is None


@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
def test_empty_group_and_nothing_to_assign(assignor: UniformAssignor | RangeAssignor) -> None:
    topics = topics_of(4)
    assert assignor.assign({}, topics) == {}
    # No subscription, or subscriptions only to topics that do not exist: every member answered with nothing.
    members = {"a": sub(), "b": sub(9), "c": sub(9, current={tid(9): frozenset({0})})}
    assert assignor.assign(members, topics) == {"a": {}, "b": {}, "c": {}}
    assert assignor.assign({"a": sub(1)}, topics_of(0)) == {"a": {}}


def test_uniform_balances_same_subscriptions() -> None:
    topics = topics_of(5, 7, 11)
    members = {f"m{i}": sub(1, 2, 3) for i in range(7)}
    result = UNIFORM.assign(members, topics)
    check_complete(members, topics, result)
    assert sorted(size(a) for a in result.values()) == [3, 3, 3, 3, 3, 4, 4]


def test_uniform_join_moves_only_the_new_members_share() -> None:
    topics = topics_of(50, 50)
    members = {f"m{i:02d}": sub(1, 2) for i in range(10)}
    before = UNIFORM.assign(members, topics)
    # The newcomer's id sorts first: the remainder's extra partition stays with a member that already has it.
    grown = with_current(members, before) | {"a-new": sub(1, 2)}
    after = UNIFORM.assign(grown, topics)
    check_complete(grown, topics, after)
    assert size(after["a-new"]) == 100 // 11
    assert moved(before, after) == size(after["a-new"])
    assert all(after[m][t] <= before[m][t] for m in members for t in after[m])


@pytest.mark.parametrize("partitions", [100, 103])
def test_uniform_leave_moves_only_the_leavers_partitions(partitions: int) -> None:
    topics = topics_of(partitions)
    members = {f"m{i:02d}": sub(1) for i in range(10)}
    before = UNIFORM.assign(members, topics)
    leaver = max(members, key=lambda m: size(before[m]))
    shrunk = {m: s for m, s in with_current(members, before).items() if m != leaver}
    after = UNIFORM.assign(shrunk, topics)
    check_complete(shrunk, topics, after)
    assert moved(before, after) == 0
    assert all(before[m][tid(1)] <= after[m][tid(1)] for m in shrunk)
    assert max(size(a) for a in after.values()) - min(size(a) for a in after.values()) <= 1


def test_uniform_different_subscriptions_balance_per_topic() -> None:
    topics = topics_of(6, 6)
    members = {"a": sub(1), "b": sub(1, 2), "c": sub(2)}
    result = UNIFORM.assign(members, topics)
    check_complete(members, topics, result)
    assert {m: size(a) for m, a in result.items()} == {"a": 4, "b": 4, "c": 4}
    # A member subscribing to the first topic only takes its share of that topic; nothing of the second moves.
    grown = with_current(members, result) | {"d": sub(1)}
    after = UNIFORM.assign(grown, topics)
    check_complete(grown, topics, after)
    check_topic_balance(grown, after)
    assert set(after["d"]) == {tid(1)}
    assert moved(result, after) == size(after["d"])
    assert {p: m for (t, p), m in owners(after).items() if t == tid(2)} == {
        p: m for (t, p), m in owners(result).items() if t == tid(2)
    }


def test_uniform_drops_what_a_member_no_longer_may_hold() -> None:
    topics = topics_of(4, 4)
    # "a" had topic 2 (now unsubscribed), a topic that no longer exists and partitions past the count of topic 1
    # (recreated smaller); "b" claims a partition "a" also claims: the first in member order keeps it.
    current = {tid(1): frozenset({0, 1, 7}), tid(2): frozenset({0, 1, 2, 3}), tid(9): frozenset({0})}
    members = {"a": sub(1, 9, current=current), "b": sub(1, 2, current={tid(1): frozenset({1, 2})})}
    result = UNIFORM.assign(members, topics)
    check_complete(members, topics, result)
    assert tid(2) not in result["a"] and tid(9) not in result["a"]
    assert result["a"][tid(1)] >= {0, 1}
    # Balance first: "b" alone reads topic 2, so topic 1 is left to "a" (four partitions each).
    assert result == {"a": {tid(1): {0, 1, 2, 3}}, "b": {tid(2): {0, 1, 2, 3}}}


def test_uniform_prefers_members_in_the_partitions_rack() -> None:
    # Even partitions are served in rack "a", odd ones in rack "b"; two members in each rack.
    racks = {1: {p: frozenset({"a" if p % 2 == 0 else "b"}) for p in range(8)}}
    topics = topics_of(8, racks=racks)
    members = {"a1": sub(1, rack="a"), "a2": sub(1, rack="a"), "b1": sub(1, rack="b"), "b2": sub(1, rack="b")}
    result = UNIFORM.assign(members, topics)
    check_complete(members, topics, result)
    for member_id, assignment in result.items():
        assert len(assignment[tid(1)]) == 2
        assert all(racks[1][p] == {member_id[0]} for p in assignment[tid(1)]), (member_id, assignment)
    # Everyone currently reading across racks: balance holds and the partitions come home to their racks.
    crossed = {m: frozenset(p + 1 if p % 2 == 0 else p - 1 for p in result[m][tid(1)]) for m in result}
    crossed_members = {m: sub(1, rack=m[0], current={tid(1): crossed[m]}) for m in members}
    assert UNIFORM.assign(crossed_members, topics) == result
    # Without member racks the same topic is assigned as if it had none.
    plain = {m: sub(1) for m in members}
    assert UNIFORM.assign(plain, topics) == UNIFORM.assign(plain, topics_of(8))


def test_uniform_racks_never_break_balance() -> None:
    # Six partitions in rack "a", two in rack "b"; one member in "a" and three in "b": two each whatever the racks.
    racks = {1: {p: frozenset({"a" if p < 6 else "b"}) for p in range(8)}}
    topics = topics_of(8, racks=racks)
    members = {"a1": sub(1, rack="a"), "b1": sub(1, rack="b"), "b2": sub(1, rack="b"), "b3": sub(1, rack="b")}
    result = UNIFORM.assign(members, topics)
    check_complete(members, topics, result)
    assert {m: size(a) for m, a in result.items()} == {"a1": 2, "b1": 2, "b2": 2, "b3": 2}
    assert result["a1"][tid(1)] <= set(range(6))
    assert {6, 7} <= {p for m in ("b1", "b2", "b3") for p in result[m][tid(1)]}


def test_uniform_racks_break_ties_with_different_subscriptions() -> None:
    # Both members end with one partition of topic 1 either way; with racks each gets the one in its rack.
    racks = {1: {0: frozenset({"b"}), 1: frozenset({"a"})}}
    members = {"m1": sub(1, 2, rack="a"), "m2": sub(1, 3, rack="b")}
    plain = UNIFORM.assign(members, topics_of(2, 1, 1))
    assert plain["m1"][tid(1)] == {0} and plain["m2"][tid(1)] == {1}
    result = UNIFORM.assign(members, topics_of(2, 1, 1, racks=racks))
    check_complete(members, topics_of(2, 1, 1), result)
    assert result["m1"][tid(1)] == {1} and result["m2"][tid(1)] == {0}


def test_range_gives_contiguous_co_partitioned_ranges() -> None:
    topics = topics_of(7, 7, 2)
    members = {"m2": sub(1, 2), "m0": sub(1, 2, 3), "m1": sub(1, 2, 3)}
    result = RANGE.assign(members, topics)
    check_complete(members, topics, result)
    for topic_id in (tid(1), tid(2)):
        assert [result[m][topic_id] for m in ("m0", "m1", "m2")] == [{0, 1, 2}, {3, 4}, {5, 6}]
    # Topic 3 is ranged over its own two subscribers.
    assert result["m0"][tid(3)] == {0} and result["m1"][tid(3)] == {1} and tid(3) not in result["m2"]
    # More members than partitions: the last ones get none of that topic.
    crowd = {f"m{i}": sub(3) for i in range(4)}
    assert [RANGE.assign(crowd, topics)[f"m{i}"] for i in range(4)] == [{tid(3): {0}}, {tid(3): {1}}, {}, {}]


def test_range_keeps_ranges_of_static_members_across_a_rolling_bounce() -> None:
    topics = topics_of(6)
    members = {"x": sub(1, instance="i2"), "y": sub(1, instance="i1"), "a-dynamic": sub(1)}
    result = RANGE.assign(members, topics)
    assert [result[m][tid(1)] for m in ("y", "x", "a-dynamic")] == [{0, 1}, {2, 3}, {4, 5}]
    bounced = {"z": sub(1, instance="i2"), "b": sub(1, instance="i1"), "a-dynamic": sub(1)}
    after = RANGE.assign(bounced, topics)
    assert after["b"] == result["y"] and after["z"] == result["x"]


def test_range_ignores_racks_and_current() -> None:
    racks = {1: {p: frozenset({"b"}) for p in range(4)}}
    members = {"m0": sub(1, rack="a", current={tid(1): frozenset({3})}), "m1": sub(1, rack="b")}
    assert RANGE.assign(members, topics_of(4, racks=racks)) == {"m0": {tid(1): {0, 1}}, "m1": {tid(1): {2, 3}}}


@pytest.mark.parametrize("assignor", [UNIFORM, RANGE], ids=["uniform", "range"])
def test_same_group_in_any_order_gets_the_same_assignment(assignor: UniformAssignor | RangeAssignor) -> None:
    rng = random.Random(7)
    topics = topics_of(13, 5, 9)
    members = {f"m{i}": sub(*rng.sample([1, 2, 3], rng.randint(1, 3)), rack=rng.choice("ab")) for i in range(9)}
    expected = assignor.assign(members, topics)
    for _ in range(5):
        items = list(members.items())
        rng.shuffle(items)
        assert assignor.assign(dict(items), topics) == expected


def random_group(rng: random.Random) -> tuple[Members, Topics]:
    topic_count = rng.randint(0, 6)
    racked = rng.random() < 0.5
    all_racks = ["a", "b", "c"]
    topics = {}
    for i in range(1, topic_count + 1):
        n = rng.randint(0, 40)
        racks = {p: frozenset(rng.sample(all_racks, rng.randint(1, 2))) for p in range(n)} if racked else {}
        topics[tid(i)] = TopicMetadata(tid(i), f"t{i}", n, racks)
    homogeneous = rng.random() < 0.5
    shared = [tid(i) for i in range(1, topic_count + 2) if rng.random() < 0.7]  # topic_count + 1 does not exist
    members = {}
    for m in range(rng.randint(0, 15)):
        subscribed = shared if homogeneous else [tid(i) for i in range(1, topic_count + 2) if rng.random() < 0.5]
        rack = rng.choice([*all_racks, None]) if racked else None
        members[f"m{m:02d}"] = MemberSubscription(rack, frozenset(subscribed))
    return members, topics


def churn(rng: random.Random, members: Members, result: Result) -> Members:
    """The next epoch: current set from ``result``, then a member or two join or leave."""
    nxt = with_current(members, result)
    for _ in range(rng.randint(1, 2)):
        if nxt and rng.random() < 0.5:
            del nxt[rng.choice(sorted(nxt))]
        else:
            template = rng.choice(list(members.values())) if members else MemberSubscription(None, frozenset())
            nxt[f"{rng.choice('anz')}{rng.randrange(10**6):06d}"] = MemberSubscription(
                template.rack_id, template.subscribed_topic_ids
            )
    return nxt


def test_random_groups_keep_the_invariants() -> None:
    rng = random.Random(20261129)
    for _ in range(300):
        members, topics = random_group(rng)
        for _epoch in range(3):
            uniform = UNIFORM.assign(members, topics)
            check_complete(members, topics, uniform)
            assert UNIFORM.assign(with_current(members, uniform), topics) == uniform, "a settled group stays put"
            sizes = [size(a) for m, a in uniform.items() if members[m].subscribed_topic_ids & topics.keys()]
            subscriptions = {s.subscribed_topic_ids.intersection(topics) for s in members.values()}
            if len(subscriptions) == 1 and sizes:
                assert max(sizes) - min(sizes) <= 1
            else:
                check_topic_balance(members, uniform)
            ranged = RANGE.assign(members, topics)
            check_complete(members, topics, ranged)
            for assignment in ranged.values():
                for partitions in assignment.values():
                    assert max(partitions) - min(partitions) + 1 == len(partitions), "a range is contiguous"
            nxt = churn(rng, members, uniform)
            after = UNIFORM.assign(nxt, topics)
            if len(subscriptions) == 1 and not any(t.partition_racks for t in topics.values()):
                # Each member that stays keeps as many of its partitions as its new share allows.
                kept = owners(uniform).items() & owners(after).items()
                for m in nxt.keys() & members.keys():
                    assert sum(1 for (_, who) in kept if who == m) == min(size(uniform[m]), size(after[m]))
                # And no other balanced assignment keeps more: the remainder's extra partitions went to members
                # holding more than the minimum.
                if nxt and (total := sum(size(a) for a in after.values())):
                    minimum, extra = divmod(total, len(nxt))
                    held = [size(uniform[m]) for m in nxt.keys() & members.keys()]
                    best = sum(min(h, minimum) for h in held) + min(extra, sum(1 for h in held if h > minimum))
                    assert len(kept) == best
            members = nxt


def test_large_group_is_assigned_well_under_a_second() -> None:
    """1,000 members over 10,000 partitions, as the heartbeat path would ask at a new group epoch (the bound is
    loose for a shared machine; a quadratic step would take minutes)."""
    topics = topics_of(*[100] * 100)
    everything = frozenset(topics)
    rng = random.Random(3)
    homogeneous = {f"member-{i:04d}": MemberSubscription(rng.choice("abc"), everything) for i in range(1000)}
    mixed = {
        m: MemberSubscription(s.rack_id, frozenset(rng.sample(sorted(everything), 50))) for m, s in homogeneous.items()
    }
    for assignor, members in ((UNIFORM, homogeneous), (UNIFORM, mixed), (RANGE, homogeneous)):
        first = assignor.assign(members, topics)
        grown = with_current(members, first) | {"member-new": MemberSubscription("a", everything)}
        started = time.perf_counter()
        assignor.assign(grown, topics)
        assert time.perf_counter() - started < 1.0
