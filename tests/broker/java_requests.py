"""The requests the Java Kafka clients and tools send, at the versions a Kafka 3.6-4.0 Java client picks against this
broker, as raw kio requests for the conformance tests (``test_java_client_conformance.py``): Metadata, Produce,
ListOffsets, Fetch, DescribeConfigs, IncrementalAlterConfigs, JoinGroup, FindCoordinator and OffsetFetch, and the
constants those tests name (the ConfigSource codes, resource types, the ListOffsets sentinels, isolation levels).
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from testkit.node_process import WireClient
from testkit.waiting import eventually
from tests.broker.kafka_clients import call, entity
from wire import schema
from wire.record_batch import Record, build_batch

JAVA_SOFTWARE = {"client_software_name": "apache-kafka-java", "client_software_version": "3.7.0"}
# ConfigSource codes of DescribeConfigs (Java's DescribeConfigsResponse.ConfigSource).
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 2, 5
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
# The consumer's range assignor metadata: version 3, one topic, no user data/owned partitions/rack/generation.
_SUBSCRIPTION_HEADER = b"\x00\x03\x00\x00\x00\x01"


def metadata(client: WireClient, *topics: str, auto_create: bool = False, ops: bool = False) -> Any:
    """Metadata v12 as the Java producer/consumer/admin send it (by name; ``()``: brokers only)."""
    topic_cls = entity(3, 12, "topics")
    return call(
        client, 3, 12,
        topics=tuple(schema.build(topic_cls, name=t, topic_id=uuid_zero) for t in topics),
        allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=ops,
    )


def wait_for_leader(client: WireClient, topic: str, partitions: int = 1) -> Any:
    """The topic's Metadata once every partition has a leader, as a Java client retries LEADER_NOT_AVAILABLE."""
    return eventually(
        lambda: metadata(client, topic).topics[0],
        until=lambda found: found.error_code == ErrorCode.none and len(found.partitions) == partitions
        and all(p.leader_id >= 0 for p in found.partitions),
        timeout=15, what=f"{topic} to have a leader for each of its {partitions} partition(s)",
    )


def produce(client: WireClient, topic: str, partition: int, batch: bytes) -> Any:
    """Produce v9 with acks=all (the Java producer's default), one partition; returns its partition response."""
    topic_cls = entity(0, 9, "topic_data")
    part = schema.build(schema.field_entity(topic_cls, "partition_data"), index=partition, records=batch)
    response = call(
        client, 0, 9, transactional_id=None, acks=-1, timeout=30_000,
        topic_data=(schema.build(topic_cls, name=topic, partition_data=(part,)),),
    )
    assert schema.millis(response.throttle_time) == 0
    [topic_response] = response.responses
    assert topic_response.name == topic
    [part_response] = topic_response.partition_responses
    assert part_response.index == partition
    return part_response


def list_offsets(
    client: WireClient, topic: str, timestamp: int, *, partition: int = 0, leader_epoch: int = -1,
    isolation: int = READ_UNCOMMITTED, version: int = 8,
) -> Any:
    topic_cls = entity(2, version, "topics")
    part = schema.build(
        schema.field_entity(topic_cls, "partitions"),
        partition_index=partition, current_leader_epoch=leader_epoch, timestamp=timestamp,
    )
    response = call(
        client, 2, version, replica_id=-1, isolation_level=isolation,
        topics=(schema.build(topic_cls, name=topic, partitions=(part,)),),
    )
    [topic_response] = response.topics
    [part_response] = topic_response.partitions
    assert (topic_response.name, part_response.partition_index) == (topic, partition)
    return part_response


