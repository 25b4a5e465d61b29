"""A 3-controller, 3-broker cluster on moto S3 serving real clients: topics spread over brokers, produce and
consume across them, the wrong broker refusing with NOT_LEADER_OR_FOLLOWER, group coordinators on the broker that
leads the group's ``__consumer_offsets`` partition, a deleted topic's streams and committed offsets gone with it,
and the metadata shell showing all of it. librdkafka's own
transactions test (0103) runs here too: it creates its topics with replication factor 3."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from broker.partition.producer_ids import BLOCK_SIZE
from metadata.rpc.connection import ControllerConnection
from node.local_cluster import LocalCluster
from settings.keys import INTERNAL_TOPIC_PARTITIONS
from testkit.waiting import eventually
from tests.cluster.cluster_support import (
    consume_all,
    leaders,
    live_brokers,
    metadata_shell,
    produce,
    shell_in_process,
    table_rows,
    topic_name,
    wait_for,
)
from tests.librdkafka_suite import NOT_BUILT, RUNNER, run_suite_test, write_suite_conf
from tests.topics import create_topic, delete_topic
from wire import codec, schema
from wire.stored_schema import partition_for

LIST_OFFSETS = 2
INIT_PRODUCER_ID = 22
DESCRIBE_QUORUM = 55


def test_topics_spread_over_brokers_and_records_flow(shared_cluster: LocalCluster) -> None:
    bootstrap = shared_cluster.bootstrap_servers
    broker_ids = {b.spec.node_id for b in shared_cluster.brokers}
    assert live_brokers(bootstrap) == broker_ids
    topic = topic_name("spread")
    create_topic(bootstrap, topic, 6)
    placement = leaders(bootstrap, topic, 6)
    assert sorted(placement) == list(range(6))
    assert set(placement.values()) == broker_ids, f"partitions are not spread over every broker: {placement}"

    values = [f"v{i}" for i in range(300)]
    acked = produce(bootstrap, topic, values)
    assert acked == set(values)
    seen = consume_all(bootstrap, topic, 6, acked, timeout=30)
    assert set(seen) == acked
    assert len(seen) == len(acked), "a record was delivered twice"


def test_a_partition_asked_of_the_wrong_broker_is_refused(shared_cluster: LocalCluster) -> None:
    bootstrap = shared_cluster.bootstrap_servers
    topic = topic_name("wrong")
    create_topic(bootstrap, topic, 3)
    placement = leaders(bootstrap, topic, 3)

    async def list_offsets(port: int, partition: int) -> int:
        cls = codec.request_class(LIST_OFFSETS, 7)
        topic_cls = schema.field_entity(cls, "topics")
        request = schema.build(cls, replica_id=-1, isolation_level=0, topics=(
            schema.build_nested(cls, "topics", name=topic, partitions=(
                schema.build_nested(topic_cls, "partitions", partition_index=partition, current_leader_epoch=-1,
                                   timestamp=-1),
            )),
        ))
        connection = ControllerConnection("127.0.0.1", port, client_id="cluster-test")
        await connection.connect(timeout=5)
        try:
            response = await connection.request(request, timeout=10)
        finally:
            await connection.close()
        return int(response.topics[0].partitions[0].error_code)

    def answer(port: int, partition: int) -> int:
        """The broker's answer once it knows the topic (each broker replays the metadata on its own)."""
        code: int = eventually(lambda: asyncio.run(list_offsets(port, partition)), timeout=10, interval=0.1,
                               until=lambda code: code != ErrorCode.unknown_topic_or_partition,
                               what=f"the broker on port {port} to know {topic}-{partition}")
        return code

    for partition, leader in placement.items():
        for broker in shared_cluster.brokers:
            code = answer(broker.spec.port, partition)
            if broker.spec.node_id == leader:
                assert code == ErrorCode.none, f"leader {leader} of partition {partition} answered {code}"
            else:
                assert code == ErrorCode.not_leader_or_follower, (
                    f"broker {broker.spec.node_id} answered {code} for partition {partition} led by {leader}"
                )


