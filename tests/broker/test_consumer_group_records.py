"""The KIP-848 consumer-group records of ``__consumer_offsets``, and replaying them.

The expected bytes are written out field by field from Kafka's schemas (``ConsumerGroup*Key.json`` /
``*Value.json`` of Kafka's group coordinator): keys in the classic encoding (int16 version, int16-length strings),
values as version 0 in the flexible one (compact lengths as length + 1 in an unsigned varint, 16-byte uuids, a
tagged-field section ending every struct). So the tests check that a Kafka-written log reads here and ours reads in
Kafka, not only that our writer and reader agree.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.broker import Broker
from broker.groups.consumer.assignment import TopicMetadata
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
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    decode_consumer_key,
    decode_consumer_record,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
)
from broker.groups.coordinator import GroupCoordinator
from broker.groups.offsets_schema import (
    GroupValue,
    OffsetValue,
    UnknownKey,
    decode_key,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from broker.groups.offsets_topic import (
    OFFSETS_TOPIC,
    ReplayedConsumerGroup,
    ReplayedPartition,
    replay_offsets_partition,
)
from node.process import Node
from settings.server import ServerConfig
from testkit.node_process import default_overrides
from testkit.waiting import eventually_async
from wire.record_batch import Record, build_batch
from wire.stored_schema import SchemaError

TOPIC_A = uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")
TOPIC_B = uuid.UUID("fedcba98-7654-3210-fedc-ba9876543210")
# Java's Uuid writes its most significant long, then its least significant one: the UUID's 16 bytes in order.
A_BYTES = bytes.fromhex("0123456789abcdef0123456789abcdef")
B_BYTES = bytes.fromhex("fedcba9876543210fedcba9876543210")

V0 = b"\x00\x00"  # every value's version: 0
NO_TAGS = b"\x00"  # an empty tagged-field section


def i32(value: int) -> bytes:
    return struct.pack(">i", value)


def i64(value: int) -> bytes:
    return struct.pack(">q", value)


MEMBER = ConsumerGroupMemberMetadataValue(
    instance_id=None,
    rack_id="r1",
    client_id="cid",
    client_host="/1.2.3.4",
    subscribed_topic_names=frozenset({"b", "a"}),
    subscribed_topic_regex=None,
    rebalance_timeout_ms=30_000,
    server_assignor="uniform",
)
MEMBER_BYTES = (
    V0
    + b"\x00"  # InstanceId: null
    + b"\x03r1"  # RackId
    + b"\x04cid"  # ClientId
    + b"\x09/1.2.3.4"  # ClientHost
    + b"\x03" + b"\x02a" + b"\x02b"  # SubscribedTopicNames: 2 entries
    + b"\x00"  # SubscribedTopicRegex: null
    + i32(30_000)  # RebalanceTimeoutMs
    + b"\x08uniform"  # ServerAssignor
    + NO_TAGS  # no ClassicMemberMetadata
)  # fmt: skip

CLASSIC_MEMBER = ConsumerGroupMemberMetadataValue(
    instance_id="inst",
    rack_id=None,
    client_id="c",
    client_host="h",
    subscribed_topic_names=frozenset(),
    subscribed_topic_regex="t.*",
    rebalance_timeout_ms=-1,
    server_assignor=None,
    classic_member_metadata=ClassicMemberMetadata(10_000, (ClassicProtocol("range", b"\x00\x01"),)),
)
CLASSIC_STRUCT = (
    b"\x01"  # presence of the nullable struct
    + i32(10_000)  # SessionTimeoutMs
    + b"\x02"  # SupportedProtocols: 1 entry
    + b"\x06range" + b"\x03\x00\x01" + NO_TAGS  # Name, Metadata (compact bytes), the entry's tags
    + NO_TAGS  # the struct's tags
)  # fmt: skip
CLASSIC_MEMBER_BYTES = (
    V0
    + b"\x05inst"
    + b"\x00"  # RackId: null
    + b"\x02c"
    + b"\x02h"
    + b"\x01"  # SubscribedTopicNames: empty
    + b"\x04t.*"
    + i32(-1)
    + b"\x00"  # ServerAssignor: null
    + b"\x01" + b"\x00" + bytes([len(CLASSIC_STRUCT)]) + CLASSIC_STRUCT  # 1 tagged field: tag 0, its size
)  # fmt: skip

PARTITION_METADATA = ConsumerGroupPartitionMetadataValue(
    (TopicMetadata(TOPIC_A, "t", 2, {0: frozenset({"r1"}), 1: frozenset({"r2", "r1"})}),)
)
PARTITION_METADATA_BYTES = (
    V0
    + b"\x02"  # Topics: 1 entry
    + A_BYTES  # TopicId
    + b"\x02t"  # TopicName
    + i32(2)  # NumPartitions
    + b"\x03"  # PartitionMetadata: 2 entries
    + i32(0) + b"\x02" + b"\x03r1" + NO_TAGS  # Partition, Racks, the entry's tags
    + i32(1) + b"\x03" + b"\x03r1" + b"\x03r2" + NO_TAGS
    + NO_TAGS  # the topic's tags
    + NO_TAGS
)  # fmt: skip

TARGET_MEMBER = ConsumerGroupTargetAssignmentMemberValue({TOPIC_B: frozenset({1}), TOPIC_A: frozenset({2, 0})})
TARGET_MEMBER_BYTES = (
    V0
    + b"\x03"  # TopicPartitions: 2 entries
    + A_BYTES + b"\x03" + i32(0) + i32(2) + NO_TAGS  # TopicId, Partitions ([]int32), the entry's tags
    + B_BYTES + b"\x02" + i32(1) + NO_TAGS
    + NO_TAGS
)  # fmt: skip

CURRENT = ConsumerGroupCurrentMemberAssignmentValue(
    member_epoch=7,
    previous_member_epoch=6,
    state=1,
    assigned_partitions={TOPIC_A: frozenset({3})},
    partitions_pending_revocation={},
)
CURRENT_BYTES = (
    V0
    + i32(7)  # MemberEpoch
    + i32(6)  # PreviousMemberEpoch
    + b"\x01"  # State (int8): UNREVOKED_PARTITIONS
    + b"\x02" + A_BYTES + b"\x02" + i32(3) + NO_TAGS  # AssignedPartitions: 1 entry
    + b"\x01"  # PartitionsPendingRevocation: empty
    + NO_TAGS
)  # fmt: skip

REGEX = ConsumerGroupRegularExpressionValue(frozenset({"ab", "a"}), version=100, timestamp_ms=1_700_000_000_000)
REGEX_BYTES = V0 + b"\x03" + b"\x02a" + b"\x03ab" + i64(100) + i64(1_700_000_000_000) + NO_TAGS

GOLDEN_KEYS: list[tuple[ConsumerGroupKey, bytes]] = [
    (ConsumerGroupMetadataKey("grp"), b"\x00\x03" + b"\x00\x03grp"),
    (ConsumerGroupPartitionMetadataKey("grp"), b"\x00\x04" + b"\x00\x03grp"),
    (ConsumerGroupMemberMetadataKey("grp", "m1"), b"\x00\x05" + b"\x00\x03grp" + b"\x00\x02m1"),
    (ConsumerGroupTargetAssignmentMetadataKey("grp"), b"\x00\x06" + b"\x00\x03grp"),
    (ConsumerGroupTargetAssignmentMemberKey("grp", "m1"), b"\x00\x07" + b"\x00\x03grp" + b"\x00\x02m1"),
    (ConsumerGroupCurrentMemberAssignmentKey("grp", "m1"), b"\x00\x08" + b"\x00\x03grp" + b"\x00\x02m1"),
    (ConsumerGroupRegularExpressionKey("grp", "a.*"), b"\x00\x10" + b"\x00\x03grp" + b"\x00\x03a.*"),
]

GOLDEN_VALUES: list[tuple[ConsumerGroupKey, ConsumerGroupValue, bytes]] = [
    # The metadata hash (Kafka 4.1+) is tag 0; at its default 0 Kafka leaves it out.
    (ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(epoch=42), V0 + i32(42) + NO_TAGS),
    (
        ConsumerGroupMetadataKey("g"),
        ConsumerGroupMetadataValue(epoch=42, metadata_hash=-2),
        V0 + i32(42) + b"\x01" + b"\x00" + b"\x08" + i64(-2),  # 1 tagged field: tag 0, 8 bytes
    ),
    (ConsumerGroupPartitionMetadataKey("g"), PARTITION_METADATA, PARTITION_METADATA_BYTES),
    (ConsumerGroupMemberMetadataKey("g", "m"), MEMBER, MEMBER_BYTES),
    (ConsumerGroupMemberMetadataKey("g", "m"), CLASSIC_MEMBER, CLASSIC_MEMBER_BYTES),
    (
        ConsumerGroupTargetAssignmentMetadataKey("g"),
        ConsumerGroupTargetAssignmentMetadataValue(5),
        V0 + i32(5) + NO_TAGS,
    ),
    (ConsumerGroupTargetAssignmentMemberKey("g", "m"), TARGET_MEMBER, TARGET_MEMBER_BYTES),
    (ConsumerGroupCurrentMemberAssignmentKey("g", "m"), CURRENT, CURRENT_BYTES),
    (ConsumerGroupRegularExpressionKey("g", "a.*"), REGEX, REGEX_BYTES),
]


@pytest.mark.parametrize(("key", "raw"), GOLDEN_KEYS)
def test_keys_are_kafkas_bytes(key: ConsumerGroupKey, raw: bytes) -> None:
    assert encode_consumer_key(key) == raw
    assert decode_consumer_key(raw) == key
    # The offsets' key reader leaves them to this module (it depends on no group type).
    assert decode_key(raw) == UnknownKey(raw[1])


@pytest.mark.parametrize(("key", "value", "raw"), GOLDEN_VALUES)
def test_values_are_kafkas_bytes(key: ConsumerGroupKey, value: ConsumerGroupValue, raw: bytes) -> None:
    assert encode_consumer_value(value) == raw
    assert decode_consumer_value(key, raw) == value


def test_an_old_partition_metadata_record_without_racks_decodes() -> None:
    """Kafka stores an empty PartitionMetadata list when no partition's rack is known."""
    raw = V0 + b"\x03" + A_BYTES + b"\x02a" + i32(3) + b"\x01" + NO_TAGS + B_BYTES + b"\x02b" + i32(1) + b"\x01"
    raw += NO_TAGS + NO_TAGS
    assert decode_consumer_value(ConsumerGroupPartitionMetadataKey("g"), raw) == ConsumerGroupPartitionMetadataValue(
        (TopicMetadata(TOPIC_A, "a", 3), TopicMetadata(TOPIC_B, "b", 1))
    )


