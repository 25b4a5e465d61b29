"""KIP-848's online migration without I/O: a classic group converted to a consumer group and back
(:mod:`broker.groups.conversions`), classic members reconciling inside a consumer group through JoinGroup, SyncGroup
and Heartbeat (:mod:`broker.groups.consumer.classic_members`), their time-outs, offset commits and records, checked
against Kafka 4.2's ``GroupMetadataManager`` and ``ConsumerGroup``.
"""

from __future__ import annotations

import io
import uuid
from dataclasses import replace

import pytest
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription, TopicPartition
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i32

from broker.groups.classic.group import Group, JoinRequest
from broker.groups.classic.rebalance import GroupConfig
from broker.groups.classic.state import GroupState
from broker.groups.consumer import classic_members
from broker.groups.consumer.assignment import TopicMetadata
from broker.groups.consumer.assignors.uniform import UniformAssignor
from broker.groups.consumer.changes import (
    CurrentAssignmentChanged,
    GroupEpochChanged,
    MemberMetadataChanged,
    TargetEpochChanged,
    TargetMemberChanged,
)
from broker.groups.consumer.cluster_topics import ClusterTopics
from broker.groups.consumer.consumer_protocol import assignment_bytes, parse_assignment, parse_subscription
from broker.groups.consumer.group import ConsumerGroup, ConsumerGroupConfig, HeartbeatRequest
from broker.groups.consumer.member import MemberState
from broker.groups.consumer_persistence import member_metadata_value
from broker.groups.consumer_records import (
    ConsumerGroupMemberMetadataKey,
    decode_consumer_value,
    encode_consumer_value,
)
from broker.groups.conversions import downgradable, downgraded, tombstones, upgrade_refusal, upgraded
from broker.groups.offsets_schema import GroupValue, MemberValue
from settings.server import ServerConfig
from storage.config import ConfigError

TOPIC = "orders"
TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_URL, "fjord-test/orders")
TOPICS = ClusterTopics(by_name={TOPIC: TopicMetadata(TOPIC_ID, TOPIC, 4)}, regex_visible=frozenset({TOPIC}))
CONFIG = ConsumerGroupConfig(
    session_timeout_ms=45_000, heartbeat_interval_ms=5_000, assignors={"uniform": UniformAssignor()}
)
CLASSIC_CONFIG = GroupConfig(initial_rebalance_delay_ms=0)
SESSION_MS = 10_000
REBALANCE_MS = 30_000
NOW = 1_000_000


def subscription(owned: frozenset[int] = frozenset()) -> bytes:
    """A ConsumerProtocolSubscription v1 to ``orders``, owning ``owned`` (as a classic consumer rejoins)."""
    owned_partitions = (TopicPartition(topic=TOPIC, partitions=tuple(i32(p) for p in sorted(owned))),) if owned else ()
    buf = io.BytesIO(b"\x00\x01")
    buf.seek(2)
    entity_writer(ConsumerProtocolSubscription)(
        buf, ConsumerProtocolSubscription(topics=(TOPIC,), owned_partitions=owned_partitions)
    )
    return buf.getvalue()


def classic_group(assignments: dict[str, frozenset[int]], *, protocol_type: str = "consumer") -> Group:
    """A Stable classic group at generation 5, each member holding its partitions of ``orders``."""
    members = tuple(
        MemberValue(
            member_id=member_id,
            group_instance_id=None,
            client_id="app",
            client_host="/127.0.0.1",
            rebalance_timeout_ms=REBALANCE_MS,
            session_timeout_ms=SESSION_MS,
            subscription=subscription(),
            assignment=assignment_bytes({TOPIC: partitions}, 1),
        )
        for member_id, partitions in assignments.items()
    )
    value = GroupValue(protocol_type, 5, "range", next(iter(assignments)), NOW, members)
    return Group.restore("g", CLASSIC_CONFIG, value, NOW)


def join_request(member_id: str, owned: frozenset[int] = frozenset(), name: str = "range") -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        group_instance_id=None,
        client_id="app",
        client_host="/127.0.0.1",
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        protocol_type="consumer",
        protocols=((name, subscription(owned)),),
    )


