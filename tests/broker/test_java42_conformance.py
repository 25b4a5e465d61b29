"""The requests of Kafka 4.2's Java consumer and admin client at the versions they pick against this broker (Kafka
4.2's maximum versions), with exactly the response fields the Java client reads checked; and the advertised version
table against Kafka 4's floors (KIP-896).

As in test_java_client_conformance.py (the Kafka 3.6 generation), no Java client can be installed here, so each test
replays the client's request shape with raw kio requests against one real broker process shared by the module.
kio decodes durations as timedeltas and a zero uuid in a nullable uuid field as None.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from broker import authorized_operations
from testkit.node_process import BrokerProcess, WireClient, api_versions_request, start_broker
from testkit.waiting import eventually
from tests.broker.kafka_clients import call, entity, topic_name
from tests.topics import create_topic
from wire import codec, schema
from wire.api_versions import API_VERSIONS
from wire.record_batch import Record, build_batch, iter_batches

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -4, -5, -6

#: Where Fjord's lowest advertised version is below Kafka 4's floor, and why (a client Fjord supports needs it).
#: Empty: every API Fjord serves starts at or above the floor.
BELOW_KAFKA_4_FLOOR: dict[int, str] = {}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("java42-conformance"))
    try:
        yield process
    finally:
        code = process.stop()
    assert code == 0, process.log_text()


@pytest.fixture
def client(kafka: BrokerProcess, wire: Callable[[int], WireClient]) -> WireClient:
    return wire(kafka.port)




def metadata_v13(client: WireClient, *topics: str) -> Any:
    """Metadata v13 as Kafka 4.2's consumer sends it: by name, no auto-creation, no authorized operations."""
    topic_cls = entity(3, 13, "topics")
    return call(
        client, 3, 13,
        topics=tuple(schema.build(topic_cls, name=t, topic_id=uuid_zero) for t in topics),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    )


def ready_topic(client: WireClient, partitions: int = 1) -> tuple[str, uuid.UUID]:
    """A new topic once each partition has a leader; (name, topic id)."""
    name = topic_name("j42")
    create_topic(client, name, partitions)
    found = eventually(
        lambda: metadata_v13(client, name).topics[0],
        until=lambda t: t.error_code == ErrorCode.none and len(t.partitions) == partitions
        and all(p.leader_id >= 0 for p in t.partitions),
        timeout=15, what=f"{name} to have leaders",
    )
    return name, found.topic_id


def produce(client: WireClient, topic: str, count: int, partition: int = 0) -> None:
    topic_cls = entity(0, 9, "topic_data")
    batch = build_batch([Record(b"k%d" % i, b"v%d" % i) for i in range(count)])
    part = schema.build(schema.field_entity(topic_cls, "partition_data"), index=partition, records=batch)
    response = call(client, 0, 9, transactional_id=None, acks=-1, timeout=30_000,
                    topic_data=(schema.build(topic_cls, name=topic, partition_data=(part,)),))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


def fetch(client: WireClient, version: int, topic_id: uuid.UUID, offset: int, *, leader_epoch: int = -1) -> Any:
    """Fetch v17/v18 as Kafka 4.2's consumer sends it: by topic id, a new session, no replica state or directory."""
    topic_cls = entity(1, version, "topics")
    part = schema.build(
        schema.field_entity(topic_cls, "partitions"), partition=0, current_leader_epoch=leader_epoch,
        fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20,
    )
    return call(
        client, 1, version, max_wait=200, min_bytes=1, max_bytes=50 << 20, isolation_level=0, session_id=0,
        session_epoch=0, topics=(schema.build(topic_cls, topic_id=topic_id, partitions=(part,)),),
        forgotten_topics_data=(), rack_id="",
    )


