"""KIP-848's online migration: a classic group with members becoming a consumer group, and back (Kafka 4.2's
``ConsumerGroup.fromClassicGroup`` and ``ClassicGroup.fromConsumerGroup``).

**Upgrade.** The first ConsumerGroupHeartbeat join to a classic group of the ``consumer`` protocol type converts
it: the group epoch and every member's epoch become the classic generation, each member keeps (as its current
assignment and its share of the target) the partitions of its last SyncGroup, its subscription is read from its
JoinGroup metadata, and it stays a *classic member* (:mod:`broker.groups.consumer.classic_members`). The joining
member then bumps the epoch like any new member, and the server-side assignor takes over. Refused (the group stays
classic, GROUP_ID_NOT_FOUND) for another protocol type, more members than ``group.consumer.max.size``, a group
without a protocol yet, unreadable metadata, or a custom assignor's user data that would be lost.

**Downgrade.** A consumer group whose remaining members all speak the classic protocol (the last consumer-protocol
member left or was fenced) becomes a classic group with those members, each given its share of the target as its
assignment, at the generation they were last told, and rebalances at once so that the client-side assignor takes
over again.

Pure functions of the groups and the cluster's topics; the coordinator (:mod:`broker.groups.migration`) decides
when, and writes the records these return.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from broker.groups.classic.group import Group
from broker.groups.classic.protocols import CONSUMER_PROTOCOL_TYPE, select_protocol
from broker.groups.classic.rebalance import GroupConfig
from broker.groups.classic.state import GroupState, Member
from broker.groups.consumer.assignment import Assignment, TopicMetadata
from broker.groups.consumer.changes import (
    Change,
    CurrentAssignmentChanged,
    GroupEpochChanged,
    MemberMetadataChanged,
    TargetEpochChanged,
    TargetMemberChanged,
)
from broker.groups.consumer.cluster_topics import ClusterTopics, metadata_hash
from broker.groups.consumer.consumer_protocol import (
    MalformedProtocolError,
    assignment_bytes,
    parse_assignment,
    parse_subscription,
    subscription_version,
)
from broker.groups.consumer.group import ConsumerGroup, ConsumerGroupConfig
from broker.groups.consumer.member import ClassicMetadata, ConsumerMember, MemberState


@dataclass(frozen=True, slots=True)
class Upgrade:
    group: ConsumerGroup
    #: The new group's records (Kafka's ``createConsumerGroupRecords``), after the classic group's tombstone.
    changes: list[Change]


def upgrade_refusal(classic: Group, max_size: int) -> str | None:
    """Why Kafka's ``validateOnlineUpgrade`` refuses to convert a classic group with members, or None."""
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return f"group {classic.group_id} does not use the consumer embedded protocol"
    if len(classic.members) > max_size:
        return f"group {classic.group_id} has more members than group.consumer.max.size ({max_size})"
    if classic.protocol_name is None:
        return f"group {classic.group_id} has not completed its first rebalance"
    return None


