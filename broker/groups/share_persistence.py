"""A share group's changes as Kafka's records in ``__consumer_offsets``, and the group rebuilt from them.

The translation both ways between :mod:`broker.groups.share.changes` and :mod:`broker.groups.share_records`, as
:mod:`broker.groups.consumer_persistence` is for consumer groups: ``encode_share_changes`` when the coordinator
persists a heartbeat's changes, ``restore_share_group`` when it loads a partition (a failover or a restart) and must
continue the group at the epochs its members were told.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.groups.consumer.cluster_topics import metadata_hash
from broker.groups.offsets_topic import ReplayedShareGroup
from broker.groups.share.changes import (
    ShareAssignmentChanged,
    ShareChange,
    ShareEpochChanged,
    ShareMemberChanged,
    ShareStateTopicsChanged,
    ShareTargetEpochChanged,
    ShareTargetMemberChanged,
)
from broker.groups.share.group import ShareGroup, ShareMembershipConfig
from broker.groups.share.member import ShareMember
from broker.groups.share_records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareGroupValue,
    encode_share_key,
    encode_share_value,
)

#: Kafka's MemberState STABLE: a share member is never anything else.
_STABLE = 0


def _record(change: ShareChange, group_id: str) -> tuple[ShareGroupKey, ShareGroupValue | None]:
    match change:
        case ShareEpochChanged(epoch=epoch, metadata_hash=hashed, deleted=deleted):
            return ShareGroupMetadataKey(group_id), None if deleted else ShareGroupMetadataValue(epoch, hashed)
        case ShareMemberChanged(member=m, deleted=deleted):
            value = ShareGroupMemberMetadataValue(m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names)
            return ShareGroupMemberMetadataKey(group_id, m.member_id), None if deleted else value
        case ShareTargetMemberChanged(member_id=member_id, assignment=assignment):
            target = None if assignment is None else ShareGroupTargetAssignmentMemberValue(dict(assignment))
            return ShareGroupTargetAssignmentMemberKey(group_id, member_id), target
        case ShareTargetEpochChanged(epoch=epoch, deleted=deleted):
            epoch_value = None if deleted else ShareGroupTargetAssignmentMetadataValue(epoch)
            return ShareGroupTargetAssignmentMetadataKey(group_id), epoch_value
        case ShareAssignmentChanged(member=m, deleted=deleted):
            current = ShareGroupCurrentMemberAssignmentValue(
                m.member_epoch, m.previous_member_epoch, _STABLE, dict(m.assigned)
            )
            return ShareGroupCurrentMemberAssignmentKey(group_id, m.member_id), None if deleted else current
        case ShareStateTopicsChanged(topics=topics, deleted=deleted):
            state = None if deleted else ShareGroupStatePartitionMetadataValue({}, dict(topics), {})
            return ShareGroupStatePartitionMetadataKey(group_id), state


def encode_share_changes(group_id: str, changes: Sequence[ShareChange]) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of each change's record, in order; None is a tombstone. Raises SchemaError when an id does not
    fit the format."""
    out: list[tuple[bytes, bytes | None]] = []
    for change in changes:
        key, value = _record(change, group_id)
        out.append((encode_share_key(key), None if value is None else encode_share_value(value)))
    return out


def encode_share_state(group: ShareGroup) -> list[tuple[bytes, bytes | None]]:
    """Every record of the share group's state as it is now (as :func:`broker.groups.consumer_persistence.
    encode_state` for a consumer group)."""
    members = list(group.members.values())
    state: list[ShareChange] = [
        ShareEpochChanged(group.group_epoch, metadata_hash(group.subscription)),
        *(ShareMemberChanged(member) for member in members),
        *(ShareTargetMemberChanged(member_id, assignment) for member_id, assignment in group.target.items()),
        ShareTargetEpochChanged(group.target_epoch),
        *(ShareAssignmentChanged(member) for member in members),
    ]
    if group.state_topics:
        state.append(ShareStateTopicsChanged(dict(group.state_topics)))
    return encode_share_changes(group.group_id, state)


def restore_share_group(
    replayed: ReplayedShareGroup, config: ShareMembershipConfig, now_ms: int
) -> ShareGroup | None:
    """The group a replay found; None when its creation never completed (no group-epoch record)."""
    if replayed.metadata is None:
        return None
    members = []
    for member_id, metadata in replayed.members.items():
        current = replayed.current_assignments.get(member_id)
        members.append(
            ShareMember(
                member_id=member_id,
                rack_id=metadata.rack_id,
                client_id=metadata.client_id,
                client_host=metadata.client_host,
                subscribed_topic_names=metadata.subscribed_topic_names,
                member_epoch=current.member_epoch if current is not None else 0,
                previous_member_epoch=current.previous_member_epoch if current is not None else -1,
                assigned=dict(current.assigned_partitions) if current is not None else {},
            )
        )
    return ShareGroup.restored(
        replayed.group_id,
        config,
        now_ms,
        group_epoch=replayed.metadata.epoch,
        metadata_hash=replayed.metadata.metadata_hash,
        target_epoch=replayed.target_assignment_epoch if replayed.target_assignment_epoch is not None else 0,
        target={m: a for m, a in replayed.target_assignment.items() if m in replayed.members},
        members=members,
        state_topics=None if replayed.state_partitions is None else {
            **replayed.state_partitions.initializing, **replayed.state_partitions.initialized
        },
    )
