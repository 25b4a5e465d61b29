"""The ``fjord`` Spark source against a real broker: every read must return exactly the records a plain
confluent-kafka consumer reads from the same topic and offsets.

One SparkSession (``local[2]``) and one broker serve the whole module, since starting either takes seconds; every
test uses its own topics.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from pyspark.sql import DataFrame, SparkSession

from testkit.node_process import BrokerProcess, start_broker
from testkit.waiting import eventually

# (topic, partition, offset, key, value, timestamp ms, timestamp type, headers)
Record = tuple[Any, ...]
COLUMNS = ["topic", "partition", "offset", "key", "value", "unix_millis(timestamp) AS ts", "timestampType"]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("spark-broker"))
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


def new_topic(bootstrap: str, partitions: int = 3, config: Mapping[str, str] | None = None) -> str:
    name = f"spark-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=dict(config or {}))])
    futures[name].result(timeout=30)
    return name


def produce(bootstrap: str, topic: str, count: int, *, partitions: int = 3, start: int = 0,
            extra: Mapping[str, Any] | None = None, timestamp: int | None = None,
            headers: list[tuple[str, bytes | None]] | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **(extra or {})})
    for i in range(start, start + count):
        key = None if i % 7 == 0 else f"k{i}".encode()
        kwargs: dict[str, Any] = {}
        if timestamp is not None:
            kwargs["timestamp"] = timestamp + i * 1000
        if headers is not None and i % 2 == 0:
            kwargs["headers"] = [*headers, ("n", str(i).encode())]
        producer.produce(topic, value=f"value-{i}".encode() * (1 + i % 5), key=key, partition=i % partitions,
                         **kwargs)
    assert producer.flush(30) == 0


def consume(bootstrap: str, topic: str, partitions: int = 3, start: Mapping[int, int] | None = None,
            end: Mapping[int, int] | None = None, *, isolation: str = "read_uncommitted") -> list[Record]:
    """What a plain consumer reads: each partition from ``start`` (default beginning) up to ``end`` or its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests-reference",
                         "enable.partition.eof": True, "enable.auto.commit": False,
                         "isolation.level": isolation})
    starts = start or {}
    consumer.assign([TopicPartition(topic, p, starts.get(p, -2)) for p in range(partitions)])
    records: list[Record] = []
    at_end: set[int] = set()

    def drained() -> bool:
        for message in consumer.consume(500, timeout=0.5):
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(message.partition() or 0)
                continue
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            if end is not None and offset >= end.get(partition, 1 << 62):
                continue
            ts_type, ts = message.timestamp()
            records.append((message.topic(), partition, offset, message.key(), message.value(), ts,
                            {1: 0, 2: 1}.get(ts_type, -1), message.headers()))
        return len(at_end) == partitions

    try:
        eventually(drained, timeout=30, what=f"a consumer to read {topic} to its end")
    finally:
        consumer.close()
    return sorted(records, key=lambda r: (r[1], r[2]))


def read(spark: SparkSession, bootstrap: str, topic: str, **options: str) -> DataFrame:
    return (spark.read.format("fjord").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .options(**options).load())


def rows(frame: DataFrame, headers: bool = False) -> list[Record]:
    columns = COLUMNS + (["headers"] if headers else [])
    result = []
    for row in frame.selectExpr(*columns).collect():
        record = (row.topic, row.partition, row.offset, _bytes(row.key), _bytes(row.value), row.ts, row.timestampType)
        if headers:
            record += ([(h.key, _bytes(h.value)) for h in row.headers] if row.headers is not None else None,)
        else:
            record += (None,)
        result.append(record)
    return sorted(result, key=lambda r: (r[1], r[2]))


