"""KIP-932 share group membership over the wire against a real node: members join with ShareGroupHeartbeat, every
partition of the subscribed topics is spread over them (with more members than partitions, each partition goes to
several members), they leave with epoch -1 or by letting their session expire, the group is described, listed by
type and deleted, FindCoordinator v6 finds a share partition's broker, and bad requests get Kafka's error codes.

One node for the module (each test uses its own topic and group), with a short share session so a member that
stops heartbeating is gone within seconds.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker import cg_wire, share_wire
from tests.broker.cg_clients import unique
from tests.broker.test_features import SAFE_DOWNGRADE, UPGRADE, update
from tests.topics import create_topic
from wire import codec, schema

SESSION_MS = 2_000
#: A short share session (below Kafka's default minimum, lowered with it) so an expiry is seen within seconds.
OVERRIDES = {
    "group.share.session.timeout.ms": str(SESSION_MS),
    "group.share.min.session.timeout.ms": str(SESSION_MS),
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "500",
}
LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, FIND_COORDINATOR = 16, 15, 42, 10


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("share-members"), OVERRIDES)
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


@pytest.fixture
def client(node: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(node.port) as opened:
        yield opened


def _topic(client: WireClient, partitions: int) -> tuple[str, uuid.UUID]:
    name = unique("share-topic")
    return name, create_topic(client, name, partitions).topic_id


def _group(client: WireClient) -> str:
    group = unique("share-group")
    cg_wire.await_coordinator(client, group)
    return group


def _join(client: WireClient, group: str, topic: str) -> tuple[str, Any]:
    member = str(uuid.uuid4())
    response = share_wire.heartbeat(client, group, member, 0, topics=(topic,))
    assert response.error_code == ErrorCode.none, response
    return member, response


Assigned = dict[uuid.UUID, tuple[int, ...]]


def _members(client: WireClient, group: str, topic: str, n: int) -> tuple[dict[str, int], dict[str, Assigned]]:
    """``n`` members joined: their epochs and the assignments their joins answered."""
    joined = [_join(client, group, topic) for _ in range(n)]
    return {m: r.member_epoch for m, r in joined}, {m: share_wire.assigned(r) for m, r in joined}


def _settle(
    client: WireClient, group: str, epochs: dict[str, int], known: dict[str, Assigned] | None = None
) -> dict[str, Assigned]:
    """Heartbeats every member until all are at the group's assignment epoch; their assignments then (``known``:
    what the members were last told, as a client keeps it)."""
    assignments: dict[str, Assigned] = {m: {} for m in epochs} | (known or {})

    def round_() -> int:
        for member, epoch in epochs.items():
            response = share_wire.heartbeat(client, group, member, epoch)
            assert response.error_code == ErrorCode.none, response
            epochs[member] = response.member_epoch
            if response.assignment is not None:
                assignments[member] = share_wire.assigned(response)
        return len({*epochs.values(), share_wire.describe(client, group).assignment_epoch})

    eventually(round_, until=lambda n: n == 1, timeout=10, interval=0.05, what="every member at the target epoch")
    return assignments


def test_a_member_joins_and_is_given_every_partition(client: WireClient) -> None:
    topic, topic_id = _topic(client, 3)
    group = _group(client)
    member, joined = _join(client, group, topic)
    assert joined.member_id == member
    assert joined.member_epoch == 1
    assert joined.heartbeat_interval == timedelta(milliseconds=500)
    assert share_wire.assigned(joined) == {topic_id: (0, 1, 2)}
    again = share_wire.heartbeat(client, group, member, 1)
    assert again.error_code == ErrorCode.none and again.member_epoch == 1
    assert again.assignment is None  # nothing changed: the answer does not repeat the assignment


def test_a_full_heartbeat_after_a_lost_answer_gets_the_assignment_again(client: WireClient) -> None:
    topic, topic_id = _topic(client, 4)
    group = _group(client)
    a, joined = _join(client, group, topic)
    assert share_wire.assigned(joined) == {topic_id: (0, 1, 2, 3)}
    _join(client, group, topic)
    moved = share_wire.heartbeat(client, group, a, joined.member_epoch)
    assert moved.member_epoch > joined.member_epoch and share_wire.assigned(moved), moved
    # That answer is lost: the client retries with the epoch it knows and, as after any failed heartbeat, its
    # subscription (a full request); it must learn the assignment it holds now.
    retry = share_wire.heartbeat(client, group, a, joined.member_epoch, topics=(topic,))
    assert retry.error_code == ErrorCode.none and retry.member_epoch == moved.member_epoch
    assert share_wire.assigned(retry) == share_wire.assigned(moved)


def test_partitions_are_spread_over_members_each_exactly_once(client: WireClient) -> None:
    topic, topic_id = _topic(client, 5)
    group = _group(client)
    epochs, known = _members(client, group, topic, 2)
    assignments = _settle(client, group, epochs, known)
    owners = Counter(p for a in assignments.values() for p in a.get(topic_id, ()))
    assert sorted(owners) == [0, 1, 2, 3, 4] and set(owners.values()) == {1}
    assert sorted(len(a[topic_id]) for a in assignments.values()) == [2, 3]


def test_with_more_members_than_partitions_each_partition_goes_to_several(client: WireClient) -> None:
    topic, topic_id = _topic(client, 2)
    group = _group(client)
    epochs, known = _members(client, group, topic, 5)
    assignments = _settle(client, group, epochs, known)
    # As Kafka's SimpleAssignor: each partition to ceil(5 / 2) = 3 members, so one member consumes both.
    assert sorted(len(a[topic_id]) for a in assignments.values()) == [1, 1, 1, 1, 2], assignments
    sharing = Counter(p for a in assignments.values() for p in a[topic_id])
    assert sharing == {0: 3, 1: 3}


def test_a_leaving_member_gives_its_partitions_to_the_others(client: WireClient) -> None:
    topic, topic_id = _topic(client, 4)
    group = _group(client)
    epochs, known = _members(client, group, topic, 2)
    _settle(client, group, epochs, known)
    leaving, staying = sorted(epochs)
    before = share_wire.describe(client, group).group_epoch
    left = share_wire.heartbeat(client, group, leaving, -1)
    assert (left.error_code, left.member_id, left.member_epoch) == (ErrorCode.none, leaving, -1)
    described = share_wire.describe(client, group)
    assert [m.member_id for m in described.members] == [staying]
    assert described.group_epoch == before + 1
    assignments = _settle(client, group, {staying: epochs[staying]})
    assert assignments[staying] == {topic_id: (0, 1, 2, 3)}
    gone = share_wire.heartbeat(client, group, leaving, epochs[leaving])
    assert gone.error_code == ErrorCode.unknown_member_id


def test_a_member_whose_session_expires_is_removed(client: WireClient) -> None:
    topic, topic_id = _topic(client, 2)
    group = _group(client)
    silent, _ = _join(client, group, topic)
    alive, joined = _join(client, group, topic)
    epoch, known = joined.member_epoch, share_wire.assigned(joined)

    def members() -> list[str]:
        nonlocal epoch, known
        response = share_wire.heartbeat(client, group, alive, epoch)
        assert response.error_code == ErrorCode.none, response
        epoch = response.member_epoch
        known = share_wire.assigned(response) if response.assignment is not None else known
        return [m.member_id for m in share_wire.describe(client, group).members]

    assert silent in members()
    eventually(members, until=lambda ms: ms == [alive], timeout=SESSION_MS / 1000 + 8, interval=0.3,
               what="the silent member's session to expire")
    assert _settle(client, group, {alive: epoch}, {alive: known})[alive] == {topic_id: (0, 1)}
    assert share_wire.heartbeat(client, group, silent, 1).error_code == ErrorCode.unknown_member_id


def test_describe_shows_members_and_assignments(client: WireClient) -> None:
    topic, topic_id = _topic(client, 2)
    group = _group(client)
    member, _ = _join(client, group, topic)
    described = share_wire.describe(client, group)
    assert described.error_code == ErrorCode.none
    assert (described.group_state, described.group_epoch, described.assignment_epoch) == ("Stable", 1, 1)
    assert described.assignor_name == "simple"
    [shown] = described.members
    assert (shown.member_id, shown.member_epoch, shown.subscribed_topic_names) == (member, 1, (topic,))
    assert shown.client_host.startswith("/127.0.0.1")
    [tp] = shown.assignment.topic_partitions
    assert (tp.topic_id, tp.topic_name, tuple(tp.partitions)) == (topic_id, topic, (0, 1))
    missing = share_wire.describe(client, unique("no-such-share-group"))
    assert missing.error_code == ErrorCode.group_id_not_found


def _listed(client: WireClient, *types: str) -> dict[str, Any]:
    request = schema.build(codec.request_class(LIST_GROUPS, 5), states_filter=(), types_filter=types)
    # A broker just started may still be loading __consumer_offsets partitions: COORDINATOR_LOAD_IN_PROGRESS, which
    # an admin client retries.
    response = eventually(
        lambda: client.request(request), until=lambda r: r.error_code != ErrorCode.coordinator_load_in_progress,
        timeout=30, what="the offsets partitions to load",
    )
    assert response.error_code == ErrorCode.none
    return {g.group_id: g for g in response.groups}


def test_share_groups_are_listed_by_type_and_refused_by_describe_groups(client: WireClient) -> None:
    topic, _ = _topic(client, 1)
    group = _group(client)
    _join(client, group, topic)
    listed = _listed(client, "Share")[group]
    assert (listed.group_type, listed.protocol_type, listed.group_state) == ("share", "share", "Stable")
    assert group not in _listed(client, "consumer", "classic")
    assert group in _listed(client)
    for version, code in ((6, ErrorCode.group_id_not_found), (5, ErrorCode.none)):
        request = schema.build(
            codec.request_class(DESCRIBE_GROUPS, version), groups=(group,), include_authorized_operations=False
        )
        [described] = client.request(request).groups
        assert (described.error_code, described.members) == (code, ())
        if version < 6:
            assert described.group_state == "Dead"


def _delete(client: WireClient, group: str) -> ErrorCode:
    [result] = client.request(schema.build(codec.request_class(DELETE_GROUPS, 2), groups_names=(group,))).results
    return ErrorCode(result.error_code)


def _alter_offsets(client: WireClient, group: str, topic: str) -> None:
    """AlterShareGroupOffsets of partition 0: makes the share group, empty, if no group has the id yet."""
    request_cls = codec.request_class(91, 0)
    topic_cls = schema.field_entity(request_cls, "topics")
    partitions = (schema.build_nested(topic_cls, "partitions", partition_index=0, start_offset=0),)
    client.request(schema.build(
        request_cls, group_id=group, topics=(schema.build(topic_cls, topic_name=topic, partitions=partitions),)
    ))


def test_delete_an_empty_share_group(client: WireClient) -> None:
    topic, _ = _topic(client, 1)
    group = _group(client)
    _alter_offsets(client, group, topic)
    assert share_wire.describe(client, group).group_state == "Empty"
    assert _delete(client, group) == ErrorCode.none
    assert share_wire.describe(client, group).error_code == ErrorCode.group_id_not_found
    assert share_wire.heartbeat(client, group, str(uuid.uuid4()), 1).error_code == ErrorCode.group_id_not_found
    assert _delete(client, group) == ErrorCode.group_id_not_found


def test_a_share_group_is_deleted_only_with_its_share_state(client: WireClient) -> None:
    topic, _ = _topic(client, 1)
    group = _group(client)
    member, _ = _join(client, group, topic)
    assert _delete(client, group) == ErrorCode.non_empty_group
    assert share_wire.heartbeat(client, group, member, -1).error_code == ErrorCode.none
    deleted = _delete(client, group)
    # Its state on the topic's partition goes first: the group is gone exactly when that worked.
    described = share_wire.describe(client, group)
    if deleted == ErrorCode.none:
        assert described.error_code == ErrorCode.group_id_not_found
    else:
        assert (described.error_code, described.group_state) == (ErrorCode.none, "Empty"), deleted


def _find(client: WireClient, key: str, version: int = 6) -> Any:
    request = schema.build(codec.request_class(FIND_COORDINATOR, version), key_type=2, coordinator_keys=(key,))
    [found] = client.request(request).coordinators
    return found


def test_find_coordinator_answers_a_share_key_with_the_leader(node: BrokerProcess, client: WireClient) -> None:
    _, topic_id = _topic(client, 2)
    found = _find(client, share_wire.share_key("any-group", topic_id, 1))
    assert (found.error_code, found.node_id, found.port) == (ErrorCode.none, node.node_id, node.port)
    assert found.host == "127.0.0.1"
    assert _find(client, share_wire.share_key("g", topic_id, 7)).error_code == ErrorCode.unknown_topic_or_partition
    assert _find(client, share_wire.share_key("g", uuid.uuid4(), 0)).error_code == ErrorCode.unknown_topic_or_partition
    for malformed in ("no-colons", "g:not-base64!:0", f"g:{share_wire.share_key('x', topic_id, 0).split(':')[1]}:x"):
        refused = _find(client, malformed)
        assert refused.error_code == ErrorCode.invalid_request, malformed
        assert refused.node_id == -1
    assert _find(client, share_wire.share_key("g", topic_id, 0), version=5).error_code == ErrorCode.invalid_request


@pytest.mark.parametrize(
    "case",
    [
        ("", 0, ("t",), None, "MemberId can't be empty."),
        ("m", 0, None, None, "SubscribedTopicNames must be set in first request."),
        ("m", 0, (), None, "SubscribedTopicNames must be set in first request."),
        ("m", 0, ("t",), "", "RackId can't be empty."),
        ("m", -2, None, None, "MemberEpoch is invalid."),
    ],
)
def test_malformed_heartbeats_are_invalid_requests(
    client: WireClient, case: tuple[str, int, tuple[str, ...] | None, str | None, str]
) -> None:
    member_id, epoch, topics, rack, message = case
    group = _group(client)
    response = share_wire.heartbeat(client, group, member_id, epoch, topics=topics, rack_id=rack)
    assert (response.error_code, response.error_message) == (ErrorCode.invalid_request, message)
    assert share_wire.describe(client, group).error_code == ErrorCode.group_id_not_found  # nothing was created
    empty_group = share_wire.heartbeat(client, "", "m", 0, topics=("t",))
    assert (empty_group.error_code, empty_group.error_message) == (ErrorCode.invalid_request, "GroupId can't be empty.")


def test_unknown_members_fenced_epochs_and_other_group_types(client: WireClient) -> None:
    topic, _ = _topic(client, 1)
    group = _group(client)
    assert share_wire.heartbeat(client, group, "m", 1).error_code == ErrorCode.group_id_not_found
    member, _ = _join(client, group, topic)
    assert share_wire.heartbeat(client, group, str(uuid.uuid4()), 1).error_code == ErrorCode.unknown_member_id
    assert share_wire.heartbeat(client, group, str(uuid.uuid4()), -1).error_code == ErrorCode.unknown_member_id
    ahead = share_wire.heartbeat(client, group, member, 5)
    assert ahead.error_code == ErrorCode.fenced_member_epoch and "greater member epoch (5)" in ahead.error_message
    assert share_wire.heartbeat(client, group, member, 1).error_code == ErrorCode.none
    for _ in range(2):  # two more joins: the member moves to epoch 2, then 3 (its previous epoch 2)
        _join(client, group, topic)
        [known] = [m for m in share_wire.describe(client, group).members if m.member_id == member]
        moved = share_wire.heartbeat(client, group, member, known.member_epoch)
        assert moved.error_code == ErrorCode.none
    assert moved.member_epoch == 3
    behind = share_wire.heartbeat(client, group, member, 1)
    assert behind.error_code == ErrorCode.fenced_member_epoch and "smaller member epoch (1)" in behind.error_message
    previous = share_wire.heartbeat(client, group, member, 2)  # the answer that moved it may have been lost
    assert (previous.error_code, previous.member_epoch) == (ErrorCode.none, 3)
    rejoined = share_wire.heartbeat(client, group, member, 0, topics=(topic,))
    assert (rejoined.error_code, rejoined.member_epoch) == (ErrorCode.none, 3)
    assert rejoined.assignment is not None  # a rejoin is sent its assignment again
    # A share group's id is not a consumer group's, nor the other way round.
    consumer = cg_wire.heartbeat(client, group, str(uuid.uuid4()), 0, topics=(topic,), owned={})
    assert consumer.error_code == ErrorCode.group_id_not_found
    assert cg_wire.describe(client, group).error_code == ErrorCode.group_id_not_found
    consumer_group = _group(client)
    assert cg_wire.heartbeat(client, consumer_group, str(uuid.uuid4()), 0, topics=(topic,), owned={}).error_code == 0
    share = share_wire.heartbeat(client, consumer_group, str(uuid.uuid4()), 0, topics=(topic,))
    assert (share.error_code, share.error_message) == (
        ErrorCode.group_id_not_found, f"Group {consumer_group} is not a share group."
    )


def test_classic_requests_for_a_share_group_id_are_refused(client: WireClient) -> None:
    topic, _ = _topic(client, 1)
    group = _group(client)
    member, _ = _join(client, group, topic)
    join_cls = codec.request_class(11, 9)
    join = client.request(schema.build(
        join_cls,
        group_id=group,
        session_timeout=10_000,
        rebalance_timeout=10_000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(schema.build_nested(join_cls, "protocols", name="range", metadata=b""),),
        reason=None,
    ))
    assert (join.error_code, join.member_id) == (ErrorCode.inconsistent_group_protocol, "")
    assert cg_wire.commit(client, group, member, 1, topic=topic, offsets={0: 5}) == {0: ErrorCode.group_id_not_found}
    fetched = cg_wire.fetch_offsets(client, group, None, -1, topic=topic, partitions=(0,))
    assert fetched.error_code == ErrorCode.group_id_not_found
    assert share_wire.describe(client, group).members[0].member_id == member  # the share group is untouched


def test_a_topic_created_after_the_join_is_assigned_on_the_next_heartbeat(client: WireClient) -> None:
    group = _group(client)
    topic = unique("share-later-topic")
    member, joined = _join(client, group, topic)
    assert (joined.member_epoch, share_wire.assigned(joined)) == (1, {})
    topic_id = create_topic(client, topic, 2).topic_id
    epochs, known = {member: 1}, {member: {}}
    assert _settle(client, group, epochs, known)[member] == {topic_id: (0, 1)}
    assert epochs[member] == 2


def test_altering_offsets_of_a_new_group_makes_an_empty_share_group(client: WireClient) -> None:
    topic, _ = _topic(client, 1)
    group = _group(client)
    _alter_offsets(client, group, topic)
    described = share_wire.describe(client, group)
    assert (described.error_code, described.group_state, described.group_epoch, described.members) == (
        ErrorCode.none, "Empty", 0, ()
    )
    assert _listed(client, "share")[group].group_state == "Empty"
    _, joined = _join(client, group, topic)  # the group is used as any other from then on
    assert joined.member_epoch == 1


def test_share_groups_are_unsupported_while_share_version_is_zero(client: WireClient) -> None:
    topic, _ = _topic(client, 1)
    group = _group(client)
    assert update(client, ("share.version", 0, SAFE_DOWNGRADE)).error_code == ErrorCode.none
    try:
        refused = eventually(lambda: share_wire.heartbeat(client, group, str(uuid.uuid4()), 0, topics=(topic,)),
                             until=lambda r: r.error_code == ErrorCode.unsupported_version, timeout=10,
                             what="share groups off")
        assert "share.version" in refused.error_message
        assert share_wire.describe(client, group).error_code == ErrorCode.unsupported_version
    finally:
        assert update(client, ("share.version", 1, UPGRADE)).error_code == ErrorCode.none
    eventually(lambda: share_wire.heartbeat(client, group, str(uuid.uuid4()), 0, topics=(topic,)).error_code,
               until=lambda e: e == ErrorCode.none, timeout=10, what="share groups on again")


def test_a_groups_own_heartbeat_interval_applies_from_its_next_heartbeat(client: WireClient) -> None:
    topic, _ = _topic(client, 1)
    group = _group(client)
    member, joined = _join(client, group, topic)
    assert joined.heartbeat_interval == timedelta(milliseconds=500)
    request_cls = codec.request_class(44, 1)
    resource_cls = schema.field_entity(request_cls, "resources")
    setting = schema.build_nested(resource_cls, "configs", name="share.heartbeat.interval.ms", config_operation=0,
                                  value="700")
    altered = client.request(schema.build(request_cls, resources=(
        schema.build(resource_cls, resource_type=32, resource_name=group, configs=(setting,)),
    ), validate_only=False))
    assert altered.responses[0].error_code == ErrorCode.none, altered
    eventually(lambda: share_wire.heartbeat(client, group, member, 1).heartbeat_interval,
               until=lambda interval: interval == timedelta(milliseconds=700), timeout=10,
               what="the group's own heartbeat interval")
