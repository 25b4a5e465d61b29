"""The KIP-848 consumer group state machine against Kafka 4.2's group coordinator (``GroupMetadataManager``'s
consumer group heartbeat, ``CurrentAssignmentBuilder``, ``ConsumerGroup``), driven directly with the real
``uniform`` assignor and hand-built cluster topics: what members are assigned and how the group reconciles it
(revoke before assign, subscriptions and regexes, topics growing and going, the group's states, a restored group).
Who may be a member (epochs, leaving, static members, time-outs) is ``test_consumer_group_membership.py``.

The invariant a user cares about, checked after every step of the randomized runs: no partition is ever held by two
members, on the coordinator's side or the clients' (``tests/broker/cg_state.py``).
"""

from __future__ import annotations

import random

import pytest
from kio.schema.errors import ErrorCode

from broker.groups.consumer.changes import GroupEpochChanged
from broker.groups.consumer.cluster_topics import metadata_hash
from broker.groups.consumer.group import (
    ConsumerGroup,
    ConsumerGroupState,
    HeartbeatRequest,
)
from broker.groups.consumer.member import MemberState
from tests.broker.cg_state import (
    ORDERS6,
    SESSION_MS,
    Client,
    check_exclusive,
    cluster,
    config,
    count,
    flat,
    joined,
    parts,
    settle,
    topic_id,
)


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


def _restored(group: ConsumerGroup) -> ConsumerGroup:
    """``group`` as a coordinator loads it back from its records at t=1000."""
    return ConsumerGroup.restored(
        "g",
        config(),
        1_000,
        group_epoch=group.group_epoch,
        metadata_hash=metadata_hash(group.subscription),
        target_epoch=group.target_epoch,
        target=group.target,
        members=list(group.members.values()),
    )


def test_restored_group_continues_at_the_same_epochs() -> None:
    group = ConsumerGroup("g", config(), 0)
    a, b = joined(group, ORDERS6, Client("a"), Client("b"))
    loaded = _restored(group)
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


def test_leave_of_the_only_subscriber_of_a_topic_bumps_the_epoch_once() -> None:
    topics = cluster(orders=2, payments=2)
    group = ConsumerGroup("g", config(), 0)
    a, b = joined(group, topics, Client("a"), Client("b", topics=("payments",)))
    epoch = group.group_epoch
    b.leave(group, 10, topics)
    a.heartbeat(group, 20, topics)
    a.heartbeat(group, 30, topics)
    assert group.group_epoch == epoch + 1 and a.epoch == epoch + 1


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


def test_a_group_loaded_from_the_log_knows_its_subscriptions_before_any_heartbeat() -> None:
    """Kafka's isSubscribedToTopic reads the members' records: right after a failover OffsetDelete must answer
    GROUP_SUBSCRIBED_TO_TOPIC and expiry keep the offsets, for names and for what a regex matches."""
    topics = cluster(orders=2, **{"audit-eu": 1, "logs": 1})
    group = ConsumerGroup("g", config(), 0)
    joined(group, topics, Client("a"), Client("b", regex="audit-.*"))
    loaded = _restored(group)
    for g in (group, loaded):
        assert g.is_subscribed_to("orders") and g.is_subscribed_to("audit-eu")
        assert not g.is_subscribed_to("logs")