def _bytes(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def without_headers(records: list[Record]) -> list[Record]:
    return [(*r[:7], None) for r in records]


def test_schema_is_sparks_kafka_schema(spark: SparkSession, kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap, 1)
    frame = read(spark, kafka.bootstrap, topic, includeHeaders="true")
    assert frame.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    assert frame.count() == 0


def test_whole_topic_over_several_partitions(spark: SparkSession, kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap)
    produce(kafka.bootstrap, topic, 600)
    expected = without_headers(consume(kafka.bootstrap, topic))
    assert len(expected) == 600
    assert rows(read(spark, kafka.bootstrap, topic)) == expected
    split = read(spark, kafka.bootstrap, topic, minPartitions="6")
    assert split.rdd.getNumPartitions() == 6
    assert rows(split) == expected
    pattern = (spark.read.format("fjord").option("kafka.bootstrap.servers", kafka.bootstrap)
               .option("subscribePattern", topic + "|nothing-.*").load())
    assert rows(pattern) == expected


def test_per_partition_starting_and_ending_offsets(spark: SparkSession, kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap)
    produce(kafka.bootstrap, topic, 300)
    frame = read(spark, kafka.bootstrap, topic,
                 startingOffsets=f'{{"{topic}": {{"0": 5, "1": -2, "2": 60}}}}',
                 endingOffsets=f'{{"{topic}": {{"0": 50, "1": -1, "2": 61}}}}')
    expected = consume(kafka.bootstrap, topic, start={0: 5, 1: 0, 2: 60}, end={0: 50, 2: 61})
    assert rows(frame) == without_headers(expected)
    assigned = (spark.read.format("fjord").option("kafka.bootstrap.servers", kafka.bootstrap)
                .option("assign", f'{{"{topic}": [1]}}').load())
    assert rows(assigned) == [r for r in without_headers(consume(kafka.bootstrap, topic)) if r[1] == 1]


def test_starting_offsets_by_timestamp(spark: SparkSession, kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap)
    base = 1_700_000_000_000
    produce(kafka.bootstrap, topic, 90, timestamp=base)
    cut = base + 45_500
    by_partition = ", ".join(f'"{p}": {cut}' for p in range(3))
    frame = read(spark, kafka.bootstrap, topic, startingOffsetsByTimestamp=f'{{"{topic}": {{{by_partition}}}}}')
    expected = [r for r in without_headers(consume(kafka.bootstrap, topic)) if r[5] >= cut]
    assert len(expected) == 44
    assert rows(frame) == expected
    assert rows(read(spark, kafka.bootstrap, topic, startingTimestamp=str(cut))) == expected


def test_ending_offsets_by_timestamp(spark: SparkSession, kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap)
    base = 1_700_000_000_000
    produce(kafka.bootstrap, topic, 90, timestamp=base)
    cut = base + 45_500
    everything = without_headers(consume(kafka.bootstrap, topic))
    expected = [r for r in everything if r[5] < cut]
    assert len(expected) == 46
    by_partition = ", ".join(f'"{p}": {cut}' for p in range(3))
    assert rows(read(spark, kafka.bootstrap, topic, endingOffsetsByTimestamp=f'{{"{topic}": {{{by_partition}}}}}')) \
        == expected
    assert rows(read(spark, kafka.bootstrap, topic, endingTimestamp=str(cut))) == expected
    # endingTimestamp wins over endingOffsets; a window between two timestamps reads what lies between them.
    assert rows(read(spark, kafka.bootstrap, topic, endingTimestamp=str(cut), endingOffsets="latest",
                     startingTimestamp=str(base + 30_000))) == [r for r in expected if r[5] >= base + 30_000]
    # No record that recent: the partition ends at its latest offset, as Spark ends it.
    assert rows(read(spark, kafka.bootstrap, topic, endingTimestamp=str(base + 10**9))) == everything


def test_headers(spark: SparkSession, kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap, 2)
    produce(kafka.bootstrap, topic, 40, partitions=2, headers=[("h1", b"one"), ("empty", None), ("h1", b"again")])
    expected = consume(kafka.bootstrap, topic, partitions=2)
    assert any(r[7] is None for r in expected) and any(r[7] for r in expected)
    assert rows(read(spark, kafka.bootstrap, topic, includeHeaders="true"), headers=True) == expected


def test_compressed_topics(spark: SparkSession, kafka: BrokerProcess) -> None:
    for codec in ("gzip", "lz4", "zstd", "snappy"):
        topic = new_topic(kafka.bootstrap, 2)
        produce(kafka.bootstrap, topic, 200, partitions=2, extra={"compression.type": codec, "linger.ms": 50})
        expected = without_headers(consume(kafka.bootstrap, topic, partitions=2))
        assert len(expected) == 200, codec
        assert rows(read(spark, kafka.bootstrap, topic, minPartitions="3")) == expected, codec


def test_fail_on_data_loss_after_delete_records(spark: SparkSession, kafka: BrokerProcess) -> None:
    topic = new_topic(kafka.bootstrap, 1)
    produce(kafka.bootstrap, topic, 100, partitions=1)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, 0, 40)], operation_timeout=10)
    assert next(iter(deleted.values())).result(timeout=15).low_watermark == 40
    start = f'{{"{topic}": {{"0": 10}}}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        rows(read(spark, kafka.bootstrap, topic, startingOffsets=start))
    skipped = rows(read(spark, kafka.bootstrap, topic, startingOffsets=start, failOnDataLoss="false"))
    expected = without_headers(consume(kafka.bootstrap, topic, partitions=1))
    assert [r[2] for r in skipped] == list(range(40, 100))
    assert skipped == expected
    assert rows(read(spark, kafka.bootstrap, topic)) == expected


