"""The requests of Kafka 4.2's Java share consumer (``KafkaShareConsumer``: ShareHeartbeatRequestManager,
ShareConsumeRequestManager, ShareSessionHandler) and of its admin client and ``kafka-share-groups.sh``
(ShareGroupCommand: listShareGroups, describeShareGroups, listShareGroupOffsets, alterShareGroupOffsets,
deleteShareGroupOffsets, deleteShareGroups, group configs), replayed at the versions they pick against this broker,
with the response fields the Java client reads checked exactly.

As in test_java42_conformance.py, no Java client can be installed here, so each test replays the client's request
shapes with raw kio requests against one real broker process shared by the module. kio decodes durations as
timedeltas and the zero uuid as None.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker import authorized_operations
from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker.kafka_clients import call, entity, topic_name
from tests.topics import create_topic
from wire import schema
from wire.record_batch import Record, build_batch, iter_batches

ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1
GROUP_RESOURCE = 32
GROUP_CONFIG_SOURCE, INT_TYPE = 8, 3  # DescribeConfigsResponse.ConfigSource.GROUP_CONFIG, ConfigType.INT
#: The Java share consumer's defaults: fetch.max.wait.ms, fetch.min.bytes, fetch.max.bytes, max.poll.records.
MAX_WAIT_MS, MIN_BYTES, MAX_BYTES, MAX_RECORDS = 500, 1, 52_428_800, 500
LOCK_MS = 30_000  # group.share.record.lock.duration.ms's default


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("java42-share"))
    try:
        yield process
    finally:
        code = process.stop()
    assert code == 0, process.log_text()


@pytest.fixture
def client(kafka: BrokerProcess, wire: Callable[[int], WireClient]) -> WireClient:
    return wire(kafka.port)


# ---------------------------------------------------------------------------------------------- request shapes
def java_uuid() -> str:
    """A member id as the Java client makes it: ``Uuid.randomUuid().toString()``, 22 characters of base64url."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def ready_topic(client: WireClient, count: int = 0, partitions: int = 1) -> tuple[str, uuid.UUID]:
    """A new topic once its partitions have leaders, with ``count`` records in one batch on partition 0."""
    name = topic_name("s42")
    create_topic(client, name, partitions)
    topic_cls = entity(3, 13, "topics")
    found = eventually(
        lambda: call(client, 3, 13, topics=(schema.build(topic_cls, name=name, topic_id=None),),
                     allow_auto_topic_creation=False, include_topic_authorized_operations=False).topics[0],
        until=lambda t: t.error_code == ErrorCode.none and all(p.leader_id >= 0 for p in t.partitions)
        and len(t.partitions) == partitions,
        timeout=15, what=f"{name} to have leaders",
    )
    if count:
        produce(client, name, count)
    return name, found.topic_id


def produce(client: WireClient, topic: str, count: int, partition: int = 0, *, value_size: int = 0) -> None:
    """One batch of ``count`` records (values of ``value_size`` bytes when given)."""
    topic_cls = entity(0, 9, "topic_data")
    batch = build_batch([Record(b"k%d" % i, (b"v%d" % i).ljust(value_size, b".")) for i in range(count)])
    part = schema.build(schema.field_entity(topic_cls, "partition_data"), index=partition, records=batch)
    response = call(client, 0, 9, transactional_id=None, acks=-1, timeout=30_000,
                    topic_data=(schema.build(topic_cls, name=topic, partition_data=(part,)),))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


def find_group_coordinator(client: WireClient, group: str) -> Any:
    """FindCoordinator v6 with key type 0 (GROUP), as the share consumer and the admin look up a share group's."""
    return eventually(
        lambda: call(client, 10, 6, key_type=0, coordinator_keys=(group,)).coordinators[0],
        until=lambda found: found.error_code != ErrorCode.coordinator_not_available,
        timeout=15, what=f"a coordinator for {group}",
    )


