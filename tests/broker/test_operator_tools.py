"""The operator tools around partition moves, against one real broker with real clients: ElectLeaders (43),
DescribeLogDirs (35), the replication-throttle configs kafka-reassign-partitions.sh sets and removes, and the
BROKER_LOGGER config resource (8). The election rules themselves are checked on metadata images (``elect``); the
ACL refusals are tests/broker/test_acls.py's, ElectLeaders through a cluster's remote client
tests/cluster/test_cluster_reassign.py's."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic
from kio.schema.errors import ErrorCode

from controller.decisions.leadership import elect
from metadata.cluster_records import (
    FenceBrokerRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from metadata.controller_api import ElectionType
from metadata.image import MetadataImage
from settings.endpoint import Endpoint
from settings.keys import NO_REPLICATION_TRAFFIC
from storage.metadata.record_codec import MetadataRecord
from testkit.node_process import BrokerProcess, WireClient, api_versions_request
from wire import codec, schema

ELECT_LEADERS, DESCRIBE_LOG_DIRS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, ALTER_CONFIGS = 43, 35, 32, 44, 33
BROKER_LOGGER = 8
LOGGER = "broker.handlers.configs"


# ------------------------------------------------------------------------------ the election rules, on images


def _image(leaders_and_replicas: list[tuple[int, tuple[int, ...]]], live: tuple[int, ...]) -> MetadataImage:
    """Topic ``t`` with one partition per (leader, replicas); brokers 0-2 registered, those in ``live`` unfenced."""
    topic_id = str(uuid.uuid4())
    records: list[MetadataRecord] = [TopicRecord("t", topic_id)]
    for index, (leader, replicas) in enumerate(leaders_and_replicas):
        records.append(PartitionRecord(topic_id, index, replicas, replicas, leader, 0, 0))
    for node in (0, 1, 2):
        records.append(RegisterBrokerRecord(node, 1, (Endpoint("PLAINTEXT", "127.0.0.1", 9092 + node),)))
        records.append(UnfenceBrokerRecord(node, 1) if node in live else FenceBrokerRecord(node, 1))
    return MetadataImage("c").apply(records, len(records))


def test_preferred_election_moves_to_the_first_replica_only_when_it_is_live() -> None:
    image = _image([(1, (0, 1)), (0, (0, 1)), (1, (2, 1))], live=(0, 1))
    election = elect(image, [("t", 0), ("t", 1), ("t", 2), ("t", 9)], ElectionType.PREFERRED)
    assert [r.error for r in election.results] == [
        ErrorCode.none,
        ErrorCode.election_not_needed,
        ErrorCode.preferred_leader_not_available,
        ErrorCode.unknown_topic_or_partition,
    ]
    [change] = election.records
    assert (change.partition, change.leader) == (0, 0)
    # Asked for every partition, Kafka leaves out those that need no election.
    everything = elect(image, None, ElectionType.PREFERRED)
    assert [(r.partition, r.error) for r in everything.results] == [
        (0, ErrorCode.none),
        (2, ErrorCode.preferred_leader_not_available),
    ]


def test_unclean_election_gives_an_offline_leaders_partition_a_live_replica_else_the_least_loaded_broker() -> None:
    image = _image([(2, (2, 1)), (1, (1, 0)), (2, (2,))], live=(0, 1))
    election = elect(image, [("t", 0), ("t", 1), ("t", 2)], ElectionType.UNCLEAN)
    assert [r.error for r in election.results] == [ErrorCode.none, ErrorCode.election_not_needed, ErrorCode.none]
    # t-2 has no live replica: any broker serves it from the shared storage, so it goes to the one leading the
    # fewest (broker 1 leads t-1 and now t-0), and is its only replica from then on.
    assert [(c.partition, c.leader, c.replicas) for c in election.records] == [(0, 1, None), (2, 0, (0,))]
    # With no live broker at all, nobody can lead it.
    nobody = elect(_image([(2, (2,))], live=()), [("t", 0)], ElectionType.UNCLEAN)
    assert [r.error for r in nobody.results] == [ErrorCode.eligible_leaders_not_available]
    assert nobody.records == []


# ------------------------------------------------------------------------------------- against a real broker


@pytest.fixture(scope="module")
def admin(shared_broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=15000)
    yield client
    client.close()


def _topic(admin: KafkaAdminClient, partitions: int) -> str:
    name = f"ops-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    return name


def _elect(client: WireClient, version: int, election_type: int, partitions: dict[str, list[int]] | None) -> Any:
    cls = codec.request_class(ELECT_LEADERS, version)
    topics = (
        None
        if partitions is None
        else tuple(
            schema.build_nested(cls, "topic_partitions", topic=t, partitions=tuple(p)) for t, p in partitions.items()
        )
    )
    return client.request(schema.build(cls, election_type=election_type, topic_partitions=topics, timeout=15000))


def _errors(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (t.topic, int(p.partition_id)): ErrorCode(int(p.error_code))
        for t in response.replica_election_results
        for p in t.partition_result
    }


def test_elect_leaders_with_kafka_python_and_every_version(
    shared_broker: BrokerProcess, admin: KafkaAdminClient, wire: Callable[[int], WireClient]
) -> None:
    client = wire(shared_broker.port)
    [versions] = [k for k in client.request(api_versions_request()).api_keys if k.api_key == ELECT_LEADERS]
    assert (versions.min_version, versions.max_version) == (0, 2)
    topic = _topic(admin, 2)
    response = admin.elect_leaders(ElectionType.PREFERRED, {topic: [0, 1, 7]}, raise_errors=False)
    got = {
        (t.topic, p.partition_id): ErrorCode(p.error_code)
        for t in response.replica_election_results
        for p in t.partition_result
    }
    assert got == {
        (topic, 0): ErrorCode.election_not_needed,
        (topic, 1): ErrorCode.election_not_needed,
        (topic, 7): ErrorCode.unknown_topic_or_partition,
    }
    for version in (0, 1, 2):
        unclean = _elect(client, version, ElectionType.UNCLEAN, {topic: [0], "no-such-topic": [0]})
        assert _errors(unclean) == {
            (topic, 0): ErrorCode.election_not_needed,
            ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
        }
    # Null partitions: every partition, and only those that needed an election are answered (none here).
    everything = _elect(client, 2, ElectionType.PREFERRED, None)
    assert everything.error_code == ErrorCode.none and (topic, 0) not in _errors(everything)
    # An unknown election type refuses the request as a whole (top-level code), as Kafka does.
    for partitions in ({topic: [0, 1]}, None):
        unknown = _elect(client, 2, 9, partitions)
        assert unknown.error_code == ErrorCode.invalid_request, unknown
        assert set(_errors(unknown).values()) <= {ErrorCode.invalid_request}, unknown


def _log_dirs(admin: KafkaAdminClient, topic: str) -> dict[str, dict[str, Any]]:
    [answer] = admin.describe_log_dirs({topic: [0, 1]})
    return {d["log_dir"]: d for d in answer["log_dirs"]}


def _sizes(log_dir: dict[str, Any], topic: str) -> dict[int, tuple[int, int, bool]]:
    return {
        p["partition_index"]: (p["partition_size"], p["offset_lag"], p["is_future_key"])
        for t in log_dir["topics"]
        if t["name"] == topic
        for p in t["partitions"]
    }


def test_describe_log_dirs_reports_the_wal_and_the_node_directory_with_partition_sizes(
    shared_broker: BrokerProcess, admin: KafkaAdminClient
) -> None:
    topic = _topic(admin, 2)
    wal, node_dir = str(shared_broker.data_dir / "wal"), str(shared_broker.data_dir / "kraft")
    before = _log_dirs(admin, topic)
    assert set(before) == {wal, node_dir}
    assert _sizes(before[wal], topic) == {0: (0, 0, False), 1: (0, 0, False)}
    assert before[node_dir]["topics"] == []
    assert all(d["total_bytes"] > 0 and 0 <= d["usable_bytes"] <= d["total_bytes"] for d in before.values())
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap)
    for _ in range(20):
        producer.send(topic, value=b"x" * 100, partition=0)
    producer.flush(timeout=15)
    producer.close()
    after = _sizes(_log_dirs(admin, topic)[wal], topic)
    assert after[0][0] >= 20 * 100 and after[0][1:] == (0, False)
    assert after[1] == (0, 0, False)


def _describe(client: WireClient, resource_type: int, name: str, keys: tuple[str, ...] | None) -> Any:
    cls = codec.request_class(DESCRIBE_CONFIGS, 4)
    resource = schema.build_nested(
        cls, "resources", resource_type=resource_type, resource_name=name, configuration_keys=keys
    )
    [result] = client.request(
        schema.build(cls, resources=(resource,), include_synonyms=False, include_documentation=True)
    ).results
    return result


def _alter(client: WireClient, resource_type: int, name: str, ops: dict[str, tuple[int, str | None]]) -> Any:
    cls = codec.request_class(INCREMENTAL_ALTER_CONFIGS, 1)
    configs = tuple(
        schema.build_nested(schema.field_entity(cls, "resources"), "configs", name=k, config_operation=op, value=v)
        for k, (op, v) in ops.items()
    )
    resource = schema.build_nested(cls, "resources", resource_type=resource_type, resource_name=name, configs=configs)
    [result] = client.request(schema.build(cls, resources=(resource,), validate_only=False)).responses
    return result


THROTTLE_RATES = (
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
)


def test_throttle_configs_are_accepted_documented_and_removed_as_reassign_verify_does(
    shared_broker: BrokerProcess, admin: KafkaAdminClient, wire: Callable[[int], WireClient]
) -> None:
    client = wire(shared_broker.port)
    topic = _topic(admin, 1)
    set_rates = {k: (AlterConfigOp.SET, "1000000") for k in THROTTLE_RATES}
    assert admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "0", set_rates)]) == {"broker": {"0": "OK"}}
    for name in ("0", ""):  # per broker (kafka-python above) and the cluster default (no broker to route it to)
        if name == "":
            answer = _alter(client, ConfigResourceType.BROKER, "", {k: (0, "1000000") for k in THROTTLE_RATES})
            assert answer.error_code == ErrorCode.none, answer.error_message
        described = {c.name: c for c in _describe(client, ConfigResourceType.BROKER, name, THROTTLE_RATES).configs}
        assert {k: c.value for k, c in described.items()} == {k: "1000000" for k in THROTTLE_RATES}
        assert all(c.documentation == NO_REPLICATION_TRAFFIC for c in described.values())
    replicas = {"leader.replication.throttled.replicas": "0:0", "follower.replication.throttled.replicas": "*"}
    answer = _alter(client, ConfigResourceType.TOPIC, topic, {k: (0, v) for k, v in replicas.items()})
    assert answer.error_code == ErrorCode.none, answer.error_message
    bad = _alter(client, ConfigResourceType.TOPIC, topic, {"leader.replication.throttled.replicas": (0, "zero")})
    assert bad.error_code == ErrorCode.invalid_config and "[partitionId]:[brokerId]" in bad.error_message
    # What --verify sends once the move is done: DELETE of every throttle, each of which must succeed.
    delete = AlterConfigOp.DELETE
    assert admin.alter_configs(
        [
            ConfigResource(ConfigResourceType.BROKER, "0", {k: (delete, None) for k in THROTTLE_RATES}),
            ConfigResource(ConfigResourceType.TOPIC, topic, {k: (delete, None) for k in replicas}),
        ]
    ) == {"broker": {"0": "OK"}, "topic": {topic: "OK"}}
    assert _alter(client, ConfigResourceType.BROKER, "", {k: (1, None) for k in THROTTLE_RATES}).error_code == 0
    reset = {c.name: c.value for c in _describe(client, ConfigResourceType.BROKER, "0", THROTTLE_RATES).configs}
    assert reset == {k: str(2**63 - 1) for k in THROTTLE_RATES}
    assert {c.name: c.value for c in _describe(client, ConfigResourceType.TOPIC, topic, tuple(replicas)).configs} == {
        k: "" for k in replicas
    }


def _levels(admin: KafkaAdminClient, *names: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResourceType.BROKER_LOGGER, "0", list(names) or None)
    described = admin.describe_configs([resource], config_filter="all")
    return {name: entry["value"] for name, entry in described["broker_logger"]["0"].items()}


def test_broker_logger_levels_are_read_and_changed_at_run_time(
    shared_broker: BrokerProcess, admin: KafkaAdminClient, wire: Callable[[int], WireClient]
) -> None:
    client = wire(shared_broker.port)
    everything = _levels(admin)
    assert everything["root"] == "INFO" and everything[LOGGER] == "INFO"
    assert {"broker", "controller", "storage", "wire"} <= set(everything)
    logger_resource = ConfigResourceType.BROKER_LOGGER
    assert admin.alter_configs(
        [ConfigResource(logger_resource, "0", {LOGGER: (AlterConfigOp.SET, "DEBUG")})], raise_on_unknown=False
    ) == {"broker_logger": {"0": "OK"}}
    assert _levels(admin, LOGGER, "root") == {LOGGER: "DEBUG", "root": "INFO"}
    assert _alter(client, logger_resource, "0", {"broker": (0, "TRACE")}).error_code == ErrorCode.none
    assert _levels(admin, "broker.handlers")["broker.handlers"] == "TRACE"  # inherited from "broker"
    assert _alter(client, logger_resource, "0", {LOGGER: (1, None), "broker": (1, None)}).error_code == 0
    assert _levels(admin, LOGGER, "broker.handlers") == {LOGGER: "INFO", "broker.handlers": "INFO"}
    refusals = {
        "unknown logger": ({"no.such.logger": (0, "DEBUG")}, "0", ErrorCode.invalid_config, "does not exist"),
        "unknown level": ({LOGGER: (0, "LOUD")}, "0", ErrorCode.invalid_config, "Valid log levels are"),
        "root removed": ({"root": (1, None)}, "0", ErrorCode.invalid_request, "not allowed"),
        "append": ({LOGGER: (2, "DEBUG")}, "0", ErrorCode.invalid_request, "APPEND"),
        "another broker": ({LOGGER: (0, "DEBUG")}, "7", ErrorCode.invalid_request, "expected 0 but received 7"),
    }
    for what, (ops, name, code, message) in refusals.items():
        answer = _alter(client, logger_resource, name, ops)
        assert (answer.error_code, message in (answer.error_message or "")) == (code, True), what
    assert _levels(admin, LOGGER)[LOGGER] == "INFO"  # a refused request changes nothing
    other = _describe(client, logger_resource, "7", None)
    assert other.error_code == ErrorCode.invalid_request and "received 7" in other.error_message
    # Legacy AlterConfigs has no BROKER_LOGGER, as in Kafka.
    cls = codec.request_class(ALTER_CONFIGS, 2)
    entry = schema.build_nested(
        cls,
        "resources",
        resource_type=logger_resource,
        resource_name="0",
        configs=(schema.build_nested(schema.field_entity(cls, "resources"), "configs", name=LOGGER, value="DEBUG"),),
    )
    [legacy] = client.request(schema.build(cls, resources=(entry,), validate_only=False)).responses
    assert legacy.error_code == ErrorCode.invalid_request