def test_tagged_fields_of_later_kafka_versions_are_read_past() -> None:
    # Group metadata with tag 1 (a later Kafka's group creation time) after the metadata hash.
    metadata = V0 + i32(3) + b"\x02" + b"\x00\x08" + i64(77) + b"\x01\x08" + i64(1_000)
    assert decode_consumer_value(ConsumerGroupMetadataKey("g"), metadata) == ConsumerGroupMetadataValue(3, 77)
    # Target-assignment metadata with 4.3's assignment timestamp (tag 0, KIP-1263).
    target = V0 + i32(5) + b"\x01" + b"\x00\x08" + i64(123)
    assert decode_consumer_value(
        ConsumerGroupTargetAssignmentMetadataKey("g"), target
    ) == ConsumerGroupTargetAssignmentMetadataValue(5)
    # A current assignment whose partition entries carry assignment epochs (tag 0 of the entry, KIP-1251).
    epochs = b"\x02" + i32(9)  # a compact []int32 of one epoch
    current = (
        V0 + i32(7) + i32(6) + b"\x01"
        + b"\x02" + A_BYTES + b"\x02" + i32(3) + b"\x01" + b"\x00" + bytes([len(epochs)]) + epochs
        + b"\x01"
        + NO_TAGS
    )  # fmt: skip
    assert decode_consumer_value(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), current) == CURRENT
    # An unknown tag in the member's classic metadata struct and one in the value itself.
    struct_with_tag = CLASSIC_STRUCT[:-1] + b"\x01" + b"\x05\x02zz"
    member = CLASSIC_MEMBER_BYTES[: -len(CLASSIC_STRUCT) - 3] + b"\x02" + b"\x00" + bytes([len(struct_with_tag)])
    member += struct_with_tag + b"\x07\x01\xff"
    assert decode_consumer_value(ConsumerGroupMemberMetadataKey("g", "m"), member) == CLASSIC_MEMBER


