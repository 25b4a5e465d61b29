"""The ``__consumer_offsets`` key/value codec and the group -> partition mapping.

The byte layouts are checked field by field against Kafka's published schemas (version prefix, int16-length
strings, int32-length bytes), and the partition mapping against a real JVM's ``String.hashCode``.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.groups.offsets import GroupOffsets
from broker.groups.offsets_schema import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    UnknownKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from wire.stored_schema import SchemaError, java_string_hash, partition_for

text = st.text(max_size=40)


def test_offset_key_layout() -> None:
    key = encode_offset_key("grp", "topic", 7)
    assert key == b"\x00\x01" + b"\x00\x03grp" + b"\x00\x05topic" + b"\x00\x00\x00\x07"
    assert decode_key(key) == OffsetKey("grp", "topic", 7)


def test_group_key_layout() -> None:
    assert encode_group_key("grp") == b"\x00\x02\x00\x03grp"
    assert decode_key(encode_group_key("grp")) == GroupKey("grp")


def test_offset_value_v4_layout_carries_the_topic_id_as_kafka_4_1_does() -> None:
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    raw = encode_offset_value(
        OffsetValue(offset=42, metadata="m", commit_timestamp_ms=1000, leader_epoch=5, topic_id=topic_id)
    )
    # Version, offset, leader epoch, compact string "m", commit time, then one tagged field: tag 0, 16 bytes.
    assert raw == (
        struct.pack(">hqi", 4, 42, 5) + b"\x02m" + struct.pack(">q", 1000) + b"\x01\x00\x10" + topic_id.bytes
    )
    without = encode_offset_value(OffsetValue(offset=42, metadata="m", commit_timestamp_ms=1000, leader_epoch=5))
    assert without == struct.pack(">hqi", 4, 42, 5) + b"\x02m" + struct.pack(">q", 1000) + b"\x00"


def test_an_offset_value_with_the_zero_topic_id_or_a_bad_one() -> None:
    base = struct.pack(">hqi", 4, 7, -1) + b"\x01" + struct.pack(">q", 9)
    # Kafka writes the zero id for "none"; it means the same as no field.
    assert decode_offset_value(base + b"\x01\x00\x10" + bytes(16)).topic_id is None
    # An unknown tag is read past, as a newer writer's field must be.
    assert decode_offset_value(base + b"\x01\x05\x02ab").offset == 7
    with pytest.raises(SchemaError, match="topic id of 3 bytes"):
        decode_offset_value(base + b"\x01\x00\x03abc")


def test_offset_value_with_explicit_retention_uses_v1() -> None:
    value = OffsetValue(offset=1, metadata="", commit_timestamp_ms=10, expire_timestamp_ms=99)
    raw = encode_offset_value(value)
    assert struct.unpack_from(">h", raw) == (1,)
    assert decode_offset_value(raw) == value


def test_offset_value_old_and_flexible_versions_decode() -> None:
    v0 = struct.pack(">hq", 0, 5) + b"\x00\x02md" + struct.pack(">q", 77)
    assert decode_offset_value(v0) == OffsetValue(offset=5, metadata="md", commit_timestamp_ms=77)
    # v4: compact string (length + 1 as unsigned varint) and an empty tagged-field section.
    v4 = struct.pack(">hqi", 4, 5, 3) + b"\x03md" + struct.pack(">q", 77) + b"\x00"
    assert decode_offset_value(v4) == OffsetValue(offset=5, metadata="md", commit_timestamp_ms=77, leader_epoch=3)


def test_group_value_v3_layout() -> None:
    member = MemberValue("m1", "inst", "cid", "/1.2.3.4", 300, 100, b"SUB", b"ASG")
    raw = encode_group_value(GroupValue("consumer", 4, "range", "m1", 123, (member,)))
    expected = (
        b"\x00\x03"
        + b"\x00\x08consumer"
        + b"\x00\x00\x00\x04"
        + b"\x00\x05range"
        + b"\x00\x02m1"
        + struct.pack(">q", 123)
        + b"\x00\x00\x00\x01"
        + b"\x00\x02m1"
        + b"\x00\x04inst"
        + b"\x00\x03cid"
        + b"\x00\x08/1.2.3.4"
        + struct.pack(">ii", 300, 100)
        + b"\x00\x00\x00\x03SUB"
        + b"\x00\x00\x00\x03ASG"
    )
    assert raw == expected


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    raw = encode_group_value(GroupValue("consumer", 2, None, None, 5, ()))
    assert raw == b"\x00\x03\x00\x08consumer\x00\x00\x00\x02\xff\xff\xff\xff" + struct.pack(">qi", 5, 0)
    assert decode_group_value(raw).protocol is None


def test_group_value_v0_decodes_with_rebalance_timeout_defaulting_to_session() -> None:
    raw = (
        b"\x00\x00\x00\x08consumer\x00\x00\x00\x01\x00\x05range\x00\x02m1\x00\x00\x00\x01"
        + b"\x00\x02m1\x00\x01c\x00\x01h"
        + struct.pack(">i", 10_000)
        + b"\x00\x00\x00\x00\x00\x00\x00\x00"
    )
    value = decode_group_value(raw)
    assert value.members[0].rebalance_timeout_ms == 10_000
    assert value.members[0].group_instance_id is None
    assert value.current_state_timestamp_ms == -1


def test_group_value_v4_flexible_decodes() -> None:
    member = b"\x03m1" + b"\x00" + b"\x02c" + b"\x02h" + struct.pack(">ii", 5, 6) + b"\x02S" + b"\x02A" + b"\x00"
    raw = (
        b"\x00\x04"
        + b"\x09consumer"
        + struct.pack(">i", 9)
        + b"\x06range"
        + b"\x03m1"
        + struct.pack(">q", 1)
        + b"\x02"
        + member
        + b"\x00"
    )
    assert decode_group_value(raw) == GroupValue(
        "consumer", 9, "range", "m1", 1, (MemberValue("m1", None, "c", "h", 5, 6, b"S", b"A"),)
    )


@pytest.mark.parametrize("raw", [b"", b"\x00", b"\x00\x01\x00\x05ab", b"\xff\xff"])
def test_malformed_keys_raise_schema_error(raw: bytes) -> None:
    with pytest.raises(SchemaError):
        decode_key(raw)


def test_truncated_values_raise_schema_error() -> None:
    raw = encode_offset_value(OffsetValue(offset=42, metadata="meta", commit_timestamp_ms=1000))
    for cut in range(len(raw)):
        with pytest.raises(SchemaError):
            decode_offset_value(raw[:cut])
    with pytest.raises(SchemaError, match="unknown version"):
        decode_offset_value(b"\x00\x09" + raw[2:])


def test_newer_key_versions_are_reported_not_misread() -> None:
    # Key 11 is a share group's metadata, which nothing here interprets.
    assert decode_key(b"\x00\x0b\x00\x01g") == UnknownKey(11)


@given(
    st.builds(
        OffsetValue,
        offset=st.integers(-1, 2**63 - 1),
        metadata=text,
        commit_timestamp_ms=st.integers(0, 2**50),
        leader_epoch=st.integers(-1, 2**31 - 1),
        topic_id=st.none() | st.uuids().filter(lambda u: u.int != 0),
    )
)
def test_offset_value_round_trip(value: OffsetValue) -> None:
    assert decode_offset_value(encode_offset_value(value)) == value


@given(
    st.builds(
        GroupValue,
        protocol_type=text,
        generation=st.integers(0, 2**31 - 1),
        protocol=st.none() | text,
        leader=st.none() | text,
        current_state_timestamp_ms=st.integers(0, 2**50),
        members=st.lists(
            st.builds(
                MemberValue,
                member_id=text,
                group_instance_id=st.none() | text,
                client_id=text,
                client_host=text,
                rebalance_timeout_ms=st.integers(0, 2**31 - 1),
                session_timeout_ms=st.integers(0, 2**31 - 1),
                subscription=st.binary(max_size=50),
                assignment=st.binary(max_size=50),
            ),
            max_size=4,
        ).map(tuple),
    )
)
def test_group_value_round_trip(value: GroupValue) -> None:
    assert decode_group_value(encode_group_value(value)) == value


@given(text, text, st.integers(0, 2**31 - 1))
def test_offset_key_round_trip(group: str, topic: str, partition: int) -> None:
    assert decode_key(encode_offset_key(group, topic, partition)) == OffsetKey(group, topic, partition)


GROUP_IDS = [
    "",
    "a",
    "my-group",
    "console-consumer-12345",
    "grüße",
    "组",
    "emoji-\U0001f600",
    "x" * 300,
    "polygenelubricants",
]


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JVM as the reference for String.hashCode")
def test_partition_for_matches_the_jvm(tmp_path: Path) -> None:
    source = tmp_path / "Hash.java"
    source.write_text(
        "import java.nio.file.*;\n"
        "public class Hash { public static void main(String[] a) throws Exception {\n"
        "  for (String s : Files.readAllLines(Paths.get(a[0]), java.nio.charset.StandardCharsets.UTF_8)) {\n"
        "    String g = s.substring(1); int h = g.hashCode();\n"
        '    System.out.println(h + " " + ((h == Integer.MIN_VALUE ? 0 : Math.abs(h)) % 50));\n'
        "  }\n"
        "}}\n",
        encoding="utf-8",
    )
    ids = tmp_path / "ids.txt"
    # A prefix character keeps the empty group id a non-empty line.
    ids.write_text("".join(f"#{g}\n" for g in GROUP_IDS), encoding="utf-8")
    out = subprocess.run(
        ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", str(source), str(ids)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split("\n")
    for group_id, line in zip(GROUP_IDS, out, strict=False):
        h, p = (int(x) for x in line.split())
        assert java_string_hash(group_id) == h, group_id
        assert partition_for(group_id, 50) == p, group_id


def test_partition_for_min_int_hash_maps_to_zero() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE, the one value Math.abs cannot negate.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert partition_for("polygenelubricants", 7) == 0


def test_offsets_expiry_rules() -> None:
    offsets = GroupOffsets()
    offsets.put("t", 0, OffsetValue(offset=1, metadata="", commit_timestamp_ms=1_000))
    offsets.put("t", 1, OffsetValue(offset=1, metadata="", commit_timestamp_ms=5_000))
    offsets.put("u", 0, OffsetValue(offset=1, metadata="", commit_timestamp_ms=1_000, expire_timestamp_ms=2_000))
    never = lambda topic: False  # noqa: E731
    # A commit-only group: each offset by its own commit time; explicit expiry wins.
    assert offsets.expired(10_999, 10_000, empty_since_ms=None, keep=never) == [("u", 0)]
    assert offsets.expired(11_000, 10_000, empty_since_ms=None, keep=never) == [("t", 0), ("u", 0)]
    # An empty managed group: the clock starts when it became empty.
    assert offsets.expired(15_000, 10_000, empty_since_ms=8_000, keep=never) == [("u", 0)]
    assert offsets.expired(18_000, 10_000, empty_since_ms=8_000, keep=never) == [("t", 0), ("t", 1), ("u", 0)]
    # Subscribed topics of a live group never expire.
    assert offsets.expired(99_000, 10_000, empty_since_ms=None, keep=lambda t: t == "t") == [("u", 0)]
