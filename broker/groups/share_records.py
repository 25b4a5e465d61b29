"""Kafka's key/value schemas for the KIP-932 share-group records of ``__consumer_offsets`` (Kafka 4.2).

A share group is persisted as a KIP-848 consumer group is (:mod:`broker.groups.consumer_records`), one record per
part so that compaction keeps the latest of each and a tombstone deletes just that part:

  * key 10 — a member's subscription and client details (``ShareGroupMemberMetadata``);
  * key 11 — the group: its epoch and the hash of its subscribed topics' metadata (``ShareGroupMetadata``);
  * key 12 — the epoch of the target assignment (``ShareGroupTargetAssignmentMetadata``);
  * key 13 — one member's share of the target (``ShareGroupTargetAssignmentMember``);
  * key 14 — a member's current epochs and assignment (``ShareGroupCurrentMemberAssignment``);
  * key 15 — the partitions the group has share state on (``ShareGroupStatePartitionMetadata``). Kafka's group
    coordinator asks its share coordinator to initialize a partition's state before assigning it, and records it
    here as initialized; in Fjord the state lives with the partition and is created on first use, so the
    partitions ever assigned are recorded as initialized (none are ever initializing or deleting).

Key 9 (the subscribed topics' metadata, which Kafka 4.1 replaced by the hash of key 11) is no longer written. Keys
are written in the classic encoding (int16-length strings), values in the flexible one, value version 0.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.groups.consumer.assignment import Assignment
from broker.groups.consumer_records import encode_assignment, read_assignment
from wire.stored_schema import (
    SchemaError,
    SchemaReader,
    array_length,
    int32_array,
    nullable_string,
    string,
    tagged_fields,
    uuid_field,
)

SHARE_GROUP_MEMBER_METADATA_KEY_VERSION = 10
SHARE_GROUP_METADATA_KEY_VERSION = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION = 14
SHARE_GROUP_STATE_PARTITION_METADATA_KEY_VERSION = 15
VALUE_VERSION = 0
_METADATA_HASH_TAG = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True)
class ShareGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True)
class ShareGroupMetadataKey:
    group_id: str


@dataclass(frozen=True)
class ShareGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True)
class ShareGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True)
class ShareGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True)
class ShareGroupStatePartitionMetadataKey:
    group_id: str


ShareGroupKey = (
    ShareGroupMemberMetadataKey
    | ShareGroupMetadataKey
    | ShareGroupTargetAssignmentMetadataKey
    | ShareGroupTargetAssignmentMemberKey
    | ShareGroupCurrentMemberAssignmentKey
    | ShareGroupStatePartitionMetadataKey
)

_KEY_VERSIONS: dict[type, int] = {
    ShareGroupMemberMetadataKey: SHARE_GROUP_MEMBER_METADATA_KEY_VERSION,
    ShareGroupMetadataKey: SHARE_GROUP_METADATA_KEY_VERSION,
    ShareGroupTargetAssignmentMetadataKey: SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION,
    ShareGroupTargetAssignmentMemberKey: SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION,
    ShareGroupCurrentMemberAssignmentKey: SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION,
    ShareGroupStatePartitionMetadataKey: SHARE_GROUP_STATE_PARTITION_METADATA_KEY_VERSION,
}


@dataclass(frozen=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: frozenset[str]


@dataclass(frozen=True)
class ShareGroupMetadataValue:
    """``metadata_hash`` (tag 0; 0 when absent) hashes the subscribed topics' metadata, as for consumer groups."""

    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True)
class ShareGroupTargetAssignmentMemberValue:
    topic_partitions: Assignment


