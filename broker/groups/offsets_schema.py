"""Kafka's key/value schemas for the records of ``__consumer_offsets``.

Group state is stored in Kafka's own record format so that the topic reads like a Kafka cluster's (tools that
decode ``__consumer_offsets``, e.g. ``kafka-console-consumer --formatter OffsetsMessageFormatter``, understand it).

Keys start with an int16 version that says what the record is:
  * 0 and 1 — an offset commit: (group, topic, partition);
  * 2 — group metadata: (group);
  * 3 and up — :class:`UnknownKey` here: the KIP-848 consumer-group records (3-8 and 16) are
    :mod:`broker.groups.consumer_records`' (the replay in :mod:`broker.groups.offsets_topic` reads them there, so
    this module, which every group type's offsets use, depends on no group type); share- and streams-group
    records are skipped.
A record with a null value is a tombstone (the offset or the group was deleted); compaction drops it in the end.

We write offset values version 4, the flexible encoding, with the committed topic's id in tagged field 0 as Kafka
4.1 does (version 1 when the commit carried an explicit retention, as Kafka does), and group values version 3. We
read every version 0-4; an offset value without a topic id (versions 0-3, or Fjord's before it wrote them) is one
whose topic is known by name only.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from wire.stored_schema import (
    SchemaError,
    SchemaReader,
    bytes_field,
    nullable_string,
    string,
    tagged_fields,
    uuid_field,
)

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 4
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
#: Kafka 4.1's tagged field of an offset value (version 4) holding the committed topic's id.
_TOPIC_ID_TAG = 0
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True)
class UnknownKey:
    """A key version of no offset or classic group record: a KIP-848 record (``broker.groups.consumer_records``),
    or a share- or streams-group record, which loaders skip."""

    version: int


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    metadata: str
    commit_timestamp_ms: int
    leader_epoch: int = -1
    # Only set when the committing client asked for an explicit retention (OffsetCommit v2-v4).
    expire_timestamp_ms: int | None = None
    #: The id the topic had when the offset was committed; None when the record does not say (written before Kafka
    #: 4.1 or Fjord kept it, or with an explicit retention). It tells a topic deleted and created again under the
    #: same name from the one the offset was committed for.
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberValue, ...]


# ---------------------------------------------------------------------------------------------------------- writing


def encode_offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + string(group_id) + string(topic) + _I32.pack(partition)


def encode_group_key(group_id: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + string(group_id)


def encode_offset_value(value: OffsetValue) -> bytes:
    if value.expire_timestamp_ms is not None:
        return (
            _I16.pack(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY)
            + _I64.pack(value.offset)
            + string(value.metadata)
            + _I64.pack(value.commit_timestamp_ms)
            + _I64.pack(value.expire_timestamp_ms)
        )
    topic_id = {} if value.topic_id is None else {_TOPIC_ID_TAG: uuid_field(value.topic_id)}
    return (
        _I16.pack(OFFSET_COMMIT_VALUE_VERSION)
        + _I64.pack(value.offset)
        + _I32.pack(value.leader_epoch)
        + string(value.metadata, flexible=True)
        + _I64.pack(value.commit_timestamp_ms)
        + tagged_fields(topic_id)
    )


def encode_group_value(value: GroupValue) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_VALUE_VERSION))
    out += string(value.protocol_type)
    out += _I32.pack(value.generation)
    out += nullable_string(value.protocol)
    out += nullable_string(value.leader)
    out += _I64.pack(value.current_state_timestamp_ms)
    out += _I32.pack(len(value.members))
    for member in value.members:
        out += string(member.member_id)
        out += nullable_string(member.group_instance_id)
        out += string(member.client_id)
        out += string(member.client_host)
        out += _I32.pack(member.rebalance_timeout_ms)
        out += _I32.pack(member.session_timeout_ms)
        out += bytes_field(member.subscription)
        out += bytes_field(member.assignment)
    return bytes(out)


# ---------------------------------------------------------------------------------------------------------- reading


def decode_key(data: bytes) -> OffsetKey | GroupKey | UnknownKey:
    reader = SchemaReader(data, "__consumer_offsets key")
    version = reader.i16()
    if version in (0, 1):
        return OffsetKey(reader.string(), reader.string(), reader.i32())
    if version == 2:
        return GroupKey(reader.string())
    if version < 0:
        raise SchemaError(f"__consumer_offsets key: negative version {version}")
    return UnknownKey(version)


def decode_offset_value(data: bytes) -> OffsetValue:
    version = SchemaReader(data, "offset commit value").i16()
    if not 0 <= version <= 4:
        raise SchemaError(f"offset commit value: unknown version {version}")
    reader = SchemaReader(data, f"offset commit value v{version}", flexible=version >= 4)
    reader.pos = 2
    offset = reader.i64()
    leader_epoch = reader.i32() if version >= 3 else -1
    metadata = reader.string()
    commit_timestamp = reader.i64()
    expire = reader.i64() if version == 1 else -1
    tagged = reader.tagged_fields()
    topic_id: uuid.UUID | None = None
    if _TOPIC_ID_TAG in tagged:
        if len(tagged[_TOPIC_ID_TAG]) != 16:
            raise SchemaError(f"offset commit value v{version}: topic id of {len(tagged[_TOPIC_ID_TAG])} bytes")
        topic_id = uuid.UUID(bytes=tagged[_TOPIC_ID_TAG])
    return OffsetValue(
        offset=offset,
        metadata=metadata,
        commit_timestamp_ms=commit_timestamp,
        leader_epoch=leader_epoch,
        expire_timestamp_ms=None if expire < 0 else expire,
        # Kafka reads a missing id as the zero id; both mean "not known".
        topic_id=topic_id if topic_id is not None and topic_id.int else None,
    )


def decode_group_value(data: bytes) -> GroupValue:
    version = SchemaReader(data, "group metadata value").i16()
    if not 0 <= version <= 4:
        raise SchemaError(f"group metadata value: unknown version {version}")
    reader = SchemaReader(data, f"group metadata value v{version}", flexible=version >= 4)
    reader.pos = 2
    protocol_type = reader.string()
    generation = reader.i32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    state_timestamp = reader.i64() if version >= 2 else -1
    members: list[MemberValue] = []
    for _ in range(reader.array_length()):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        rebalance_timeout = reader.i32() if version >= 1 else -1
        session_timeout = reader.i32()
        subscription = reader.bytes_()
        assignment = reader.bytes_()
        reader.skip_tagged_fields()
        members.append(
            MemberValue(
                member_id=member_id,
                group_instance_id=instance_id,
                client_id=client_id,
                client_host=client_host,
                rebalance_timeout_ms=session_timeout if rebalance_timeout < 0 else rebalance_timeout,
                session_timeout_ms=session_timeout,
                subscription=subscription,
                assignment=assignment,
            )
        )
    reader.skip_tagged_fields()
    return GroupValue(
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        current_state_timestamp_ms=state_timestamp,
        members=tuple(members),
    )
