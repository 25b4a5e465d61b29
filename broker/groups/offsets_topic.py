"""The ``__consumer_offsets`` topic every group type keeps its state in: its definition and reading it back.

A group belongs to one ``__consumer_offsets`` partition (Kafka's hash of the group id), served by that partition's
leader. When this broker becomes the leader it replays the partition from the log start to the end and only then
serves its groups. What a replay finds (committed offsets, offsets pending in a transaction, group metadata) is the
same for every group type, so it is read here once; the coordinator turns it into groups.

Keys are Kafka's (:mod:`broker.groups.offsets_schema`, :mod:`broker.groups.consumer_records`,
:mod:`broker.groups.share_records`): offset commits, classic group metadata, the KIP-848 consumer-group records and
the KIP-932 share-group records are collected; streams-group records are skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from broker.groups.consumer.assignment import Assignment
from broker.groups.consumer_records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    decode_consumer_key,
    decode_consumer_value,
)
from broker.groups.offsets import TopicPartition
from broker.groups.offsets_schema import (
    GroupKey,
    GroupValue,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
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
    decode_share_key,
    decode_share_value,
)
from broker.groups.txn_offsets import AppendedOffset, PendingTxnOffsets, newer
from broker.internal_topic import InternalTopic, replay
from broker.partition.partition_log import PartitionLog
from settings.server import ServerConfig
from wire.control_records import ControlRecordError, decode_marker
from wire.record_batch import Record
from wire.stored_schema import SchemaError

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


def _offsets_topic_configs(cfg: ServerConfig) -> dict[str, str]:
    return {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "segment.bytes": str(cfg.value("offsets.topic.segment.bytes")),
    }


OFFSETS_INTERNAL_TOPIC = InternalTopic(
    name=OFFSETS_TOPIC,
    role="group coordinator",
    items="groups",
    partitions_key="offsets.topic.num.partitions",
    replication_key="offsets.topic.replication.factor",
    configs=_offsets_topic_configs,
)


@dataclass
class ReplayedConsumerGroup:
    """A KIP-848 consumer group as the last of each of its records left it: what the coordinator rebuilds the
    group from.

    Kafka writes a group's records in several batches (a member's subscription, then the group epoch, the target
    assignment, the member's current assignment), so a group is collected from whichever of its records comes
    first; ``metadata`` stays None if the group-epoch record itself never came (a group whose creation did not
    complete). ``target_assignment_epoch`` is None without a target-assignment record (Kafka's -1).
    ``subscription_metadata`` is the record Kafka before 4.1 wrote (key 4): Kafka 4.1+ replaces it by the metadata
    hash and writes its tombstone when the group's epoch next moves, which a coordinator that finds it should do too.
    """

    group_id: str
    metadata: ConsumerGroupMetadataValue | None = None
    members: dict[str, ConsumerGroupMemberMetadataValue] = field(default_factory=dict)
    target_assignment_epoch: int | None = None
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    current_assignments: dict[str, ConsumerGroupCurrentMemberAssignmentValue] = field(default_factory=dict)
    regexes: dict[str, ConsumerGroupRegularExpressionValue] = field(default_factory=dict)
    subscription_metadata: ConsumerGroupPartitionMetadataValue | None = None

    def apply(self, record: ConsumerGroupRecord) -> None:
        """One record of this group (a group-metadata tombstone removes the whole group and never gets here)."""
        match record.key, record.value:
            case ConsumerGroupMetadataKey(), ConsumerGroupMetadataValue() as v:
                self.metadata = v
            case ConsumerGroupPartitionMetadataKey(), (ConsumerGroupPartitionMetadataValue() | None) as v:
                self.subscription_metadata = v
            case ConsumerGroupMemberMetadataKey(member_id=m), ConsumerGroupMemberMetadataValue() as v:
                self.members[m] = v
            case ConsumerGroupMemberMetadataKey(member_id=m), None:
                self.members.pop(m, None)
            case ConsumerGroupTargetAssignmentMetadataKey(), ConsumerGroupTargetAssignmentMetadataValue() as v:
                self.target_assignment_epoch = v.assignment_epoch
            case ConsumerGroupTargetAssignmentMetadataKey(), None:
                self.target_assignment_epoch = None
            case ConsumerGroupTargetAssignmentMemberKey(member_id=m), ConsumerGroupTargetAssignmentMemberValue() as v:
                self.target_assignment[m] = v.topic_partitions
            case ConsumerGroupTargetAssignmentMemberKey(member_id=m), None:
                self.target_assignment.pop(m, None)
            case ConsumerGroupCurrentMemberAssignmentKey(member_id=m), ConsumerGroupCurrentMemberAssignmentValue() as v:
                self.current_assignments[m] = v
            case ConsumerGroupCurrentMemberAssignmentKey(member_id=m), None:
                self.current_assignments.pop(m, None)
            case ConsumerGroupRegularExpressionKey(regex=regex), ConsumerGroupRegularExpressionValue() as v:
                self.regexes[regex] = v
            case ConsumerGroupRegularExpressionKey(regex=regex), None:
                self.regexes.pop(regex, None)


@dataclass
class ReplayedShareGroup:
    """A KIP-932 share group as the last of each of its records left it (like :class:`ReplayedConsumerGroup`);
    ``metadata`` stays None if the group-epoch record never came."""

    group_id: str
    metadata: ShareGroupMetadataValue | None = None
    members: dict[str, ShareGroupMemberMetadataValue] = field(default_factory=dict)
    target_assignment_epoch: int | None = None
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    current_assignments: dict[str, ShareGroupCurrentMemberAssignmentValue] = field(default_factory=dict)
    state_partitions: ShareGroupStatePartitionMetadataValue | None = None

    def apply(self, key: ShareGroupKey, value: ShareGroupValue | None) -> None:
        """One record of this group (the group-metadata tombstone removes the whole group and never gets here)."""
        match key, value:
            case ShareGroupMetadataKey(), ShareGroupMetadataValue() as v:
                self.metadata = v
            case ShareGroupMemberMetadataKey(member_id=m), ShareGroupMemberMetadataValue() as v:
                self.members[m] = v
            case ShareGroupMemberMetadataKey(member_id=m), None:
                self.members.pop(m, None)
            case ShareGroupTargetAssignmentMetadataKey(), ShareGroupTargetAssignmentMetadataValue() as v:
                self.target_assignment_epoch = v.assignment_epoch
            case ShareGroupTargetAssignmentMetadataKey(), None:
                self.target_assignment_epoch = None
            case ShareGroupTargetAssignmentMemberKey(member_id=m), ShareGroupTargetAssignmentMemberValue() as v:
                self.target_assignment[m] = v.topic_partitions
            case ShareGroupTargetAssignmentMemberKey(member_id=m), None:
                self.target_assignment.pop(m, None)
            case ShareGroupCurrentMemberAssignmentKey(member_id=m), ShareGroupCurrentMemberAssignmentValue() as v:
                self.current_assignments[m] = v
            case ShareGroupCurrentMemberAssignmentKey(member_id=m), None:
                self.current_assignments.pop(m, None)
            case ShareGroupStatePartitionMetadataKey(), (ShareGroupStatePartitionMetadataValue() | None) as v:
                self.state_partitions = v


@dataclass
class ReplayedPartition:
    """What replaying one ``__consumer_offsets`` partition found."""

    group_values: dict[str, GroupValue | None] = field(default_factory=dict)
    consumer_groups: dict[str, ReplayedConsumerGroup] = field(default_factory=dict)
    share_groups: dict[str, ReplayedShareGroup] = field(default_factory=dict)
    offsets: dict[str, dict[TopicPartition, AppendedOffset]] = field(default_factory=dict)
    pending: dict[str, PendingTxnOffsets] = field(default_factory=dict)
    records: int = 0


async def replay_offsets_partition(log: PartitionLog, where: str) -> ReplayedPartition:
    """Last value per key from the log start to its end; tombstones remove earlier values. Offsets committed in
    a transaction stay pending until the transaction's marker, which applies or drops them."""
    replayed = ReplayedPartition()
    async for header, record in replay(log, where):
        producer_id = header.producer_id if header.is_transactional else -1
        replayed.records += 1
        if header.is_control:
            _apply_marker(record, producer_id, replayed, where)
        else:
            _apply_record(record, producer_id, replayed, where)
    return replayed


def _apply_marker(record: Record, producer_id: int, replayed: ReplayedPartition, where: str) -> None:
    try:
        marker = decode_marker(record.key, record.value)
    except ControlRecordError as exc:
        logger.warning("%s: control record at offset %d does not decode (%s); skipped", where, record.offset, exc)
        return
    if marker is None or producer_id < 0:
        return
    for group_id, pending in replayed.pending.items():
        committed = replayed.offsets.setdefault(group_id, {})
        for tp, offset in pending.complete(producer_id, commit=marker.commit).items():
            current = committed.get(tp)
            if newer(current.log_offset if current is not None else None, offset):
                committed[tp] = offset


def _apply_record(record: Record, producer_id: int, replayed: ReplayedPartition, where: str) -> None:
    if record.key is None:
        logger.warning("%s: record at offset %d has no key; skipped", where, record.offset)
        return
    try:
        key = decode_key(record.key)
        if isinstance(key, OffsetKey):
            tp = (key.topic, key.partition)
            if producer_id >= 0 and record.value is not None:
                offset = AppendedOffset(decode_offset_value(record.value), record.offset)
                replayed.pending.setdefault(key.group_id, PendingTxnOffsets()).add(producer_id, tp, offset)
                return
            committed = replayed.offsets.setdefault(key.group_id, {})
            if record.value is None:
                committed.pop(tp, None)
                pending = replayed.pending.get(key.group_id)
                if pending is not None:
                    pending.remove(tp)  # as the live tombstone does (PendingTxnOffsets.remove says why)
            else:
                committed[tp] = AppendedOffset(decode_offset_value(record.value), record.offset)
        elif isinstance(key, GroupKey):
            if record.value is None:
                # Only the group metadata goes; its offsets have tombstones of their own (as in Kafka).
                replayed.group_values[key.group_id] = None
            else:
                replayed.group_values[key.group_id] = decode_group_value(record.value)
        else:
            consumer_key = decode_consumer_key(record.key)
            share_key = decode_share_key(record.key) if consumer_key is None else None
            if consumer_key is not None:
                _apply_consumer_record(consumer_key, record.value, replayed)
            elif share_key is not None:
                _apply_share_record(share_key, record.value, replayed)
            else:
                logger.debug(
                    "%s: offset %d has key version %d, which this coordinator does not use",
                    where,
                    record.offset,
                    key.version,
                )
    except SchemaError as exc:
        logger.warning("%s: record at offset %d does not decode (%s); skipped", where, record.offset, exc)


def _apply_consumer_record(key: ConsumerGroupKey, value: bytes | None, replayed: ReplayedPartition) -> None:
    decoded = None if value is None else decode_consumer_value(key, value)
    groups = replayed.consumer_groups
    if decoded is None and isinstance(key, ConsumerGroupMetadataKey):
        # Kafka deletes a group by writing the tombstones of its parts first and this one last.
        groups.pop(key.group_id, None)
        return
    group = groups.get(key.group_id)
    if group is None:
        if decoded is None:
            return  # the tombstone of a part of a group that is already gone
        group = groups[key.group_id] = ReplayedConsumerGroup(key.group_id)
    group.apply(ConsumerGroupRecord(key, decoded))


def _apply_share_record(key: ShareGroupKey, value: bytes | None, replayed: ReplayedPartition) -> None:
    decoded = None if value is None else decode_share_value(key, value)
    groups = replayed.share_groups
    if decoded is None and isinstance(key, ShareGroupMetadataKey):
        groups.pop(key.group_id, None)  # the group's own tombstone comes last when it is deleted
        return
    group = groups.get(key.group_id)
    if group is None:
        if decoded is None:
            return
        group = groups[key.group_id] = ReplayedShareGroup(key.group_id)
    group.apply(key, decoded)