def test_group_coordinator_is_the_leader_of_the_groups_offsets_partition(shared_cluster: LocalCluster) -> None:
    bootstrap = shared_cluster.bootstrap_servers
    topic = topic_name("group")
    create_topic(bootstrap, topic, 3)
    acked = produce(bootstrap, topic, [f"g{i}" for i in range(60)])
    groups = [f"group-{i}-{topic}" for i in range(4)]
    for group in groups:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe([topic])
        seen: set[str] = set()
        deadline = time.monotonic() + 40
        while seen != acked and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.add((msg.value() or b"").decode())
        consumer.commit(asynchronous=False)
        consumer.close()
        assert seen == acked, f"group {group} read {len(seen)} of {len(acked)} records"

    offsets_leaders = leaders(bootstrap, "__consumer_offsets", INTERNAL_TOPIC_PARTITIONS)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups(groups)
    coordinators = {}
    for group, future in described.items():
        coordinator = future.result(timeout=20).coordinator.id
        expected = offsets_leaders[partition_for(group, INTERNAL_TOPIC_PARTITIONS)]
        assert coordinator == expected, f"{group}: coordinator {coordinator}, offsets partition led by {expected}"
        coordinators[group] = coordinator
    assert len(set(offsets_leaders.values())) > 1, "__consumer_offsets is not spread over brokers"


