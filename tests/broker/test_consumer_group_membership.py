"""Who is a member of a KIP-848 consumer group, against Kafka 4.2's group coordinator, driven directly on the state
machine (``tests/broker/cg_state.py``): the epoch rules that fence a member (and its offset commits and fetches), a
rejoin and an unknown member, leaving, static members stepping out and coming back, the session and rebalance
time-outs, and the group's size limit. What members are assigned is ``test_consumer_group_state.py``.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.groups.consumer.assignment import Assignment
from broker.groups.consumer.changes import GroupEpochChanged, TargetMemberChanged
from broker.groups.consumer.group import (
    ConsumerGroup,
    ConsumerGroupState,
    HeartbeatRequest,
    HeartbeatResult,
)
from broker.groups.consumer.member import MemberState
from tests.broker.cg_state import (
    ORDERS6,
    REBALANCE_MS,
    SESSION_MS,
    Client,
    check_exclusive,
    cluster,
    config,
    count,
    flat,
    joined,
    parts,
)


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


def test_a_member_that_changes_its_instance_id_frees_the_old_one() -> None:
    """A member id rejoining under another instance id holds only the new one: once it leaves, the old instance id
    joins as anyone would (it used to stay mapped to the departed member, and the next heartbeat naming it failed)."""
    group = ConsumerGroup("g", config(), 0)
    (x,) = joined(group, ORDERS6, Client("x", instance_id="i-a"))
    x.instance_id = "i-b"
    assert x.heartbeat(group, 10, ORDERS6, epoch=0).error is ErrorCode.none
    assert x.leave(group, 20, ORDERS6, epoch=-1).error is ErrorCode.none
    stray = HeartbeatRequest(member_id="y", member_epoch=3, instance_id="i-a", owned={})
    assert group.heartbeat(30, stray, ORDERS6).error is ErrorCode.unknown_member_id
    newcomer = Client("z", instance_id="i-a")
    assert newcomer.heartbeat(group, 40, ORDERS6).error is ErrorCode.none
    assert list(group.members) == ["z"]


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
