"""Kafka 4.2's share-group records of ``__consumer_offsets`` (key versions 10-14): a group's changes written and
read back, byte for byte as Kafka's generated format has them, and the group rebuilt from a replay at its epochs."""

from __future__ import annotations

import uuid

from broker.groups.offsets_topic import ReplayedPartition, _apply_record
from broker.groups.share.changes import (
    ShareAssignmentChanged,
    ShareEpochChanged,
    ShareMemberChanged,
    ShareStateTopicsChanged,
    ShareTargetEpochChanged,
    ShareTargetMemberChanged,
)
from broker.groups.share.group import ShareMembershipConfig
from broker.groups.share.member import ShareMember
from broker.groups.share_persistence import encode_share_changes, restore_share_group
from broker.groups.share_records import (
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    decode_share_key,
    decode_share_value,
    encode_share_key,
    encode_share_value,
)
from wire.record_batch import Record

T = uuid.UUID(int=7)
MEMBER = ShareMember("m1", rack_id=None, client_id="c", client_host="/127.0.0.1", subscribed_topic_names=frozenset(
    {"t"}), member_epoch=3, previous_member_epoch=2, assigned={T: frozenset({0, 1})})


def test_group_metadata_bytes_are_kafkas() -> None:
    assert encode_share_key(ShareGroupMetadataKey("g")) == b"\x00\x0b\x00\x01g"
    # version 0, epoch 5, no tagged fields (a zero hash is left out, as Kafka's writer does)
    assert encode_share_value(ShareGroupMetadataValue(5)) == b"\x00\x00\x00\x00\x00\x05\x00"
    hashed = encode_share_value(ShareGroupMetadataValue(5, -2))
    assert decode_share_value(ShareGroupMetadataKey("g"), hashed) == ShareGroupMetadataValue(5, -2)


def test_changes_replay_into_the_same_group() -> None:
    changes = [
        ShareMemberChanged(MEMBER),
        ShareEpochChanged(3, 42),
        ShareTargetMemberChanged("m1", {T: frozenset({0, 1})}),
        ShareTargetEpochChanged(3),
        ShareAssignmentChanged(MEMBER),
        ShareStateTopicsChanged({T: ("t", frozenset({0, 1}))}),
    ]
    replayed = ReplayedPartition()
    for offset, (key, value) in enumerate(encode_share_changes("g", changes)):
        assert decode_share_key(key) is not None
        _apply_record(Record(key=key, value=value, offset=offset), -1, replayed, "test")
    group = restore_share_group(replayed.share_groups["g"], ShareMembershipConfig(), 0)
    assert group is not None
    assert (group.group_epoch, group.target_epoch, group.state_name) == (3, 3, "Stable")
    assert group.members == {"m1": MEMBER}
    assert group.target == {"m1": {T: frozenset({0, 1})}}
    assert group.state_topics == {T: ("t", frozenset({0, 1}))}


def test_deletion_tombstones_remove_the_group() -> None:
    replayed = ReplayedPartition()
    written = encode_share_changes("g", [ShareMemberChanged(MEMBER), ShareEpochChanged(1)])
    deleted = encode_share_changes(
        "g", [ShareMemberChanged(MEMBER, deleted=True), ShareTargetEpochChanged(1, deleted=True),
              ShareStateTopicsChanged({}, deleted=True), ShareEpochChanged(1, deleted=True)]
    )
    for offset, (key, value) in enumerate(written + deleted):
        _apply_record(Record(key=key, value=value, offset=offset), -1, replayed, "test")
    assert "g" not in replayed.share_groups
