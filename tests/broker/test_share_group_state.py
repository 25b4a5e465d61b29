"""The sans-I/O share group: the maximum size, session time-outs through ``tick``, what each heartbeat asks to
persist, and a group loaded from its records continuing without a new epoch when the topics did not change."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from broker.groups.consumer.assignment import TopicMetadata
from broker.groups.consumer.cluster_topics import ClusterTopics, metadata_hash
from broker.groups.share.changes import (
    ShareAssignmentChanged,
    ShareEpochChanged,
    ShareMemberChanged,
    ShareStateTopicsChanged,
    ShareTargetEpochChanged,
    ShareTargetMemberChanged,
)
from broker.groups.share.group import ShareGroup, ShareHeartbeat, ShareMembershipConfig

T = uuid.UUID(int=5)
TOPICS = ClusterTopics({"t": TopicMetadata(T, "t", 2)}, frozenset({"t"}))
CONFIG = ShareMembershipConfig(session_timeout_ms=1_000, heartbeat_interval_ms=100, max_size=2)


def _join(group: ShareGroup, member: str, now: int = 0) -> int:
    result = group.heartbeat(now, ShareHeartbeat(member, 0, subscribed_topic_names=("t",)), TOPICS)
    assert result.error == ErrorCode.none, result
    return result.member_epoch


def test_a_full_group_refuses_new_members_but_not_its_own() -> None:
    group = ShareGroup("g", CONFIG, 0)
    _join(group, "a")
    _join(group, "b")
    refused = group.heartbeat(0, ShareHeartbeat("c", 0, subscribed_topic_names=("t",)), TOPICS)
    assert refused.error == ErrorCode.group_max_size_reached
    assert refused.message == "The share group has reached its maximum capacity of 2 members."
    assert group.heartbeat(0, ShareHeartbeat("a", 1), TOPICS).error == ErrorCode.none


def test_a_join_persists_member_epoch_target_and_assignment() -> None:
    group = ShareGroup("g", CONFIG, 0)
    _join(group, "a")
    changes = group.take_changes()
    assert [type(c) for c in changes] == [
        ShareMemberChanged, ShareEpochChanged, ShareTargetMemberChanged, ShareTargetEpochChanged,
        ShareStateTopicsChanged, ShareAssignmentChanged,
    ]
    assert changes[4] == ShareStateTopicsChanged({T: ("t", frozenset({0, 1}))})
    assert changes[1] == ShareEpochChanged(1, metadata_hash({T: TOPICS.by_name["t"]}))
    assert group.heartbeat(10, ShareHeartbeat("a", 1), TOPICS).error == ErrorCode.none
    assert group.take_changes() == []  # a plain heartbeat writes nothing


def test_expired_sessions_are_fenced_by_tick() -> None:
    group = ShareGroup("g", CONFIG, 0)
    _join(group, "a")
    _join(group, "b", now=500)
    assert group.next_deadline_ms() == 1_000
    assert group.tick(999) == []
    assert group.tick(1_000) == ["a"]
    assert list(group.members) == ["b"] and group.group_epoch == 3
    assert group.tick(1_500) == ["b"]
    assert group.state_name == "Empty" and not group.is_disposable  # kept until DeleteGroups


def test_a_restored_group_keeps_its_epoch_when_the_topics_did_not_change() -> None:
    group = ShareGroup("g", CONFIG, 0)
    epoch = _join(group, "a")
    restored = ShareGroup.restored(
        "g", CONFIG, 0, group_epoch=group.group_epoch, metadata_hash=metadata_hash(group.subscription),
        target_epoch=group.target_epoch, target=group.target, members=list(group.members.values()),
    )
    answer = restored.heartbeat(1, ShareHeartbeat("a", epoch), TOPICS)
    assert (answer.error, answer.member_epoch, answer.assignment) == (ErrorCode.none, epoch, None)
    assert restored.take_changes() == []
    grown = ClusterTopics({"t": TopicMetadata(T, "t", 3)}, frozenset({"t"}))
    moved = restored.heartbeat(2, ShareHeartbeat("a", epoch), grown)
    assert moved.member_epoch == epoch + 1 and moved.assignment == {T: frozenset({0, 1, 2})}


def test_the_topics_with_share_state_outlive_the_members() -> None:
    group = ShareGroup("g", CONFIG, 0)
    epoch = _join(group, "a")
    assert group.heartbeat(1, ShareHeartbeat("a", epoch), TOPICS).error == ErrorCode.none
    group.take_changes()
    group.heartbeat(2, ShareHeartbeat("a", -1), TOPICS)
    assert group.is_empty and group.topics() == {"t"}
    assert not any(isinstance(c, ShareStateTopicsChanged) for c in group.take_changes())


def test_a_kept_group_is_written_without_members() -> None:
    group = ShareGroup("g", CONFIG, 0)
    assert group.is_disposable
    group.keep()
    assert not group.is_disposable and group.state_name == "Empty"
    assert group.take_changes() == [ShareEpochChanged(0, metadata_hash({}))]
