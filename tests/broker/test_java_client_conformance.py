"""What the Java Kafka tools and Spark's Kafka source send, at the versions a Kafka 3.6-4.0 Java client picks
against this broker, in the order those tools send it, with every response field the Java client reads checked.

No Java client can be installed here, so each test replays one tool's conversation with raw kio requests:
the console producer (idempotent by default since Kafka 3.0), the console consumer in a group, kafka-topics,
kafka-configs, kafka-consumer-groups, kafka-metadata-quorum / kafka-features, and Spark's source (assign, seek by
ListOffsets, poll with either isolation level, position validation by OffsetForLeaderEpoch after a leader epoch
bump). Java is strict about null vs empty, -1 sentinels and per-partition vs top-level errors, so those are
asserted exactly. kio decodes Kafka's -1 "no timestamp" as None and durations as timedeltas. The requests, as the
Java client builds them, are ``tests/broker/java_requests.py``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from broker import authorized_operations
from testkit.node_process import BrokerProcess, WireClient, start_broker
from tests.broker.java_requests import (
    BROKER_RESOURCE,
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    EARLIEST,
    JAVA_SOFTWARE,
    LATEST,
    MAX_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TOPIC_RESOURCE,
    alter_configs,
    describe_configs,
    fetch,
    find_coordinator,
    join,
    list_offsets,
    metadata,
    offset_fetch,
    one_partition,
    produce,
    records,
    wait_for_leader,
)
from tests.broker.kafka_clients import call, entity, topic_name
from tests.topics import create_topic
from wire import codec, schema
from wire.api_versions import API_VERSIONS, METADATA_VERSION
from wire.record_batch import Record, build_batch, iter_batches


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("java-conformance"))
    try:
        yield process
    finally:
        code = process.stop()
    assert code == 0, process.log_text()


@pytest.fixture
def client(kafka: BrokerProcess, wire: Callable[[int], WireClient]) -> WireClient:
    return wire(kafka.port)


def test_api_versions_as_java_3_and_4_clients_negotiate_it(client: WireClient) -> None:
    # A Kafka 4 client opens with ApiVersions v4: every feature (kraft.version too), with transaction.version and
    # group.version ranges starting at 0, which only v4 may carry (KAFKA-17492).
    client.send(schema.build(entity(18, 4), client_software_name="apache-kafka-java", client_software_version="4.2.0"))
    _, v4 = client.receive(18, 4)
    assert v4.error_code == ErrorCode.none
    assert {f.name: (f.min_version, f.max_version) for f in v4.supported_features} == {
        "metadata.version": (7, 14), "transaction.version": (0, 2), "group.version": (0, 1), "share.version": (0, 1),
        "kraft.version": (0, 1)}
    assert {f.name: f.max_version_level for f in v4.finalized_features} == {
        "metadata.version": 14, "transaction.version": 2, "group.version": 1, "share.version": 1}

    # ApiVersions answers with response header v0 even at flexible v3 (no header tagged fields), which Java
    # parses before it knows any version: correlation id, then straight into the body's error code.
    correlation_id = client.send(schema.build(entity(18, 3), **JAVA_SOFTWARE))
    frame = client.read_frame()
    assert frame[:4] == correlation_id.to_bytes(4, "big") and frame[4:6] == b"\x00\x00"
    _, response = codec.decode_response(18, 3, frame)
    assert response.error_code == ErrorCode.none
    assert frame[6] == len(response.api_keys) + 1  # compact array length right after the error code
    # Other flexible responses carry header v1: one (empty) tagged-field byte after the correlation id, here
    # followed by Metadata v12's throttle time (0) and the compact array of our one broker (length + 1).
    correlation_id = client.send(schema.build(entity(3, 12), topics=(), allow_auto_topic_creation=False))
    frame = client.read_frame()
    assert frame[:4] == correlation_id.to_bytes(4, "big")
    assert (frame[4], frame[5:9], frame[9]) == (0, bytes(4), 2)
    assert schema.millis(response.throttle_time) == 0
    served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert served == {
        key: (API_VERSIONS[key].min_version, API_VERSIONS[key].max_version) for key in served
    }
    # What a Java 3.6+ client needs from us, at versions it can pick.
    for key, version in {0: 9, 1: 15, 2: 8, 3: 12, 8: 8, 9: 8, 10: 4, 11: 9, 12: 4, 13: 5, 14: 5, 15: 5, 16: 5,
                         19: 7, 20: 6, 22: 4, 23: 4, 32: 4, 37: 3, 42: 2, 44: 1, 47: 0, 55: 1, 60: 1}.items():
        assert key in served and served[key][0] <= version <= served[key][1], (key, served.get(key))
    # KIP-584 features as a real broker reports them: kafka-features and Java admin read metadata.version.
    [supported] = response.supported_features
    assert (supported.name, supported.min_version, supported.max_version) == (
        "metadata.version", METADATA_VERSION.min_version, METADATA_VERSION.max_version
    )
    finalized = next(f for f in response.finalized_features if f.name == "metadata.version")
    assert (finalized.min_version_level, finalized.max_version_level) == (
        METADATA_VERSION.finalized_level, METADATA_VERSION.finalized_level
    )
    assert supported.min_version <= finalized.max_version_level <= supported.max_version
    assert response.finalized_features_epoch >= 0
    assert response.zk_migration_ready is False
    # v0-v2 have none of these fields, and a bad client software name is INVALID_REQUEST (KIP-511).
    assert call(client, 18, 2).error_code == ErrorCode.none
    bad = call(client, 18, 3, client_software_name="bad name!", client_software_version="1")
    assert bad.error_code == ErrorCode.invalid_request


def test_console_producer_idempotent_sequence(client: WireClient) -> None:
    topic = topic_name("console-producer")
    call(client, 18, 3, **JAVA_SOFTWARE)
    # The producer asks for the topic with auto-creation on; the first answer is UNKNOWN_TOPIC_OR_PARTITION (Kafka 4).
    first = metadata(client, topic, auto_create=True)
    [created] = first.topics
    assert created.name == topic and created.error_code in (ErrorCode.unknown_topic_or_partition, ErrorCode.none)
    assert created.topic_authorized_operations == authorized_operations.OMITTED
    assert first.cluster_id and first.controller_id == first.brokers[0].node_id
    found = wait_for_leader(client, topic)
    assert found.topic_id not in (None, uuid_zero) and found.is_internal is False
    [part] = found.partitions
    assert part.leader_epoch >= 0 and part.replica_nodes == part.isr_nodes == (part.leader_id,)
    assert part.offline_replicas == ()

    # enable.idempotence=true: a producer id first, then sequenced batches.
    init = call(client, 22, 4, transactional_id=None, transaction_timeout=2**31 - 1, producer_id=-1, producer_epoch=-1)
    assert (init.error_code, schema.millis(init.throttle_time)) == (ErrorCode.none, 0)
    assert init.producer_id >= 0 and init.producer_epoch >= 0
    ids = {"producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
    sent = produce(client, topic, 0, records(3, base_sequence=0, **ids))
    assert (sent.error_code, sent.base_offset, sent.log_start_offset) == (ErrorCode.none, 0, 0)
    assert sent.log_append_time is None  # -1: CreateTime topic
    assert sent.record_errors == () and sent.error_message is None
    nxt = produce(client, topic, 0, records(2, start=3, base_sequence=3, **ids))
    assert (nxt.error_code, nxt.base_offset) == (ErrorCode.none, 3)
    # A retry after a lost response is acknowledged with the original offset, not appended again.
    again = produce(client, topic, 0, records(2, start=3, base_sequence=3, **ids))
    assert (again.error_code, again.base_offset) == (ErrorCode.none, 3)
    gap = produce(client, topic, 0, records(1, base_sequence=9, **ids))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    assert list_offsets(client, topic, LATEST).offset == 5
    # Rejected batches: per-partition error codes with a message, -1 sentinels, no record errors.
    corrupt = bytearray(records(2))
    corrupt[-1] ^= 0xFF
    bad_crc = produce(client, topic, 0, bytes(corrupt))
    assert (bad_crc.error_code, bad_crc.base_offset, bad_crc.record_errors) == (ErrorCode.corrupt_message, -1, ())
    assert topic in (bad_crc.error_message or "")
    too_large = produce(client, topic, 0, build_batch([Record(b"k", b"x" * 1_100_000)]))
    assert (too_large.error_code, too_large.base_offset) == (ErrorCode.message_too_large, -1)
    # A partition the topic does not have: per-partition error with Kafka's -1 sentinels.
    missing = produce(client, topic, 7, records(1))
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    assert (missing.base_offset, missing.log_start_offset, missing.log_append_time) == (-1, -1, None)

    # A LogAppendTime topic answers with the broker's append time.
    stamped = topic_name("log-append-time")
    created = create_topic(client, stamped, config={"message.timestamp.type": "LogAppendTime"})
    assert created.error_code == ErrorCode.none
    wait_for_leader(client, stamped)
    before = time.time()
    appended = produce(client, stamped, 0, records(1))
    assert appended.error_code == ErrorCode.none and appended.log_append_time is not None
    assert before - 5 <= appended.log_append_time.timestamp() <= time.time() + 5


def test_console_consumer_group_sequence(client: WireClient) -> None:
    topic, group = topic_name("console-consumer"), topic_name("console-group")
    assert create_topic(client, topic).error_code == ErrorCode.none
    topic_id = wait_for_leader(client, topic).topic_id
    assert produce(client, topic, 0, records(4)).error_code == ErrorCode.none

    # FindCoordinator v4 batches keys; every key gets its own entry.
    found = call(client, 10, 4, key_type=0, coordinator_keys=(group, "another-group"))
    assert [c.key for c in found.coordinators] == [group, "another-group"]
    for coordinator in found.coordinators:
        assert (coordinator.error_code, coordinator.error_message) == (ErrorCode.none, None)
        assert coordinator.node_id >= 0 and coordinator.host == "127.0.0.1" and coordinator.port == client_port(client)

    # JoinGroup v9: first MEMBER_ID_REQUIRED with the id to use, then the real join.
    required = join(client, group, topic)
    assert required.error_code == ErrorCode.member_id_required and required.member_id
    assert (required.generation_id, required.protocol_type, required.protocol_name) == (-1, None, None)
    assert required.leader == "" and required.members == ()
    joined = join(client, group, topic, required.member_id)
    member = joined.member_id
    assert joined.error_code == ErrorCode.none and member == required.member_id
    assert (joined.protocol_type, joined.protocol_name, joined.leader) == ("consumer", "range", member)
    assert joined.generation_id >= 1 and joined.skip_assignment is False
    assert [m.member_id for m in joined.members] == [member]

    assignment = b"\x00\x03\x00\x00\x00\x01" + len(topic).to_bytes(2, "big") + topic.encode() + bytes(8)
    # SyncGroup v5 must name the protocol the group chose.
    wrong = call(
        client, 14, 5, group_id=group, generation_id=joined.generation_id, member_id=member,
        group_instance_id=None, protocol_type="consumer", protocol_name="roundrobin", assignments=(),
    )
    assert (wrong.error_code, wrong.assignment) == (ErrorCode.inconsistent_group_protocol, b"")
    synced = call(
        client, 14, 5, group_id=group, generation_id=joined.generation_id, member_id=member,
        group_instance_id=None, protocol_type="consumer", protocol_name="range",
        assignments=(schema.build(entity(14, 5, "assignments"), member_id=member, assignment=assignment),),
    )
    assert (synced.error_code, synced.protocol_type, synced.protocol_name) == (ErrorCode.none, "consumer", "range")
    assert synced.assignment == assignment

    # No committed offset yet: -1, leader epoch -1, empty metadata, no error; then auto.offset.reset=latest.
    fetched = offset_fetch(client, {group: {topic: (0,)}, "another-group": None})
    assert set(fetched) == {group, "another-group"}
    assert fetched["another-group"].error_code == ErrorCode.none and fetched["another-group"].topics == ()
    [committed] = fetched[group].topics[0].partitions
    assert (committed.committed_offset, committed.committed_leader_epoch, committed.metadata) == (-1, -1, "")
    assert committed.error_code == ErrorCode.none
    earliest = list_offsets(client, topic, EARLIEST)
    latest = list_offsets(client, topic, LATEST)
    assert (earliest.error_code, earliest.offset, earliest.timestamp) == (ErrorCode.none, 0, -1)
    assert (latest.error_code, latest.offset, latest.timestamp) == (ErrorCode.none, 4, -1)
    assert earliest.leader_epoch >= 0 and latest.leader_epoch >= 0

    # Fetch v15: a full fetch (session 0, epoch 0) creates a session; then incremental fetches.
    full = fetch(client, topic_id, 0)
    assert full.session_id > 0 and schema.millis(full.throttle_time) == 0
    assert full.responses[0].topic_id == topic_id
    part = one_partition(full)
    assert (part.error_code, part.high_watermark, part.last_stable_offset, part.log_start_offset) == (
        ErrorCode.none, 4, 4, 0
    )
    assert part.aborted_transactions is None and part.preferred_read_replica == -1
    assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (-1, -1)
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (-1, -1)
    assert [header.base_offset for header, _ in iter_batches(part.records)] == [0]
    started = time.monotonic()
    idle = fetch(client, topic_id, 4, session_id=full.session_id, session_epoch=1, max_wait_ms=300)
    assert (idle.error_code, idle.session_id, idle.responses) == (ErrorCode.none, full.session_id, ())
    assert time.monotonic() - started >= 0.25  # an incremental fetch with nothing new waits max.wait.ms
    assert produce(client, topic, 0, records(1, start=4)).error_code == ErrorCode.none
    more = one_partition(fetch(client, topic_id, 4, session_id=full.session_id, session_epoch=2, partitions=False))
    assert (more.partition_index, more.high_watermark) == (0, 5)
    assert [header.base_offset for header, _ in iter_batches(more.records)] == [4]

    heartbeat = call(client, 12, 4, group_id=group, generation_id=joined.generation_id, member_id=member,
                     group_instance_id=None)
    assert (heartbeat.error_code, schema.millis(heartbeat.throttle_time)) == (ErrorCode.none, 0)
    commit_topic = entity(8, 8, "topics")
    committed_part = schema.build(
        schema.field_entity(commit_topic, "partitions"), partition_index=0, committed_offset=5,
        committed_leader_epoch=latest.leader_epoch, committed_metadata="",
    )
    commit = call(
        client, 8, 8, group_id=group, generation_id_or_member_epoch=joined.generation_id, member_id=member,
        group_instance_id=None, topics=(schema.build(commit_topic, name=topic, partitions=(committed_part,)),),
    )
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in commit.topics] == [
        (topic, [(0, ErrorCode.none)])
    ]
    [after] = offset_fetch(client, {group: {topic: (0,)}})[group].topics[0].partitions
    assert (after.committed_offset, after.committed_leader_epoch, after.metadata) == (5, latest.leader_epoch, "")

    left = call(
        client, 13, 5, group_id=group,
        members=(schema.build(entity(13, 5, "members"), member_id=member, group_instance_id=None,
                             reason="the consumer is being closed"),),
    )
    assert left.error_code == ErrorCode.none
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in left.members] == [
        (member, None, ErrorCode.none)
    ]
    stale = call(client, 12, 4, group_id=group, generation_id=joined.generation_id, member_id=member,
                 group_instance_id=None)
    assert stale.error_code == ErrorCode.unknown_member_id


def client_port(client: WireClient) -> int:
    return int(client.sock.getpeername()[1])


def test_kafka_topics_create_describe_alter_delete(client: WireClient) -> None:
    topic = topic_name("kafka-topics")
    # kafka-topics --create --partitions 2 --config retention.ms=3600000 --config cleanup.policy=delete
    configs = {"retention.ms": "3600000", "cleanup.policy": "delete"}
    created = create_topic(client, topic, 2, configs, replication_factor=-1)
    assert (created.error_code, created.error_message, created.topic_config_error_code) == (ErrorCode.none, None, 0)
    assert created.topic_id not in (None, uuid_zero)
    assert (created.num_partitions, created.replication_factor) == (2, 1)
    configs = {c.name: c for c in created.configs}
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("3600000", DYNAMIC_TOPIC_CONFIG)
    assert configs["segment.bytes"].config_source == DEFAULT_CONFIG and configs["segment.bytes"].read_only is False
    again = create_topic(client, topic, 2, replication_factor=-1, check=False)
    assert again.error_code == ErrorCode.topic_already_exists and again.error_message
    assert (again.num_partitions, again.replication_factor, again.configs) == (-1, -1, None)

    # --describe: Metadata for every topic (null list), then DescribeConfigs with synonyms for the topic.
    listing = call(client, 3, 12, topics=None, allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False)
    described = {t.name: t for t in listing.topics}[topic]
    assert described.topic_id == created.topic_id and [p.partition_index for p in described.partitions] == [0, 1]
    topic_configs = describe_configs(client, TOPIC_RESOURCE, topic, None)
    retention = topic_configs["retention.ms"]
    assert (retention.value, retention.config_source, retention.read_only, retention.is_sensitive) == (
        "3600000", DYNAMIC_TOPIC_CONFIG, False, False
    )
    assert retention.synonyms[0].name == "retention.ms" and retention.synonyms[0].source == DYNAMIC_TOPIC_CONFIG
    assert all(s.source == DEFAULT_CONFIG for s in retention.synonyms[1:]) and len(retention.synonyms) >= 2
    assert retention.documentation is None
    segment = topic_configs["segment.bytes"]
    assert segment.config_source == DEFAULT_CONFIG and segment.synonyms[0].name == "log.segment.bytes"

    # --alter --partitions 4 (CreatePartitions v3), and shrinking is refused per topic.
    topics_cls = entity(37, 3, "topics")
    grown = call(client, 37, 3, topics=(schema.build(topics_cls, name=topic, count=4, assignments=None),),
                 timeout=30_000, validate_only=False)
    assert [(r.name, r.error_code, r.error_message) for r in grown.results] == [(topic, ErrorCode.none, None)]
    wait_for_leader(client, topic, partitions=4)
    shrunk = call(client, 37, 3, topics=(schema.build(topics_cls, name=topic, count=3, assignments=None),),
                  timeout=30_000, validate_only=False)
    assert shrunk.results[0].error_code == ErrorCode.invalid_partitions and shrunk.results[0].error_message

    # --delete by name (DeleteTopics v6): the answer carries the topic id; a second delete is per-topic unknown.
    deleted = call(client, 20, 6, topics=(schema.build(entity(20, 6, "topics"), name=topic, topic_id=uuid_zero),),
                   timeout=30_000)
    assert [(r.name, r.topic_id, r.error_code) for r in deleted.responses] == [
        (topic, created.topic_id, ErrorCode.none)
    ]
    gone = call(client, 20, 6, topics=(schema.build(entity(20, 6, "topics"), name=topic, topic_id=uuid_zero),),
                timeout=30_000)
    assert gone.responses[0].error_code == ErrorCode.unknown_topic_or_partition
    [unknown] = metadata(client, topic).topics
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition and unknown.topic_id in (None, uuid_zero)


def test_kafka_configs_incremental_alter_and_describe(client: WireClient, kafka: BrokerProcess) -> None:
    topic = topic_name("kafka-configs")
    assert create_topic(client, topic, config={"retention.ms": "3600000"}).error_code == ErrorCode.none
    broker = str(kafka.node_id)
    week_plus = "604800001"
    # kafka-configs --alter --entity-type brokers --entity-name 0 --add-config log.retention.ms=...
    set_broker = alter_configs(client, BROKER_RESOURCE, broker, ("log.retention.ms", 0, week_plus))
    assert (set_broker.error_code, set_broker.error_message) == (ErrorCode.none, None)
    try:
        broker_configs = describe_configs(client, BROKER_RESOURCE, broker, ("log.retention.ms",))
        entry = broker_configs["log.retention.ms"]
        assert (entry.value, entry.config_source) == (week_plus, DYNAMIC_BROKER_CONFIG)
        assert (entry.synonyms[0].name, entry.synonyms[0].value, entry.synonyms[0].source) == (
            "log.retention.ms", week_plus, DYNAMIC_BROKER_CONFIG
        )
        # --delete-config retention.ms on the topic: it now inherits the broker's dynamic value.
        deleted = alter_configs(client, TOPIC_RESOURCE, topic, ("retention.ms", 1, None))
        assert deleted.error_code == ErrorCode.none
        retention = describe_configs(client, TOPIC_RESOURCE, topic, ("retention.ms",))["retention.ms"]
        assert (retention.value, retention.config_source) == (week_plus, DYNAMIC_BROKER_CONFIG)
        assert [s.source for s in retention.synonyms][:1] == [DYNAMIC_BROKER_CONFIG]
        set_topic = alter_configs(client, TOPIC_RESOURCE, topic, ("retention.ms", 0, "7200000"))
        assert set_topic.error_code == ErrorCode.none
        retention = describe_configs(client, TOPIC_RESOURCE, topic, ("retention.ms",))["retention.ms"]
        assert (retention.value, retention.config_source) == ("7200000", DYNAMIC_TOPIC_CONFIG)
        assert [s.source for s in retention.synonyms][:2] == [DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG]
    finally:
        reset = alter_configs(client, BROKER_RESOURCE, broker, ("log.retention.ms", 1, None))
        assert reset.error_code == ErrorCode.none
    # Errors are per resource, with a message naming the problem.
    bad = alter_configs(client, TOPIC_RESOURCE, topic, ("no.such.config", 0, "1"))
    assert bad.error_code == ErrorCode.invalid_config and "no.such.config" in (bad.error_message or "")
    unknown = alter_configs(client, TOPIC_RESOURCE, topic_name("absent"), ("retention.ms", 0, "1"))
    assert unknown.error_code == ErrorCode.unknown_topic_or_partition


def test_kafka_consumer_groups_describe_list_reset_delete(client: WireClient) -> None:
    topic, group = topic_name("groups-tool"), topic_name("groups-tool")
    assert create_topic(client, topic).error_code == ErrorCode.none
    wait_for_leader(client, topic)
    assert produce(client, topic, 0, records(3)).error_code == ErrorCode.none
    find_coordinator(client, group)
    member = join(client, group, topic, join(client, group, topic).member_id)
    assignment = b"\x00\x03\x00\x00\x00\x00" + bytes(4)
    call(client, 14, 5, group_id=group, generation_id=member.generation_id, member_id=member.member_id,
         group_instance_id=None, protocol_type="consumer", protocol_name="range",
         assignments=(schema.build(entity(14, 5, "assignments"), member_id=member.member_id, assignment=assignment),))

    listed = call(client, 16, 4, states_filter=("Stable",))
    assert (listed.error_code, schema.millis(listed.throttle_time)) == (ErrorCode.none, 0)
    assert (group, "consumer", "Stable") in {(g.group_id, g.protocol_type, g.group_state) for g in listed.groups}
    assert group not in {g.group_id for g in call(client, 16, 4, states_filter=("Empty",)).groups}
    # v5 (Kafka 3.7+ tools with --type): every group here is a classic one.
    classic = call(client, 16, 5, states_filter=(), types_filter=("Classic",))
    assert (group, "Stable", "classic") in {(g.group_id, g.group_state, g.group_type) for g in classic.groups}
    assert call(client, 16, 5, states_filter=(), types_filter=("consumer",)).groups == ()

    described = call(client, 15, 5, groups=(group, "no-such-group"), include_authorized_operations=False)
    live, absent = described.groups
    assert (live.error_code, live.group_id, live.group_state, live.protocol_type, live.protocol_data) == (
        ErrorCode.none, group, "Stable", "consumer", "range"
    )
    [desc] = live.members
    assert (desc.member_id, desc.group_instance_id, desc.client_host) == (member.member_id, None, "/127.0.0.1")
    assert desc.client_id == "fjord-tests" and desc.member_assignment == assignment
    assert live.authorized_operations == authorized_operations.OMITTED
    # A group this coordinator does not know: Dead, no error (kafka-consumer-groups prints "does not exist").
    assert (absent.error_code, absent.group_state, absent.members) == (ErrorCode.none, "Dead", ())
    with_ops = call(client, 15, 5, groups=(group,), include_authorized_operations=True).groups[0]
    assert with_ops.authorized_operations == authorized_operations.GROUP

    # --delete on an active group is refused; once the member left, the group and its offsets go.
    busy = call(client, 42, 2, groups_names=(group,))
    assert [(r.group_id, r.error_code) for r in busy.results] == [(group, ErrorCode.non_empty_group)]
    call(client, 13, 5, group_id=group, members=(schema.build(entity(13, 5, "members"), member_id=member.member_id,
                                                             group_instance_id=None, reason=None),))
    # --reset-offsets --to-earliest --execute: ListOffsets then a commit from outside the (now empty) group.
    earliest = list_offsets(client, topic, EARLIEST)
    commit_topic = entity(8, 8, "topics")
    reset = call(
        client, 8, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=(schema.build(commit_topic, name=topic, partitions=(schema.build(
            schema.field_entity(commit_topic, "partitions"), partition_index=0, committed_offset=earliest.offset,
            committed_leader_epoch=-1, committed_metadata=None),)),),
    )
    assert reset.topics[0].partitions[0].error_code == ErrorCode.none
    [stored] = offset_fetch(client, {group: None})[group].topics
    assert (stored.name, [(p.partition_index, p.committed_offset) for p in stored.partitions]) == (topic, [(0, 0)])
    # --delete-offsets (OffsetDelete v0) then --delete (DeleteGroups v2).
    offset_delete_topic = entity(47, 0, "topics")
    removed = call(client, 47, 0, group_id=group, topics=(schema.build(offset_delete_topic, name=topic, partitions=(
        schema.build(schema.field_entity(offset_delete_topic, "partitions"), partition_index=0),)),))
    assert removed.error_code == ErrorCode.none
    assert [(p.partition_index, p.error_code) for p in removed.topics[0].partitions] == [(0, ErrorCode.none)]
    assert offset_fetch(client, {group: None})[group].topics == ()
    deleted = call(client, 42, 2, groups_names=(group, "no-such-group"))
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        (group, ErrorCode.none), ("no-such-group", ErrorCode.group_id_not_found)
    ]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_kafka_metadata_quorum_describe_quorum_and_cluster(
    client: WireClient, kafka: BrokerProcess, version: int
) -> None:
    request_topic = entity(55, version, "topics")
    partition = schema.build(schema.field_entity(request_topic, "partitions"), partition_index=0)
    before = int(time.time() * 1000)
    quorum = call(client, 55, version,
                  topics=(schema.build(request_topic, topic_name="__cluster_metadata", partitions=(partition,)),))
    assert quorum.error_code == ErrorCode.none
    [topic] = quorum.topics
    [state] = topic.partitions
    assert (topic.topic_name, state.partition_index, state.error_code) == ("__cluster_metadata", 0, ErrorCode.none)
    assert state.leader_id == kafka.node_id and state.leader_epoch >= 0
    [voter] = state.current_voters
    assert voter.replica_id == kafka.node_id and state.observers == ()
    assert voter.log_end_offset == state.high_watermark > 0
    if version >= 1:  # the leader reports itself fetched and caught up now (the tool prints "x ms ago")
        assert voter.last_fetch_timestamp >= before and voter.last_caught_up_timestamp >= before

    cluster = call(client, 60, 1, include_cluster_authorized_operations=False, endpoint_type=1)
    assert (cluster.error_code, cluster.error_message, cluster.endpoint_type) == (ErrorCode.none, None, 1)
    assert cluster.cluster_id == metadata(client).cluster_id and cluster.controller_id == kafka.node_id
    assert [(b.broker_id, b.host, b.port, b.rack) for b in cluster.brokers] == [
        (kafka.node_id, "127.0.0.1", kafka.port, None)
    ]
    assert cluster.cluster_authorized_operations == authorized_operations.OMITTED
    asked = call(client, 60, 1, include_cluster_authorized_operations=True, endpoint_type=1)
    assert asked.cluster_authorized_operations == authorized_operations.CLUSTER
    controllers = call(client, 60, 1, include_cluster_authorized_operations=False, endpoint_type=2)
    assert controllers.error_code == ErrorCode.mismatched_endpoint_type and controllers.error_message


def test_authorized_operations_in_metadata_only_when_asked(client: WireClient) -> None:
    topic = topic_name("ops")
    assert create_topic(client, topic).error_code == ErrorCode.none
    wait_for_leader(client, topic)
    [plain] = metadata(client, topic).topics
    assert plain.topic_authorized_operations == authorized_operations.OMITTED
    [asked] = metadata(client, topic, ops=True).topics
    assert asked.topic_authorized_operations == authorized_operations.TOPIC
    [missing] = metadata(client, topic_name("absent"), ops=True).topics
    assert missing.error_code == ErrorCode.unknown_topic_or_partition
    # v8-v10 also carry the cluster's operations (v11 moved them to DescribeCluster).
    v10 = call(client, 3, 10, topics=(), allow_auto_topic_creation=False, include_cluster_authorized_operations=True,
               include_topic_authorized_operations=False)
    assert v10.cluster_authorized_operations == authorized_operations.CLUSTER
    v10 = call(client, 3, 10, topics=(), allow_auto_topic_creation=False,
               include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    assert v10.cluster_authorized_operations == authorized_operations.OMITTED


@pytest.mark.parametrize("isolation", [READ_UNCOMMITTED, READ_COMMITTED])
def test_spark_source_assign_seek_and_poll(client: WireClient, isolation: int) -> None:
    topic = topic_name("spark")
    assert create_topic(client, topic, 2).error_code == ErrorCode.none
    described = wait_for_leader(client, topic, partitions=2)
    epoch = described.partitions[0].leader_epoch
    base = int(time.time() * 1000) - 60_000
    batch = build_batch([Record(b"k", b"v%d" % i, timestamp=base + i * 1000) for i in range(5)])
    assert produce(client, topic, 0, batch).error_code == ErrorCode.none

    # The admin's listOffsets: earliest, latest, max timestamp and by timestamp, with the leader epoch.
    earliest = list_offsets(client, topic, EARLIEST, leader_epoch=epoch, isolation=isolation)
    latest = list_offsets(client, topic, LATEST, leader_epoch=epoch, isolation=isolation)
    newest = list_offsets(client, topic, MAX_TIMESTAMP, leader_epoch=epoch, isolation=isolation)
    assert (earliest.offset, earliest.timestamp, earliest.leader_epoch) == (0, -1, epoch)
    assert (latest.offset, latest.timestamp, latest.leader_epoch) == (5, -1, epoch)
    assert (newest.offset, newest.timestamp, newest.leader_epoch) == (4, base + 4000, epoch)
    at = list_offsets(client, topic, base + 2500, leader_epoch=epoch, isolation=isolation)
    assert (at.error_code, at.offset, at.timestamp, at.leader_epoch) == (ErrorCode.none, 3, base + 3000, epoch)
    beyond = list_offsets(client, topic, base + 10_000, isolation=isolation)
    assert (beyond.error_code, beyond.offset, beyond.timestamp, beyond.leader_epoch) == (ErrorCode.none, -1, -1, -1)
    empty = list_offsets(client, topic, LATEST, partition=1, isolation=isolation)
    assert (empty.error_code, empty.offset) == (ErrorCode.none, 0)
    assert list_offsets(client, topic, MAX_TIMESTAMP, version=6).error_code == ErrorCode.unsupported_version
    # A stale or future leader epoch is fenced per partition; a partition the topic lacks is unknown.
    assert list_offsets(client, topic, LATEST, leader_epoch=epoch + 1).error_code == ErrorCode.unknown_leader_epoch
    assert list_offsets(client, topic, LATEST, partition=9).error_code == ErrorCode.unknown_topic_or_partition

    # poll(): read_committed gets an empty (not null) aborted-transaction list and the last stable offset.
    part = one_partition(fetch(client, described.topic_id, 2, leader_epoch=epoch, isolation=isolation))
    assert (part.error_code, part.high_watermark, part.last_stable_offset, part.log_start_offset) == (
        ErrorCode.none, 5, 5, 0
    )
    assert part.aborted_transactions == (() if isolation == READ_COMMITTED else None)
    assert part.preferred_read_replica == -1 and part.records
    future = one_partition(fetch(client, described.topic_id, 0, leader_epoch=epoch + 1, isolation=isolation))
    assert (future.error_code, future.high_watermark, future.records) == (ErrorCode.unknown_leader_epoch, -1, b"")
    beyond_end = one_partition(fetch(client, described.topic_id, 99, isolation=isolation))
    assert beyond_end.error_code == ErrorCode.offset_out_of_range and beyond_end.records == b""
    unknown = fetch(client, uuid.uuid4(), 0, isolation=isolation)
    assert one_partition(unknown).error_code == ErrorCode.unknown_topic_id


def test_position_validation_after_a_leader_epoch_bump(broker_factory: Callable[..., BrokerProcess]) -> None:
    """Spark's consumer after the partition leader changed: OffsetForLeaderEpoch v4 tells where the epoch it
    last saw ended; fetches and list-offsets with the old epoch are fenced."""
    first = broker_factory()
    topic = topic_name("epochs")
    with WireClient(first.port) as client:
        assert create_topic(client, topic).error_code == ErrorCode.none
        old_epoch = wait_for_leader(client, topic).partitions[0].leader_epoch
        assert produce(client, topic, 0, records(3)).error_code == ErrorCode.none
    assert first.stop() == 0, first.log_text()
    second = broker_factory(data_dir=first.data_dir)
    with WireClient(second.port) as client:
        described = wait_for_leader(client, topic)
        new_epoch = described.partitions[0].leader_epoch
        assert new_epoch > old_epoch
        assert produce(client, topic, 0, records(2, start=3)).error_code == ErrorCode.none

        def end_of(epoch: int, current: int) -> Any:
            topic_cls = entity(23, 4, "topics")
            part = schema.build(schema.field_entity(topic_cls, "partitions"), partition=0,
                               current_leader_epoch=current, leader_epoch=epoch)
            response = call(client, 23, 4, replica_id=-1, topics=(schema.build(topic_cls, topic=topic,
                                                                              partitions=(part,)),))
            assert schema.millis(response.throttle_time) == 0 and response.topics[0].topic == topic
            return response.topics[0].partitions[0]

        ended = end_of(old_epoch, new_epoch)
        assert (ended.error_code, ended.partition, ended.leader_epoch, ended.end_offset) == (
            ErrorCode.none, 0, old_epoch, 3
        )
        current = end_of(new_epoch, new_epoch)
        assert (current.leader_epoch, current.end_offset) == (new_epoch, 5)
        future = end_of(new_epoch + 5, -1)
        assert (future.error_code, future.leader_epoch, future.end_offset) == (ErrorCode.none, -1, -1)
        fenced = end_of(old_epoch, old_epoch)
        assert (fenced.error_code, fenced.leader_epoch, fenced.end_offset) == (ErrorCode.fenced_leader_epoch, -1, -1)

        assert list_offsets(client, topic, EARLIEST).leader_epoch == old_epoch
        latest = list_offsets(client, topic, LATEST, leader_epoch=new_epoch)
        assert (latest.offset, latest.leader_epoch) == (5, new_epoch)
        assert list_offsets(client, topic, LATEST, leader_epoch=old_epoch).error_code == ErrorCode.fenced_leader_epoch
        stale = one_partition(fetch(client, described.topic_id, 0, leader_epoch=old_epoch))
        assert stale.error_code == ErrorCode.fenced_leader_epoch and stale.records == b""
        # The fenced answer says where leadership is now (current_leader, a tagged field since v12).
        assert (stale.current_leader.leader_id, stale.current_leader.leader_epoch) == (second.node_id, new_epoch)
        # Batches carry the epoch they were appended in: the consumer's position takes it from there.
        part = one_partition(fetch(client, described.topic_id, 0, leader_epoch=new_epoch))
        assert [(h.base_offset, h.partition_leader_epoch) for h, _ in iter_batches(part.records)] == [
            (0, old_epoch), (3, new_epoch)
        ]