def list_offsets(client: WireClient, version: int, topic: str, *timestamps: int) -> list[Any]:
    """ListOffsets as Kafka 4.2's consumer and admin send it (v10+: with the request timeout), one partition per
    timestamp asked (the admin's per-spec requests, merged here into one)."""
    topic_cls = entity(2, version, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    answers = []
    for timestamp in timestamps:
        part = schema.build(part_cls, partition_index=0, current_leader_epoch=-1, timestamp=timestamp)
        response = call(client, 2, version, replica_id=-1, isolation_level=0, timeout=30_000,
                        topics=(schema.build(topic_cls, name=topic, partitions=(part,)),))
        [topic_response] = response.topics
        assert topic_response.name == topic
        [answer] = topic_response.partitions
        assert answer.partition_index == 0
        answers.append(answer)
    return answers


# ---------------------------------------------------------------------------------------------- version table
def _kio_versions(api_key: int) -> list[int]:
    """The versions Kafka 4.2's message definitions have for ``api_key`` (kio is generated from them): their lowest
    is Kafka 4's floor, since Kafka 4.0 removed the older versions from the definitions (KIP-896)."""
    found = []
    for version in range(0, 32):
        try:
            codec.request_class(api_key, version)
        except Exception:
            continue
        found.append(version)
    return found


@pytest.mark.parametrize("api_key", sorted(API_VERSIONS), ids=[API_VERSIONS[k].name for k in sorted(API_VERSIONS)])
def test_every_range_is_within_kafka_42_and_above_kafka_4_floor(api_key: int) -> None:
    entry = API_VERSIONS[api_key]
    versions = _kio_versions(api_key)
    assert versions, f"{entry.name} is not a Kafka 4.2 API"
    floor, ceiling = versions[0], versions[-1]
    assert entry.max_version <= ceiling
    if api_key in BELOW_KAFKA_4_FLOOR:
        assert entry.min_version < floor
    else:
        assert entry.min_version >= floor, f"{entry.name} v{entry.min_version} is below Kafka 4's floor v{floor}"


def test_kafka_4_floors_are_those_of_kip_896() -> None:
    """The floors read from kio are KIP-896's (so the test above checks the right numbers)."""
    expected = {0: 3, 1: 4, 2: 1, 8: 2, 9: 1, 19: 2, 20: 1, 23: 2, 29: 1, 30: 1, 31: 1, 32: 1, 35: 1}
    assert {key: _kio_versions(key)[0] for key in expected} == expected


def test_new_versions_are_advertised(client: WireClient) -> None:
    served = {k.api_key: (k.min_version, k.max_version) for k in client.request(api_versions_request(3)).api_keys}
    assert served[1] == (4, 18) and served[2] == (1, 11) and served[3] == (0, 13)
    assert served[8] == (2, 10) and served[9] == (1, 10) and served[10] == (0, 6)
    assert served[15] == (0, 6) and served[60] == (0, 2) and served[75] == (0, 0)


# ---------------------------------------------------------------------------------------------- consumer
def test_metadata_v13_top_level_error_code_is_none(client: WireClient, kafka: BrokerProcess) -> None:
    name, topic_id = ready_topic(client)
    response = metadata_v13(client, name, topic_name("missing"))
    assert response.error_code == ErrorCode.none  # KIP-1102: REBOOTSTRAP_REQUIRED would make the client re-bootstrap
    assert schema.millis(response.throttle_time) == 0
    [broker] = response.brokers
    assert (broker.host, broker.port) == ("127.0.0.1", kafka.port)
    assert response.cluster_id and response.controller_id == broker.node_id
    found, missing = response.topics
    assert (found.error_code, found.name, found.topic_id, found.is_internal) == (ErrorCode.none, name, topic_id, False)
    [part] = found.partitions
    assert (part.error_code, part.partition_index, part.leader_id) == (ErrorCode.none, 0, broker.node_id)
    assert part.replica_nodes == part.isr_nodes == (broker.node_id,) and part.offline_replicas == ()
    assert missing.error_code == ErrorCode.unknown_topic_or_partition and missing.partitions == ()


def test_metadata_names_no_topic_can_have_are_invalid_without_auto_creation(client: WireClient) -> None:
    """Kafka's getTopicMetadata validates a name it will not create: a consumer asking for one fails at once
    (INVALID_TOPIC_EXCEPTION) instead of waiting for a topic that can never exist."""
    illegal = ("bad name!", "..", "x" * 250)
    missing = topic_name("missing")
    response = metadata_v13(client, *illegal, missing)
    assert [(t.name, t.error_code, t.partitions) for t in response.topics] == [
        *((name, ErrorCode.invalid_topic_exception, ()) for name in illegal),
        (missing, ErrorCode.unknown_topic_or_partition, ()),
    ]


@pytest.mark.parametrize("version", [17, 18])
def test_fetch_v17_v18_by_topic_id(client: WireClient, version: int) -> None:
    name, topic_id = ready_topic(client)
    produce(client, name, 3)
    response = fetch(client, version, topic_id, 0)
    assert (response.error_code, schema.millis(response.throttle_time)) == (ErrorCode.none, 0)
    assert response.session_id > 0 and response.node_endpoints == ()
    [topic] = response.responses
    assert topic.topic_id == topic_id
    [part] = topic.partitions
    assert (part.error_code, part.high_watermark, part.last_stable_offset, part.log_start_offset) == (
        ErrorCode.none, 3, 3, 0
    )
    assert part.preferred_read_replica == -1 and part.aborted_transactions is None
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (-1, -1)
    assert [header.base_offset for header, _ in iter_batches(part.records)] == [0]
    unknown = fetch(client, version, uuid.uuid4(), 0)
    assert unknown.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id


@pytest.mark.parametrize("version", [10, 11])
def test_list_offsets_v10_v11_special_timestamps(client: WireClient, version: int) -> None:
    name, _ = ready_topic(client)
    produce(client, name, 4)
    earliest, latest, max_ts, local, tiered = list_offsets(
        client, version, name, EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED
    )
    assert (earliest.error_code, earliest.offset, earliest.timestamp) == (ErrorCode.none, 0, -1)
    assert (latest.error_code, latest.offset) == (ErrorCode.none, 4)
    # The batch's records share one timestamp: the first of them carries the max (Kafka's answer since 3.7).
    assert (max_ts.error_code, max_ts.offset) == (ErrorCode.none, 0) and max_ts.timestamp > 0
    # No tiered storage (Kafka's answer for a topic without remote.storage.enable): the earliest local offset is the
    # log start, nothing is tiered.
    assert (local.error_code, local.offset, local.leader_epoch) == (ErrorCode.none, 0, earliest.leader_epoch)
    assert (tiered.error_code, tiered.offset, tiered.timestamp, tiered.leader_epoch) == (ErrorCode.none, -1, -1, -1)
    [pending] = list_offsets(client, version, name, EARLIEST_PENDING_UPLOAD)
    if version >= 11:
        assert (pending.error_code, pending.offset, pending.leader_epoch) == (ErrorCode.none, -1, -1)
    else:
        assert (pending.error_code, pending.offset) == (ErrorCode.unsupported_version, -1)
    [by_time] = list_offsets(client, version, name, 0)
    assert (by_time.error_code, by_time.offset) == (ErrorCode.none, 0)


def test_find_coordinator_v6_group_and_share_keys(client: WireClient, kafka: BrokerProcess) -> None:
    group = topic_name("g42")
    [found] = eventually(
        lambda: call(client, 10, 6, key_type=0, coordinator_keys=(group,)).coordinators,
        until=lambda got: got[0].error_code != ErrorCode.coordinator_not_available,
        timeout=15, what=f"a coordinator for {group}",
    )
    assert (found.key, found.error_code, found.host, found.port) == (group, ErrorCode.none, "127.0.0.1", kafka.port)
    share_key = f"{group}:{uuid.uuid4()}:0"
    [share] = call(client, 10, 6, key_type=2, coordinator_keys=(share_key,)).coordinators
    assert (share.key, share.error_code, share.node_id, share.host, share.port) == (
        share_key, ErrorCode.invalid_request, -1, "", -1
    )
    [old] = call(client, 10, 5, key_type=2, coordinator_keys=(share_key,)).coordinators
    assert old.error_code == ErrorCode.invalid_request


def test_offset_commit_and_fetch_v10_by_topic_id(client: WireClient) -> None:
    _, topic_id = ready_topic(client, partitions=2)
    group = topic_name("g42")
    eventually(
        lambda: call(client, 10, 6, key_type=0, coordinator_keys=(group,)).coordinators[0],
        until=lambda got: got.error_code == ErrorCode.none, timeout=15, what=f"a coordinator for {group}",
    )
    unknown_id = uuid.uuid4()
    topic_cls = entity(8, 10, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")

    def parts(*offsets: int) -> tuple[Any, ...]:
        return tuple(
            schema.build(part_cls, partition_index=i, committed_offset=o, committed_leader_epoch=-1,
                         committed_metadata="m")
            for i, o in enumerate(offsets)
        )

    # A consumer that assigns its partitions itself commits with no generation and no member (Kafka 4.2: v10).
    committed = call(
        client, 8, 10, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(schema.build(topic_cls, topic_id=topic_id, partitions=parts(5, 7)),
                schema.build(topic_cls, topic_id=unknown_id, partitions=parts(1))),
    )
    assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in committed.topics] == [
        (topic_id, [(0, ErrorCode.none), (1, ErrorCode.none)]),
        (unknown_id, [(0, ErrorCode.unknown_topic_id)]),
    ]

    group_cls = entity(9, 10, "groups")
    fetch_topic_cls = schema.field_entity(group_cls, "topics")

    def offsets(topics: tuple[Any, ...] | None) -> Any:
        response = call(client, 9, 10, require_stable=True, groups=(
            schema.build(group_cls, group_id=group, member_id=None, member_epoch=-1, topics=topics),
        ))
        [answer] = response.groups
        assert (answer.group_id, answer.error_code) == (group, ErrorCode.none)
        return {t.topic_id: [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in t.partitions]
                for t in answer.topics}

    asked = offsets((schema.build(fetch_topic_cls, topic_id=topic_id, partition_indexes=(0, 1)),
                     schema.build(fetch_topic_cls, topic_id=unknown_id, partition_indexes=(3,))))
    assert asked == {
        topic_id: [(0, 5, "m", ErrorCode.none), (1, 7, "m", ErrorCode.none)],
        unknown_id: [(3, -1, "", ErrorCode.unknown_topic_id)],
    }
    # Every committed topic (the admin's listConsumerGroupOffsets): named by id.
    assert offsets(None) == {topic_id: [(0, 5, "m", ErrorCode.none), (1, 7, "m", ErrorCode.none)]}


# ---------------------------------------------------------------------------------------------- admin client
def describe_topic_partitions(client: WireClient, topics: tuple[str, ...], limit: int,
                              cursor: tuple[str, int] | None = None) -> Any:
    """DescribeTopicPartitions v0 as Kafka 4.2's admin sends it (``describeTopics``)."""
    request_cls = entity(75, 0)
    return call(
        client, 75, 0,
        topics=tuple(schema.build(schema.field_entity(request_cls, "topics"), name=t) for t in topics),
        response_partition_limit=limit,
        cursor=None if cursor is None else schema.build(
            schema.field_entity(request_cls, "cursor"), topic_name=cursor[0], partition_index=cursor[1]
        ),
    )


def test_describe_topic_partitions_pages_by_cursor(client: WireClient) -> None:
    first, first_id = ready_topic(client, partitions=5)
    second, second_id = ready_topic(client, partitions=3)
    missing = topic_name("missing")
    named = tuple(sorted((first, second, missing)))
    pages: list[list[tuple[str, list[int]]]] = []
    cursor: tuple[str, int] | None = None
    seen: dict[str, Any] = {}
    while True:
        # The admin asks again for the topics not yet fully described, from the cursor on.
        response = describe_topic_partitions(client, named, 3, cursor)
        assert schema.millis(response.throttle_time) == 0
        pages.append([(t.name, [p.partition_index for p in t.partitions]) for t in response.topics])
        for topic in response.topics:
            seen[topic.name] = topic
        if response.next_cursor is None:
            break
        cursor = (response.next_cursor.topic_name, response.next_cursor.partition_index)
    # Three partitions a page, the topics in name order, a page ending inside a topic or at the start of the next;
    # the topic not found is answered once, on the page that reaches it (the last: "missing-" sorts after "j42-").
    sizes = {first: 5, second: 3}
    flat = [(t, i) for t in sorted(sizes) for i in range(sizes[t])]
    expected: list[list[tuple[str, list[int]]]] = []
    for start in range(0, len(flat), 3):
        page: dict[str, list[int]] = {}
        for topic, index in flat[start:start + 3]:
            page.setdefault(topic, []).append(index)
        expected.append(list(page.items()))
    expected[-1].append((missing, []))
    assert pages == expected
    # kio decodes the zero uuid Kafka sends for "no topic id" as None.
    assert seen[missing].error_code == ErrorCode.unknown_topic_or_partition and seen[missing].topic_id is None
    for name, topic_id in ((first, first_id), (second, second_id)):
        topic = seen[name]
        assert (topic.error_code, topic.topic_id, topic.is_internal) == (ErrorCode.none, topic_id, False)
        assert topic.topic_authorized_operations == authorized_operations.TOPIC
        for part in topic.partitions:
            assert part.error_code == ErrorCode.none and part.leader_id >= 0 and part.leader_epoch >= 0
            assert part.replica_nodes == part.isr_nodes == (part.leader_id,)
            assert part.eligible_leader_replicas == () and part.last_known_elr == () and part.offline_replicas == ()

    # Every topic (an empty list): the internal and the new ones, nothing refused; a cursor outside a named list
    # or a negative cursor partition is INVALID_REQUEST.
    every = describe_topic_partitions(client, (), 2000)
    names = [t.name for t in every.topics]
    assert names == sorted(names) and {first, second} <= set(names) and missing not in names
    assert every.next_cursor is None
    bad = describe_topic_partitions(client, (first,), 10, cursor=(second, 0))
    assert [(t.name, t.error_code, t.partitions) for t in bad.topics] == [(first, ErrorCode.invalid_request, ())]
    negative = describe_topic_partitions(client, (first,), 10, cursor=(first, -1))
    assert negative.topics[0].error_code == ErrorCode.invalid_request


def test_describe_cluster_v2_with_fenced_brokers(client: WireClient, kafka: BrokerProcess) -> None:
    response = call(client, 60, 2, include_cluster_authorized_operations=False, endpoint_type=1,
                    include_fenced_brokers=True)
    assert (response.error_code, response.error_message, response.endpoint_type) == (ErrorCode.none, None, 1)
    [broker] = response.brokers
    assert (broker.host, broker.port, broker.is_fenced) == ("127.0.0.1", kafka.port, False)
    assert response.controller_id == broker.broker_id and response.cluster_id
    # As Kafka's AuthHelper: the controllers are a known type a broker does not serve, any other byte an unknown
    # type; the refusal carries the code and message alone (no cluster id, the schema's endpoint type).
    controllers = call(client, 60, 2, include_cluster_authorized_operations=False, endpoint_type=2,
                       include_fenced_brokers=False)
    assert (controllers.error_code, controllers.error_message) == (
        ErrorCode.mismatched_endpoint_type,
        "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER",
    )
    assert (controllers.cluster_id, controllers.endpoint_type, controllers.brokers) == ("", 1, ())
    for unknown in (0, 3):
        refused = call(client, 60, 2, include_cluster_authorized_operations=False, endpoint_type=unknown,
                       include_fenced_brokers=False)
        assert (refused.error_code, refused.error_message) == (
            ErrorCode.unsupported_endpoint_type, f"Unsupported endpoint type {unknown}"
        )


def test_describe_groups_v6_unknown_group(client: WireClient) -> None:
    group = topic_name("nogroup")
    eventually(
        lambda: call(client, 10, 6, key_type=0, coordinator_keys=(group,)).coordinators[0],
        until=lambda got: got.error_code == ErrorCode.none, timeout=15, what=f"a coordinator for {group}",
    )
    [v6] = call(client, 15, 6, groups=(group,), include_authorized_operations=False).groups
    assert (v6.group_id, v6.error_code, v6.error_message) == (group, ErrorCode.group_id_not_found,
                                                               f"Group {group} not found.")
    assert v6.members == ()
    [v5] = call(client, 15, 5, groups=(group,), include_authorized_operations=False).groups
    assert (v5.group_id, v5.error_code, v5.group_state) == (group, ErrorCode.none, "Dead")


def test_fetch_v18_says_where_a_moved_leader_is(broker_factory: Callable[..., BrokerProcess]) -> None:
    """KIP-951: a fenced fetch carries the current leader and its endpoint, so the consumer goes straight there."""
    first = broker_factory()
    with WireClient(first.port) as client:
        name, topic_id = ready_topic(client)
        old_epoch = metadata_v13(client, name).topics[0].partitions[0].leader_epoch
    assert first.stop() == 0, first.log_text()
    second = broker_factory(data_dir=first.data_dir)
    with WireClient(second.port) as client:
        new_epoch = eventually(
            lambda: metadata_v13(client, name).topics[0].partitions[0],
            until=lambda p: p.leader_id >= 0 and p.leader_epoch > old_epoch, timeout=15, what="a new leader epoch",
        ).leader_epoch
        for version in (16, 18):
            response = fetch(client, version, topic_id, 0, leader_epoch=old_epoch)
            [part] = response.responses[0].partitions
            assert part.error_code == ErrorCode.fenced_leader_epoch
            assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (second.node_id, new_epoch)
            [endpoint] = response.node_endpoints
            assert (endpoint.node_id, endpoint.host, endpoint.port, endpoint.rack) == (
                second.node_id, "127.0.0.1", second.port, None
            )