def _group_read(bootstrap: str, topic: str, group: str, count: int) -> set[str]:
    """What a subscribed member of ``group`` reads until it has ``count`` records (bounded), then commits."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen: set[str] = set()
    deadline = time.monotonic() + 40
    try:
        while len(seen) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.add((msg.value() or b"").decode())
        if seen:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return seen


def test_a_deleted_topic_leaves_no_streams_or_offsets_behind_and_is_read_whole_when_created_again(
    shared_cluster: LocalCluster,
) -> None:
    bootstrap = shared_cluster.bootstrap_servers
    topic = topic_name("deleted")
    group = f"readers-{topic}"
    create_topic(bootstrap, topic, 3)
    first = produce(bootstrap, topic, [f"a{i}" for i in range(30)])
    assert _group_read(bootstrap, topic, group, len(first)) == first

    delete_topic(bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def streams_of_topic() -> list[list[str]]:
        return [r for r in table_rows(shell_in_process(shared_cluster).run("ls /streams")) if f"topic={topic}," in r[6]]

    wait_for(f"the streams of {topic} deleted by its brokers", lambda: not streams_of_topic(), timeout=30)

    def committed() -> set[int]:
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(3)])
        (future,) = admin.list_consumer_group_offsets([request]).values()
        return {tp.offset for tp in future.result(timeout=20).topic_partitions}

    wait_for(f"the group's offsets of {topic} removed", lambda: committed() == {OFFSET_INVALID}, timeout=30)
    wait_for(f"{topic} created again", lambda: create_topic(bootstrap, topic, 3, check=False).error_code == 0,
             timeout=30)
    # Three times the old topic's records: each partition's old position lies inside the new one.
    second = produce(bootstrap, topic, [f"b{i}" for i in range(90)])
    assert _group_read(bootstrap, topic, group, len(second)) == second


def test_metadata_shell_shows_the_running_cluster(shared_cluster: LocalCluster) -> None:
    bootstrap = shared_cluster.bootstrap_servers
    topic = topic_name("shell")
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, [f"s{i}" for i in range(20)])
    placement = leaders(bootstrap, topic, 4)

    brokers = table_rows(metadata_shell(shared_cluster, "ls /brokers", via="bootstrap"))
    assert {(int(r[0]), r[2], r[4]) for r in brokers} == {
        (b.spec.node_id, "active", f"PLAINTEXT://{b.spec.address}") for b in shared_cluster.brokers
    }
    shell = shell_in_process(shared_cluster)
    topics = {r[0]: r for r in table_rows(shell.run("ls /topics"))}
    assert topics[topic][2] == "4"

    assert shell.run(f"cd /topics/{topic}") == ""
    assert shell.run("pwd") == f"/topics/{topic}"
    fields = {key.strip(): value for key, value in (line.split(" : ", 1) for line in shell.run("cat 0").splitlines())}
    assert fields["leader"] == str(placement[0])
    rows = {int(r[0]): int(r[1]) for r in table_rows(shell.run("cat partitions"))}
    assert rows == placement

    streams = table_rows(shell.run("ls /streams"))
    mine = [r for r in streams if f"topic={topic}," in r[6]]
    log_streams = {r[6]: r for r in mine if r[6].endswith("type=log")}
    assert len(log_streams) == 4, mine
    for row in log_streams.values():
        partition = int(row[6].split("partition=")[1].split(",")[0])
        assert int(row[5]) == placement[partition], f"stream {row[0]} is owned by {row[5]}, not the leader"

    tree = shell.run("tree /nodes")
    assert tree.splitlines()[0] == "/nodes"
    for broker in shared_cluster.brokers:
        assert f"{broker.spec.node_id}/" in tree


def test_describe_quorum_through_any_broker_reports_the_real_quorum(shared_cluster: LocalCluster) -> None:
    """What ``kafka-metadata-quorum --bootstrap-server`` asks: every broker forwards it to the Raft leader."""
    controllers = {n.spec.node_id for n in shared_cluster.controllers}
    brokers = {n.spec.node_id for n in shared_cluster.brokers}

    async def describe(port: int) -> Any:
        cls = codec.request_class(DESCRIBE_QUORUM, 2)
        topic = schema.build_nested(cls, "topics", topic_name="__cluster_metadata", partitions=(
            schema.build_nested(schema.field_entity(cls, "topics"), "partitions", partition_index=0),
        ))
        connection = ControllerConnection("127.0.0.1", port, client_id="cluster-test")
        await connection.connect(timeout=5)
        try:
            return await connection.request(schema.build(cls, topics=(topic,)), timeout=10)
        finally:
            await connection.close()

    answers = [asyncio.run(describe(b.spec.port)) for b in shared_cluster.brokers]
    for response in answers:
        assert response.error_code == ErrorCode.none
        partition = response.topics[0].partitions[0]
        assert partition.error_code == ErrorCode.none
        assert partition.leader_id in controllers
        assert {v.replica_id for v in partition.current_voters} == controllers
        assert brokers <= {o.replica_id for o in partition.observers}, "brokers replay the log as observers"
        assert partition.high_watermark > 0
        assert {n.node_id for n in response.nodes} == controllers
    assert len({r.topics[0].partitions[0].leader_id for r in answers}) == 1


def test_idempotent_producers_on_different_brokers_get_distinct_producer_ids(shared_cluster: LocalCluster) -> None:
    """What an idempotent producer sends first (InitProducerId without a transactional id), to every broker at
    once: each broker hands out ids from its own block, so no two producers share an id."""

    async def init_producer_ids(port: int, count: int) -> list[int]:
        request = schema.build(codec.request_class(INIT_PRODUCER_ID, 4), transactional_id=None,
                              transaction_timeout=-1, producer_id=-1, producer_epoch=-1)
        connection = ControllerConnection("127.0.0.1", port, client_id="idempotent-producer")
        await connection.connect(timeout=5)
        try:
            responses = await asyncio.gather(*(connection.request(request, timeout=20) for _ in range(count)))
        finally:
            await connection.close()
        assert all(r.error_code == ErrorCode.none for r in responses), [r.error_code for r in responses]
        assert all(r.producer_epoch == 0 for r in responses)
        return [int(r.producer_id) for r in responses]

    async def everywhere() -> list[list[int]]:
        return list(await asyncio.gather(*(init_producer_ids(b.spec.port, 20) for b in shared_cluster.brokers)))

    per_broker = asyncio.run(everywhere())
    every = [pid for ids in per_broker for pid in ids]
    assert len(set(every)) == len(every), f"producer ids handed out twice: {per_broker}"
    blocks = [{pid // BLOCK_SIZE for pid in ids} for ids in per_broker]
    for i, mine in enumerate(blocks):
        for theirs in blocks[i + 1:]:
            assert not mine & theirs, f"two brokers share a producer id block: {blocks}"
    shown = metadata_shell(shared_cluster, "cat /producerIds")
    next_id = int(shown.split("next producer id")[1].split(":")[1].split()[0])
    assert next_id > max(every), shown


@pytest.mark.slow
def test_librdkafka_transactions_test_passes_on_three_brokers(shared_cluster: LocalCluster, tmp_path: Path) -> None:
    """librdkafka 2.0.2's 0103_transactions (commit, abort, consume-transform-produce, fencing, empty transactions,
    read_committed watermarks) needs replication factor 3, so it cannot run in the single-node allowlist run
    (tests/broker/test_librdkafka_suite.py)."""
    if not RUNNER.exists():
        pytest.skip(NOT_BUILT)
    conf = write_suite_conf(tmp_path / "test.conf", shared_cluster.bootstrap_servers)
    ok, summary, output = run_suite_test("0103", conf)
    assert ok, f"{summary}\n{output}\n--- cluster logs ---\n{shared_cluster.logs(tail=3000)}"
