"""What a share group asks to persist: one value per Kafka record of the group in ``__consumer_offsets`` (key
versions 10 to 15), which :mod:`broker.groups.share_persistence` turns into Kafka's records. The group never
depends on the record format, as with :mod:`broker.groups.consumer.changes`."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from broker.groups.consumer.assignment import Assignment
from broker.groups.share.member import ShareMember


@dataclass(frozen=True, slots=True)
class ShareEpochChanged:
    """ShareGroupMetadata: the group epoch moved, computed on the subscribed topics of ``metadata_hash``
    (``deleted``: the group's tombstone, written last when the group is deleted)."""

    epoch: int
    metadata_hash: int = 0
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class ShareMemberChanged:
    """ShareGroupMemberMetadata of ``member``; ``deleted`` writes its tombstone."""

    member: ShareMember
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class ShareTargetMemberChanged:
    """ShareGroupTargetAssignmentMember: the member's share of the target (None: its tombstone)."""

    member_id: str
    assignment: Assignment | None


@dataclass(frozen=True, slots=True)
class ShareTargetEpochChanged:
    """ShareGroupTargetAssignmentMetadata: the target was computed at this group epoch."""

    epoch: int
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class ShareAssignmentChanged:
    """ShareGroupCurrentMemberAssignment of ``member``; ``deleted`` writes its tombstone."""

    member: ShareMember
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class ShareStateTopicsChanged:
    """ShareGroupStatePartitionMetadata: the partitions, by topic id (with the topic's name), that the group's
    members were ever assigned, so share-partition state may exist on them (Kafka's initialized topics); what a
    describe of the group's offsets without topics covers. ``deleted``: its tombstone."""

    topics: Mapping[uuid.UUID, tuple[str, frozenset[int]]]
    deleted: bool = False


ShareChange = (
    ShareEpochChanged
    | ShareMemberChanged
    | ShareTargetMemberChanged
    | ShareTargetEpochChanged
    | ShareAssignmentChanged
    | ShareStateTopicsChanged
)
