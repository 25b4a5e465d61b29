"""Kafka's key/value schemas for the KIP-848 consumer-group records of ``__consumer_offsets``.

A consumer group is persisted as several records, each under its own key so that compaction keeps the latest of
each part and a tombstone (null value) deletes just that part:

  * key 3 — the group: its epoch and the hash of its subscribed topics' metadata (``ConsumerGroupMetadata``);
  * key 4 — the subscribed topics' metadata (``ConsumerGroupPartitionMetadata``). Kafka 4.1 replaced it by the
    metadata hash of key 3 (KIP-1101): Kafka 4.1+ no longer writes its value, only a tombstone for a record an
    older Kafka left, the next time the group's epoch moves. We read it so that a log older Kafka wrote loads;
  * key 5 — a member's subscription and client details (``ConsumerGroupMemberMetadata``);
  * key 6 — the epoch of the group's target assignment (``ConsumerGroupTargetAssignmentMetadata``);
  * key 7 — one member's share of the target assignment (``ConsumerGroupTargetAssignmentMember``);
  * key 8 — a member's current assignment and reconciliation state (``ConsumerGroupCurrentMemberAssignment``);
  * key 16 — the topics a subscribed regular expression resolved to (``ConsumerGroupRegularExpression``).

Keys 9-15 and 17+ are share- and streams-group records, which this module does not interpret. Keys are written
in the classic encoding (int16-length strings), values in the flexible one (compact lengths, tagged fields), each
prefixed with an int16 version: the key's record type, and value version 0, the only one Kafka 4.2 has. Tagged
fields a later Kafka adds (e.g. 4.3's assignment timestamp, tag 0 of key 6's value) are read past and dropped.

Topic ids are :class:`uuid.UUID`; partitions by topic id are an :data:`Assignment`. Sets (subscribed topic names,
partitions, racks) are written sorted so the bytes of equal values are equal.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from broker.groups.consumer.assignment import Assignment, TopicMetadata
from wire.stored_schema import (
    SchemaError,
    SchemaReader,
    array_length,
    bytes_field,
    int32_array,
    nullable_string,
    string,
    tagged_fields,
    uuid_field,
    uvarint,
)

CONSUMER_GROUP_METADATA_KEY_VERSION = 3
CONSUMER_GROUP_PARTITION_METADATA_KEY_VERSION = 4
CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION = 8
CONSUMER_GROUP_REGULAR_EXPRESSION_KEY_VERSION = 16
VALUE_VERSION = 0

# Tags of the tagged fields Kafka 4.2 writes.
_METADATA_HASH_TAG = 0
_CLASSIC_MEMBER_METADATA_TAG = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


# ---------------------------------------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class ConsumerGroupMetadataKey:
    group_id: str


@dataclass(frozen=True)
class ConsumerGroupPartitionMetadataKey:
    group_id: str


@dataclass(frozen=True)
class ConsumerGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True)
class ConsumerGroupRegularExpressionKey:
    group_id: str
    regex: str


ConsumerGroupKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)


# ---------------------------------------------------------------------------------------------------------- values


@dataclass(frozen=True)
class ConsumerGroupMetadataValue:
    """``metadata_hash`` (Kafka 4.1+, tag 0; 0 when absent) hashes the subscribed topics' metadata: a group whose
    hash no longer matches the cluster's topics needs a new assignment."""

    epoch: int
    metadata_hash: int = 0


@dataclass(frozen=True)
class ConsumerGroupPartitionMetadataValue:
    """The subscribed topics as an older Kafka (before 4.1) saw them; ``partition_racks`` is empty when no
    partition had a known rack (Kafka stores an empty list then)."""

    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True)
class ClassicProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True)
class ClassicMemberMetadata:
    """What a member that speaks the classic protocol (JoinGroup) in a consumer group brought along: kept so
    that the group can be converted back to a classic group."""

    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...]


