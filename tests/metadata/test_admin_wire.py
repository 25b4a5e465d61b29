"""``metadata.admin`` (``topic_wire``, ``config_wire``, ``scram_wire``): what a broker forwards is read back by the
controller as the same request, and what the controller answers is read back by the broker as the same results,
through real frames; request-level checks answer their items without asking anyone."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from metadata.admin import config_wire, topic_wire
from metadata.controller_api import (
    ConfigResource,
    CreateTopicResult,
    DeleteTopicResult,
    ElectionType,
    IncrementalOp,
    NewTopic,
    PartitionReassignment,
    ReassignmentResult,
)
from metadata.errors import ControllerError
from settings.describe import ConfigEntry, ConfigSource
from wire import codec, schema


def _over_the_wire(request: Any) -> Any:
    """The request as the controller listener decodes it (the frame without its length prefix)."""
    return codec.decode_request(codec.encode_request(request, 7, client_id="broker-3")[4:]).body


def _answer_over_the_wire(response: Any) -> Any:
    cls = type(response)
    _, body = codec.decode_response(cls.__api_key__, cls.__version__, codec.encode_response(7, response)[4:])
    return body


def test_create_topics_round_trip() -> None:
    topics = [
        NewTopic("orders", 3, 1, None, {"retention.ms": "1000"}),
        NewTopic("placed", assignments={0: (1, 2), 1: (2, 1)}),
    ]
    ask = topic_wire.read_create_topics(_over_the_wire(topic_wire.create_topics_request(topics, True, 5000)), "c")
    assert ask.validate_only is True
    assert ask.order == ("orders", "placed")
    assert not ask.refused
    assert [(t.name, t.num_partitions, t.replication_factor, t.assignments, dict(t.configs)) for t in ask.topics] == [
        ("orders", 3, 1, None, {"retention.ms": "1000"}),
        ("placed", -1, -1, {0: (1, 2), 1: (2, 1)}, {}),
    ]
    topic_id = uuid.uuid4()
    created = [
        CreateTopicResult("orders", topic_id, ErrorCode.none, None, 3, 1,
                          [ConfigEntry("retention.ms", "1000", ConfigSource.TOPIC_CONFIG, False, False)]),
        CreateTopicResult("placed", None, ErrorCode.invalid_replica_assignment, "broker 2 is not registered"),
    ]
    response = topic_wire.create_topics_response(codec.response_class(19, 7), ask, created)
    assert topic_wire.read_create_topics_response(_answer_over_the_wire(response)) == created


def test_create_topics_refuses_duplicates_and_contradictions_in_request_order() -> None:
    cls = codec.request_class(19, 5)
    topic_cls = schema.field_entity(cls, "topics")
    request = schema.build(cls, validate_only=False, topics=(
        schema.build(topic_cls, name="b", num_partitions=1, replication_factor=-1),
        schema.build(topic_cls, name="a", num_partitions=2, replication_factor=1, assignments=(
            schema.build_nested(topic_cls, "assignments", partition_index=0, broker_ids=(1,)),)),
        schema.build(topic_cls, name="b", num_partitions=1, replication_factor=-1),
        schema.build(topic_cls, name="c", num_partitions=1, replication_factor=-1),
    ))
    ask = topic_wire.read_create_topics(request, "tool")
    assert [t.name for t in ask.topics] == ["c"]
    assert ask.order == ("b", "a", "c")
    assert ask.refused["b"].message == "Create topics request from client 'tool' contains topic 'b' more than once"
    assert ask.refused["a"].error is ErrorCode.invalid_request
    created = topic_wire.create_topics_refused(ask.topics, ErrorCode.not_controller, "no active controller")
    response = topic_wire.create_topics_response(codec.response_class(19, 5), ask, created)
    assert [(t.name, t.error_code, t.num_partitions) for t in response.topics] == [
        ("b", ErrorCode.invalid_request, -1), ("a", ErrorCode.invalid_request, -1), ("c", ErrorCode.not_controller, -1)
    ]


def test_create_topics_refuses_a_partition_assigned_twice() -> None:
    cls = codec.request_class(19, 7)
    topic_cls = schema.field_entity(cls, "topics")

    def assigned(partition: int, broker: int) -> Any:
        return schema.build_nested(topic_cls, "assignments", partition_index=partition, broker_ids=(broker,))

    request = schema.build(cls, validate_only=False, timeout=5000, topics=(
        schema.build(topic_cls, name="twice", num_partitions=-1, replication_factor=-1,
                     assignments=(assigned(0, 1), assigned(1, 1), assigned(1, 2), assigned(0, 2))),
        schema.build(topic_cls, name="once", num_partitions=-1, replication_factor=-1,
                     assignments=(assigned(1, 1), assigned(0, 2))),
    ))
    ask = topic_wire.read_create_topics(_over_the_wire(request), "tool")
    assert [(t.name, t.assignments) for t in ask.topics] == [("once", {1: (1,), 0: (2,)})]
    assert (ask.refused["twice"].error, ask.refused["twice"].message) == (
        ErrorCode.invalid_replica_assignment, "Found multiple manual partition assignments for partition 1"
    )


def test_delete_topics_round_trip_by_name_and_id() -> None:
    topic_id = uuid.uuid4()
    request = _over_the_wire(topic_wire.delete_topics_request(["orders"], [topic_id], 5000))
    ask = topic_wire.read_delete_topics(request)
    assert (ask.names, ask.ids, ask.refused) == (("orders",), (topic_id,), ())
    deleted = [DeleteTopicResult("orders", None, ErrorCode.none),
               DeleteTopicResult(None, topic_id, ErrorCode.unknown_topic_id, "no such topic id")]
    response = topic_wire.delete_topics_response(codec.response_class(20, 6), ask, deleted)
    assert topic_wire.read_delete_topics_response(_answer_over_the_wire(response)) == deleted


def test_delete_topics_v6_refuses_both_or_neither_name_and_id() -> None:
    cls = codec.request_class(20, 6)
    request = schema.build(cls, topics=(
        schema.build_nested(cls, "topics", name="x", topic_id=uuid.uuid4()),
        schema.build_nested(cls, "topics", name=None, topic_id=uuid.UUID(int=0)),
    ))
    ask = topic_wire.read_delete_topics(request)
    assert not ask.names and not ask.ids
    assert [r.message for r in ask.refused] == [
        "topic name and topic id cannot both be given", "neither topic name nor topic id given"
    ]


def test_create_partitions_round_trip_and_duplicates() -> None:
    request = _over_the_wire(topic_wire.create_partitions_request("orders", 4, [[1], [2]], False, 5000))
    ask = topic_wire.read_create_partitions(request)
    assert ask.topics == (topic_wire.NewPartitions("orders", 4, ((1,), (2,))),)
    response = topic_wire.create_partitions_response(
        codec.response_class(37, 3), [("orders", ErrorCode.invalid_partitions, "too few")]
    )
    assert topic_wire.read_create_partitions_response(_answer_over_the_wire(response)) == (
        ErrorCode.invalid_partitions, "too few"
    )
    cls = codec.request_class(37, 0)
    twice = schema.build(cls, validate_only=True, topics=(
        schema.build_nested(cls, "topics", name="t", count=2, assignments=None),
        schema.build_nested(cls, "topics", name="t", count=3, assignments=None),
    ))
    assert [t.refused for t in topic_wire.read_create_partitions(twice).topics] == [
        (ErrorCode.invalid_request, "duplicate topic 't' in the request")
    ] * 2


@pytest.mark.parametrize("ops", [None, {"retention.ms": IncrementalOp.SET, "cleanup.policy": IncrementalOp.DELETE}])
def test_alter_configs_round_trip(ops: dict[str, int] | None) -> None:
    resource = ConfigResource(ConfigResource.TOPIC, "orders")
    # Only an incremental DELETE carries no value (anything else without one is refused where it is read).
    changes: dict[str, str | None] = {"retention.ms": "1000", "cleanup.policy": None if ops else "compact"}
    request = _over_the_wire(config_wire.alter_configs_request(resource, changes, ops, True))
    read = config_wire.read_alter_configs if ops is None else config_wire.read_incremental_alter_configs
    ask = read(request)
    assert ask.validate_only is True
    assert ask.resources == (config_wire.ConfigAlteration(resource, changes, ops),)
    response = config_wire.alter_configs_response(
        codec.response_class(type(request).__api_key__, type(request).__version__),
        [(resource, ErrorCode.invalid_config, "bad value")],
    )
    assert config_wire.read_alter_configs_response(_answer_over_the_wire(response)) == (
        ErrorCode.invalid_config, "bad value"
    )


def test_incremental_alter_configs_refuses_duplicates_unknown_ops_and_resource_types() -> None:
    cls = codec.request_class(44, 1)
    resource_cls = schema.field_entity(cls, "resources")

    def resource(kind: int, name: str, *configs: tuple[str, int]) -> Any:
        return schema.build(resource_cls, resource_type=kind, resource_name=name, configs=tuple(
            schema.build_nested(resource_cls, "configs", name=n, config_operation=op, value="1") for n, op in configs
        ))

    request = schema.build(cls, validate_only=False, resources=(
        resource(2, "r", ("a", 0), ("a", 1)),
        resource(2, "s", ("a", 9)),
        resource(7, "r", ("a", 0)),
        resource(4, "r", ("a", 0)),
    ))
    refused = [item.refused for item in config_wire.read_incremental_alter_configs(request).resources]
    assert refused == [
        (ErrorCode.invalid_request, "Error due to duplicate config keys ['a']"),
        (ErrorCode.invalid_request, "Unknown alter config operation(s) [9]"),
        (ErrorCode.invalid_request, "Unsupported resource type 7"),
        None,
    ]


def test_a_config_without_a_value_is_refused_unless_incrementally_deleted() -> None:
    """Kafka's codes: CreateTopics INVALID_CONFIG (its controller's check), AlterConfigs and IncrementalAlterConfigs
    (any operation but DELETE) INVALID_REQUEST (its broker's preprocess), naming the keys."""
    create = codec.request_class(19, 7)
    topic_cls = schema.field_entity(create, "topics")
    request = schema.build(create, validate_only=False, timeout=5000, topics=(
        schema.build(topic_cls, name="t", num_partitions=1, replication_factor=1, configs=tuple(
            schema.build_nested(topic_cls, "configs", name=n, value=v)
            for n, v in (("retention.ms", None), ("segment.ms", "1000"), ("cleanup.policy", None))
        )),
    ))
    ask = topic_wire.read_create_topics(request, "tool")
    assert not ask.topics
    refused = ask.refused["t"]
    assert (refused.error, refused.message) == (
        ErrorCode.invalid_config, "Null value not supported for topic configs: retention.ms,cleanup.policy"
    )

    legacy = codec.request_class(33, 2)
    legacy_cls = schema.field_entity(legacy, "resources")
    request = schema.build(legacy, validate_only=False, resources=(
        schema.build(legacy_cls, resource_type=2, resource_name="t", configs=(
            schema.build_nested(legacy_cls, "configs", name="retention.ms", value=None),
            schema.build_nested(legacy_cls, "configs", name="segment.ms", value="1000"),
        )),
    ))
    (item,) = config_wire.read_alter_configs(request).resources
    assert item.refused == (ErrorCode.invalid_request, "Null value not supported for : retention.ms")

    incremental = codec.request_class(44, 1)
    incremental_cls = schema.field_entity(incremental, "resources")

    def resource(op: int) -> Any:
        return schema.build(incremental_cls, resource_type=2, resource_name=f"t{op}", configs=(
            schema.build_nested(incremental_cls, "configs", name="cleanup.policy", config_operation=op, value=None),
        ))

    ops = (IncrementalOp.SET, IncrementalOp.DELETE, IncrementalOp.APPEND, IncrementalOp.SUBTRACT)
    request = schema.build(incremental, validate_only=False, resources=tuple(resource(op) for op in ops))
    null = (ErrorCode.invalid_request, "Null value not supported for : cleanup.policy")
    assert [item.refused for item in config_wire.read_incremental_alter_configs(request).resources] == [
        null, None, null, null
    ]


@pytest.mark.parametrize("api_key", [33, 44])
def test_a_resource_named_twice_is_refused_both_times(api_key: int) -> None:
    """Kafka refuses every copy of a repeated resource (same type and name) before any other check."""
    cls = codec.request_class(api_key, 1)
    resource_cls = schema.field_entity(cls, "resources")

    def resource(kind: int, name: str) -> Any:
        config = {"config_operation": 0} if api_key == 44 else {}
        return schema.build(resource_cls, resource_type=kind, resource_name=name, configs=(
            schema.build_nested(resource_cls, "configs", name="retention.ms", value="1", **config),
        ))

    request = schema.build(cls, validate_only=False, resources=(
        resource(2, "t"), resource(2, "u"), resource(4, "t"), resource(2, "t"),
    ))
    read = config_wire.read_alter_configs if api_key == 33 else config_wire.read_incremental_alter_configs
    repeated = (ErrorCode.invalid_request, "Each resource must appear at most once.")
    assert [item.refused for item in read(request).resources] == [repeated, None, None, repeated]


def test_a_broker_resource_must_name_the_answering_broker() -> None:
    assert config_wire.check_broker_resource("", 1) is True
    assert config_wire.check_broker_resource("1", 1) is False
    with pytest.raises(config_wire.ResourceRefused, match="expected 1 or empty string, but received 2"):
        config_wire.check_broker_resource("2", 1)
    with pytest.raises(config_wire.ResourceRefused, match="'x' is not a broker id"):
        config_wire.check_broker_resource("x", 1)
    # BROKER_LOGGER (no cluster-wide default): the same reading of the name, "" refused.
    assert config_wire.check_broker_resource("01", 1, cluster_default=False) is False
    with pytest.raises(config_wire.ResourceRefused, match="Broker id must not be empty"):
        config_wire.check_broker_resource("", 1, cluster_default=False)
    with pytest.raises(config_wire.ResourceRefused, match="expected 1 but received 2"):
        config_wire.check_broker_resource("2", 1, cluster_default=False)


@pytest.mark.parametrize("partitions", [None, (("a", 0),)])
def test_a_refused_elect_leaders_is_raised_not_answered_as_no_results(
    partitions: tuple[tuple[str, int], ...] | None,
) -> None:
    """A controller's top-level refusal must reach the broker's answer: read as no results, a forwarded "all
    partitions" election the controller refused would be answered NONE."""
    ask = topic_wire.ElectLeadersAsk(ElectionType.PREFERRED, partitions)
    assert topic_wire.read_elect_leaders(_over_the_wire(topic_wire.elect_leaders_request(ask))) == ask
    refused = topic_wire.elect_leaders_response(codec.response_class(43, 2), [], ErrorCode.not_controller)
    with pytest.raises(ControllerError) as caught:
        topic_wire.read_elect_leaders_response(_answer_over_the_wire(refused), ask)
    assert caught.value.code is ErrorCode.not_controller


def test_alter_partition_reassignments_round_trip() -> None:
    asked = [PartitionReassignment("a", 0, (2,)), PartitionReassignment("a", 1, None),
             PartitionReassignment("b", 0, (1,))]
    request = _over_the_wire(topic_wire.alter_partition_reassignments_request(asked))
    assert topic_wire.read_alter_partition_reassignments(request) == asked
    results = [ReassignmentResult("a", 0), ReassignmentResult("a", 1, ErrorCode.no_reassignment_in_progress, "none"),
               ReassignmentResult("b", 0, ErrorCode.not_controller, "moved")]
    response = topic_wire.alter_partition_reassignments_response(codec.response_class(45, 0), results)
    assert topic_wire.read_alter_partition_reassignments_response(_answer_over_the_wire(response), asked) == results
    missing = topic_wire.read_alter_partition_reassignments_response(_answer_over_the_wire(response), [
        PartitionReassignment("c", 0, (1,))
    ])
    assert missing == [ReassignmentResult("c", 0, ErrorCode.unknown_server_error, "no answer")]