def test_a_null_classic_member_metadata_decodes_as_none() -> None:
    # Kafka leaves a null tagged struct out; a writer that sends it anyway sends presence 0.
    raw = MEMBER_BYTES[:-1] + b"\x01" + b"\x00\x01\x00"
    assert decode_consumer_value(ConsumerGroupMemberMetadataKey("g", "m"), raw) == MEMBER


def test_tombstones_decode_as_key_without_value() -> None:
    key = encode_consumer_key(ConsumerGroupCurrentMemberAssignmentKey("grp", "m1"))
    assert decode_consumer_record(key, None) == ConsumerGroupRecord(
        ConsumerGroupCurrentMemberAssignmentKey("grp", "m1"), None
    )
    assert decode_consumer_record(key, CURRENT_BYTES) == ConsumerGroupRecord(
        ConsumerGroupCurrentMemberAssignmentKey("grp", "m1"), CURRENT
    )


def test_other_record_types_are_not_consumer_group_records() -> None:
    assert decode_consumer_record(encode_offset_key("g", "t", 0), None) is None
    assert decode_consumer_record(encode_group_key("g"), None) is None
    share_group_metadata_key = b"\x00\x0b\x00\x01g"
    assert decode_consumer_key(share_group_metadata_key) is None
    assert decode_key(share_group_metadata_key) == UnknownKey(11)