def alter_group_configs(client: WireClient, group: str, **configs: str) -> Any:
    """IncrementalAlterConfigs v1 (SET) on the GROUP resource, as ``kafka-configs --entity-type groups`` sends it."""
    resource_cls = entity(44, 1, "resources")
    config_cls = schema.field_entity(resource_cls, "configs")
    [result] = call(client, 44, 1, validate_only=False, resources=(schema.build(
        resource_cls, resource_type=GROUP_RESOURCE, resource_name=group,
        configs=tuple(schema.build(config_cls, name=k.replace("_", "."), config_operation=0, value=v)
                      for k, v in configs.items()),
    ),)).responses
    return result


def new_group(client: WireClient) -> str:
    """A share group reading from the earliest offset (``share.auto.offset.reset=earliest``, set before it starts)."""
    group = topic_name("sg42")
    find_group_coordinator(client, group)
    assert alter_group_configs(client, group, share_auto_offset_reset="earliest").error_code == ErrorCode.none
    return group


def heartbeat(client: WireClient, group: str, member: str, epoch: int, *, topics: tuple[str, ...] | None = None,
              rack: str | None = None) -> Any:
    """ShareGroupHeartbeat v1 as ShareHeartbeatRequestManager sends it: the join carries the subscription and the
    rack; later ones send nulls for what did not change; the leave is epoch -1."""
    return call(client, 76, 1, group_id=group, member_id=member, member_epoch=epoch, rack_id=rack,
                subscribed_topic_names=topics)


@dataclass(frozen=True)
class Member:
    """A joined share consumer: what every ShareFetch and ShareAcknowledge it sends carries."""

    client: WireClient
    group: str
    member_id: str
    epoch: int
    topic_id: uuid.UUID


def assigned(answer: Any, topic_id: uuid.UUID) -> tuple[int, ...] | None:
    if answer.assignment is None:
        return None
    found = [tuple(tp.partitions) for tp in answer.assignment.topic_partitions if tp.topic_id == topic_id]
    return found[0] if found else None


def join(client: WireClient, group: str, topic: str, topic_id: uuid.UUID, *, partitions: int = 1) -> Member:
    """A member joined (subscription and rack on the first heartbeat) and then heartbeating, with nulls for what did
    not change, until it is assigned all of ``topic``'s partitions."""
    member = java_uuid()
    joined = heartbeat(client, group, member, 0, topics=(topic,), rack="rack-a")
    assert (joined.error_code, joined.error_message, joined.member_id) == (ErrorCode.none, None, member)
    assert joined.member_epoch > 0 and schema.millis(joined.heartbeat_interval) == 5_000
    assert schema.millis(joined.throttle_time) == 0
    wanted = tuple(range(partitions))
    answer = joined if assigned(joined, topic_id) == wanted else eventually(
        lambda: heartbeat(client, group, member, joined.member_epoch),
        until=lambda r: r.error_code != ErrorCode.none or assigned(r, topic_id) == wanted,
        timeout=15, what=f"{member} to be assigned {topic}",
    )
    assert (answer.error_code, assigned(answer, topic_id)) == (ErrorCode.none, wanted)
    return Member(client, group, member, answer.member_epoch, topic_id)


def ack_batch(cls: type[Any], first: int, last: int, *types: int) -> Any:
    return schema.build(schema.field_entity(cls, "acknowledgement_batches"), first_offset=first, last_offset=last,
                        acknowledge_types=types)


Acks = tuple[tuple[int, int, int], ...]


