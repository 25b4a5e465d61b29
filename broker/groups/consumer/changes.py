"""What a consumer group asks to persist: one value per Kafka record of the group in ``__consumer_offsets``.

The sans-I/O group only says what changed; the coordinator turns each change into Kafka's record (key versions 3
to 8) and appends them, so the group never depends on the record format and the format module never on the group.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.groups.consumer.assignment import Assignment
from broker.groups.consumer.member import ConsumerMember


@dataclass(frozen=True, slots=True)
class GroupEpochChanged:
    """ConsumerGroupMetadata: the group epoch moved (or, with ``deleted``, the group's tombstone).

    ``metadata_hash`` stands for the subscribed topics' metadata the epoch was computed on (Kafka 4.1+ stores such
    a hash instead of the topics): a coordinator loading the group compares it with the cluster's topics, and
    only a difference moves the epoch, so a failover does not reassign anything."""

    epoch: int
    metadata_hash: int = 0
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class MemberMetadataChanged:
    """ConsumerGroupMemberMetadata of ``member``; ``deleted`` writes the member's tombstone."""

    member: ConsumerMember
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class TargetMemberChanged:
    """ConsumerGroupTargetAssignmentMember: the member's share of the target (None: its tombstone)."""

    member_id: str
    assignment: Assignment | None


@dataclass(frozen=True, slots=True)
class TargetEpochChanged:
    """ConsumerGroupTargetAssignmentMetadata: the target assignment was computed at this group epoch."""

    epoch: int
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class CurrentAssignmentChanged:
    """ConsumerGroupCurrentMemberAssignment of ``member``; ``deleted`` writes the tombstone."""

    member: ConsumerMember
    deleted: bool = False


Change = GroupEpochChanged | MemberMetadataChanged | TargetMemberChanged | TargetEpochChanged | CurrentAssignmentChanged