@dataclass(frozen=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: frozenset[str]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: Assignment


@dataclass(frozen=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    """``state`` is Kafka's ``MemberState`` byte: 0 stable, 1 unrevoked partitions, 2 unreleased partitions,
    127 unknown."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: Assignment
    partitions_pending_revocation: Assignment


@dataclass(frozen=True)
class ConsumerGroupRegularExpressionValue:
    """The topics ``regex`` matched when it was last resolved, against metadata ``version`` (the metadata image's
    offset), at ``timestamp_ms``."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int


ConsumerGroupValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)


@dataclass(frozen=True)
class ConsumerGroupRecord:
    """One record as read back: ``value`` None is a tombstone, the part of the group ``key`` names is deleted."""

    key: ConsumerGroupKey
    value: ConsumerGroupValue | None


# ---------------------------------------------------------------------------------------------------------- writing


def encode_consumer_key(key: ConsumerGroupKey) -> bytes:
    match key:
        case ConsumerGroupMetadataKey(group_id):
            return _I16.pack(CONSUMER_GROUP_METADATA_KEY_VERSION) + string(group_id)
        case ConsumerGroupPartitionMetadataKey(group_id):
            return _I16.pack(CONSUMER_GROUP_PARTITION_METADATA_KEY_VERSION) + string(group_id)
        case ConsumerGroupMemberMetadataKey(group_id, member_id):
            return _I16.pack(CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION) + string(group_id) + string(member_id)
        case ConsumerGroupTargetAssignmentMetadataKey(group_id):
            return _I16.pack(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION) + string(group_id)
        case ConsumerGroupTargetAssignmentMemberKey(group_id, member_id):
            version = CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION
            return _I16.pack(version) + string(group_id) + string(member_id)
        case ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id):
            version = CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION
            return _I16.pack(version) + string(group_id) + string(member_id)
        case ConsumerGroupRegularExpressionKey(group_id, regex):
            return _I16.pack(CONSUMER_GROUP_REGULAR_EXPRESSION_KEY_VERSION) + string(group_id) + string(regex)


def encode_consumer_value(value: ConsumerGroupValue) -> bytes:
    """Value version 0 in the flexible encoding. Raises :class:`SchemaError` for what the format cannot hold (a
    string over 32767 bytes, a number out of its field's range)."""
    try:
        return _I16.pack(VALUE_VERSION) + _encode_body(value)
    except struct.error as exc:
        raise SchemaError(f"{type(value).__name__}: {exc}") from exc


def _encode_body(value: ConsumerGroupValue) -> bytes:
    match value:
        case ConsumerGroupMetadataValue(epoch, metadata_hash):
            # A tagged field at its default (0 here) is left out, as Kafka's generated writer does.
            tagged = {_METADATA_HASH_TAG: _I64.pack(metadata_hash)} if metadata_hash != 0 else {}
            return _I32.pack(epoch) + tagged_fields(tagged)
        case ConsumerGroupPartitionMetadataValue(topics):
            return _array((_topic_metadata(topic) for topic in topics), len(topics)) + tagged_fields()
        case ConsumerGroupMemberMetadataValue():
            return _member_metadata(value)
        case ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch):
            return _I32.pack(assignment_epoch) + tagged_fields()
        case ConsumerGroupTargetAssignmentMemberValue(topic_partitions):
            return encode_assignment(topic_partitions) + tagged_fields()
        case ConsumerGroupCurrentMemberAssignmentValue():
            return (
                _I32.pack(value.member_epoch)
                + _I32.pack(value.previous_member_epoch)
                + _I8.pack(value.state)
                + encode_assignment(value.assigned_partitions)
                + encode_assignment(value.partitions_pending_revocation)
                + tagged_fields()
            )
        case ConsumerGroupRegularExpressionValue(topics, version, timestamp_ms):
            names = sorted(topics)
            return (
                _array((string(name, flexible=True) for name in names), len(names))
                + _I64.pack(version)
                + _I64.pack(timestamp_ms)
                + tagged_fields()
            )


def _array(items: Iterable[bytes], n: int) -> bytes:
    return array_length(n, flexible=True) + b"".join(items)


def encode_assignment(assignment: Assignment) -> bytes:
    """``[]TopicPartitions``: topic id, its partitions, and the struct's (empty) tagged fields (share groups'
    records store assignments the same way)."""
    entries = sorted(assignment.items())
    return _array(
        (uuid_field(topic) + int32_array(sorted(parts), flexible=True) + tagged_fields() for topic, parts in entries),
        len(entries),
    )


def _topic_metadata(topic: TopicMetadata) -> bytes:
    racks = sorted(topic.partition_racks.items())
    partitions = _array(
        (
            _I32.pack(partition)
            + _array((string(rack, flexible=True) for rack in sorted(names)), len(names))
            + tagged_fields()
            for partition, names in racks
        ),
        len(racks),
    )
    return (
        uuid_field(topic.topic_id)
        + string(topic.name, flexible=True)
        + _I32.pack(topic.num_partitions)
        + partitions
        + tagged_fields()
    )


