"""Classic members inside a KIP-848 consumer group: JoinGroup, SyncGroup, Heartbeat and LeaveGroup from consumers
still speaking the classic protocol, during an online upgrade or downgrade (Kafka 4.2's
``classicGroupJoinToConsumerGroup`` and its siblings).

A classic member has no heartbeat that carries its assignment, so it reconciles through rebalances as a classic
consumer knows them:

* **JoinGroup** is a heartbeat in disguise: the subscription (topics, rack, the partitions the member still owns)
  is read from the member's protocol metadata and the member moves one step towards its share of the target, as a
  ConsumerGroupHeartbeat would. The answer comes at once, the member's epoch as generation, with no leader and no
  member list (nobody assigns on the client side), and the member's first protocol as the group's;
* **SyncGroup** answers the partitions the member holds now, as a ConsumerProtocolAssignment in its subscription's
  version; while a newer group epoch waits for it (and it is not revoking), REBALANCE_IN_PROGRESS sends it back to
  JoinGroup;
* **Heartbeat** answers REBALANCE_IN_PROGRESS whenever a JoinGroup would move the member: the group epoch moved,
  the member must revoke, or partitions it waits for were released;
* **LeaveGroup** fences the member (its partitions go to the others).

Each member keeps the session time-out of its JoinGroup, and must follow a JoinGroup with a SyncGroup, and a
REBALANCE_IN_PROGRESS with a JoinGroup, within its rebalance time-out, or it is fenced (Kafka's sync and join
time-outs). Sans-I/O, like the group: the coordinator persists what the group queued.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from broker.groups.classic.group import JoinRequest
from broker.groups.classic.state import JoinResult, SyncResult
from broker.groups.consumer.assignment import Assignment
from broker.groups.consumer.cluster_topics import ClusterTopics
from broker.groups.consumer.consumer_protocol import (
    MalformedProtocolError,
    assignment_bytes,
    parse_subscription,
    subscription_version,
)
from broker.groups.consumer.group import ConsumerGroup, HeartbeatRequest
from broker.groups.consumer.member import JOIN_EPOCH, STATIC_LEAVE_EPOCH, ClassicMetadata, ConsumerMember, MemberState

CONSUMER_PROTOCOL_TYPE = "consumer"


def supports_protocols(group: ConsumerGroup, protocol_type: str, names: Sequence[str]) -> bool:
    """Kafka's ``supportsClassicProtocols``: the consumer protocol type, and a protocol every classic member has."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
        return False
    classic = [m.classic for m in group.members.values() if m.classic is not None]
    return any(all(any(n == name for n, _ in c.protocols) for c in classic) for name in names)


def join(group: ConsumerGroup, now_ms: int, request: JoinRequest, topics: ClusterTopics) -> JoinResult:
    """A classic member's JoinGroup (module docstring)."""
    member_id = request.member_id or str(uuid.uuid4())
    if request.member_id not in group.members and len(group.members) >= group.config.max_size:
        return JoinResult(ErrorCode.group_max_size_reached, request.member_id)
    if not supports_protocols(group, request.protocol_type, [name for name, _ in request.protocols]):
        return JoinResult(ErrorCode.inconsistent_group_protocol, request.member_id)
    if not request.member_id and request.group_instance_id is None and request.require_known_member_id:
        return JoinResult(ErrorCode.member_id_required, member_id)
    try:
        subscription = parse_subscription(request.protocols[0][1])
    except MalformedProtocolError:
        return JoinResult(ErrorCode.inconsistent_group_protocol, request.member_id)
    owned: Assignment = {
        topics.by_name[name].topic_id: partitions
        for name, partitions in subscription.owned.items()
        if name in topics.by_name
    }
    epoch = _join_epoch(group, now_ms, member_id, request.group_instance_id, topics)
    result = group.heartbeat(
        now_ms,
        HeartbeatRequest(
            member_id=member_id,
            member_epoch=epoch,
            instance_id=request.group_instance_id,
            rack_id=subscription.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=subscription.topics,
            subscribed_topic_regex="",
            owned=owned,
            client_id=request.client_id,
            client_host=request.client_host,
            classic=ClassicMetadata(request.session_timeout_ms, request.protocols),
        ),
        topics,
    )
    if result.error is not ErrorCode.none:
        return JoinResult(result.error, request.member_id)
    # Kafka's sync time-out: a member that joined must come for its assignment within its rebalance time-out.
    group.deadlines.set_join(result.member_id, now_ms + max(request.rebalance_timeout_ms, 0))
    return JoinResult(
        ErrorCode.none,
        result.member_id,
        generation_id=result.member_epoch,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        protocol_name=request.protocols[0][0],
        leader_id="",
    )


