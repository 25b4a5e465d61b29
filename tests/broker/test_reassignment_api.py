"""AlterPartitionReassignments (45) and ListPartitionReassignments (46) on the wire, against one real broker:
advertised versions, Kafka's error codes per partition, and a null replica list that cancels nothing pending.
Moves between brokers are tests/cluster/test_cluster_reassign.py's; the state machine is tests/controller's."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, api_versions_request
from wire import codec, schema

ALTER, LIST = 45, 46


def _create(client: WireClient, partitions: int) -> str:
    name = f"reassign-{uuid.uuid4().hex[:8]}"
    cls = codec.request_class(19, 7)
    topic = schema.build_nested(cls, "topics", name=name, num_partitions=partitions, replication_factor=1,
                               assignments=(), configs=())
    response = client.request(schema.build(cls, topics=(topic,), timeout=15000, validate_only=False))
    assert response.topics[0].error_code == ErrorCode.none
    return name


def _alter(
    client: WireClient,
    moves: dict[tuple[str, int], tuple[int, ...] | None],
    *,
    version: int = 0,
    allow_replication_factor_change: bool = True,
) -> dict[tuple[str, int], Any]:
    cls = codec.request_class(ALTER, version)
    topic_cls = schema.field_entity(cls, "topics")
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), replicas in moves.items():
        by_topic.setdefault(topic, []).append(
            schema.build_nested(topic_cls, "partitions", partition_index=partition, replicas=replicas))
    topics = tuple(schema.build_nested(cls, "topics", name=t, partitions=tuple(p)) for t, p in by_topic.items())
    response = client.request(schema.build(cls, timeout=15000, topics=topics,
                                           allow_replication_factor_change=allow_replication_factor_change))
    assert response.error_code == ErrorCode.none
    return {(t.name, int(p.partition_index)): p for t in response.responses for p in t.partitions}


def _list(client: WireClient, topics: dict[str, list[int]] | None) -> Any:
    cls = codec.request_class(LIST, 0)
    entries = None if topics is None else tuple(
        schema.build_nested(cls, "topics", name=t, partition_indexes=tuple(p)) for t, p in topics.items())
    return client.request(schema.build(cls, timeout=15000, topics=entries))


def test_both_apis_are_advertised(shared_broker: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    response = wire(shared_broker.port).request(api_versions_request(3))
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
    assert ranges[ALTER] == (0, 1) and ranges[LIST] == (0, 0)


def test_v1_refuses_a_replication_factor_change_when_asked_to(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    """KIP-860 (``--disallow-replication-factor-change``): the move that would change the replica count is refused
    with INVALID_REPLICATION_FACTOR; the others in the request are answered as usual."""
    client = wire(shared_broker.port)
    topic = _create(client, 2)
    me = shared_broker.node_id
    results = _alter(client, {(topic, 0): (me, me + 1), (topic, 1): (me + 50,)}, version=1,
                     allow_replication_factor_change=False)
    assert results[(topic, 0)].error_code == ErrorCode.invalid_replication_factor
    assert "from 1 to 2" in results[(topic, 0)].error_message
    assert results[(topic, 1)].error_code == ErrorCode.invalid_replica_assignment
    assert f"broker {me + 50}" in results[(topic, 1)].error_message


def test_error_codes_per_partition(shared_broker: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    client = wire(shared_broker.port)
    topic = _create(client, 2)
    me = shared_broker.node_id
    results = _alter(client, {
        (topic, 0): (me, me + 1),
        (topic, 1): (me + 50,),
        (topic, 9): (me,),
        ("no-such-topic", 0): (me,),
    })
    assert results[(topic, 0)].error_code == ErrorCode.invalid_replica_assignment
    assert "one replica" in results[(topic, 0)].error_message
    assert "object storage" in results[(topic, 0)].error_message
    assert results[(topic, 1)].error_code == ErrorCode.invalid_replica_assignment
    assert f"broker {me + 50}" in results[(topic, 1)].error_message
    assert results[(topic, 9)].error_code == ErrorCode.unknown_topic_or_partition
    assert results[("no-such-topic", 0)].error_code == ErrorCode.unknown_topic_or_partition


def test_null_replicas_cancel_only_a_pending_move(shared_broker: BrokerProcess,
                                                  wire: Callable[[int], WireClient]) -> None:
    client = wire(shared_broker.port)
    topic = _create(client, 1)
    [result] = _alter(client, {(topic, 0): None}).values()
    assert result.error_code == ErrorCode.no_reassignment_in_progress
    # A move to where the partition already is succeeds and starts nothing.
    [result] = _alter(client, {(topic, 0): (shared_broker.node_id,)}).values()
    assert result.error_code == ErrorCode.none and result.error_message is None
    listed = _list(client, None)
    assert listed.error_code == ErrorCode.none and listed.topics == ()


@pytest.mark.parametrize("filtered", [False, True])
def test_list_answers_with_nothing_in_flight(shared_broker: BrokerProcess, wire: Callable[[int], WireClient],
                                             filtered: bool) -> None:
    client = wire(shared_broker.port)
    topic = _create(client, 1)
    listed = _list(client, {topic: [0], "no-such-topic": [3]} if filtered else None)
    assert listed.error_code == ErrorCode.none and listed.error_message is None and listed.topics == ()