def fetch(
    client: WireClient, topic_id: uuid.UUID, offset: int, *, leader_epoch: int = -1, session_id: int = 0,
    session_epoch: int = 0, isolation: int = READ_UNCOMMITTED, max_wait_ms: int = 500, partitions: bool = True,
) -> Any:
    """Fetch v15 as the Java consumer sends it: topic ids, a fetch session, replica state -1, no last epoch."""
    topic_cls = entity(1, 15, "topics")
    part = schema.build(
        schema.field_entity(topic_cls, "partitions"),
        partition=0, current_leader_epoch=leader_epoch, fetch_offset=offset, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=1 << 20,
    )
    topics = (schema.build(topic_cls, topic_id=topic_id, partitions=(part,)),) if partitions else ()
    return call(
        client, 1, 15, replica_id=-1, max_wait=max_wait_ms, min_bytes=1, max_bytes=50 << 20,
        isolation_level=isolation, session_id=session_id, session_epoch=session_epoch, topics=topics,
        forgotten_topics_data=(), rack_id="",
    )


def one_partition(fetch_response: Any) -> Any:
    assert fetch_response.error_code == ErrorCode.none
    [topic_response] = fetch_response.responses
    [part] = topic_response.partitions
    return part


def records(
    count: int, *, start: int = 0, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1
) -> bytes:
    return build_batch(
        [Record(b"k%d" % i, b"v%d" % i) for i in range(start, start + count)],
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
    )


def describe_configs(client: WireClient, resource_type: int, name: str, keys: tuple[str, ...] | None) -> Any:
    resource = schema.build(
        entity(32, 4, "resources"), resource_type=resource_type, resource_name=name, configuration_keys=keys
    )
    response = call(client, 32, 4, resources=(resource,), include_synonyms=True, include_documentation=False)
    [result] = response.results
    assert (result.error_code, result.resource_type, result.resource_name) == (ErrorCode.none, resource_type, name)
    return {c.name: c for c in result.configs}


def alter_configs(client: WireClient, resource_type: int, name: str, *ops: tuple[str, int, str | None]) -> Any:
    """IncrementalAlterConfigs v1 (operation 0 SET, 1 DELETE) for one resource; returns its result."""
    resource_cls = entity(44, 1, "resources")
    config_cls = schema.field_entity(resource_cls, "configs")
    resource = schema.build(
        resource_cls, resource_type=resource_type, resource_name=name,
        configs=tuple(schema.build(config_cls, name=k, config_operation=op, value=v) for k, op, v in ops),
    )
    [result] = call(client, 44, 1, resources=(resource,), validate_only=False).responses
    assert (result.resource_type, result.resource_name) == (resource_type, name)
    return result


def join(client: WireClient, group: str, topic: str, member_id: str = "") -> Any:
    """JoinGroup v9 as the Java consumer sends it (range assignor, no static membership)."""
    protocol = schema.build(
        entity(11, 9, "protocols"), name="range",
        metadata=_SUBSCRIPTION_HEADER + len(topic).to_bytes(2, "big") + topic.encode() + b"\xff\xff\xff\xff",
    )
    return call(
        client, 11, 9, group_id=group, session_timeout=45_000, rebalance_timeout=300_000, member_id=member_id,
        group_instance_id=None, protocol_type="consumer", protocols=(protocol,), reason=None,
    )


def find_coordinator(client: WireClient, group: str) -> Any:
    """FindCoordinator v4 for one group, retried on COORDINATOR_NOT_AVAILABLE as every Java client does."""
    [found] = eventually(
        lambda: call(client, 10, 4, key_type=0, coordinator_keys=(group,)).coordinators,
        until=lambda got: got[0].error_code != ErrorCode.coordinator_not_available,
        timeout=15, what=f"a coordinator for group {group}",
    )
    assert (found.key, found.error_code) == (group, ErrorCode.none)
    return found


def offset_fetch(client: WireClient, groups: dict[str, dict[str, tuple[int, ...]] | None]) -> dict[str, Any]:
    """OffsetFetch v8 with several groups in one request (the Java admin batches them); by group id."""
    group_cls = entity(9, 8, "groups")
    topic_cls = schema.field_entity(group_cls, "topics")
    response = call(
        client, 9, 8, require_stable=True,
        groups=tuple(
            schema.build(
                group_cls, group_id=group,
                topics=None if topics is None else tuple(
                    schema.build(topic_cls, name=t, partition_indexes=parts) for t, parts in topics.items()
                ),
            )
            for group, topics in groups.items()
        ),
    )
    assert schema.millis(response.throttle_time) == 0
    return {g.group_id: g for g in response.groups}