def upgraded(classic: Group, config: ConsumerGroupConfig, now_ms: int, topics: ClusterTopics) -> Upgrade | str:
    """The consumer group a classic group becomes, or why it cannot (module docstring)."""
    protocol = classic.protocol_name
    assert protocol is not None
    epoch = classic.generation_id
    members: list[ConsumerMember] = []
    for old in classic.members.values():
        try:
            last = parse_assignment(old.assignment)
            subscription = parse_subscription(old.metadata_for(protocol))
        except (MalformedProtocolError, KeyError):
            return f"group {classic.group_id}: the embedded consumer protocol of {old.member_id} is malformed"
        if last.user_data:
            return f"group {classic.group_id} uses a custom assignor whose user data would be lost"
        assigned: Assignment = {
            topics.by_name[name].topic_id: ps for name, ps in last.partitions.items() if name in topics.by_name and ps
        }
        members.append(
            ConsumerMember(
                member_id=old.member_id,
                instance_id=old.group_instance_id,
                rack_id=subscription.rack_id,
                client_id=old.client_id,
                client_host=old.client_host,
                subscribed_topic_names=frozenset(subscription.topics),
                rebalance_timeout_ms=old.rebalance_timeout_ms,
                member_epoch=epoch,
                previous_member_epoch=epoch,
                state=MemberState.STABLE,
                assigned=assigned,
                classic=ClassicMetadata(old.session_timeout_ms, old.protocols),
            )
        )
    subscribed: dict[uuid.UUID, TopicMetadata] = {}
    for member in members:
        for name in member.subscribed_topic_names:
            if name in topics.by_name:
                subscribed[topics.by_name[name].topic_id] = topics.by_name[name]
    hashed = metadata_hash(subscribed)
    group = ConsumerGroup.restored(
        classic.group_id,
        config,
        now_ms,
        group_epoch=epoch,
        metadata_hash=hashed,
        target_epoch=epoch,
        target={m.member_id: m.assigned for m in members},
        members=members,
    )
    group.offsets = classic.offsets
    group.pending_txn_offsets = classic.pending_txn_offsets
    changes: list[Change] = [MemberMetadataChanged(m) for m in members]
    changes.append(GroupEpochChanged(epoch, hashed))
    changes.extend(TargetMemberChanged(m.member_id, m.assigned) for m in members)
    changes.append(TargetEpochChanged(epoch))
    changes.extend(CurrentAssignmentChanged(m) for m in members)
    return Upgrade(group, changes)


def downgradable(group: ConsumerGroup, classic_max_size: int) -> bool:
    """Kafka's ``validateOnlineDowngrade``: members left, all of them classic, no more than a classic group may
    hold (the policy is the caller's); and a protocol they all have, which the classic group needs."""
    classic = [m.classic for m in group.members.values()]
    if group.dead or not classic or len(classic) > classic_max_size:
        return False
    protocols = [frozenset(name for name, _ in c.protocols) for c in classic if c is not None]
    return len(protocols) == len(classic) and bool(frozenset.intersection(*protocols))


def downgraded(group: ConsumerGroup, config: GroupConfig, now_ms: int, topics: ClusterTopics) -> Group:
    """The classic group a consumer group of classic members becomes, rebalancing (module docstring)."""
    names = {meta.topic_id: name for name, meta in topics.by_name.items()}
    classic = Group(group.group_id, config, now_ms)
    classic.offsets = group.offsets
    classic.pending_txn_offsets = group.pending_txn_offsets
    classic.protocol_type = CONSUMER_PROTOCOL_TYPE
    # Kafka converts before the leaving member's fence bumps the group epoch, so the members' generation still
    # matches: their next Heartbeat answers REBALANCE_IN_PROGRESS and they rejoin under their member ids. Here the
    # fence came first; the epoch the remaining members were last told is that generation.
    classic.generation_id = max(m.member_epoch for m in group.members.values())
    for member in group.members.values():
        assert member.classic is not None
        classic.members[member.member_id] = Member(
            member_id=member.member_id,
            group_instance_id=member.instance_id,
            client_id=member.client_id,
            client_host=member.client_host,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            session_timeout_ms=member.classic.session_timeout_ms,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocols=member.classic.protocols,
            last_heartbeat_ms=now_ms,
        )
        if member.instance_id is not None:
            classic.static_members[member.instance_id] = member.member_id
    protocol = select_protocol(list(classic.members.values()))
    classic.protocol_name = protocol
    classic.leader_id = next(iter(classic.members))
    for member_id, joined in classic.members.items():
        target = group.target.get(member_id, {})
        partitions = {names[t]: frozenset(ps) for t, ps in target.items() if t in names}
        joined.assignment = assignment_bytes(partitions, subscription_version(joined.metadata_for(protocol)))
    classic.state = GroupState.STABLE
    classic.state_timestamp_ms = now_ms
    return classic


def tombstones(group: ConsumerGroup) -> list[Change]:
    """Every record of the consumer group, deleted (Kafka's ``createGroupTombstoneRecords``)."""
    changes: list[Change] = []
    for member in group.members.values():
        changes.append(CurrentAssignmentChanged(member, deleted=True))
        changes.append(MemberMetadataChanged(member, deleted=True))
    changes.extend(group.deletion_changes())  # the target's records and the epochs
    return changes