def _member_metadata(value: ConsumerGroupMemberMetadataValue) -> bytes:
    names = sorted(value.subscribed_topic_names)
    tagged: dict[int, bytes] = {}
    if value.classic_member_metadata is not None:
        classic = value.classic_member_metadata
        protocols = _array(
            (
                string(p.name, flexible=True) + bytes_field(p.metadata, flexible=True) + tagged_fields()
                for p in classic.supported_protocols
            ),
            len(classic.supported_protocols),
        )
        # A nullable struct in a tagged field starts with a presence varint (1; 0 would be null).
        tagged[_CLASSIC_MEMBER_METADATA_TAG] = (
            uvarint(1) + _I32.pack(classic.session_timeout_ms) + protocols + tagged_fields()
        )
    return (
        nullable_string(value.instance_id, flexible=True)
        + nullable_string(value.rack_id, flexible=True)
        + string(value.client_id, flexible=True)
        + string(value.client_host, flexible=True)
        + _array((string(name, flexible=True) for name in names), len(names))
        + nullable_string(value.subscribed_topic_regex, flexible=True)
        + _I32.pack(value.rebalance_timeout_ms)
        + nullable_string(value.server_assignor, flexible=True)
        + tagged_fields(tagged)
    )


# ---------------------------------------------------------------------------------------------------------- reading


def decode_consumer_key(data: bytes) -> ConsumerGroupKey | None:
    """The consumer-group key ``data`` holds, or None when its version is another record type (classic group,
    offset commit, share or streams group). Raises :class:`SchemaError` for a key that does not decode."""
    reader = SchemaReader(data, "__consumer_offsets key")
    version = reader.i16()
    if version == CONSUMER_GROUP_METADATA_KEY_VERSION:
        return ConsumerGroupMetadataKey(reader.string())
    if version == CONSUMER_GROUP_PARTITION_METADATA_KEY_VERSION:
        return ConsumerGroupPartitionMetadataKey(reader.string())
    if version == CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION:
        return ConsumerGroupMemberMetadataKey(reader.string(), reader.string())
    if version == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY_VERSION:
        return ConsumerGroupTargetAssignmentMetadataKey(reader.string())
    if version == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY_VERSION:
        return ConsumerGroupTargetAssignmentMemberKey(reader.string(), reader.string())
    if version == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY_VERSION:
        return ConsumerGroupCurrentMemberAssignmentKey(reader.string(), reader.string())
    if version == CONSUMER_GROUP_REGULAR_EXPRESSION_KEY_VERSION:
        return ConsumerGroupRegularExpressionKey(reader.string(), reader.string())
    return None


def decode_consumer_value(key: ConsumerGroupKey, data: bytes) -> ConsumerGroupValue:
    """The value stored under ``key``. Raises :class:`SchemaError` for an unknown value version or bytes that
    do not decode."""
    name = type(key).__name__.removesuffix("Key") + "Value"
    version = SchemaReader(data, name).i16()
    if version != VALUE_VERSION:
        raise SchemaError(f"{name}: unknown version {version}")
    reader = SchemaReader(data, f"{name} v{version}", flexible=True)
    reader.pos = 2
    return _VALUE_READERS[type(key)](reader)


def decode_consumer_record(key: bytes, value: bytes | None) -> ConsumerGroupRecord | None:
    """A ``__consumer_offsets`` record read back, or None when it is not a consumer-group record."""
    decoded = decode_consumer_key(key)
    if decoded is None:
        return None
    return ConsumerGroupRecord(decoded, None if value is None else decode_consumer_value(decoded, value))


def _read_metadata(reader: SchemaReader) -> ConsumerGroupMetadataValue:
    epoch = reader.i32()
    tagged = reader.tagged_fields()
    metadata_hash = 0
    if _METADATA_HASH_TAG in tagged:
        metadata_hash = _tagged_reader(reader, tagged[_METADATA_HASH_TAG], "metadata hash").i64()
    return ConsumerGroupMetadataValue(epoch, metadata_hash)


def _read_partition_metadata(reader: SchemaReader) -> ConsumerGroupPartitionMetadataValue:
    topics: list[TopicMetadata] = []
    for _ in range(reader.array_length()):
        topic_id = reader.uuid_()
        name = reader.string()
        num_partitions = reader.i32()
        racks: dict[int, frozenset[str]] = {}
        for _ in range(reader.array_length()):
            partition = reader.i32()
            racks[partition] = frozenset(_read_strings(reader))
            reader.skip_tagged_fields()
        reader.skip_tagged_fields()
        topics.append(TopicMetadata(topic_id, name, num_partitions, racks))
    reader.skip_tagged_fields()
    return ConsumerGroupPartitionMetadataValue(tuple(topics))


