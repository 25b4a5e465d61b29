"""The KIP-848 consumer group state machine against Kafka 4.2's group coordinator (``GroupMetadataManager``'s
consumer group heartbeat, ``CurrentAssignmentBuilder``, ``ConsumerGroup``), driven directly with the real
``uniform`` assignor and hand-built cluster topics.

``Client`` plays a well-behaved consumer: it holds what the last answer assigned it and reports that as its owned
partitions on the next heartbeat (it revokes at once). The invariant a user cares about, checked after every step
of the randomized runs: no partition is ever held by two members, on the coordinator's side or the clients'.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest
from kio.schema.errors import ErrorCode

from broker.groups.consumer.assignment import Assignment, TopicMetadata
from broker.groups.consumer.assignors.uniform import UniformAssignor
from broker.groups.consumer.changes import GroupEpochChanged, TargetMemberChanged
from broker.groups.consumer.cluster_topics import ClusterTopics, metadata_hash
from broker.groups.consumer.group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupState,
    HeartbeatRequest,
    HeartbeatResult,
)
from broker.groups.consumer.member import MemberState

SESSION_MS = 45_000
REBALANCE_MS = 10_000


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"fjord-test/{name}")


def cluster(**partitions: int) -> ClusterTopics:
    by_name = {name: TopicMetadata(topic_id(name), name, count) for name, count in partitions.items()}
    return ClusterTopics(by_name=by_name, regex_visible=frozenset(by_name))


def config(max_size: int = 2**31 - 1) -> ConsumerGroupConfig:
    return ConsumerGroupConfig(
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=5_000,
        max_size=max_size,
        assignors={"uniform": UniformAssignor()},
    )


def parts(name: str, *numbers: int) -> dict[uuid.UUID, frozenset[int]]:
    return {topic_id(name): frozenset(numbers)}


def count(assignment: Assignment | None) -> int:
    return sum(len(ps) for ps in (assignment or {}).values())


def flat(assignment: Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


@dataclass
class Client:
    """A consumer that applies every answer at once (revoking immediately) and reports what it holds."""

    member_id: str
    topics: tuple[str, ...] = ("orders",)
    regex: str | None = None
    instance_id: str | None = None
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    last: HeartbeatResult | None = None

    def heartbeat(
        self, group: ConsumerGroup, now_ms: int, topics: ClusterTopics, *, epoch: int | None = None, full: bool = False
    ) -> HeartbeatResult:
        joining = self.epoch == 0 if epoch is None else epoch == 0
        sending_full = joining or full
        request = HeartbeatRequest(
            member_id=self.member_id,
            member_epoch=self.epoch if epoch is None else epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=REBALANCE_MS if sending_full else -1,
            subscribed_topic_names=(self.topics if self.regex is None else None) if sending_full else None,
            subscribed_topic_regex=self.regex if sending_full else None,
            owned=dict(self.owned),
        )
        result = group.heartbeat(now_ms, request, topics)
        self.last = result
        if result.error is ErrorCode.none and epoch is None:
            self.epoch = result.member_epoch
            if result.assignment is not None:
                self.owned = dict(result.assignment)
        return result

    def leave(self, group: ConsumerGroup, now_ms: int, topics: ClusterTopics, epoch: int = -1) -> HeartbeatResult:
        result = group.heartbeat(
            now_ms, HeartbeatRequest(member_id=self.member_id, member_epoch=epoch, instance_id=self.instance_id), topics
        )
        self.owned = {}
        self.epoch = 0
        return result


def check_exclusive(group: ConsumerGroup, clients: Iterable[Client] = ()) -> None:
    """No partition held by two members: assigned or still being revoked on the coordinator, owned on clients."""
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for member in group.members.values():
        for tp in flat(member.assigned) | flat(member.pending_revocation):
            assert tp not in seen, f"{tp} held by {seen[tp]} and {member.member_id}"
            seen[tp] = member.member_id
    held: dict[tuple[uuid.UUID, int], str] = {}
    for client in clients:
        for tp in flat(client.owned):
            assert tp not in held, f"{tp} owned by clients {held[tp]} and {client.member_id}"
            held[tp] = client.member_id


def settle(group: ConsumerGroup, clients: list[Client], now_ms: int, topics: ClusterTopics, rounds: int = 8) -> None:
    for _ in range(rounds):
        for client in clients:
            assert client.heartbeat(group, now_ms, topics).error is ErrorCode.none
            check_exclusive(group, clients)
        if group.state is ConsumerGroupState.STABLE:
            return


def joined(group: ConsumerGroup, topics: ClusterTopics, *clients: Client, now_ms: int = 0) -> list[Client]:
    out = list(clients)
    for client in out:
        assert client.heartbeat(group, now_ms, topics).error is ErrorCode.none
    settle(group, out, now_ms, topics)
    assert group.state is ConsumerGroupState.STABLE
    return out


ORDERS6 = cluster(orders=6)


def test_first_member_gets_every_partition_at_epoch_one() -> None:
    group = ConsumerGroup("g", config(), 0)
    assert group.state is ConsumerGroupState.EMPTY
    a = Client("a")
    result = a.heartbeat(group, 0, ORDERS6)
    assert (result.error, result.member_epoch, result.heartbeat_interval_ms) == (ErrorCode.none, 1, 5_000)
    assert result.assignment == parts("orders", 0, 1, 2, 3, 4, 5)
    assert group.group_epoch == group.target_epoch == 1
    assert group.state is ConsumerGroupState.STABLE
    # A steady heartbeat carries no assignment: nothing changed.
    steady = a.heartbeat(group, 1_000, ORDERS6)
    assert (steady.member_epoch, steady.assignment) == (1, None)


def test_second_member_waits_for_the_first_to_revoke() -> None:
    group = ConsumerGroup("g", config(), 0)
    a, b = Client("a"), Client("b")
    a.heartbeat(group, 0, ORDERS6)
    joining = b.heartbeat(group, 10, ORDERS6)
    # B moves to the new epoch but gets nothing the first member still holds (UNRELEASED_PARTITIONS).
    assert (joining.member_epoch, joining.assignment) == (2, {})
    assert group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert group.state is ConsumerGroupState.RECONCILING
    # A is told to give half up, at its old epoch (UNREVOKED_PARTITIONS).
    told = a.heartbeat(group, 20, ORDERS6)
    assert told.member_epoch == 1 and count(told.assignment) == 3
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert count(group.members["a"].pending_revocation) == 3
    check_exclusive(group, [a, b])
    # B asks again: still nothing, A has not confirmed yet.
    waiting = b.heartbeat(group, 30, ORDERS6)
    assert waiting.assignment is None and b.owned == {}
    # A reports it no longer owns them: it reaches epoch 2, and then B gets them.
    moved = a.heartbeat(group, 40, ORDERS6)
    assert (moved.member_epoch, group.members["a"].state) == (2, MemberState.STABLE)
    got = b.heartbeat(group, 50, ORDERS6)
    assert count(got.assignment) == 3 and flat(b.owned).isdisjoint(flat(a.owned))
    assert group.members["b"].state is MemberState.STABLE
    assert group.state is ConsumerGroupState.STABLE


@pytest.mark.parametrize("seed", range(12))
def test_random_joins_leaves_and_heartbeats_never_share_a_partition(seed: int) -> None:
    rng = random.Random(seed)
    sizes = {"orders": 7, "payments": 3}
    topics = cluster(**sizes)
    group = ConsumerGroup("g", config(), 0)
    live: list[Client] = []
    gone: list[Client] = []
    now = 0
    names = iter(f"m{i}" for i in range(1000))
    for _ in range(120):
        now += rng.randint(1, 500)
        action = rng.random()
        if action < 0.15 and len(live) < 6:
            live.append(Client(next(names), topics=("orders", "payments")))
            live[-1].heartbeat(group, now, topics)
        elif action < 0.25 and live:
            leaving = live.pop(rng.randrange(len(live)))
            assert leaving.leave(group, now, topics).error is ErrorCode.none
            gone.append(leaving)
        elif action < 0.27:
            sizes["orders"] += 1
            topics = cluster(**sizes)
        elif action < 0.3 and live:
            # A client that stops heartbeating is fenced by its session time-out; it is out of the invariant.
            silent = live.pop(rng.randrange(len(live)))
            for client in live:
                client.heartbeat(group, now, topics)
            now += SESSION_MS + 1
            for client in live:
                # Everyone else heartbeats in the same instant the time-out fires.
                client.heartbeat(group, now - 1, topics)
            assert silent.member_id in group.tick(now)
            silent.owned = {}
        elif live:
            assert live[rng.randrange(len(live))].heartbeat(group, now, topics).error is ErrorCode.none
        check_exclusive(group, live)
        assert not group.tick(now), "nobody is late in this run"
    settle(group, live, now, topics, rounds=10)
    if live:
        assert group.state is ConsumerGroupState.STABLE
        assert all(m.member_epoch == group.group_epoch for m in group.members.values())
        held = set().union(*(flat(c.owned) for c in live))
        assert held == {(topic_id(name), p) for name, n in sizes.items() for p in range(n)}
        counts = sorted(count(c.owned) for c in live)
        assert counts[-1] - counts[0] <= 1
    else:
        assert group.state is ConsumerGroupState.EMPTY


def test_fencing_follows_kafkas_epoch_rules() -> None:
    topics = cluster(orders=4, payments=2)
    group = ConsumerGroup("g", config(), 0)
    a = Client("a")
    a.heartbeat(group, 0, topics)
    # A subscription change bumps the group epoch: epoch 2, with payments.
    a.topics = ("orders", "payments")
    assert a.heartbeat(group, 1, topics, full=True).member_epoch == 2 and count(a.owned) == 6
    # Dropping payments: revoke first at epoch 2, then epoch 3 once it is gone.
    a.topics = ("orders",)
    assert a.heartbeat(group, 2, topics, full=True).member_epoch == 2
    assert a.heartbeat(group, 3, topics).member_epoch == 3
    member = group.members["a"]
    assert (member.member_epoch, member.previous_member_epoch) == (3, 2)
    orders = parts("orders", 0, 1, 2, 3)

    def send(epoch: int, owned: Assignment | None) -> HeartbeatResult:
        return group.heartbeat(4, HeartbeatRequest(member_id="a", member_epoch=epoch, owned=owned), topics)

    assert send(4, orders).error is ErrorCode.fenced_member_epoch  # ahead of the coordinator
    assert send(1, orders).error is ErrorCode.fenced_member_epoch  # behind, and not the previous epoch
    # The previous epoch owning what it no longer has, or not saying what it owns: fenced (Kafka's isSubset).
    assert send(2, {**orders, **parts("payments", 0)}).error is ErrorCode.fenced_member_epoch
    assert send(2, None).error is ErrorCode.fenced_member_epoch
    # The previous epoch owning a part of its assignment: the answer moving it was lost; it is told again.
    tolerated = send(2, parts("orders", 0, 1))
    assert (tolerated.error, tolerated.member_epoch) == (ErrorCode.none, 3)
    assert group.group_epoch == 3


def test_rejoin_with_epoch_zero_and_the_same_member_id_keeps_the_member() -> None:
    group = ConsumerGroup("g", config(), 0)
    (a,) = joined(group, ORDERS6, Client("a"))
    a.owned = {}
    again = a.heartbeat(group, 10, ORDERS6, epoch=0)
    assert (again.error, again.member_epoch, count(again.assignment)) == (ErrorCode.none, 1, 6)
    assert group.group_epoch == 1


def test_unknown_member_id() -> None:
    group = ConsumerGroup("g", config(), 0)
    joined(group, ORDERS6, Client("a"))
    stranger = HeartbeatRequest(member_id="nobody", member_epoch=1, owned={})
    assert group.heartbeat(1, stranger, ORDERS6).error is ErrorCode.unknown_member_id
    leaving = HeartbeatRequest(member_id="nobody", member_epoch=-1)
    assert group.heartbeat(1, leaving, ORDERS6).error is ErrorCode.unknown_member_id
    assert group.group_epoch == 1


def test_leave_bumps_the_epoch_and_frees_the_partitions() -> None:
    group = ConsumerGroup("g", config(), 0)
    a, b = joined(group, ORDERS6, Client("a"), Client("b"))
    epoch = group.group_epoch
    b_parts = flat(b.owned)
    result = b.leave(group, 100, ORDERS6)
    assert (result.error, result.member_id, result.member_epoch) == (ErrorCode.none, "b", -1)
    assert group.group_epoch == epoch + 1 and "b" not in group.members
    assert all(group.owner_of(t, p) is None for t, p in b_parts)
    taken = a.heartbeat(group, 110, ORDERS6)
    assert taken.member_epoch == epoch + 1 and count(a.owned) == 6
    # The next heartbeat finds nothing new: the leave's epoch bump already accounted for the topics.
    a.heartbeat(group, 120, ORDERS6)
    assert group.group_epoch == epoch + 1


def test_static_member_steps_out_and_comes_back_under_a_new_member_id() -> None:
    group = ConsumerGroup("g", config(), 0)
    a, b = joined(group, ORDERS6, Client("a1", instance_id="i-a"), Client("b"))
    epoch = group.group_epoch
    a_parts = dict(a.owned)
    group.take_changes()
    left = a.leave(group, 100, ORDERS6, epoch=-2)
    assert (left.error, left.member_epoch) == (ErrorCode.none, -2)
    # It keeps its partitions: nobody else gets them, and the group epoch does not move.
    assert group.members["a1"].member_epoch == -2 and group.group_epoch == epoch
    assert group.state is ConsumerGroupState.RECONCILING
    assert all(group.owner_of(t, p) == "a1" for t, p in flat(a_parts))
    b.heartbeat(group, 110, ORDERS6)
    assert count(b.owned) == 3
    # Another process with the same instance id cannot join before the holder left; here it has.
    back = Client("a2", instance_id="i-a")
    result = back.heartbeat(group, 120, ORDERS6)
    assert (result.error, result.member_epoch, result.assignment) == (ErrorCode.none, epoch, a_parts)
    assert "a1" not in group.members and group.group_epoch == epoch
    changes = group.take_changes()
    assert TargetMemberChanged("a2", a_parts) in changes and TargetMemberChanged("a1", None) in changes
    assert not [c for c in changes if isinstance(c, GroupEpochChanged)]
    # The old member id is fenced by the instance that took over.
    old = HeartbeatRequest(member_id="a1", member_epoch=epoch, instance_id="i-a", owned=a_parts)
    assert group.heartbeat(130, old, ORDERS6).error is ErrorCode.fenced_instance_id
    check_exclusive(group, [back, b])


def test_unreleased_instance_id_while_the_holder_has_not_left() -> None:
    group = ConsumerGroup("g", config(), 0)
    joined(group, ORDERS6, Client("a1", instance_id="i-a"))
    intruder = Client("a2", instance_id="i-a")
    assert intruder.heartbeat(group, 10, ORDERS6).error is ErrorCode.unreleased_instance_id
    # Even the holder's own member id rejoining with epoch 0 must leave first (throwIfInstanceIdIsUnreleased).
    same = Client("a1", instance_id="i-a")
    assert same.heartbeat(group, 20, ORDERS6).error is ErrorCode.unreleased_instance_id
    assert list(group.members) == ["a1"] and group.group_epoch == 1


def test_static_member_that_never_returns_is_removed_at_its_session_time_out() -> None:
    group = ConsumerGroup("g", config(), 0)
    a, b = joined(group, ORDERS6, Client("a1", instance_id="i-a"), Client("b"))
    epoch = group.group_epoch
    a.leave(group, 1_000, ORDERS6, epoch=-2)
    b.heartbeat(group, 40_000, ORDERS6)
    assert group.tick(SESSION_MS - 1) == []
    # The session counts from the last heartbeat (at 0), not from the leave.
    assert group.tick(SESSION_MS) == ["a1"]
    assert group.group_epoch == epoch + 1
    b.heartbeat(group, SESSION_MS + 1, ORDERS6)
    assert count(b.owned) == 6


def test_session_time_out_removes_a_silent_member() -> None:
    group = ConsumerGroup("g", config(), 0)
    _a, b = joined(group, ORDERS6, Client("a"), Client("b"))
    b.heartbeat(group, 30_000, ORDERS6)
    assert group.next_deadline_ms() == SESSION_MS
    assert group.tick(SESSION_MS - 1) == []
    assert group.tick(SESSION_MS) == ["a"]
    assert list(group.members) == ["b"] and group.next_deadline_ms() == 30_000 + SESSION_MS
    b.heartbeat(group, SESSION_MS + 1, ORDERS6)
    assert count(b.owned) == 6


def test_member_that_does_not_revoke_within_its_rebalance_time_out_is_removed() -> None:
    group = ConsumerGroup("g", config(), 0)
    a, b = Client("a"), Client("b")
    a.heartbeat(group, 0, ORDERS6)
    b.heartbeat(group, 100, ORDERS6)
    a.heartbeat(group, 200, ORDERS6)
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    # A keeps heartbeating but never gives the partitions up.
    stubborn = HeartbeatRequest(member_id="a", member_epoch=1, owned=parts("orders", 0, 1, 2, 3, 4, 5))
    assert group.heartbeat(5_000, stubborn, ORDERS6).error is ErrorCode.none
    b.heartbeat(group, 5_000, ORDERS6)
    assert group.next_deadline_ms() == 200 + REBALANCE_MS
    assert group.tick(200 + REBALANCE_MS - 1) == []
    assert group.tick(200 + REBALANCE_MS) == ["a"]
    b.heartbeat(group, 200 + REBALANCE_MS + 1, ORDERS6)
    assert count(b.owned) == 6 and group.state is ConsumerGroupState.STABLE


def test_revocation_time_out_is_cancelled_once_the_member_revokes() -> None:
    group = ConsumerGroup("g", config(), 0)
    a, b = Client("a"), Client("b")
    a.heartbeat(group, 0, ORDERS6)
    b.heartbeat(group, 100, ORDERS6)
    a.heartbeat(group, 200, ORDERS6)
    a.heartbeat(group, 300, ORDERS6)
    assert group.members["a"].state is MemberState.STABLE
    assert group.tick(200 + REBALANCE_MS) == []


def test_group_max_size_reached() -> None:
    group = ConsumerGroup("g", config(max_size=2), 0)
    a, _b = joined(group, ORDERS6, Client("a"), Client("b"))
    result = Client("c").heartbeat(group, 10, ORDERS6)
    assert result.error is ErrorCode.group_max_size_reached
    assert sorted(group.members) == ["a", "b"]
    # Members already in the group go on heartbeating.
    assert a.heartbeat(group, 20, ORDERS6).error is ErrorCode.none


def test_subscription_change_bumps_the_epoch_and_a_rack_change_does_not() -> None:
    topics = cluster(orders=2, payments=2)
    group = ConsumerGroup("g", config(), 0)
    (a,) = joined(group, topics, Client("a"))
    a.topics = ("orders", "payments")
    assert a.heartbeat(group, 10, topics, full=True).member_epoch == 2 and count(a.owned) == 4
    rack = HeartbeatRequest(member_id="a", member_epoch=2, rack_id="r1", owned=a.owned)
    assert group.heartbeat(20, rack, topics).member_epoch == 2 and group.group_epoch == 2


def test_topic_created_that_matches_a_regex_is_assigned_on_the_next_heartbeat() -> None:
    before = cluster(**{"orders-eu": 2, "audit": 1})
    group = ConsumerGroup("g", config(), 0)
    a = Client("a", regex="orders-.*")
    assert a.heartbeat(group, 0, before).assignment == parts("orders-eu", 0, 1)
    unrelated = cluster(**{"orders-eu": 2, "audit": 1, "logs": 4})
    assert a.heartbeat(group, 10, unrelated).member_epoch == 1
    after = cluster(**{"orders-eu": 2, "audit": 1, "logs": 4, "orders-us": 3})
    grown = a.heartbeat(group, 20, after)
    assert grown.member_epoch == 2
    assert grown.assignment == {**parts("orders-eu", 0, 1), **parts("orders-us", 0, 1, 2)}


def test_a_regex_matches_the_describable_topics_and_another_principal_does_not_resolve_it_again() -> None:
    """Views of one image and one set of ACLs (``describable_by`` with one generation) share a resolution: the
    regex is resolved with the principal of the heartbeat that finds it stale, and a member of another principal
    heartbeating on its own view does not move the group epoch (no rebalance at every alternate heartbeat)."""
    topics = cluster(**{"orders-eu": 2, "orders-secret": 1})
    generation = object()
    alice = topics.describable_by(lambda name: name != "orders-secret", generation)
    admin = topics.describable_by(lambda _name: True, generation)
    group = ConsumerGroup("g", config(), 0)
    a, b = Client("a", regex="orders-.*"), Client("b", regex="orders-.*")
    assert a.heartbeat(group, 0, alice).assignment == parts("orders-eu", 0, 1)
    settle(group, [a, b], 0, alice)
    epoch = group.group_epoch
    for now in range(10, 200, 10):
        a.heartbeat(group, now, alice)
        b.heartbeat(group, now, admin)
    assert group.group_epoch == epoch
    assert topic_id("orders-secret") not in group.subscription
    assert set(a.owned) | set(b.owned) == {topic_id("orders-eu")}

    # The ACLs change (a new generation): the next heartbeat resolves the regex again, with its principal.
    granted = topics.describable_by(lambda _name: True, object())
    settle(group, [a, b], 300, granted)
    assert topic_id("orders-secret") in group.subscription


def test_partition_count_growth_is_assigned() -> None:
    group = ConsumerGroup("g", config(), 0)
    a, b = joined(group, ORDERS6, Client("a"), Client("b"))
    grown = cluster(orders=8)
    epoch = group.group_epoch
    settle(group, [a, b], 100, grown)
    assert group.group_epoch == epoch + 1 and group.state is ConsumerGroupState.STABLE
    assert count(a.owned) + count(b.owned) == 8 and count(a.owned) == 4


def test_state_moves_through_empty_assigning_reconciling_stable() -> None:
    group = ConsumerGroup("g", config(), 0)
    assert group.state_name == "Empty"
    a, b = joined(group, ORDERS6, Client("a"), Client("b"))
    assert group.state_name == "Stable"
    # The cluster's topics changed: the epoch moved, no target yet.
    group.refresh_topics(cluster(orders=9))
    assert group.state_name == "Assigning"
    a.heartbeat(group, 10, cluster(orders=9))
    assert group.state_name == "Reconciling"
    settle(group, [a, b], 20, cluster(orders=9))
    assert group.state_name == "Stable"
    a.leave(group, 30, ORDERS6)
    b.leave(group, 30, ORDERS6)
    assert group.state_name == "Empty" and group.empty_since_ms == 30


def test_restored_group_continues_at_the_same_epochs() -> None:
    group = ConsumerGroup("g", config(), 0)
    a, b = joined(group, ORDERS6, Client("a"), Client("b"))
    loaded = ConsumerGroup.restored(
        "g",
        config(),
        1_000,
        group_epoch=group.group_epoch,
        metadata_hash=metadata_hash(group.subscription),
        target_epoch=group.target_epoch,
        target=group.target,
        members=list(group.members.values()),
    )
    epoch = group.group_epoch
    assert loaded.state is ConsumerGroupState.STABLE
    for client in (a, b):
        result = client.heartbeat(loaded, 1_100, ORDERS6)
        assert (result.error, result.member_epoch, result.assignment) == (ErrorCode.none, epoch, None)
    assert loaded.group_epoch == epoch
    assert not [c for c in loaded.take_changes() if isinstance(c, GroupEpochChanged)]
    # Sessions restart at load time.
    assert (
        ConsumerGroup.restored(
            "g", config(), 1_000, group_epoch=epoch, metadata_hash=0, target_epoch=epoch, target={}, members=[]
        ).next_deadline_ms()
        is None
    )
    # Topics that changed while the coordinator was away do move the epoch.
    moved = ConsumerGroup.restored(
        "g",
        config(),
        1_000,
        group_epoch=epoch,
        metadata_hash=metadata_hash(group.subscription),
        target_epoch=epoch,
        target=group.target,
        members=list(group.members.values()),
    )
    assert a.heartbeat(moved, 1_100, cluster(orders=8)).error is ErrorCode.none
    assert moved.group_epoch == epoch + 1


def _offsets_group() -> tuple[ConsumerGroup, Client]:
    group = ConsumerGroup("g", config(), 0)
    (a,) = joined(group, ORDERS6, Client("a"))
    return group, a


def test_validate_offset_commit() -> None:
    group, a = _offsets_group()
    assert group.validate_offset_commit("a", a.epoch, api_version=9) is ErrorCode.none
    assert group.validate_offset_commit("a", a.epoch - 1, api_version=9) is ErrorCode.stale_member_epoch
    assert group.validate_offset_commit("a", a.epoch, api_version=8) is ErrorCode.unsupported_version
    assert group.validate_offset_commit("zz", 1, api_version=9) is ErrorCode.unknown_member_id
    # A commit from outside the group (admin tools: epoch -1) only while the group is empty.
    assert group.validate_offset_commit("", -1, api_version=9) is ErrorCode.unknown_member_id
    empty = ConsumerGroup("h", config(), 0)
    assert empty.validate_offset_commit("", -1, api_version=2) is ErrorCode.none
    assert empty.validate_offset_commit("someone", -1, api_version=9) is ErrorCode.none


def test_validate_offset_fetch() -> None:
    group, a = _offsets_group()
    assert group.validate_offset_fetch(None, -1) is ErrorCode.none
    assert group.validate_offset_fetch("a", a.epoch) is ErrorCode.none
    assert group.validate_offset_fetch("a", a.epoch + 1) is ErrorCode.stale_member_epoch
    assert group.validate_offset_fetch("zz", 1) is ErrorCode.unknown_member_id


def test_leave_of_the_only_subscriber_of_a_topic_bumps_the_epoch_once() -> None:
    topics = cluster(orders=2, payments=2)
    group = ConsumerGroup("g", config(), 0)
    a, b = joined(group, topics, Client("a"), Client("b", topics=("payments",)))
    epoch = group.group_epoch
    b.leave(group, 10, topics)
    a.heartbeat(group, 20, topics)
    a.heartbeat(group, 30, topics)
    assert group.group_epoch == epoch + 1 and a.epoch == epoch + 1


def test_static_member_leaving_for_good_with_minus_one_frees_its_partitions() -> None:
    group = ConsumerGroup("g", config(), 0)
    a, b = joined(group, ORDERS6, Client("a1", instance_id="i-a"), Client("b"))
    epoch = group.group_epoch
    assert a.leave(group, 10, ORDERS6, epoch=-1).member_epoch == -1
    assert "a1" not in group.members and group.group_epoch == epoch + 1
    b.heartbeat(group, 20, ORDERS6)
    assert count(b.owned) == 6


def test_static_member_stepping_out_releases_what_it_was_revoking() -> None:
    group = ConsumerGroup("g", config(), 0)
    a, b = Client("a1", instance_id="i-a"), Client("b")
    a.heartbeat(group, 0, ORDERS6)
    b.heartbeat(group, 10, ORDERS6)
    a.heartbeat(group, 20, ORDERS6)  # told to revoke three partitions
    revoking = flat(group.members["a1"].pending_revocation)
    assert len(revoking) == 3
    a.leave(group, 30, ORDERS6, epoch=-2)
    assert group.members["a1"].pending_revocation == {}
    b.heartbeat(group, 40, ORDERS6)
    assert flat(b.owned) == revoking
    check_exclusive(group, [b])


def test_topic_dropped_while_revoking_is_taken_back_at_once() -> None:
    """Kafka 4.2's CurrentAssignmentBuilder: a member still revoking that unsubscribes from a topic has that topic's
    partitions moved to pending revocation in the same heartbeat, at its current epoch."""
    topics = cluster(orders=2, payments=2)
    group = ConsumerGroup("g", config(), 0)
    a = Client("a", topics=("orders", "payments"))
    a.heartbeat(group, 0, topics)
    Client("b", topics=("orders", "payments")).heartbeat(group, 10, topics)
    everything = dict(a.owned)
    a.heartbeat(group, 20, topics)
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    epoch = a.epoch
    # A has not revoked yet (it still reports everything) and drops payments from its subscription.
    a.owned, a.topics = everything, ("orders",)
    result = a.heartbeat(group, 30, topics, full=True)
    member = group.members["a"]
    assert result.member_epoch == epoch and member.state is MemberState.UNREVOKED_PARTITIONS
    assert topic_id("payments") not in member.assigned and topic_id("payments") not in (result.assignment or {})
    assert member.pending_revocation.get(topic_id("payments"))
