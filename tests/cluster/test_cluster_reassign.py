"""Partition reassignment in a 3-controller, 3-broker cluster with a real admin client (kafka-python's
``alter_partition_reassignments``, as ``kafka-reassign-partitions.sh`` sends it): every partition moved under an
idempotent producer's load loses, duplicates and reorders nothing; bad targets get Kafka's error code; a move
whose source cannot close is listed in flight until the election timer gives the partition to its target."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from cluster_support import (
    SESSION_TIMEOUT_S,
    create_topic,
    leaders,
    live_brokers,
    shell_in_process,
    table_rows,
    topic_name,
    wait_for,
)
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import InvalidReplicationAssignmentError

from node.local_cluster import LocalCluster

PARTITIONS = 3
MOVE_LIMIT_S = 30.0  # generous: the figure is bench/reassign.py's; this only bounds a hang
ELECTION_TIMEOUT_MS = 3000


@dataclass
class OrderedLoad:
    """An idempotent producer sending ``<partition>:<seq>`` to each partition in turn until stopped."""

    bootstrap: str
    topic: str
    acked: dict[int, list[int]] = field(default_factory=lambda: {p: [] for p in range(PARTITIONS)})
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> OrderedLoad:
        self._thread = threading.Thread(target=self._run, name=f"ordered-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                             "message.timeout.ms": 60000, "linger.ms": 5, "retry.backoff.ms": 50})

        def delivered(err: KafkaError | None, msg: Any) -> None:
            partition, seq = (msg.value() or b"").decode().split(":")
            if err is None:
                self.acked[int(partition)].append(int(seq))
            else:
                self.failed.append(f"{partition}:{seq}: {err}")

        seq = 0
        while not self._stop.is_set():
            for partition in range(PARTITIONS):
                producer.produce(self.topic, value=f"{partition}:{seq}".encode(), partition=partition,
                                 on_delivery=delivered)
            seq += 1
            producer.poll(0.005)
        producer.flush(60)

    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=90)
            assert not self._thread.is_alive(), "the producer did not finish flushing"


def _read(bootstrap: str, topic: str, expected: int, timeout: float) -> dict[int, list[int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reassign-check", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and sum(len(v) for v in seen.values()) < expected:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                partition, seq = (msg.value() or b"").decode().split(":")
                seen[int(partition)].append(int(seq))
    finally:
        consumer.close()
    return seen


@pytest.fixture
def admin_for() -> Iterator[Any]:
    made: list[KafkaAdminClient] = []

    def make(bootstrap: str) -> KafkaAdminClient:
        client = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_every_partition_moves_under_load_without_loss(cluster_factory: Any, admin_for: Any) -> None:
    cluster: LocalCluster = cluster_factory()
    bootstrap = cluster.bootstrap_servers
    brokers = sorted(b.spec.node_id for b in cluster.brokers)
    topic = topic_name("moving")
    create_topic(bootstrap, topic, PARTITIONS)
    admin = admin_for(bootstrap)
    load = OrderedLoad(bootstrap, topic).start()
    try:
        wait_for("records acknowledged before the moves", lambda: load.count() >= 300, timeout=30)
        for partition in range(PARTITIONS):
            source = leaders(bootstrap, topic, PARTITIONS)[partition]
            target = brokers[(brokers.index(source) + 1) % len(brokers)]
            before = load.count()
            started = time.monotonic()
            result = admin.alter_partition_reassignments({KafkaTopicPartition(topic, partition): [target]})
            assert result == {KafkaTopicPartition(topic, partition): None}, result
            wait_for(f"{topic}-{partition} led by broker {target}",
                     lambda p=partition, t=target: leaders(bootstrap, topic).get(p) == t, timeout=MOVE_LIMIT_S)
            # Serving: the producer's records to the moved partition are acknowledged again.
            acked_at_move = len(load.acked[partition])
            wait_for(f"records acknowledged by broker {target}",
                     lambda n=acked_at_move, p=partition: len(load.acked[p]) > n + 20, timeout=MOVE_LIMIT_S)
            assert time.monotonic() - started < MOVE_LIMIT_S
            assert load.count() > before
        assert admin.list_partition_reassignments() == {}
    finally:
        load.stop()
    assert not load.failed, load.failed[:5]
    seen = _read(bootstrap, topic, load.count(), timeout=60)
    for partition in range(PARTITIONS):
        acked = load.acked[partition]
        assert seen[partition] == sorted(acked), (
            f"{topic}-{partition}: {len(acked)} acknowledged, {len(seen[partition])} read; lost "
            f"{sorted(set(acked) - set(seen[partition]))[:5]}, extra {sorted(set(seen[partition]) - set(acked))[:5]}"
        )


def test_bad_targets_are_refused_and_a_stuck_move_is_listed_until_the_timer(
    cluster_factory: Any, admin_for: Any
) -> None:
    cluster: LocalCluster = cluster_factory(extra={"partition.reassignment.election.timeout.ms":
                                                   str(ELECTION_TIMEOUT_MS)})
    bootstrap = cluster.bootstrap_servers
    topic = topic_name("stuck")
    create_topic(bootstrap, topic, PARTITIONS)
    placement = leaders(bootstrap, topic, PARTITIONS)
    admin = admin_for(bootstrap)
    # kafka-python sends both requests to the broker its Metadata named controller (any broker, in Fjord): pause
    # the leader of a partition whose leader is another broker, so the requests are still answered.
    assert admin.list_partition_reassignments() == {}
    answering = admin._controller_id
    partition, source = next((p, leader) for p, leader in sorted(placement.items()) if leader != answering)
    target = next(b.spec.node_id for b in cluster.brokers if b.spec.node_id not in (source, answering))
    tp = KafkaTopicPartition(topic, partition)
    assert admin.alter_partition_reassignments({tp: [99]}) == {tp: InvalidReplicationAssignmentError}
    assert admin.alter_partition_reassignments({tp: [source, target]}) == {tp: InvalidReplicationAssignmentError}

    # The source is paused: it cannot close its streams, so the move waits for the election timer.
    others = ",".join(b.spec.address for b in cluster.brokers if b.spec.node_id != source)
    # The source uploads what opening the partition wrote (its meta stream's records) within an upload interval:
    # wait until the controller has it committed, or the paused source would hold it in its WAL only.
    meta_stream = f"topic={topic},partition={partition},type=meta"

    def meta_stream_committed() -> list[str] | None:
        rows = table_rows(shell_in_process(cluster).run("ls /streams"))  # ID EPOCH STATE START END OWNER TAGS
        return next((row for row in rows if row[6] == meta_stream and int(row[4]) > int(row[3])), None)

    wait_for(f"the meta stream of {topic}-{partition} committed by broker {source}", meta_stream_committed,
             timeout=30)
    node = cluster.node(source)
    node.signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        assert admin.alter_partition_reassignments({tp: [target]}) == {tp: None}
        listed = admin.list_partition_reassignments()
        assert listed == {tp: {"replicas": [target, source], "adding_replicas": [target],
                               "removing_replicas": [source]}}, listed
        wait_for(f"{topic}-{partition} led by broker {target}",
                 lambda: leaders(others, topic).get(partition) == target, timeout=MOVE_LIMIT_S)
        assert time.monotonic() - started >= ELECTION_TIMEOUT_MS / 1000 - 0.5
        assert admin.list_partition_reassignments() == {}
        # Fenced once its session expires, the paused broker is no valid target either.
        wait_for(f"broker {source} fenced", lambda: source not in live_brokers(others), SESSION_TIMEOUT_S + 10)
        assert admin.alter_partition_reassignments({tp: [source]}) == {tp: InvalidReplicationAssignmentError}
    finally:
        node.signal(signal.SIGCONT)