@dataclass(frozen=True)
class ShareGroupCurrentMemberAssignmentValue:
    """``state`` is Kafka's ``MemberState`` byte; a share member is always 0 (stable)."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: Assignment


#: Partitions by topic id, each topic with its name: the state-partition record's ``[]TopicPartitionsInfo``.
StateTopics = Mapping[uuid.UUID, tuple[str, frozenset[int]]]


@dataclass(frozen=True)
class ShareGroupStatePartitionMetadataValue:
    """``initializing`` and ``initialized``: partitions by topic; ``deleting``: topic ids with their names."""

    initializing: StateTopics
    initialized: StateTopics
    deleting: Mapping[uuid.UUID, str]


ShareGroupValue = (
    ShareGroupMemberMetadataValue
    | ShareGroupMetadataValue
    | ShareGroupTargetAssignmentMetadataValue
    | ShareGroupTargetAssignmentMemberValue
    | ShareGroupCurrentMemberAssignmentValue
    | ShareGroupStatePartitionMetadataValue
)


def encode_share_key(key: ShareGroupKey) -> bytes:
    out = _I16.pack(_KEY_VERSIONS[type(key)]) + string(key.group_id)
    member_id = getattr(key, "member_id", None)
    return out + string(member_id) if member_id is not None else out


def encode_share_value(value: ShareGroupValue) -> bytes:
    """Value version 0 in the flexible encoding; raises :class:`SchemaError` for what the format cannot hold."""
    try:
        return _I16.pack(VALUE_VERSION) + _encode_body(value)
    except struct.error as exc:
        raise SchemaError(f"{type(value).__name__}: {exc}") from exc


def _encode_body(value: ShareGroupValue) -> bytes:
    match value:
        case ShareGroupMemberMetadataValue(rack_id, client_id, client_host, names):
            ordered = sorted(names)
            return (
                nullable_string(rack_id, flexible=True)
                + string(client_id, flexible=True)
                + string(client_host, flexible=True)
                + array_length(len(ordered), flexible=True)
                + b"".join(string(n, flexible=True) for n in ordered)
                + tagged_fields()
            )
        case ShareGroupMetadataValue(epoch, metadata_hash):
            tagged = {_METADATA_HASH_TAG: _I64.pack(metadata_hash)} if metadata_hash != 0 else {}
            return _I32.pack(epoch) + tagged_fields(tagged)
        case ShareGroupTargetAssignmentMetadataValue(epoch):
            return _I32.pack(epoch) + tagged_fields()
        case ShareGroupTargetAssignmentMemberValue(partitions):
            return encode_assignment(partitions) + tagged_fields()
        case ShareGroupCurrentMemberAssignmentValue(member_epoch, previous, state, assigned):
            return (
                _I32.pack(member_epoch)
                + _I32.pack(previous)
                + _I8.pack(state)
                + encode_assignment(assigned)
                + tagged_fields()
            )
        case ShareGroupStatePartitionMetadataValue(initializing, initialized, deleting):
            deleting_entries = sorted(deleting.items())
            return (
                _state_topics(initializing)
                + _state_topics(initialized)
                + array_length(len(deleting_entries), flexible=True)
                + b"".join(uuid_field(t) + string(n, flexible=True) + tagged_fields() for t, n in deleting_entries)
                + tagged_fields()
            )


def _state_topics(topics: StateTopics) -> bytes:
    entries = sorted(topics.items())
    return array_length(len(entries), flexible=True) + b"".join(
        uuid_field(t) + string(name, flexible=True) + int32_array(sorted(ps), flexible=True) + tagged_fields()
        for t, (name, ps) in entries
    )


def decode_share_key(data: bytes) -> ShareGroupKey | None:
    """The share-group key ``data`` holds, or None for another record type. Raises :class:`SchemaError` for a key
    that does not decode."""
    reader = SchemaReader(data, "__consumer_offsets key")
    version = reader.i16()
    if version == SHARE_GROUP_MEMBER_METADATA_KEY_VERSION:
        return ShareGroupMemberMetadataKey(reader.string(), reader.string())
    if version == SHARE_GROUP_METADATA_KEY_VERSION:
        return ShareGroupMetadataKey(reader.string())
    if version == SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION:
        return ShareGroupTargetAssignmentMetadataKey(reader.string())
    if version == SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION:
        return ShareGroupTargetAssignmentMemberKey(reader.string(), reader.string())
    if version == SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION:
        return ShareGroupCurrentMemberAssignmentKey(reader.string(), reader.string())
    if version == SHARE_GROUP_STATE_PARTITION_METADATA_KEY_VERSION:
        return ShareGroupStatePartitionMetadataKey(reader.string())
    return None


def decode_share_value(key: ShareGroupKey, data: bytes) -> ShareGroupValue:
    name = type(key).__name__.removesuffix("Key") + "Value"
    version = SchemaReader(data, name).i16()
    if version != VALUE_VERSION:
        raise SchemaError(f"{name}: unknown version {version}")
    reader = SchemaReader(data, f"{name} v{version}", flexible=True)
    reader.pos = 2
    return _READERS[type(key)](reader)


def _read_member(reader: SchemaReader) -> ShareGroupMemberMetadataValue:
    rack_id = reader.nullable_string()
    client_id = reader.string()
    client_host = reader.string()
    names = frozenset(reader.string() for _ in range(reader.array_length()))
    reader.skip_tagged_fields()
    return ShareGroupMemberMetadataValue(rack_id, client_id, client_host, names)


def _read_metadata(reader: SchemaReader) -> ShareGroupMetadataValue:
    epoch = reader.i32()
    tagged = reader.tagged_fields()
    hashed = 0
    if _METADATA_HASH_TAG in tagged:
        hashed = SchemaReader(tagged[_METADATA_HASH_TAG], f"{reader.what} metadata hash", flexible=True).i64()
    return ShareGroupMetadataValue(epoch, hashed)


def _read_target_metadata(reader: SchemaReader) -> ShareGroupTargetAssignmentMetadataValue:
    epoch = reader.i32()
    reader.skip_tagged_fields()
    return ShareGroupTargetAssignmentMetadataValue(epoch)


def _read_target_member(reader: SchemaReader) -> ShareGroupTargetAssignmentMemberValue:
    assignment = read_assignment(reader)
    reader.skip_tagged_fields()
    return ShareGroupTargetAssignmentMemberValue(assignment)


def _read_current(reader: SchemaReader) -> ShareGroupCurrentMemberAssignmentValue:
    member_epoch = reader.i32()
    previous = reader.i32()
    state = reader.i8()
    assigned = read_assignment(reader)
    reader.skip_tagged_fields()
    return ShareGroupCurrentMemberAssignmentValue(member_epoch, previous, state, assigned)


def _read_state_topics(reader: SchemaReader) -> dict[uuid.UUID, tuple[str, frozenset[int]]]:
    topics: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
    for _ in range(reader.array_length()):
        topic_id, name, partitions = reader.uuid_(), reader.string(), frozenset(reader.int32_array())
        reader.skip_tagged_fields()
        topics[topic_id] = (name, partitions)
    return topics


def _read_state_partitions(reader: SchemaReader) -> ShareGroupStatePartitionMetadataValue:
    initializing = _read_state_topics(reader)
    initialized = _read_state_topics(reader)
    deleting: dict[uuid.UUID, str] = {}
    for _ in range(reader.array_length()):
        topic_id, name = reader.uuid_(), reader.string()
        reader.skip_tagged_fields()
        deleting[topic_id] = name
    reader.skip_tagged_fields()
    return ShareGroupStatePartitionMetadataValue(initializing, initialized, deleting)


_READERS: dict[type, Callable[[SchemaReader], ShareGroupValue]] = {
    ShareGroupMemberMetadataKey: _read_member,
    ShareGroupMetadataKey: _read_metadata,
    ShareGroupTargetAssignmentMetadataKey: _read_target_metadata,
    ShareGroupTargetAssignmentMemberKey: _read_target_member,
    ShareGroupCurrentMemberAssignmentKey: _read_current,
    ShareGroupStatePartitionMetadataKey: _read_state_partitions,
}