@pytest.mark.parametrize(("key", "value", "raw"), GOLDEN_VALUES)
def test_every_truncation_of_a_value_is_a_schema_error(
    key: ConsumerGroupKey, value: ConsumerGroupValue, raw: bytes
) -> None:
    for cut in range(len(raw)):
        with pytest.raises(SchemaError):
            decode_consumer_value(key, raw[:cut])


@pytest.mark.parametrize(("key", "raw"), GOLDEN_KEYS)
def test_every_truncation_of_a_key_is_a_schema_error(key: ConsumerGroupKey, raw: bytes) -> None:
    for cut in range(len(raw)):
        with pytest.raises(SchemaError):
            decode_consumer_key(raw[:cut])


@pytest.mark.parametrize(
    ("key", "raw", "match"),
    [
        (ConsumerGroupMetadataKey("g"), b"\x00\x01" + i32(1) + NO_TAGS, "unknown version 1"),
        (ConsumerGroupMetadataKey("g"), b"\xff\xff" + i32(1) + NO_TAGS, "unknown version -1"),
        # A tagged metadata hash of 3 bytes instead of 8.
        (ConsumerGroupMetadataKey("g"), V0 + i32(1) + b"\x01\x00\x03abc", "truncated"),
        # An array that claims 2**28 int32 partitions.
        (ConsumerGroupTargetAssignmentMemberKey("g", "m"), V0 + b"\x02" + A_BYTES + b"\x81\x80\x80\x80\x01", "array"),
        # A varint that never ends.
        (ConsumerGroupRegularExpressionKey("g", "r"), V0 + b"\xff\xff\xff\xff\xff\xff", "varint"),
        # A client id that is not UTF-8.
        (ConsumerGroupMemberMetadataKey("g", "m"), V0 + b"\x00\x00\x02\xff", "UTF-8"),
        # A null where the client id is required.
        (ConsumerGroupMemberMetadataKey("g", "m"), V0 + b"\x00\x00\x00", "null"),
    ],
)
def test_garbage_values_are_schema_errors(key: ConsumerGroupKey, raw: bytes, match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        decode_consumer_value(key, raw)


def test_what_the_format_cannot_hold_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        encode_consumer_value(ConsumerGroupCurrentMemberAssignmentValue(1, 0, 200, {}, {}))  # state is an int8
    with pytest.raises(SchemaError):
        encode_consumer_value(ConsumerGroupTargetAssignmentMetadataValue(2**31))
    with pytest.raises(SchemaError):
        encode_consumer_key(ConsumerGroupMemberMetadataKey("g", "m" * 40_000))


# ---------------------------------------------------------------------------------------------------------- round trips

text = st.text(max_size=20)
names = st.frozensets(text, max_size=4)
i32s = st.integers(-(2**31), 2**31 - 1)
assignments = st.dictionaries(st.uuids(), st.frozensets(st.integers(0, 2**31 - 1), max_size=5), max_size=4)

VALUES = st.one_of(
    st.builds(ConsumerGroupMetadataValue, epoch=i32s, metadata_hash=st.integers(-(2**63), 2**63 - 1)),
    st.builds(
        ConsumerGroupPartitionMetadataValue,
        st.lists(
            st.builds(
                TopicMetadata,
                topic_id=st.uuids(),
                name=text,
                num_partitions=i32s,
                partition_racks=st.dictionaries(st.integers(0, 100), names, max_size=3),
            ),
            max_size=3,
        ).map(tuple),
    ),
    st.builds(
        ConsumerGroupMemberMetadataValue,
        instance_id=st.none() | text,
        rack_id=st.none() | text,
        client_id=text,
        client_host=text,
        subscribed_topic_names=names,
        subscribed_topic_regex=st.none() | text,
        rebalance_timeout_ms=i32s,
        server_assignor=st.none() | text,
        classic_member_metadata=st.none()
        | st.builds(
            ClassicMemberMetadata,
            session_timeout_ms=i32s,
            supported_protocols=st.lists(st.builds(ClassicProtocol, text, st.binary(max_size=20)), max_size=3).map(
                tuple
            ),
        ),
    ),
    st.builds(ConsumerGroupTargetAssignmentMetadataValue, i32s),
    st.builds(ConsumerGroupTargetAssignmentMemberValue, assignments),
    st.builds(
        ConsumerGroupCurrentMemberAssignmentValue,
        member_epoch=i32s,
        previous_member_epoch=i32s,
        state=st.sampled_from([0, 1, 2, 127]),
        assigned_partitions=assignments,
        partitions_pending_revocation=assignments,
    ),
    st.builds(ConsumerGroupRegularExpressionValue, names, st.integers(0, 2**63 - 1), st.integers(0, 2**50)),
)
KEY_FOR_VALUE: dict[type, ConsumerGroupKey] = {
    ConsumerGroupMetadataValue: ConsumerGroupMetadataKey("g"),
    ConsumerGroupPartitionMetadataValue: ConsumerGroupPartitionMetadataKey("g"),
    ConsumerGroupMemberMetadataValue: ConsumerGroupMemberMetadataKey("g", "m"),
    ConsumerGroupTargetAssignmentMetadataValue: ConsumerGroupTargetAssignmentMetadataKey("g"),
    ConsumerGroupTargetAssignmentMemberValue: ConsumerGroupTargetAssignmentMemberKey("g", "m"),
    ConsumerGroupCurrentMemberAssignmentValue: ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
    ConsumerGroupRegularExpressionValue: ConsumerGroupRegularExpressionKey("g", "r"),
}


@given(VALUES)
def test_values_round_trip(value: ConsumerGroupValue) -> None:
    assert decode_consumer_value(KEY_FOR_VALUE[type(value)], encode_consumer_value(value)) == value


@given(text, text, st.integers(0, 6))
def test_keys_round_trip(group: str, member: str, which: int) -> None:
    keys: list[ConsumerGroupKey] = [
        ConsumerGroupMetadataKey(group),
        ConsumerGroupPartitionMetadataKey(group),
        ConsumerGroupMemberMetadataKey(group, member),
        ConsumerGroupTargetAssignmentMetadataKey(group),
        ConsumerGroupTargetAssignmentMemberKey(group, member),
        ConsumerGroupCurrentMemberAssignmentKey(group, member),
        ConsumerGroupRegularExpressionKey(group, member),
    ]
    key = keys[which]
    assert decode_consumer_key(encode_consumer_key(key)) == key


# ---------------------------------------------------------------------------------------------------------- replay


def _record(key: ConsumerGroupKey, value: ConsumerGroupValue | None) -> Record:
    return Record(
        key=encode_consumer_key(key), value=None if value is None else encode_consumer_value(value), timestamp=1
    )


def _member(client_id: str) -> ConsumerGroupMemberMetadataValue:
    return ConsumerGroupMemberMetadataValue(None, None, client_id, "/h", frozenset({"t"}), None, 45_000, None)


def _current(epoch: int, assigned: dict[uuid.UUID, frozenset[int]]) -> ConsumerGroupCurrentMemberAssignmentValue:
    return ConsumerGroupCurrentMemberAssignmentValue(epoch, epoch - 1, 0, assigned, {})


def _batches() -> list[list[Record]]:
    """A partition as Kafka writes it: member m1 joins group "cg" (subscription, regex, group epoch, target
    assignment, current assignment, in that order); m2 joins and leaves (tombstones of its three parts); group
    "gone" is created and deleted (its parts' tombstones, then its metadata's); a tombstone for a group never seen;
    a record whose value does not decode; a share-group record; and a classic group with an offset commit."""
    a0 = {TOPIC_A: frozenset({0, 1})}
    return [
        [
            _record(ConsumerGroupMemberMetadataKey("cg", "m1"), _member("c1")),
            _record(ConsumerGroupRegularExpressionKey("cg", "t.*"), REGEX),
            _record(ConsumerGroupMetadataKey("cg"), ConsumerGroupMetadataValue(1, metadata_hash=99)),
            _record(ConsumerGroupPartitionMetadataKey("cg"), PARTITION_METADATA),
            _record(ConsumerGroupTargetAssignmentMemberKey("cg", "m1"), ConsumerGroupTargetAssignmentMemberValue(a0)),
            _record(ConsumerGroupTargetAssignmentMetadataKey("cg"), ConsumerGroupTargetAssignmentMetadataValue(1)),
            _record(ConsumerGroupCurrentMemberAssignmentKey("cg", "m1"), _current(1, a0)),
        ],
        [
            _record(ConsumerGroupMemberMetadataKey("cg", "m2"), _member("c2")),
            _record(ConsumerGroupMetadataKey("cg"), ConsumerGroupMetadataValue(2, metadata_hash=99)),
            _record(ConsumerGroupTargetAssignmentMemberKey("cg", "m2"), ConsumerGroupTargetAssignmentMemberValue({})),
            _record(ConsumerGroupTargetAssignmentMetadataKey("cg"), ConsumerGroupTargetAssignmentMetadataValue(2)),
            _record(ConsumerGroupCurrentMemberAssignmentKey("cg", "m2"), _current(2, {})),
            _record(ConsumerGroupCurrentMemberAssignmentKey("cg", "m1"), _current(2, a0)),
        ],
        [
            _record(ConsumerGroupCurrentMemberAssignmentKey("cg", "m2"), None),
            _record(ConsumerGroupTargetAssignmentMemberKey("cg", "m2"), None),
            _record(ConsumerGroupMemberMetadataKey("cg", "m2"), None),
            _record(ConsumerGroupMetadataKey("cg"), ConsumerGroupMetadataValue(3, metadata_hash=99)),
            _record(ConsumerGroupPartitionMetadataKey("cg"), None),  # what Kafka 4.1+ writes at the next epoch
        ],
        [
            _record(ConsumerGroupMemberMetadataKey("gone", "x"), _member("cx")),
            _record(ConsumerGroupMetadataKey("gone"), ConsumerGroupMetadataValue(1)),
            _record(ConsumerGroupCurrentMemberAssignmentKey("gone", "x"), _current(1, {})),
        ],
        [
            _record(ConsumerGroupCurrentMemberAssignmentKey("gone", "x"), None),
            _record(ConsumerGroupMemberMetadataKey("gone", "x"), None),
            _record(ConsumerGroupMetadataKey("gone"), None),
            _record(ConsumerGroupMemberMetadataKey("never", "y"), None),
            Record(key=encode_consumer_key(ConsumerGroupMetadataKey("bad")), value=b"\x00\x01garbage", timestamp=1),
            Record(key=b"\x00\x0b\x00\x05share", value=b"\x00\x00\x00\x00\x00\x01\x00", timestamp=1),
            Record(
                key=encode_group_key("classic"),
                value=encode_group_value(GroupValue("consumer", 1, None, None, 1, ())),
                timestamp=1,
            ),
            Record(key=encode_offset_key("cg", "t", 0), value=encode_offset_value(OffsetValue(5, "", 1)), timestamp=1),
        ],
    ]


def _expected_cg() -> ReplayedConsumerGroup:
    a0 = {TOPIC_A: frozenset({0, 1})}
    return ReplayedConsumerGroup(
        group_id="cg",
        metadata=ConsumerGroupMetadataValue(3, metadata_hash=99),
        members={"m1": _member("c1")},
        target_assignment_epoch=2,
        target_assignment={"m1": a0},
        current_assignments={"m1": _current(2, a0)},
        regexes={"t.*": REGEX},
        subscription_metadata=None,
    )


def _check(replayed: ReplayedPartition) -> None:
    assert replayed.consumer_groups == {"cg": _expected_cg()}
    assert set(replayed.group_values) == {"classic"}
    assert replayed.offsets["cg"][("t", 0)].value.offset == 5


async def _start(data_dir: Path) -> Node:
    overrides = {**default_overrides(data_dir), "offsets.topic.num.partitions": "1"}
    node = Node(ServerConfig.load(None, [f"{k}={v}" for k, v in overrides.items()]))
    await node.start()
    return node


def _broker(node: Node) -> Broker:
    assert node.broker is not None
    return node.broker


async def _ready(node: Node) -> GroupCoordinator:
    groups = _broker(node).groups

    async def serving() -> bool:
        error, _, _ = await groups.find_coordinator("cg")
        return error is ErrorCode.none and groups.coordinator_error("cg") is ErrorCode.none

    await eventually_async(serving, timeout=30, what="the coordinator of __consumer_offsets-0 to load")
    return groups


@pytest.fixture
async def node_dir(tmp_path: Path) -> AsyncIterator[Path]:
    yield tmp_path / "node"


async def test_replay_collects_consumer_groups_and_survives_a_restart(node_dir: Path) -> None:
    node = await _start(node_dir)
    try:
        await _ready(node)
        log = _broker(node).partitions.get(OFFSETS_TOPIC, 0)
        assert log is not None
        for records in _batches():
            await log.append(build_batch(records), origin="coordinator")
        _check(await replay_offsets_partition(log, f"{OFFSETS_TOPIC}-0"))
    finally:
        await node.stop()

    # The broker loads the partition again (its coordinator reads past records it does not use yet), and the
    # replay finds the same groups in what was written to storage.
    node = await _start(node_dir)
    try:
        await _ready(node)
        log = _broker(node).partitions.get(OFFSETS_TOPIC, 0)
        assert log is not None
        _check(await replay_offsets_partition(log, f"{OFFSETS_TOPIC}-0"))
    finally:
        await node.stop()