def synced(group: ConsumerGroup, member_id: str, generation: int, now: int = NOW) -> frozenset[int] | ErrorCode:
    """The partitions of ``orders`` a classic member's SyncGroup is given, or its error."""
    result = classic_members.sync(
        group,
        now,
        member_id=member_id,
        instance_id=None,
        generation_id=generation,
        protocol_type="consumer",
        protocol_name="range",
        topics=TOPICS,
    )
    if result.error is not ErrorCode.none:
        return result.error
    return frozenset(parse_assignment(result.assignment).partitions.get(TOPIC, frozenset()))


def new_member_joins() -> HeartbeatRequest:
    """A ConsumerGroupHeartbeat join of member "new" to ``orders``."""
    return HeartbeatRequest("new", 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=(TOPIC,), owned={})


def upgraded_group() -> ConsumerGroup:
    upgrade = upgraded(classic_group({"a": frozenset({0, 1}), "b": frozenset({2, 3})}), CONFIG, NOW, TOPICS)
    assert not isinstance(upgrade, str), upgrade
    return upgrade.group


def test_upgrade_keeps_the_generation_and_every_members_partitions() -> None:
    upgrade = upgraded(classic_group({"a": frozenset({0, 1}), "b": frozenset({2, 3})}), CONFIG, NOW, TOPICS)
    assert not isinstance(upgrade, str), upgrade
    group = upgrade.group
    assert (group.group_epoch, group.target_epoch) == (5, 5)
    for member_id, partitions in {"a": {0, 1}, "b": {2, 3}}.items():
        member = group.members[member_id]
        assert member.member_epoch == 5 and member.state is MemberState.STABLE
        assert member.assigned == {TOPIC_ID: frozenset(partitions)} == group.target[member_id]
        assert member.subscribed_topic_names == {TOPIC}
        assert member.classic is not None and member.classic.session_timeout_ms == SESSION_MS
    # Kafka's createConsumerGroupRecords order: subscriptions, epoch, target, target epoch, current assignments.
    kinds = [type(c) for c in upgrade.changes]
    assert (
        kinds
        == [MemberMetadataChanged] * 2
        + [GroupEpochChanged]
        + [TargetMemberChanged] * 2
        + [TargetEpochChanged]
        + [CurrentAssignmentChanged] * 2
    )


def test_upgrade_refusals() -> None:
    assert upgrade_refusal(classic_group({"a": frozenset({0})}, protocol_type="connect"), 100) is not None
    assert upgrade_refusal(classic_group({"a": frozenset({0}), "b": frozenset({1})}), 1) is not None
    assert upgrade_refusal(classic_group({"a": frozenset({0})}), 100) is None
    custom = classic_group({"a": frozenset({0})})
    custom.members["a"].assignment = custom.members["a"].assignment[:-4] + b"\x00\x00\x00\x02ud"
    assert isinstance(upgraded(custom, CONFIG, NOW, TOPICS), str)


def test_classic_members_reconcile_through_rebalances_with_a_new_member() -> None:
    group = upgraded_group()
    joined = group.heartbeat(NOW, new_member_joins(), TOPICS)
    assert joined.error is ErrorCode.none and group.group_epoch == 6
    assert joined.assignment == {}  # its share (partition 3) is still held by "b"
    assert group.target["new"] == {TOPIC_ID: frozenset({3})}

    # The classic members learn of the rebalance from their Heartbeat and rejoin, owning what they hold.
    assert classic_members.heartbeat(group, NOW, "a", None, 5) is ErrorCode.rebalance_in_progress
    answer = classic_members.join(group, NOW, join_request("a", frozenset({0, 1})), TOPICS)
    assert (answer.error, answer.generation_id, answer.leader_id, answer.members) == (ErrorCode.none, 6, "", ())
    assert answer.protocol_name == "range" and answer.protocol_type == "consumer"
    assert synced(group, "a", 6) == {0, 1}

    # "b" must give partition 3 up first: it stays at generation 5 with partition 2 only, then rejoins.
    assert classic_members.heartbeat(group, NOW, "b", None, 5) is ErrorCode.rebalance_in_progress
    assert classic_members.join(group, NOW, join_request("b", frozenset({2, 3})), TOPICS).generation_id == 5
    assert synced(group, "b", 5) == {2}
    assert classic_members.heartbeat(group, NOW, "b", None, 5) is ErrorCode.rebalance_in_progress
    assert classic_members.join(group, NOW, join_request("b", frozenset({2})), TOPICS).generation_id == 6
    assert synced(group, "b", 6) == {2}

    # Released, partition 3 goes to the new member; everyone is stable.
    assert group.heartbeat(NOW, HeartbeatRequest("new", 6, owned={}), TOPICS).assignment == {TOPIC_ID: frozenset({3})}
    assert classic_members.heartbeat(group, NOW, "a", None, 6) is ErrorCode.none
    assert classic_members.heartbeat(group, NOW, "b", None, 6) is ErrorCode.none
    assert group.state_name == "Stable"


