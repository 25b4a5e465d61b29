"""A streaming pipeline against a real Fjord cluster (3 controllers, 3 brokers, the S3 WAL on the session's moto
bucket) while the cluster changes under it: one of the input topic's partitions moves to another broker, and a third
broker is killed (SIGKILL) and started again. The pipeline (``fjord`` source to parquet, run through the pipeline
runner on the tests' local SparkSession, reading uploaded data straight from the bucket and the tail through the
brokers) must end with every produced record in its output exactly once: the parquet sink's commit log makes the
output exactly-once, so a gap or a duplicate is the source's fault.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient
from pyspark.sql import SparkSession

import spark_connector
from node.local_cluster import LocalCluster
from spark_connector.pipeline import load_pipeline
from tests.cluster.cluster_support import SESSION_TIMEOUT_S, leaders, live_brokers, topic_name, wait_for
from tests.cluster.conftest import start_cluster
from tests.conftest import S3Server
from tests.topics import create_topic

PARTITIONS = 3
PHASE = 200  # records produced before the move, after it, and after the restart
MOVE_LIMIT_S = 60.0
CATCH_UP_S = 180.0


@pytest.fixture
def cluster(tmp_path: Path, s3_server: S3Server) -> Iterator[LocalCluster]:
    started = start_cluster(tmp_path / "fjord", s3_server, wal="s3")
    try:
        yield started
    finally:
        started.stop_all(timeout=20)


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    """Numbers ``start .. start+count-1`` as JSON, record ``n`` to partition ``n % PARTITIONS``; idempotent and
    acks=all, so a retry across a failover writes nothing twice."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 90000})
    failed: list[str] = []
    for n in range(start, start + count):
        producer.produce(topic, value=json.dumps({"n": n}).encode(), partition=n % PARTITIONS,
                         on_delivery=lambda err, _msg: failed.append(str(err)) if err is not None else None)
        producer.poll(0)
    assert producer.flush(120) == 0, "records still undelivered after 120 s"
    assert not failed, failed[:3]


def written(spark: SparkSession, output: Path) -> list[int]:
    """The ``n`` of every row the sink has committed so far (the parquet sink's log names only committed files)."""
    if not (output / "_spark_metadata").is_dir():
        return []
    return [row.n for row in spark.read.parquet(str(output)).select("n").collect()]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pipeline_keeps_every_record_once_through_a_partition_move_and_a_broker_restart(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    bootstrap = cluster.bootstrap_servers
    store = cluster.brokers[0].spec.overrides["s3.data.buckets"]
    topic = topic_name("pipeline-input")
    create_topic(bootstrap, topic, PARTITIONS)
    placement = leaders(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, 0, PHASE)
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    spec = tmp_path / "numbers.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "numbers",
        "source": {"bootstrap": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
                   # Uploaded data straight from the bucket, the rest through the brokers.
                   "options": {"fjord.object.store": store, "maxOffsetsPerTrigger": 150}},
        "decode": {"value": {"format": "json", "schema": "n INT"}},
        "transform": {"sql": "SELECT n, partition, offset FROM source"},
        "sink": {"format": "parquet", "path": str(output), "checkpoint": str(checkpoint)},
        "trigger": {"processingTime": "1 second"},
    }))
    query = spark_connector.run(load_pipeline(spec, []), spark, wait=False)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        wait_for("the pipeline's first records in its output", lambda: written(spark, output), timeout=120)

        # A partition moves to another broker while the pipeline runs; more records follow it there.
        brokers = sorted(b.spec.node_id for b in cluster.brokers)
        source = placement[0]
        target = brokers[(brokers.index(source) + 1) % len(brokers)]
        moved = admin.alter_partition_reassignments({KafkaTopicPartition(topic, 0): [target]})
        assert moved == {KafkaTopicPartition(topic, 0): None}, moved
        wait_for(f"{topic}-0 led by broker {target}", lambda: leaders(bootstrap, topic).get(0) == target,
                 timeout=MOVE_LIMIT_S)
        produce(bootstrap, topic, PHASE, PHASE)

        # The third broker dies (SIGKILL) with the pipeline running: its partitions fail over (the S3 WAL is
        # replayed by a live broker), then it starts again and more records arrive.
        victim = next(b for b in brokers if b not in (source, target))
        others = ",".join(b.spec.address for b in cluster.brokers if b.spec.node_id != victim)
        cluster.node(victim).kill()
        wait_for(f"broker {victim} gone from Metadata", lambda: victim not in live_brokers(others),
                 timeout=SESSION_TIMEOUT_S + 20)
        wait_for(f"every partition of {topic} led by a live broker",
                 lambda: all(leader not in (victim, -1) for leader in leaders(others, topic, PARTITIONS).values()),
                 timeout=SESSION_TIMEOUT_S + 20)
        cluster.node(victim).start()
        wait_for(f"broker {victim} back in Metadata", lambda: victim in live_brokers(others), timeout=60)
        produce(bootstrap, topic, 2 * PHASE, PHASE)

        total = 3 * PHASE
        started = time.monotonic()
        wait_for(f"all {total} records in the pipeline's output", lambda: len(written(spark, output)) >= total,
                 timeout=CATCH_UP_S, interval=1.0)
        assert query.isActive, query.exception()
        assert time.monotonic() - started < CATCH_UP_S
    finally:
        admin.close()
        query.stop()
    assert query.exception() is None
    rows = spark.read.parquet(str(output)).collect()
    assert sorted(row.n for row in rows) == list(range(3 * PHASE)), "records lost or duplicated"
    # Each record came from where it was produced: partition n % 3, at the next offset of that partition.
    assert all(row.partition == row.n % PARTITIONS and row.offset == row.n // PARTITIONS for row in rows)
