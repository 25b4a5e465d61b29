"""KIP-951 leader hints on Produce: a partition that moved is answered NOT_LEADER_OR_FOLLOWER by its old broker with
the partition's new leader and epoch and that leader's endpoint, so a producer re-sends there at once instead of
first asking for metadata. Checked on the wire (Produce v9 has no hint, v10+ has it) and with a real client
(confluent-kafka): its next produce after a move reaches the new leader (the target's own Produce counter) on the
hint, which the producer's own log says it applied; under load it sends at most one Metadata request over a move (the
producer's own request counts, from librdkafka's statistics: the brokers' counters also count the test's other
clients)."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode

from node.local_cluster import LocalCluster
from tests.cluster.cluster_support import leaders, request_once, topic_name, wait_for
from tests.metrics_scrape import metrics_url, sample, scrape
from tests.topics import create_topic
from wire import codec, schema
from wire.record_batch import Record, build_batch

PRODUCE = 0
MOVE_LIMIT_S = 30.0


@pytest.fixture
def two_brokers(cluster_factory: Any) -> LocalCluster:
    cluster: LocalCluster = cluster_factory(controllers=1, brokers=2, extra={"metrics.port": "0"})
    return cluster


def _move(cluster: LocalCluster, admin: KafkaAdminClient, topic: str, partition: int, target: int) -> None:
    result = admin.alter_partition_reassignments({KafkaTopicPartition(topic, partition): [target]})
    assert result == {KafkaTopicPartition(topic, partition): None}, result
    wait_for(f"{topic}-{partition} led by broker {target}",
             lambda: leaders(cluster.bootstrap_servers, topic).get(partition) == target, timeout=MOVE_LIMIT_S)


def _produce_request(version: int, topic: str, topic_id: Any, partition: int) -> Any:
    cls = codec.request_class(PRODUCE, version)
    topic_cls = schema.field_entity(cls, "topic_data")
    return schema.build(cls, transactional_id=None, acks=-1, timeout=5000, topic_data=(
        schema.build(topic_cls, name=topic, topic_id=topic_id, partition_data=(
            schema.build_nested(topic_cls, "partition_data", index=partition,
                                records=build_batch([Record(None, b"x")])),
        )),
    ))


def test_produce_to_the_old_leader_names_the_new_one(two_brokers: LocalCluster, admin_for: Any) -> None:
    cluster = two_brokers
    topic = topic_name("hinted")
    topic_id = create_topic(cluster.bootstrap_servers, topic, 1).topic_id
    source = leaders(cluster.bootstrap_servers, topic, 1)[0]
    target = next(b.spec.node_id for b in cluster.brokers if b.spec.node_id != source)
    _move(cluster, admin_for(cluster.bootstrap_servers), topic, 0, target)
    old = cluster.node(source).spec
    new = cluster.node(target).spec

    def refused(version: int) -> Any:
        return request_once(old.port, _produce_request(version, topic, topic_id, 0), "leader-hints-test")

    # The old broker learns of the election a moment after the cluster's metadata says it.
    wait_for(f"broker {source} to know {target} leads {topic}-0",
             lambda: refused(10).responses[0].partition_responses[0].current_leader.leader_id == target, timeout=10)
    for version in (10, 13):
        response = refused(version)
        part = response.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.not_leader_or_follower
        assert part.current_leader.leader_id == target
        assert part.current_leader.leader_epoch >= 1, part.current_leader
        assert [(e.node_id, e.host, e.port) for e in response.node_endpoints] == [(target, "127.0.0.1", new.port)]
    old_style = refused(9).responses[0].partition_responses[0]
    assert old_style.error_code == ErrorCode.not_leader_or_follower
    assert not schema.has_field(type(old_style), "current_leader")


def _produce_requests(cluster: LocalCluster, node_id: int) -> float:
    return sample(scrape(metrics_url(cluster.node(node_id).log_text(tail=10**7))), "fjord_broker_requests_total",
                  '{api="Produce"}') or 0.0


class _HintsApplied(logging.Handler):
    """A producer's ``logger`` (with ``debug: metadata``): the leaders it took from KIP-951 hints, by its own log.

    librdkafka logs ``METADATAUPDATE ... updated with leader N and epoch E`` only when it applies a hint carried by a
    Produce or Fetch answer (its ``RD_KAFKA_OP_METADATA_UPDATE``), never for a Metadata answer; a hint it refuses
    (an older epoch, an unknown leader) is logged with other words."""

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(logging.DEBUG)
        self.pattern = re.compile(rf"Partition {re.escape(topic)}\([^)]*\)\[{partition}\]: "
                                  r"updated with leader (-?\d+) and epoch (-?\d+)")
        self.applied: list[tuple[int, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = self.pattern.search(record.getMessage())
        if found:
            self.applied.append((int(found[1]), int(found[2])))


def test_a_producer_follows_a_move_on_the_old_leaders_hint(two_brokers: LocalCluster, admin_for: Any) -> None:
    cluster = two_brokers
    topic = topic_name("follow")
    create_topic(cluster.bootstrap_servers, topic, 1)
    source = leaders(cluster.bootstrap_servers, topic, 1)[0]
    target = next(b.spec.node_id for b in cluster.brokers if b.spec.node_id != source)
    hints = _HintsApplied(topic, 0)
    log = logging.getLogger(f"tests.leader_hints.{topic}")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    log.addHandler(hints)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                         "topic.metadata.refresh.interval.ms": 600000, "linger.ms": 0,
                         "debug": "metadata", "logger": log})
    delivered: list[Any] = []

    def produce_one(value: str) -> None:
        producer.produce(topic, value.encode(), partition=0,
                         on_delivery=lambda err, msg: delivered.append((err, msg.offset())))
        assert producer.flush(20) == 0, "a record was not delivered"
        err, _ = delivered[-1]
        assert err is None, err

    # The producer learns each new leader from the old leader's refusal, as its own log says. It may still send a
    # Metadata request beside it: a race between two of librdkafka's threads (see the test under load) that sent
    # none in most moves on one machine and one in each of three moves on CI's, so that count is not asserted here.
    epochs: list[int] = []
    try:
        produce_one("before")
        leader, other = source, target
        for move in range(3):
            _move(cluster, admin_for(cluster.bootstrap_servers), topic, 0, other)
            old = f"127.0.0.1:{cluster.node(leader).spec.port}"
            wait_for(f"broker {leader} to know {other} leads {topic}-0",
                     lambda old=old, other=other: leaders(old, topic).get(0) == other, timeout=10)
            on_target_before = _produce_requests(cluster, other)
            hinted_before = len(hints.applied)
            started = time.monotonic()
            produce_one(f"after move {move}")  # sent to the old leader first: the producer has not refreshed
            elapsed = time.monotonic() - started
            assert _produce_requests(cluster, other) > on_target_before
            hinted = hints.applied[hinted_before:]
            assert [leader_id for leader_id, _ in hinted] == [other], (
                f"move {move}: the producer applied {hinted} from hints, not one naming broker {other}")
            epochs.append(hinted[0][1])
            assert delivered[-1][1] == delivered[0][1] + move + 1, delivered
            assert elapsed < 5.0, f"the record took {elapsed:.2f} s to reach the new leader"
            leader, other = other, leader
        assert epochs == sorted(set(epochs)), f"each move's hint names a newer leader epoch: {epochs}"
    finally:
        producer.flush(5)
        log.removeHandler(hints)


def test_a_producer_follows_a_move_under_load_without_asking_for_metadata(
    two_brokers: LocalCluster, admin_for: Any
) -> None:
    """The records sent while the partition moves are refused by the source once it let go; the refusal names the
    target with the leader epoch its election will give it, and the target holds what arrives before that election,
    so the producer carries on at the target without a metadata refresh (counted by the producer itself:
    librdkafka's per-broker request counts in its statistics)."""
    cluster = two_brokers
    topic = topic_name("moving")
    create_topic(cluster.bootstrap_servers, topic, 1)
    source = leaders(cluster.bootstrap_servers, topic, 1)[0]
    target = next(b.spec.node_id for b in cluster.brokers if b.spec.node_id != source)
    metadata_sent: list[int] = []

    def statistics(text: str) -> None:
        brokers = json.loads(text)["brokers"].values()
        metadata_sent.append(sum(int(b.get("req", {}).get("Metadata", 0)) for b in brokers))

    # One request in flight: the source refuses one produce at the move, so librdkafka's race (below) can cost
    # one Metadata request at most; with five in flight, each refusal may take that path (2 were seen in CI).
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                         "topic.metadata.refresh.interval.ms": 600000, "linger.ms": 5,
                         "max.in.flight.requests.per.connection": 1,
                         "statistics.interval.ms": 100, "stats_cb": statistics})
    acked: list[int] = []
    errors: list[Any] = []
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            producer.produce(topic, b"x", partition=0, on_delivery=lambda err, msg: (
                errors.append(err) if err is not None else acked.append(msg.offset())))
            producer.poll(0.002)
        producer.flush(20)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        wait_for("records acknowledged by the source", lambda: len(acked) > 200 and metadata_sent, timeout=20)
        before = metadata_sent[-1]
        on_target_before = _produce_requests(cluster, target)
        _move(cluster, admin_for(cluster.bootstrap_servers), topic, 0, target)
        acked_at_move = len(acked)
        wait_for("records acknowledged by the target",
                 lambda: _produce_requests(cluster, target) > on_target_before + 5 and len(acked) > acked_at_move + 50,
                 timeout=MOVE_LIMIT_S)
        seen = len(metadata_sent)
        wait_for("the producer's statistics after the move", lambda: len(metadata_sent) > seen, timeout=10)
        # Without the hints librdkafka refreshes its metadata several times over a move under load (3 when this
        # test was written). With them it follows the move on the hint alone, but in about half the runs it still
        # sends one Metadata request, so one is allowed here. The cause is librdkafka's, a race between two of its
        # threads (read in its src/rdkafka_request.c, rdkafka_partition.c, rdkafka_topic.c): the broker thread
        # parsing the refusal first queues the hint to the main thread as a metadata update, then handles the
        # error code, which marks the topic's leader unavailable and starts the fast leader query at once. The
        # hint's update clears that mark; when the main thread applies it before the broker thread sets the mark
        # (a preempted broker thread, as under load), the mark stays and the query sends one Metadata request.
        # Nothing in the answer avoids it: any NOT_LEADER_OR_FOLLOWER takes that path. That query's answer names
        # the target too, though the election may not have happened yet (``broker.handlers.metadata``): an answer of
        # "no leader" there was dropped by librdkafka as older than the hint's epoch, and its query asked again
        # 100 ms later (2 requests, seen about once in six runs under load).
        sent = metadata_sent[-1] - before
        assert sent <= 1, f"the producer sent {sent} Metadata requests"
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not errors, errors[:3]
    assert acked == list(range(len(acked))), "records were lost, duplicated or reordered across the move"
