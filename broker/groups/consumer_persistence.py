"""A KIP-848 consumer group's changes as Kafka's records in ``__consumer_offsets``, and the group rebuilt from them.

The sans-I/O group says what changed (:mod:`broker.groups.consumer.changes`); the record format is
:mod:`broker.groups.consumer_records`'. This module is the translation both ways, so neither depends on the other:
``encode_changes`` when the coordinator persists a heartbeat's changes, ``restore_group`` when a coordinator loads
a partition (a failover, or a restart) and must continue the group at the epochs its members were told.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.groups.consumer.changes import (
    Change,
    CurrentAssignmentChanged,
    GroupEpochChanged,
    MemberMetadataChanged,
    TargetEpochChanged,
    TargetMemberChanged,
)
from broker.groups.consumer.cluster_topics import metadata_hash
from broker.groups.consumer.group import ConsumerGroup, ConsumerGroupConfig
from broker.groups.consumer.member import ClassicMetadata, ConsumerMember, MemberState
from broker.groups.consumer_records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    encode_consumer_key,
    encode_consumer_value,
)
from broker.groups.offsets_topic import ReplayedConsumerGroup


def member_metadata_value(member: ConsumerMember) -> ConsumerGroupMemberMetadataValue:
    return ConsumerGroupMemberMetadataValue(
        instance_id=member.instance_id,
        rack_id=member.rack_id,
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=member.subscribed_topic_names,
        subscribed_topic_regex=member.subscribed_topic_regex,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        server_assignor=member.server_assignor,
        classic_member_metadata=(
            None
            if member.classic is None
            else ClassicMemberMetadata(
                member.classic.session_timeout_ms,
                tuple(ClassicProtocol(name, metadata) for name, metadata in member.classic.protocols),
            )
        ),
    )


def _classic(value: ClassicMemberMetadata | None) -> ClassicMetadata | None:
    if value is None:
        return None
    return ClassicMetadata(value.session_timeout_ms, tuple((p.name, p.metadata) for p in value.supported_protocols))


def current_assignment_value(member: ConsumerMember) -> ConsumerGroupCurrentMemberAssignmentValue:
    return ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=member.member_epoch,
        previous_member_epoch=member.previous_member_epoch,
        state=member.state.value,
        assigned_partitions=dict(member.assigned),
        partitions_pending_revocation=dict(member.pending_revocation),
    )


def _record(change: Change, group_id: str) -> list[tuple[ConsumerGroupKey, ConsumerGroupValue | None]]:
    match change:
        case GroupEpochChanged(epoch=epoch, metadata_hash=hashed, deleted=deleted):
            if deleted:
                # Older Kafkas also wrote the subscribed topics under their own key: that record goes too.
                return [(ConsumerGroupPartitionMetadataKey(group_id), None), (ConsumerGroupMetadataKey(group_id), None)]
            return [(ConsumerGroupMetadataKey(group_id), ConsumerGroupMetadataValue(epoch, hashed))]
        case MemberMetadataChanged(member=member, deleted=deleted):
            key = ConsumerGroupMemberMetadataKey(group_id, member.member_id)
            return [(key, None if deleted else member_metadata_value(member))]
        case TargetMemberChanged(member_id=member_id, assignment=assignment):
            target_key = ConsumerGroupTargetAssignmentMemberKey(group_id, member_id)
            value = None if assignment is None else ConsumerGroupTargetAssignmentMemberValue(dict(assignment))
            return [(target_key, value)]
        case TargetEpochChanged(epoch=epoch, deleted=deleted):
            epoch_key = ConsumerGroupTargetAssignmentMetadataKey(group_id)
            return [(epoch_key, None if deleted else ConsumerGroupTargetAssignmentMetadataValue(epoch))]
        case CurrentAssignmentChanged(member=member, deleted=deleted):
            current_key = ConsumerGroupCurrentMemberAssignmentKey(group_id, member.member_id)
            return [(current_key, None if deleted else current_assignment_value(member))]


def encode_changes(group_id: str, changes: Sequence[Change]) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of each change's record, in order; a None value is a tombstone. Raises SchemaError when an id
    does not fit the format."""
    out: list[tuple[bytes, bytes | None]] = []
    for change in changes:
        for key, value in _record(change, group_id):
            out.append((encode_consumer_key(key), None if value is None else encode_consumer_value(value)))
    return out


def encode_state(group: ConsumerGroup) -> list[tuple[bytes, bytes | None]]:
    """Every record of the group's state as it is now (epoch, members, target, current assignments): what a write
    after a failed one carries, as the failed write's values are lost and only the present ones may be rewritten
    (an older value written again could undo a newer one)."""
    members = list(group.members.values())
    return encode_changes(
        group.group_id,
        [
            GroupEpochChanged(group.group_epoch, metadata_hash(group.subscription)),
            *(MemberMetadataChanged(member) for member in members),
            *(TargetMemberChanged(member_id, assignment) for member_id, assignment in group.target.items()),
            TargetEpochChanged(group.target_epoch),
            *(CurrentAssignmentChanged(member) for member in members),
        ],
    )


def restore_group(replayed: ReplayedConsumerGroup, config: ConsumerGroupConfig, now_ms: int) -> ConsumerGroup | None:
    """The group a replay found, at the epochs its members were last told; None when its creation never
    completed (no group-epoch record)."""
    if replayed.metadata is None:
        return None
    members = []
    for member_id, metadata in replayed.members.items():
        current = replayed.current_assignments.get(member_id)
        members.append(
            ConsumerMember(
                member_id=member_id,
                instance_id=metadata.instance_id,
                rack_id=metadata.rack_id,
                client_id=metadata.client_id,
                client_host=metadata.client_host,
                subscribed_topic_names=frozenset(metadata.subscribed_topic_names),
                subscribed_topic_regex=metadata.subscribed_topic_regex,
                server_assignor=metadata.server_assignor,
                rebalance_timeout_ms=metadata.rebalance_timeout_ms,
                member_epoch=current.member_epoch if current is not None else 0,
                previous_member_epoch=current.previous_member_epoch if current is not None else -1,
                state=_member_state(current.state) if current is not None else MemberState.STABLE,
                assigned=dict(current.assigned_partitions) if current is not None else {},
                pending_revocation=dict(current.partitions_pending_revocation) if current is not None else {},
                classic=_classic(metadata.classic_member_metadata),
            )
        )
    return ConsumerGroup.restored(
        replayed.group_id,
        config,
        now_ms,
        group_epoch=replayed.metadata.epoch,
        metadata_hash=replayed.metadata.metadata_hash,
        target_epoch=replayed.target_assignment_epoch if replayed.target_assignment_epoch is not None else 0,
        target={m: a for m, a in replayed.target_assignment.items() if m in replayed.members},
        members=members,
    )


def _member_state(value: int) -> MemberState:
    try:
        return MemberState(value)
    except ValueError:
        return MemberState.UNKNOWN