def test_partition_added_mid_stream_starting_after_0_is_data_loss(spark: SparkSession, kafka: BrokerProcess,
                                                                   tmp_path: Path) -> None:
    topic = new_topic(kafka.bootstrap, 1)
    produce(kafka.bootstrap, topic, 5, partitions=1)

    def run_available_now(name: str, **options: str) -> tuple[BaseException | None, list[Record]]:
        stream = (spark.readStream.format("fjord").option("kafka.bootstrap.servers", kafka.bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest").options(**options).load())
        query = (stream.writeStream.format("parquet").option("path", str(tmp_path / name))
                 .option("checkpointLocation", str(tmp_path / f"{name}-checkpoint")).trigger(availableNow=True)
                 .start())
        try:
            query.awaitTermination(120)
        except Exception as exc:  # the query's failure, raised again here
            return exc, []
        return query.exception(), rows(spark.read.parquet(str(tmp_path / name)))

    assert run_available_now("fail")[0] is None
    assert run_available_now("skip", failOnDataLoss="false")[0] is None
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})
    for i in range(6):
        producer.produce(topic, value=f"new-{i}".encode(), partition=1)
    assert producer.flush(30) == 0
    deleted = admin.delete_records([TopicPartition(topic, 1, 4)], operation_timeout=10)
    assert next(iter(deleted.values())).result(timeout=15).low_watermark == 4
    error, _ = run_available_now("fail")
    assert error is not None and f"added partition {topic}-1 starts from 4 instead of 0" in str(error)
    error, read = run_available_now("skip", failOnDataLoss="false")
    assert error is None
    assert [(r[1], r[2]) for r in read] == [(0, n) for n in range(5)] + [(1, 4), (1, 5)]


def test_stream_available_now_resumes_from_its_checkpoint(spark: SparkSession, kafka: BrokerProcess,
                                                          tmp_path: Path) -> None:
    topic = new_topic(kafka.bootstrap)
    produce(kafka.bootstrap, topic, 300)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"

    def run_available_now() -> list[int]:
        """Runs the query to the end of what is there now; the rows of each micro-batch."""
        stream = (spark.readStream.format("fjord").option("kafka.bootstrap.servers", kafka.bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "120").load())
        query = (stream.writeStream.format("parquet").option("path", str(output))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        assert not query.isActive
        return [progress["numInputRows"] for progress in query.recentProgress if progress["numInputRows"]]

    # maxOffsetsPerTrigger splits the backlog into batches of at most 120 (plus one per starved partition).
    assert run_available_now() == [120, 120, 60]
    first = rows(spark.read.parquet(str(output)))
    assert first == without_headers(consume(kafka.bootstrap, topic))
    produce(kafka.bootstrap, topic, 150, start=300)
    assert sum(run_available_now()) == 150
    both = rows(spark.read.parquet(str(output)))
    expected = without_headers(consume(kafka.bootstrap, topic))
    assert len(expected) == 450
    assert both == expected


def test_stream_holds_a_trigger_until_min_offsets_per_trigger_or_max_trigger_delay(
    spark: SparkSession, kafka: BrokerProcess
) -> None:
    """Spark's Kafka source options: no batch runs while fewer than ``minOffsetsPerTrigger`` new records have come
    (the triggers keep firing, each reporting no input), until there are enough, or ``maxTriggerDelay`` has passed
    since the last batch."""
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "0")  # every held trigger reports progress

    def start(topic: str, name: str, **options: str) -> Any:
        stream = (spark.readStream.format("fjord").option("kafka.bootstrap.servers", kafka.bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest").options(**options).load())
        query = (stream.writeStream.format("memory").queryName(name)
                 .trigger(processingTime="100 milliseconds").start())
        eventually(lambda: query.recentProgress, timeout=60, what="the query's first trigger")
        return query

    def batches(query: Any) -> list[int]:
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    def triggers_since(query: Any, count: int) -> int:
        return len(query.recentProgress) - count

    topic, name = new_topic(kafka.bootstrap), f"held_{uuid.uuid4().hex[:8]}"
    query = start(topic, name, minOffsetsPerTrigger="50", maxTriggerDelay="1h")
    try:
        produce(kafka.bootstrap, topic, 30)
        seen = len(query.recentProgress)
        eventually(lambda: triggers_since(query, seen) >= 5, timeout=60, what="five triggers after 30 records")
        assert batches(query) == [], "30 records are fewer than minOffsetsPerTrigger: no batch"
        produce(kafka.bootstrap, topic, 20, start=30)
        eventually(lambda: batches(query), timeout=60, what="the batch once 50 records have come")
        assert batches(query) == [50]
        assert spark.table(name).count() == 50
    finally:
        query.stop()

    topic, name = new_topic(kafka.bootstrap), f"delayed_{uuid.uuid4().hex[:8]}"
    query = start(topic, name, minOffsetsPerTrigger="1000", maxTriggerDelay="10s")
    try:
        first = datetime.fromisoformat(query.recentProgress[0]["timestamp"])  # its trigger started the delay
        produce(kafka.bootstrap, topic, 10)
        seen = len(query.recentProgress)
        eventually(lambda: batches(query), timeout=60, what="the batch maxTriggerDelay lets run")
        [batch] = [p for p in query.recentProgress if p["numInputRows"]]
        assert batch["numInputRows"] == 10
        assert triggers_since(query, seen) > 2, "triggers were held before the delay ran out"
        assert (datetime.fromisoformat(batch["timestamp"]) - first).total_seconds() >= 9.5
    finally:
        query.stop()
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")