def _join_epoch(
    group: ConsumerGroup, now_ms: int, member_id: str, instance_id: str | None, topics: ClusterTopics
) -> int:
    """The epoch a classic JoinGroup stands for: the member's own when it is known (a rejoin keeps its epoch and
    assignment), else a join. A static member coming back under a new member id replaces the one holding its
    instance id, as a classic group lets it."""
    member = group.members.get(member_id)
    if member is not None and member.member_epoch >= 0:
        return member.member_epoch
    holder = _static_member(group, instance_id)
    if holder is not None and holder.member_epoch != STATIC_LEAVE_EPOCH:
        group.heartbeat(
            now_ms,
            HeartbeatRequest(member_id=holder.member_id, member_epoch=STATIC_LEAVE_EPOCH, instance_id=instance_id),
            topics,
        )
    return JOIN_EPOCH


def _static_member(group: ConsumerGroup, instance_id: str | None) -> ConsumerMember | None:
    if instance_id is None:
        return None
    return next((m for m in group.members.values() if m.instance_id == instance_id), None)


def _classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember | ErrorCode:
    """Kafka's ``validateConsumerGroupMember`` and ``throwIfMemberDoesNotUseClassicProtocol``."""
    if instance_id is None:
        member = group.members.get(member_id)
    else:
        member = _static_member(group, instance_id)
        if member is not None and member.member_id != member_id:
            return ErrorCode.fenced_instance_id
    if member is None or member.classic is None:
        return ErrorCode.unknown_member_id
    return member


def _touch(group: ConsumerGroup, now_ms: int, member: ConsumerMember) -> None:
    """The member's session starts again (with the time-out of its JoinGroup)."""
    group.deadlines.set_session(member.member_id, now_ms + member.session_ms(group.config.session_timeout_ms))


def _expect_rejoin(group: ConsumerGroup, now_ms: int, member: ConsumerMember) -> None:
    """Kafka's join time-out: told to rejoin, the member must within its rebalance time-out (a running one stays)."""
    group.deadlines.set_join(member.member_id, now_ms + max(member.rebalance_timeout_ms, 0), if_absent=True)


def _must_rejoin(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """A JoinGroup would move the member: a newer group epoch, partitions to revoke, or partitions it waits for
    that nobody holds any longer."""
    if member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS:
        return True
    if member.state is not MemberState.UNRELEASED_PARTITIONS:
        return False
    target = group.target.get(member.member_id, {})
    return all(
        group.owner_of(topic, partition) in (None, member.member_id)
        for topic, partitions in target.items()
        for partition in partitions
    )


def sync(
    group: ConsumerGroup,
    now_ms: int,
    *,
    member_id: str,
    instance_id: str | None,
    generation_id: int,
    protocol_type: str | None,
    protocol_name: str | None,
    topics: ClusterTopics,
) -> SyncResult:
    """A classic member's SyncGroup (module docstring)."""
    member = _classic_member(group, member_id, instance_id)
    if isinstance(member, ErrorCode):
        return SyncResult(member)
    assert member.classic is not None
    if generation_id != member.member_epoch:
        return SyncResult(ErrorCode.illegal_generation)
    if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or (
        protocol_name is not None and protocol_name != member.classic.protocol_name
    ):
        return SyncResult(ErrorCode.inconsistent_group_protocol)
    if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
        _expect_rejoin(group, now_ms, member)
        return SyncResult(ErrorCode.rebalance_in_progress)
    _touch(group, now_ms, member)
    group.deadlines.clear_join(member.member_id)
    names = {meta.topic_id: name for name, meta in topics.by_name.items()}
    partitions = {names[t]: frozenset(ps) for t, ps in member.assigned.items() if t in names}
    version = subscription_version(member.classic.protocols[0][1]) if member.classic.protocols else 0
    return SyncResult(
        ErrorCode.none, assignment_bytes(partitions, version), protocol_type=protocol_type, protocol_name=protocol_name
    )


def heartbeat(
    group: ConsumerGroup, now_ms: int, member_id: str, instance_id: str | None, generation_id: int
) -> ErrorCode:
    """A classic member's Heartbeat (module docstring)."""
    member = _classic_member(group, member_id, instance_id)
    if isinstance(member, ErrorCode):
        return member
    if generation_id != member.member_epoch:
        return ErrorCode.illegal_generation
    _touch(group, now_ms, member)
    if _must_rejoin(group, member):
        _expect_rejoin(group, now_ms, member)
        return ErrorCode.rebalance_in_progress
    return ErrorCode.none


def leave(group: ConsumerGroup, now_ms: int, member_id: str, instance_id: str | None) -> ErrorCode:
    """LeaveGroup for one member (Kafka's ``classicGroupLeaveToConsumerGroup``): any member may be removed so, a
    static one by its instance id alone (an administrator's removal)."""
    if instance_id is None:
        member = group.members.get(member_id)
    else:
        member = _static_member(group, instance_id)
        if member is not None and member_id and member.member_id != member_id:
            return ErrorCode.fenced_instance_id
    if member is None:
        return ErrorCode.unknown_member_id
    group.fence(now_ms, member.member_id)
    return ErrorCode.none