def share_fetch(
    m: Member, version: int, epoch: int, acks: Acks = (), *, send: tuple[int, ...] | None = None,
    acks_on: int = 0, max_records: int = MAX_RECORDS, mode: int = BATCH_OPTIMIZED, forget: tuple[int, ...] = (),
    renew: bool = False, batch_size: int | None = None,
) -> Any:
    """ShareFetch as ShareSessionHandler and ShareFetchRequest.Builder.forConsumer build it: the session's partitions
    by topic id at epoch 0; later only the partitions added (``send``) and those whose acknowledgements ride along;
    forgotten partitions; the consumer's limits (every one 0 for a renew, KIP-1222)."""
    topic_cls = entity(78, version, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    if send is None:
        send = (0,) if epoch == 0 else ()
    batches = tuple(ack_batch(part_cls, *ack) for ack in acks)
    indexes = sorted(set(send) | ({acks_on} if batches else set()))
    parts = tuple(schema.build(part_cls, partition_index=p, acknowledgement_batches=batches if p == acks_on else ())
                  for p in indexes)
    forgotten_cls = entity(78, version, "forgotten_topics_data")
    fields: dict[str, object] = {"share_acquire_mode": mode, "is_renew_ack": renew} if version >= 2 else {}
    return call(
        m.client, 78, version, group_id=m.group, member_id=m.member_id, share_session_epoch=epoch,
        max_wait=0 if renew else MAX_WAIT_MS, min_bytes=0 if renew else MIN_BYTES,
        max_bytes=0 if renew else MAX_BYTES, max_records=0 if renew else max_records,
        batch_size=0 if renew else max_records if batch_size is None else batch_size,
        topics=(schema.build(topic_cls, topic_id=m.topic_id, partitions=parts),) if parts else (),
        forgotten_topics_data=(schema.build(forgotten_cls, topic_id=m.topic_id, partitions=forget),) if forget else (),
        **fields,
    )


def share_acknowledge(m: Member, version: int, epoch: int, acks: Acks, *, renew: bool = False) -> Any:
    """ShareAcknowledge (commitSync/commitAsync, and the close at epoch -1): partition 0's acknowledgement batches."""
    topic_cls = entity(79, version, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    part = schema.build(part_cls, partition_index=0,
                        acknowledgement_batches=tuple(ack_batch(part_cls, *a) for a in acks))
    fields: dict[str, object] = {"is_renew_ack": renew} if version >= 2 else {}
    return call(m.client, 79, version, group_id=m.group, member_id=m.member_id, share_session_epoch=epoch,
                topics=(schema.build(topic_cls, topic_id=m.topic_id, partitions=(part,)),) if acks else (), **fields)


def partitions_of(response: Any, topic_id: uuid.UUID) -> dict[int, Any]:
    [topic] = response.responses
    assert topic.topic_id == topic_id
    return {p.partition_index: p for p in topic.partitions}


def only_partition(response: Any, topic_id: uuid.UUID) -> Any:
    [part] = partitions_of(response, topic_id).values()
    return part


def ranges(part: Any) -> list[tuple[int, int, int]]:
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in part.acquired_records]


def fetched_offsets(part: Any) -> list[int]:
    return [header.base_offset + i for header, _ in iter_batches(part.records)
            for i in range(header.last_offset_delta + 1)]


# ---------------------------------------------------------------------------------------------- share consumer
def test_share_consumer_join_fetch_acknowledge_leave(client: WireClient, kafka: BrokerProcess) -> None:
    topic, topic_id = ready_topic(client, count=5)
    group = new_group(client)
    coordinator = find_group_coordinator(client, group)
    assert (coordinator.key, coordinator.error_code, coordinator.host, coordinator.port) == (
        group, ErrorCode.none, "127.0.0.1", kafka.port
    )
    m = join(client, group, topic, topic_id)

    # Epoch 0 opens the session with the assigned partition; the records come with their acquired range.
    opened = share_fetch(m, 1, 0)
    assert (opened.error_code, opened.error_message, schema.millis(opened.throttle_time)) == (ErrorCode.none, None, 0)
    assert schema.millis(opened.acquisition_lock_timeout) == LOCK_MS and opened.node_endpoints == ()
    part = only_partition(opened, topic_id)
    assert (part.partition_index, part.error_code, part.error_message) == (0, ErrorCode.none, None)
    assert (part.acknowledge_error_code, part.acknowledge_error_message) == (ErrorCode.none, None)
    # No default in Kafka's schema, so Kafka sends 0/0 where no leader moved (the client reads it only then).
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (0, 0)
    assert ranges(part) == [(0, 4, 1)] and fetched_offsets(part) == [0, 1, 2, 3, 4]

    # Epoch 1: the acknowledgements of the last poll ride on the next fetch, which names only the partition they
    # are for; the released record comes back with its second delivery, with the new ones.
    produce(client, topic, 2)
    again = share_fetch(m, 1, 1, ((0, 2, ACCEPT), (3, 3, RELEASE), (4, 4, REJECT)))
    assert again.error_code == ErrorCode.none
    part = only_partition(again, topic_id)
    assert (part.error_code, part.acknowledge_error_code, part.acknowledge_error_message) == (
        ErrorCode.none, ErrorCode.none, None
    )
    assert sorted(ranges(part)) == [(3, 3, 2), (5, 6, 1)]

    # commitSync: ShareAcknowledge at the session's next epoch; then the close at -1 with the last acknowledgements.
    acked = share_acknowledge(m, 1, 2, ((3, 3, ACCEPT),))
    assert (acked.error_code, acked.error_message, schema.millis(acked.throttle_time)) == (ErrorCode.none, None, 0)
    part = only_partition(acked, topic_id)
    assert (part.partition_index, part.error_code, part.error_message) == (0, ErrorCode.none, None)
    closed = share_acknowledge(m, 1, -1, ((5, 6, ACCEPT),))
    assert closed.error_code == ErrorCode.none and only_partition(closed, topic_id).error_code == ErrorCode.none
    # The session is gone: the next epoch is refused, as the Java client then opens a new one.
    gone = share_fetch(m, 1, 3)
    assert (gone.error_code, gone.responses) == (ErrorCode.share_session_not_found, ())
    # Everything was acknowledged: a new session finds nothing to acquire.
    reopened = share_fetch(m, 1, 0)
    assert reopened.error_code == ErrorCode.none
    assert all(not p.acquired_records for t in reopened.responses for p in t.partitions)
    assert share_fetch(m, 1, -1).error_code == ErrorCode.none

    left = heartbeat(client, group, m.member_id, -1)
    assert (left.error_code, left.member_id, left.member_epoch) == (ErrorCode.none, m.member_id, -1)


def test_incremental_session_keeps_and_forgets_partitions(client: WireClient) -> None:
    """After the epoch-0 fetch names both partitions, the incremental fetches name none and still read both; a
    partition taken from the member is sent as forgotten and is no longer read."""
    topic, topic_id = ready_topic(client, partitions=2)
    produce(client, topic, 2, partition=0)
    produce(client, topic, 3, partition=1)
    group = new_group(client)
    m = join(client, group, topic, topic_id, partitions=2)

    opened = share_fetch(m, 1, 0, send=(0, 1))
    assert {i: ranges(p) for i, p in partitions_of(opened, topic_id).items()} == {0: [(0, 1, 1)], 1: [(0, 2, 1)]}

    produce(client, topic, 1, partition=0)
    produce(client, topic, 1, partition=1)
    # An epoch the session is not at is refused as a whole, and the session stays at its epoch (the Java client's
    # ShareSessionHandler would then start a new session at epoch 0).
    skipped = share_fetch(m, 1, 7)
    assert (skipped.error_code, skipped.responses) == (ErrorCode.invalid_share_session_epoch, ())
    nothing_named = share_fetch(m, 1, 1)
    got = {i: ranges(p) for i, p in partitions_of(nothing_named, topic_id).items()}
    assert got == {0: [(2, 2, 1)], 1: [(3, 3, 1)]}

    # Partition 1 is forgotten (its acknowledgements ride on the same request); new records there are not read.
    produce(client, topic, 1, partition=0)
    produce(client, topic, 1, partition=1)
    forgot = share_fetch(m, 1, 2, ((0, 3, ACCEPT),), acks_on=1, forget=(1,))
    parts = partitions_of(forgot, topic_id)
    assert parts[1].acknowledge_error_code == ErrorCode.none and ranges(parts[1]) == []
    assert ranges(parts[0]) == [(3, 3, 1)]
    later = share_fetch(m, 1, 3, ((0, 3, ACCEPT),))
    assert set(partitions_of(later, topic_id)) == {0}
    assert share_fetch(m, 1, -1).error_code == ErrorCode.none
    assert heartbeat(client, group, m.member_id, -1).member_epoch == -1


def test_heartbeat_errors_the_share_consumer_recovers_from(client: WireClient) -> None:
    """ShareHeartbeatRequestManager's error paths: an epoch the coordinator does not know is FENCED_MEMBER_EPOCH
    (the member rejoins at epoch 0 with its id and gets its assignment again); an id the group does not know,
    UNKNOWN_MEMBER_ID. The Java client reads the code and logs the message."""
    topic, topic_id = ready_topic(client)
    group = new_group(client)
    m = join(client, group, topic, topic_id)
    ahead = heartbeat(client, group, m.member_id, m.epoch + 5)
    # GroupCoordinatorService answers a refused heartbeat with its code and message only.
    assert (ahead.error_code, ahead.member_id, ahead.member_epoch, schema.millis(ahead.heartbeat_interval)) == (
        ErrorCode.fenced_member_epoch, None, 0, 0
    )
    assert ahead.assignment is None
    assert ahead.error_message == (
        f"The share group member has a greater member epoch ({m.epoch + 5}) than the one known by the group "
        f"coordinator ({m.epoch}). The member must abandon all its partitions and rejoin."
    )
    rejoined = heartbeat(client, group, m.member_id, 0, topics=(topic,), rack="rack-a")
    assert (rejoined.error_code, rejoined.member_id, rejoined.member_epoch) == (ErrorCode.none, m.member_id, m.epoch)
    assert assigned(rejoined, topic_id) == (0,)

    stranger = java_uuid()
    unknown = heartbeat(client, group, stranger, 3)
    assert (unknown.error_code, unknown.error_message, unknown.member_id, unknown.member_epoch) == (
        ErrorCode.unknown_member_id, f"Member {stranger} is not a member of group {group}.", None, 0
    )
    # A first heartbeat without a subscription is malformed (throwIfShareGroupHeartbeatRequestIsInvalid).
    bare = heartbeat(client, group, java_uuid(), 0)
    assert (bare.error_code, bare.error_message, bare.member_id, bare.member_epoch) == (
        ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.", None, 0
    )
    assert heartbeat(client, group, m.member_id, -1).member_epoch == -1


def test_share_fetch_v2_record_limit_and_renew(client: WireClient) -> None:
    topic, topic_id = ready_topic(client, count=6)
    group = new_group(client)
    m = join(client, group, topic, topic_id)

    # share.acquire.mode=record_limit: never more than MaxRecords records acquired, even inside one batch.
    limited = share_fetch(m, 2, 0, max_records=2, mode=RECORD_LIMIT)
    assert limited.error_code == ErrorCode.none
    assert ranges(only_partition(limited, topic_id)) == [(0, 1, 1)]

    # A renew (KIP-1222): ShareAcknowledge v2 with IsRenewAck and RENEW keeps the records acquired.
    renewed = share_acknowledge(m, 2, 1, ((0, 1, RENEW),), renew=True)
    assert (renewed.error_code, schema.millis(renewed.acquisition_lock_timeout)) == (ErrorCode.none, LOCK_MS)
    assert only_partition(renewed, topic_id).error_code == ErrorCode.none
    # ShareFetch v2's renew: every limit 0, the acknowledgements only, nothing acquired.
    renew_fetch = share_fetch(m, 2, 2, ((0, 1, RENEW),), renew=True)
    assert renew_fetch.error_code == ErrorCode.none
    part = only_partition(renew_fetch, topic_id)
    assert (part.acknowledge_error_code, ranges(part)) == (ErrorCode.none, [])
    # RENEW without IsRenewAck is malformed.
    bad = share_acknowledge(m, 2, 3, ((0, 1, RENEW),))
    assert only_partition(bad, topic_id).error_code == ErrorCode.invalid_request

    # The rest, batch-optimized: accept 0-1 and acquire on from 2; then close with the final epoch.
    rest = share_fetch(m, 2, 4, ((0, 1, ACCEPT),))
    part = only_partition(rest, topic_id)
    assert part.acknowledge_error_code == ErrorCode.none and ranges(part) == [(2, 5, 1)]
    closed = share_fetch(m, 2, -1, ((2, 5, ACCEPT),))
    assert closed.error_code == ErrorCode.none
    part = only_partition(closed, topic_id)
    # ShareFetchResponse.of turns a partition's null records into MemoryRecords.EMPTY, so Kafka sends empty bytes.
    assert (part.acknowledge_error_code, ranges(part), part.records) == (ErrorCode.none, [], b"")
    assert heartbeat(client, group, m.member_id, -1).member_epoch == -1


# ---------------------------------------------------------------------------------------------- admin client
def list_share_groups(client: WireClient, *states: str) -> dict[str, tuple[str, str, str]]:
    """ListGroups v5 as Admin.listGroups(ListGroupsOptions.forShareGroups()) sends it: the share type only."""
    response = call(client, 16, 5, states_filter=states, types_filter=("share",))
    assert response.error_code == ErrorCode.none
    return {g.group_id: (g.protocol_type, g.group_state, g.group_type) for g in response.groups}


def describe_share_groups(client: WireClient, *groups: str) -> list[Any]:
    response = call(client, 77, 1, group_ids=groups, include_authorized_operations=True)
    assert schema.millis(response.throttle_time) == 0
    return list(response.groups)


def describe_offsets(client: WireClient, group: str, topics: dict[str, tuple[int, ...]] | None) -> Any:
    """DescribeShareGroupOffsets v1 (listShareGroupOffsets): named partitions, or None for every topic."""
    group_cls = entity(90, 1, "groups")
    topic_cls = schema.field_entity(group_cls, "topics")
    named = None if topics is None else tuple(
        schema.build(topic_cls, topic_name=t, partitions=p) for t, p in topics.items()
    )
    [answer] = call(client, 90, 1, groups=(schema.build(group_cls, group_id=group, topics=named),)).groups
    assert answer.group_id == group
    return answer


def offsets_of(answer: Any) -> dict[str, list[tuple[int, int, int, int, ErrorCode]]]:
    return {t.topic_name: [(p.partition_index, p.start_offset, p.leader_epoch, p.lag, p.error_code)
                           for p in t.partitions] for t in answer.topics}


def test_share_group_admin_describe_offsets_alter_delete(client: WireClient, kafka: BrokerProcess) -> None:
    topic, topic_id = ready_topic(client, count=4)
    group = new_group(client)
    m = join(client, group, topic, topic_id)
    member = m.member_id
    fetched = share_fetch(m, 1, 0)
    assert ranges(only_partition(fetched, topic_id)) == [(0, 3, 1)]
    share_acknowledge(m, 1, 1, ((0, 1, ACCEPT), (3, 3, ACCEPT)))

    assert list_share_groups(client)[group] == ("share", "Stable", "share")
    # kafka-share-groups --list --state: the states as GroupState.toString() spells them, matched case-insensitively.
    assert group in list_share_groups(client, "Stable") and group in list_share_groups(client, "stable")
    assert group not in list_share_groups(client, "Empty")
    [described, missing] = describe_share_groups(client, group, "no-such-share-group")
    assert (described.error_code, described.error_message, described.group_id) == (ErrorCode.none, None, group)
    assert (described.group_state, described.assignor_name) == ("Stable", "simple")
    assert described.group_epoch >= 1 and described.assignment_epoch == described.group_epoch
    assert described.authorized_operations == authorized_operations.GROUP
    [row] = described.members
    assert (row.member_id, row.rack_id, row.client_id, row.subscribed_topic_names) == (
        member, "rack-a", "fjord-tests", (topic,)
    )
    assert row.client_host.startswith("/127.0.0.1") and row.member_epoch == described.group_epoch
    [tp] = row.assignment.topic_partitions
    assert (tp.topic_id, tp.topic_name, tuple(tp.partitions)) == (topic_id, topic, (0,))
    assert (missing.error_code, missing.error_message) == (ErrorCode.group_id_not_found,
                                                           "Group no-such-share-group not found.")
    assert (missing.group_state, missing.members) == ("", ())

    # listShareGroupOffsets: the start offset (2: 0-1 acknowledged) and lag (1: of 2-3, 3 is acknowledged too).
    named = describe_offsets(client, group, {topic: (0,), "no-such-topic": (0,)})
    assert (named.error_code, named.error_message) == (ErrorCode.none, None)
    assert offsets_of(named) == {topic: [(0, 2, 0, 1, ErrorCode.none)],
                                 "no-such-topic": [(0, -1, 0, -1, ErrorCode.none)]}
    assert {t.topic_name: t.topic_id for t in named.topics} == {topic: topic_id, "no-such-topic": None}
    every = describe_offsets(client, group, None)
    assert offsets_of(every) == {topic: [(0, 2, 0, 1, ErrorCode.none)]}
    [t] = every.topics
    assert t.topic_id == topic_id

    # The group is not empty: its offsets cannot be reset or deleted.
    part_cls = entity(91, 0, "topics", "partitions")
    alter_topic = schema.build(entity(91, 0, "topics"), topic_name=topic,
                               partitions=(schema.build(part_cls, partition_index=0, start_offset=0),))
    busy = call(client, 91, 0, group_id=group, topics=(alter_topic,))
    assert busy.error_code == ErrorCode.non_empty_group and busy.error_message
    [in_use] = call(client, 42, 2, groups_names=(group,)).results
    assert (in_use.group_id, in_use.error_code) == (group, ErrorCode.non_empty_group)
    heartbeat(client, group, member, -1)
    assert list_share_groups(client)[group] == ("share", "Empty", "share")

    # kafka-share-groups --reset-offsets --to-earliest / --to-offset on the empty group.
    altered = call(client, 91, 0, group_id=group, topics=(alter_topic,))
    assert (altered.error_code, altered.error_message) == (ErrorCode.none, None)
    [answer] = altered.responses
    assert (answer.topic_name, answer.topic_id) == (topic, topic_id)
    assert [(p.partition_index, p.error_code, p.error_message) for p in answer.partitions] == [
        (0, ErrorCode.none, None)
    ]
    assert offsets_of(describe_offsets(client, group, {topic: (0,)})) == {topic: [(0, 0, 0, 4, ErrorCode.none)]}

    # --delete-offsets: the topic's state goes; the group's describe then has nothing for it.
    delete_topic = schema.build(entity(92, 0, "topics"), topic_name=topic)
    deleted = call(client, 92, 0, group_id=group, topics=(delete_topic,))
    assert (deleted.error_code, deleted.error_message) == (ErrorCode.none, None)
    assert [(r.topic_name, r.topic_id, r.error_code, r.error_message) for r in deleted.responses] == [
        (topic, topic_id, ErrorCode.none, None)
    ]
    assert offsets_of(describe_offsets(client, group, None)) == {}

    # --delete: DeleteGroups of the share group; then it is gone from the listing and the describe.
    [result] = call(client, 42, 2, groups_names=(group,)).results
    assert (result.group_id, result.error_code) == (group, ErrorCode.none)
    assert group not in list_share_groups(client)
    [gone] = describe_share_groups(client, group)
    assert gone.error_code == ErrorCode.group_id_not_found


def test_share_group_through_classic_group_apis(client: WireClient) -> None:
    """describeConsumerGroups (DescribeGroups v6) of a share group: Kafka's classic lookup rejects it by type; below
    v6 it is a Dead group with no error. ShareGroupDescribe of a group that is not a share group is refused too."""
    topic, topic_id = ready_topic(client)
    group = new_group(client)
    m = join(client, group, topic, topic_id)
    [v6] = call(client, 15, 6, groups=(group,), include_authorized_operations=False).groups
    assert (v6.group_id, v6.error_code, v6.error_message, v6.group_state, v6.members) == (
        group, ErrorCode.group_id_not_found, f"Group {group} is not a classic group.", "", ()
    )
    [v5] = call(client, 15, 5, groups=(group,), include_authorized_operations=False).groups
    assert (v5.error_code, v5.group_state, v5.protocol_type, v5.members) == (ErrorCode.none, "Dead", "", ())

    classic = topic_name("cg42")
    find_group_coordinator(client, classic)
    commit_cls = entity(8, 9, "topics")
    committed = call(client, 8, 9, group_id=classic, generation_id_or_member_epoch=-1, member_id="",
                     group_instance_id=None, topics=(schema.build(commit_cls, name=topic, partitions=(
                         schema.build(schema.field_entity(commit_cls, "partitions"), partition_index=0,
                                      committed_offset=0, committed_leader_epoch=-1, committed_metadata=""),
                     )),))
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none
    [other] = describe_share_groups(client, classic)
    assert (other.error_code, other.error_message) == (ErrorCode.group_id_not_found,
                                                      f"Group {classic} is not a share group.")
    assert heartbeat(client, group, m.member_id, -1).member_epoch == -1


def test_share_group_configs_on_group_resource(client: WireClient) -> None:
    """kafka-configs --entity-type groups: IncrementalAlterConfigs and DescribeConfigs on resource type 32."""
    group = topic_name("sg42")
    find_group_coordinator(client, group)
    resource_cls = entity(44, 1, "resources")
    config_cls = schema.field_entity(resource_cls, "configs")
    altered = call(client, 44, 1, validate_only=False, resources=(schema.build(
        resource_cls, resource_type=GROUP_RESOURCE, resource_name=group,
        configs=(schema.build(config_cls, name="share.record.lock.duration.ms", config_operation=0, value="45000"),),
    ),))
    [result] = altered.responses
    assert (result.error_code, result.error_message, result.resource_type, result.resource_name) == (
        ErrorCode.none, None, GROUP_RESOURCE, group
    )
    # GroupConfig.validate: names it does not know, and values outside the broker's bounds, are INVALID_CONFIG.
    too_short = alter_group_configs(client, group, share_record_lock_duration_ms="999")
    assert (too_short.error_code, too_short.error_message) == (
        ErrorCode.invalid_config,
        "Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000",
    )
    below_min = alter_group_configs(client, group, share_record_lock_duration_ms="14000")
    assert (below_min.error_code, below_min.error_message) == (
        ErrorCode.invalid_config,
        "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms",
    )
    unknown = alter_group_configs(client, group, share_no_such_thing="1")
    assert (unknown.error_code, unknown.error_message) == (
        ErrorCode.invalid_config, "Unknown group config name: share.no.such.thing"
    )

    describe_cls = entity(32, 4, "resources")
    described = call(client, 32, 4, include_synonyms=False, include_documentation=False, resources=(schema.build(
        describe_cls, resource_type=GROUP_RESOURCE, resource_name=group,
        configuration_keys=("share.record.lock.duration.ms",),
    ),))
    [found] = described.results
    assert (found.error_code, found.resource_type, found.resource_name) == (ErrorCode.none, GROUP_RESOURCE, group)
    [entry] = found.configs
    assert (entry.name, entry.value, entry.read_only, entry.is_sensitive) == (
        "share.record.lock.duration.ms", "45000", False, False
    )
    assert (entry.config_source, entry.config_type, entry.synonyms, entry.documentation) == (
        GROUP_CONFIG_SOURCE, INT_TYPE, (), None
    )

    # The share consumer learns the group's lock duration from every ShareFetch and ShareAcknowledge answer.
    topic, topic_id = ready_topic(client, count=1)
    assert alter_group_configs(client, group, share_auto_offset_reset="earliest").error_code == ErrorCode.none
    m = join(client, group, topic, topic_id)
    fetched = share_fetch(m, 1, 0)
    assert (schema.millis(fetched.acquisition_lock_timeout), ranges(only_partition(fetched, topic_id))) == (
        45_000, [(0, 0, 1)]
    )
    acked = share_acknowledge(m, 2, 1, ((0, 0, ACCEPT),))  # v2 (KIP-1222) added the lock duration here
    assert schema.millis(acked.acquisition_lock_timeout) == 45_000
    assert share_fetch(m, 1, -1).error_code == ErrorCode.none
    assert heartbeat(client, group, m.member_id, -1).member_epoch == -1