def _read_member_metadata(reader: SchemaReader) -> ConsumerGroupMemberMetadataValue:
    instance_id = reader.nullable_string()
    rack_id = reader.nullable_string()
    client_id = reader.string()
    client_host = reader.string()
    names = frozenset(_read_strings(reader))
    regex = reader.nullable_string()
    rebalance_timeout_ms = reader.i32()
    server_assignor = reader.nullable_string()
    tagged = reader.tagged_fields()
    classic = None
    if _CLASSIC_MEMBER_METADATA_TAG in tagged:
        classic = _read_classic(_tagged_reader(reader, tagged[_CLASSIC_MEMBER_METADATA_TAG], "classic metadata"))
    return ConsumerGroupMemberMetadataValue(
        instance_id=instance_id,
        rack_id=rack_id,
        client_id=client_id,
        client_host=client_host,
        subscribed_topic_names=names,
        subscribed_topic_regex=regex,
        rebalance_timeout_ms=rebalance_timeout_ms,
        server_assignor=server_assignor,
        classic_member_metadata=classic,
    )


def _read_classic(reader: SchemaReader) -> ClassicMemberMetadata | None:
    if reader.uvarint() == 0:
        return None
    session_timeout_ms = reader.i32()
    protocols: list[ClassicProtocol] = []
    for _ in range(reader.array_length()):
        protocols.append(ClassicProtocol(reader.string(), reader.bytes_()))
        reader.skip_tagged_fields()
    reader.skip_tagged_fields()
    return ClassicMemberMetadata(session_timeout_ms, tuple(protocols))


def _read_target_metadata(reader: SchemaReader) -> ConsumerGroupTargetAssignmentMetadataValue:
    epoch = reader.i32()
    reader.skip_tagged_fields()
    return ConsumerGroupTargetAssignmentMetadataValue(epoch)


def _read_target_member(reader: SchemaReader) -> ConsumerGroupTargetAssignmentMemberValue:
    assignment = read_assignment(reader)
    reader.skip_tagged_fields()
    return ConsumerGroupTargetAssignmentMemberValue(assignment)


def _read_current_assignment(reader: SchemaReader) -> ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch = reader.i32()
    previous_member_epoch = reader.i32()
    state = reader.i8()
    assigned = read_assignment(reader)
    pending = read_assignment(reader)
    reader.skip_tagged_fields()
    return ConsumerGroupCurrentMemberAssignmentValue(member_epoch, previous_member_epoch, state, assigned, pending)


def _read_regex(reader: SchemaReader) -> ConsumerGroupRegularExpressionValue:
    topics = frozenset(_read_strings(reader))
    version = reader.i64()
    timestamp_ms = reader.i64()
    reader.skip_tagged_fields()
    return ConsumerGroupRegularExpressionValue(topics, version, timestamp_ms)


def read_assignment(reader: SchemaReader) -> dict[uuid.UUID, frozenset[int]]:
    assignment: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(reader.array_length()):
        topic_id = reader.uuid_()
        partitions = frozenset(reader.int32_array())
        # Tagged fields of the entry: a later Kafka's assignment epochs (tag 0, KIP-1251) are not read.
        reader.skip_tagged_fields()
        assignment[topic_id] = assignment.get(topic_id, frozenset()) | partitions
    return assignment


def _read_strings(reader: SchemaReader) -> list[str]:
    return [reader.string() for _ in range(reader.array_length())]


def _tagged_reader(reader: SchemaReader, payload: bytes, field: str) -> SchemaReader:
    return SchemaReader(payload, f"{reader.what} {field}", flexible=True)


_VALUE_READERS: dict[type, Callable[[SchemaReader], ConsumerGroupValue]] = {
    ConsumerGroupMetadataKey: _read_metadata,
    ConsumerGroupPartitionMetadataKey: _read_partition_metadata,
    ConsumerGroupMemberMetadataKey: _read_member_metadata,
    ConsumerGroupTargetAssignmentMetadataKey: _read_target_metadata,
    ConsumerGroupTargetAssignmentMemberKey: _read_target_member,
    ConsumerGroupCurrentMemberAssignmentKey: _read_current_assignment,
    ConsumerGroupRegularExpressionKey: _read_regex,
}