def test_classic_member_checks() -> None:
    group = upgraded_group()
    assert synced(group, "a", 4) is ErrorCode.illegal_generation
    assert synced(group, "nobody", 5) is ErrorCode.unknown_member_id
    wrong_name = classic_members.sync(
        group,
        NOW,
        member_id="a",
        instance_id=None,
        generation_id=5,
        protocol_type="consumer",
        protocol_name="roundrobin",
        topics=TOPICS,
    )
    assert wrong_name.error is ErrorCode.inconsistent_group_protocol
    assert classic_members.heartbeat(group, NOW, "a", None, 4) is ErrorCode.illegal_generation
    assert classic_members.heartbeat(group, NOW, "a", None, 5) is ErrorCode.none
    # A classic member commits with any OffsetCommit version, at its generation.
    assert group.validate_offset_commit("a", 5, api_version=8) is ErrorCode.none
    assert group.validate_offset_commit("a", 4, api_version=8) is ErrorCode.illegal_generation
    # Protocols no classic member has, or another protocol type, do not fit.
    other = classic_members.join(group, NOW, join_request("", name="roundrobin"), TOPICS)
    assert other.error is ErrorCode.inconsistent_group_protocol
    required = classic_members.join(group, NOW, join_request(""), TOPICS)
    assert required.error is ErrorCode.member_id_required and required.member_id
    # A member speaking the consumer protocol is no classic member.
    group.heartbeat(NOW, new_member_joins(), TOPICS)
    assert (
        classic_members.heartbeat(group, NOW, "new", None, group.members["new"].member_epoch)
        is ErrorCode.unknown_member_id
    )


def test_classic_members_keep_their_session_and_must_sync_after_joining() -> None:
    group = upgraded_group()
    assert group.next_deadline_ms() == NOW + SESSION_MS  # the classic session time-out, not the group's 45 s
    assert classic_members.join(group, NOW, join_request("a", frozenset({0, 1})), TOPICS).error is ErrorCode.none
    # Both keep heartbeating, but "a" never comes for its assignment: fenced after its rebalance time-out.
    now = NOW
    while now < NOW + REBALANCE_MS:
        now += 8_000
        for member_id in ("a", "b"):
            if member_id in group.members:
                classic_members.heartbeat(group, now, member_id, None, group.members[member_id].member_epoch)
        group.tick(now)
    assert "a" not in group.members and "b" in group.members


def test_leave_then_downgrade_gives_each_classic_member_its_target() -> None:
    group = upgraded_group()
    group.heartbeat(NOW, new_member_joins(), TOPICS)
    assert not downgradable(group, 100)
    assert classic_members.leave(group, NOW, "new", None) is ErrorCode.none
    assert downgradable(group, 100) and not downgradable(group, 1)
    classic = downgraded(group, CLASSIC_CONFIG, NOW, TOPICS)
    # The generation the classic members were last told (5), though the leave moved the group epoch on (to 7).
    assert group.group_epoch == 7
    assert classic.generation_id == 5 and classic.protocol_name == "range"
    given = {m: frozenset(parse_assignment(classic.members[m].assignment).partitions[TOPIC]) for m in ("a", "b")}
    assert given == {m: group.target[m][TOPIC_ID] for m in ("a", "b")}
    classic.rebalance(NOW, "converted")
    assert classic.state is GroupState.PREPARING_REBALANCE
    assert classic.heartbeat(NOW, "a", None, classic.generation_id) is ErrorCode.rebalance_in_progress
    # Every record of the consumer group goes.
    deleted = tombstones(group)
    assert {c.member.member_id for c in deleted if isinstance(c, MemberMetadataChanged) and c.deleted} == {"a", "b"}
    assert {c.member.member_id for c in deleted if isinstance(c, CurrentAssignmentChanged) and c.deleted} == {"a", "b"}
    assert {c.member_id for c in deleted if isinstance(c, TargetMemberChanged) and c.assignment is None} == {"a", "b"}
    assert any(isinstance(c, GroupEpochChanged) and c.deleted for c in deleted)


def test_classic_metadata_is_persisted_in_the_member_record() -> None:
    member = upgraded_group().members["a"]
    key = ConsumerGroupMemberMetadataKey("g", "a")
    value = decode_consumer_value(key, encode_consumer_value(member_metadata_value(member)))
    classic = value.classic_member_metadata  # type: ignore[union-attr]
    assert classic is not None and classic.session_timeout_ms == SESSION_MS
    assert [(p.name, p.metadata) for p in classic.supported_protocols] == [("range", subscription())]


def test_subscription_and_assignment_encodings() -> None:
    parsed = parse_subscription(subscription(frozenset({1, 2})))
    assert parsed.version == 1 and parsed.topics == (TOPIC,) and parsed.owned == {TOPIC: frozenset({1, 2})}
    encoded = assignment_bytes({TOPIC: frozenset({3, 1})}, 7)
    assert encoded[:2] == b"\x00\x03"  # a version newer than known is written as the newest known
    assert parse_assignment(encoded).partitions == {TOPIC: frozenset({1, 3})}


def test_migration_policy_setting() -> None:
    default = ServerConfig.load(None).consumer_groups
    assert default.migration_policy == "bidirectional" and default.upgrade_allowed and default.downgrade_allowed
    upgrade_only = ServerConfig.load(None, ["group.consumer.migration.policy=Upgrade"]).consumer_groups
    assert upgrade_only.upgrade_allowed and not upgrade_only.downgrade_allowed and upgrade_only.classic_joins_allowed
    disabled = ServerConfig.load(None, ["group.consumer.migration.policy=disabled"]).consumer_groups
    assert not (disabled.upgrade_allowed or disabled.downgrade_allowed or disabled.classic_joins_allowed)
    with pytest.raises(ConfigError, match=r"group\.consumer\.migration\.policy"):
        ServerConfig.load(None, ["group.consumer.migration.policy=sideways"])


def test_a_static_classic_member_takes_its_instance_id_over() -> None:
    group = upgraded_group()
    static = HeartbeatRequest(
        "new", 0, instance_id="i1", rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=(TOPIC,), owned={}
    )
    assert group.heartbeat(NOW, static, TOPICS).error is ErrorCode.none
    assert not downgradable(group, 100)
    # The instance comes back speaking the classic protocol, under a new member id: it replaces the member holding
    # its instance id, and keeps its share of the target (no new group epoch).
    epoch = group.group_epoch
    request = replace(join_request(""), group_instance_id="i1")
    answer = classic_members.join(group, NOW, request, TOPICS)
    assert answer.error is ErrorCode.none and answer.member_id not in ("", "new")
    assert "new" not in group.members and group.group_epoch == epoch
    assert group.target[answer.member_id] == {TOPIC_ID: frozenset({3})}
    # Now every member is classic: the group may turn back into a classic group.
    assert downgradable(group, 100)
    # Rejoining under its member id keeps its epoch.
    again = classic_members.join(group, NOW, replace(request, member_id=answer.member_id), TOPICS)
    assert (again.error, again.member_id) == (ErrorCode.none, answer.member_id)
    assert again.generation_id >= answer.generation_id
