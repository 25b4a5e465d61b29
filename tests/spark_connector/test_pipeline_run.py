"""The pipeline runner and the ``fjord`` sink against a real broker, with PySpark in local mode.

The example pipelines of ``config/pipelines`` run with ``--set``-style overrides (their own topic and directories)
through the Python API on one shared SparkSession; the kill-and-restart test and the error cases run
``fjord pipeline run`` as a process, since what they check is the process: its exit status, its one line on stderr,
and a restart after SIGKILL. Expected results are computed here from what was produced, independently of Spark.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import defaultdict
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

import spark_connector
from spark_connector.pipeline import PipelineError, load_pipeline
from testkit.node_process import REPO, BrokerProcess, start_broker
from testkit.waiting import eventually
from wire.ports import free_port

EXAMPLES = REPO / "config" / "pipelines"
FJORD = str(Path(sys.executable).parent / "fjord")
BASE = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
RUN_TIMEOUT_S = 150


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("pipeline-broker"))
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


def new_topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"pipe-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future is done
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=30)
    return name


def order(i: int) -> tuple[str, dict[str, Any]]:
    """Order ``i``: its key (one of four stores) and its JSON value; amounts and times vary with ``i``."""
    at = BASE + timedelta(seconds=(i * 7) % 300)
    amount = Decimal(f"{(i * 37) % 150}.{i % 100:02d}")
    value = {"order_id": f"o-{i}", "customer": f"c-{i % 11}", "amount": str(amount), "ts": at.isoformat()}
    return f"store-{i % 4}", value


def produce(bootstrap: str, topic: str, records: list[tuple[str, dict[str, Any]]], partitions: int = 3) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for index, (key, value) in enumerate(records):
        producer.produce(topic, key=key.encode(), value=json.dumps(value).encode(), partition=index % partitions)
    assert producer.flush(30) == 0


def numbers(start: int, count: int) -> list[tuple[str, dict[str, Any]]]:
    return [("k", {"n": n}) for n in range(start, start + count)]


Consumed = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]


def consume_all(bootstrap: str, topic: str, partitions: int) -> list[Consumed]:
    """Every record of ``topic``: partition, key, value, headers."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "pipeline-tests",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
    records: list[Consumed] = []
    at_end: set[int] = set()

    def drained() -> bool:
        for message in consumer.consume(500, timeout=0.5):
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(message.partition() or 0)
                continue
            headers = message.headers()
            records.append(
                (message.partition() or 0, message.key(), message.value(), list(headers) if headers else None)
            )
        return len(at_end) == partitions

    try:
        eventually(drained, timeout=30, what=f"a consumer to read {topic} to its end")
    finally:
        consumer.close()
    return records


def fjord(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = RUN_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [FJORD, "pipeline", "run", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def test_orders_revenue_example_writes_per_minute_revenue(
    spark: SparkSession, kafka: BrokerProcess, tmp_path: Path
) -> None:
    topic = new_topic(kafka.bootstrap)
    orders = [order(i) for i in range(240)]
    # One later order moves the watermark (its time less the one-minute delay) past every earlier minute.
    closing = (
        "store-0",
        {"order_id": "o-late", "customer": "c-0", "amount": "1.00", "ts": (BASE + timedelta(minutes=10)).isoformat()},
    )
    produce(kafka.bootstrap, topic, [*orders, closing])
    pipeline = load_pipeline(
        EXAMPLES / "orders_revenue.yaml",
        [
            f"source.bootstrap={kafka.bootstrap}",
            f"source.subscribe={topic}",
            f"sink.path={tmp_path / 'out'}",
            f"sink.checkpoint={tmp_path / 'checkpoint'}",
        ],
    )
    spark_connector.run(pipeline, spark)

    expected = expected_revenue(orders)
    written = {
        (row.minute.replace(tzinfo=UTC), row.key): (row.revenue, row.orders)
        for row in spark.read.parquet(str(tmp_path / "out")).collect()
    }
    assert len(expected) == 20
    assert written == expected


def expected_revenue(orders: list[tuple[str, dict[str, Any]]]) -> dict[tuple[datetime, str], tuple[Decimal, int]]:
    """What the orders_revenue example must write for ``orders`` (once a later order closed every minute): revenue
    and order count per minute and store."""
    expected: dict[tuple[datetime, str], tuple[Decimal, int]] = defaultdict(lambda: (Decimal(0), 0))
    for key, value in orders:
        minute = datetime.fromisoformat(value["ts"]).replace(second=0)
        revenue, count = expected[(minute, key)]
        expected[(minute, key)] = (revenue + Decimal(value["amount"]), count + 1)
    return dict(expected)


def test_filter_enrich_example_writes_through_the_fjord_sink(
    spark: SparkSession, kafka: BrokerProcess, tmp_path: Path
) -> None:
    source, target = new_topic(kafka.bootstrap), new_topic(kafka.bootstrap, 2)
    orders = [order(i) for i in range(150)]
    produce(kafka.bootstrap, source, orders)
    pipeline = load_pipeline(
        EXAMPLES / "filter_enrich.yaml",
        [
            f"source.bootstrap={kafka.bootstrap}",
            f"source.subscribe={source}",
            f"sink.topic={target}",
            f"sink.checkpoint={tmp_path / 'checkpoint'}",
        ],
    )
    spark_connector.run(pipeline, spark)

    assert_filter_enrich_output(kafka.bootstrap, orders, source, target)


def positions(topic: str, count: int) -> list[str]:
    """Where each produced order landed, ``topic-partition@offset``, in production order: ``produce`` puts
    record ``i`` in partition ``i % 3``, and offsets count up from 0 within a partition of a new topic."""
    return [f"{topic}-{index % 3}@{index // 3}" for index in range(count)]


def test_fjord_sink_batch_write(spark: SparkSession, kafka: BrokerProcess) -> None:
    first, second = new_topic(kafka.bootstrap, 2), new_topic(kafka.bootstrap, 1)
    rows = spark.createDataFrame(
        [
            (first, "k1", b"v1", 1, [("h", b"x"), ("h", None)]),
            (first, "k2", None, 0, None),
            (second, None, b"v3", None, []),
        ],
        "topic string, key string, value binary, partition int, headers array<struct<key:string,value:binary>>",
    )
    # A job may say the acks and idempotence the sink enforces anyway, as Spark's Kafka sink lets it.
    rows.write.format("fjord").option("kafka.bootstrap.servers", kafka.bootstrap).option("kafka.acks", "all").option(
        "kafka.enable.idempotence", "true"
    ).mode("append").save()
    assert sorted(consume_all(kafka.bootstrap, first, 2), key=repr) == [
        (0, b"k2", None, None),
        (1, b"k1", b"v1", [("h", b"x"), ("h", None)]),
    ]
    assert consume_all(kafka.bootstrap, second, 1) == [(0, None, b"v3", None)]


def java_murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (32-bit, seed 0x9747b28c), written out here so the test does not trust librdkafka."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    whole = len(data) // 4 * 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def test_fjord_sink_partitions_keys_as_the_java_producer(spark: SparkSession, kafka: BrokerProcess) -> None:
    # Kafka's UtilsTest.testMurmur2 values.
    assert java_murmur2(b"21") == -973932308
    assert java_murmur2(b"foobar") == -790332482
    assert java_murmur2(b"a-little-bit-long-string") == -985981536
    topic = new_topic(kafka.bootstrap, 5)
    keys = [f"customer-{n}" for n in range(40)]
    frame = spark.createDataFrame([(key, f"v-{key}") for key in keys], "key string, value string")
    frame.write.format("fjord").mode("append").option("kafka.bootstrap.servers", kafka.bootstrap).option(
        "topic", topic
    ).save()
    landed = {key.decode(): partition for partition, key, _value, _headers in consume_all(kafka.bootstrap, topic, 5)
              if key is not None}
    # Utils.toPositive(murmur2(key)) % numPartitions, the Java producer's (and so Spark's Kafka sink's) choice.
    assert landed == {key: (java_murmur2(key.encode()) & 0x7FFFFFFF) % 5 for key in keys}


def test_fjord_sink_errors(spark: SparkSession, kafka: BrokerProcess) -> None:
    writer = (
        spark.createDataFrame([("k", "v")], "key string, payload string")
        .write.format("fjord")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .mode("append")
    )
    with pytest.raises(Exception, match="the rows to write need a 'value' column"):
        writer.option("topic", "anything").save()
    values = spark.createDataFrame([("v",)], "value string")

    def write(**options: str) -> None:
        """A new writer each time: a DataFrameWriter keeps the options it was given."""
        values.write.format("fjord").mode("append").option("kafka.bootstrap.servers", kafka.bootstrap).options(
            **options
        ).save()

    with pytest.raises(Exception, match="the topic to write to is missing"):
        write()
    unwritten = new_topic(kafka.bootstrap, 1)
    with pytest.raises(Exception, match=r"save mode Overwrite not allowed for the fjord format.*mode\(\"append\"\)"):
        values.write.format("fjord").mode("overwrite").option("kafka.bootstrap.servers", kafka.bootstrap).option(
            "topic", unwritten
        ).save()
    assert consume_all(kafka.bootstrap, unwritten, 1) == []
    with pytest.raises(Exception, match=r"option 'kafka\.acks' is not supported"):
        write(topic="t", **{"kafka.acks": "1"})
    # A Java client setting librdkafka does not know stops the write on the driver, naming the option.
    with pytest.raises(Exception, match=r"option 'kafka\.buffer\.memory' is not a setting of the Kafka client here"):
        write(topic="t", **{"kafka.buffer.memory": "1000000"})
    topic = new_topic(kafka.bootstrap, 1)
    beyond = spark.createDataFrame([("v", 5)], "value string, partition int")
    with pytest.raises(Exception, match=f"could not deliver a record to {topic}-5: "):
        beyond.write.format("fjord").mode("append").option("kafka.bootstrap.servers", kafka.bootstrap).option(
            "topic", topic
        ).option("kafka.delivery.timeout.ms", "5000").save()


def test_killed_pipeline_resumes_from_its_checkpoint_without_duplicates_or_gaps(
    spark: SparkSession, kafka: BrokerProcess, tmp_path: Path
) -> None:
    topic = new_topic(kafka.bootstrap)
    produce(kafka.bootstrap, topic, numbers(0, 300))
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    spec = tmp_path / "numbers.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "source": {"bootstrap": kafka.bootstrap, "subscribe": topic, "options": {"maxOffsetsPerTrigger": 60}},
                "decode": {"value": {"format": "json", "schema": "n INT"}},
                "transform": {"sql": "SELECT n, partition, offset FROM source"},
                "sink": {"format": "parquet", "path": str(output), "checkpoint": str(checkpoint)},
                "trigger": {"processingTime": "1 second"},
            }
        )
    )
    process = subprocess.Popen(
        [FJORD, "pipeline", "run", str(spec)],
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        commits = checkpoint / "commits"
        eventually(
            lambda: commits.is_dir() and any(p.name.isdigit() for p in commits.iterdir()),
            timeout=120,
            what="the pipeline to commit a micro-batch",
        )
        produce(kafka.bootstrap, topic, numbers(300, 100))
    finally:
        # The whole process group: the runner and the JVM it started, as a crash would take them.
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        assert process.stderr is not None
        process.stderr.close()
    done = len([p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()])
    assert done < 5, "the kill should land before the backlog of 300 records (5 batches) is done"

    # The restart (in this test's session, sparing a second JVM) does the rest in one batch and stops at the end.
    spark_connector.run(
        load_pipeline(spec, ["trigger=availableNow", "source.options.maxOffsetsPerTrigger=1000"]), spark
    )
    rows = spark.read.parquet(str(output)).collect()
    assert sorted(row.n for row in rows) == list(range(400))
    assert len({(row.partition, row.offset) for row in rows}) == 400


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fjord: "), lines
    return lines[0]


@pytest.mark.parametrize(
    ("mistake", "key"),
    [
        ({"sink": {"formt": "parquet"}}, "sink.formt: unknown key"),
        ({"trigger": {"processingTime": "soon"}}, "trigger.processingTime: must be an interval"),
        ({"source": {"startingOffsets": "sometimes"}}, "source.startingOffsets: must be 'earliest', 'latest'"),
        ({"decode": {"value": {"format": "json"}}}, "decode.value.schema: is required for json"),
        ({"sink": {"outputMode": "complete"}}, "sink.outputMode: the parquet sink supports only append"),
    ],
)
def test_pipeline_file_mistakes_are_one_line_and_exit_2(tmp_path: Path, mistake: dict[str, Any], key: str) -> None:
    document = yaml.safe_load((EXAMPLES / "orders_revenue.yaml").read_text())
    for section, values in mistake.items():
        document[section] = {**document[section], **values} if isinstance(document[section], dict) else values
    spec = tmp_path / "mistake.yaml"
    spec.write_text(yaml.safe_dump(document))
    result = fjord(str(spec), timeout=60)
    assert result.returncode == 2
    assert one_line_error(result).startswith(f"fjord: {spec}: {key}")


def test_unreadable_files_and_bad_overrides_exit_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("source: [unclosed\n")
    assert "is not valid YAML at line" in one_line_error(result := fjord(str(broken), timeout=60))
    assert result.returncode == 2
    assert "cannot read the pipeline file" in one_line_error(result := fjord(str(tmp_path / "none.yaml"), timeout=60))
    assert result.returncode == 2
    result = fjord(str(EXAMPLES / "orders_revenue.yaml"), "--set", "novalue", timeout=60)
    assert "--set: expected KEY.PATH=VALUE" in one_line_error(result)
    assert result.returncode == 2


def test_dry_run_prints_the_plan_without_starting_spark() -> None:
    result = fjord(
        str(EXAMPLES / "orders_revenue.yaml"),
        "--dry-run",
        "--set",
        "source.subscribe=payments",
        "--master",
        "spark://spark-master:7077",
        "--conf",
        "spark.log.level=WARN",
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    labels = [line.split()[0] for line in result.stdout.splitlines() if line and not line.startswith(" ")]
    assert labels == [
        "pipeline",
        "source",
        "decode",
        "watermark",
        "transform",
        "sink",
        "checkpoint",
        "trigger",
        "spark",
    ]
    assert "fjord source, subscribe payments on 127.0.0.1:9092, startingOffsets earliest" in result.stdout
    assert "GROUP BY window(ts, '1 minute'), key" in result.stdout
    assert "parquet files at data/pipelines/orders_revenue/output, output mode append" in result.stdout
    assert "master spark://spark-master:7077; nothing added to Spark's classpath, spark.log.level=WARN" in result.stdout
    assert result.stderr == ""
    kafka = fjord(str(EXAMPLES / "filter_enrich.yaml"), "--dry-run", "--set", "source.format=kafka", timeout=60)
    assert kafka.returncode == 0, kafka.stderr
    assert "packages org.apache.spark:spark-sql-kafka-0-10_2.13:" in kafka.stdout


def test_packages_that_cannot_be_had_are_one_line_and_exit_1(tmp_path: Path) -> None:
    # An empty Ivy cache and a repository nobody listens on: the connector can be had from nowhere.
    env = {"HOME": str(tmp_path), "FJORD_SPARK_REPOSITORY": f"http://127.0.0.1:{free_port()}/maven2"}
    result = fjord(str(EXAMPLES / "orders_revenue.yaml"), "--set", "source.format=kafka", env=env, timeout=60)
    assert result.returncode == 1
    line = one_line_error(result)
    assert "source.format kafka needs Spark's Kafka connector org.apache.spark:spark-sql-kafka-0-10_2.13:" in line
    assert "--jars" in line and "format fjord" in line
    missing_jar = fjord(str(EXAMPLES / "orders_revenue.yaml"), "--set", "source.format=kafka", "--jars", "/no/such.jar")
    assert missing_jar.returncode == 1
    assert one_line_error(missing_jar) == "fjord: --jars: /no/such.jar is not a file"
    (tmp_path / "order.avsc").write_text(json.dumps({"type": "record", "name": "Order", "fields": []}))
    avro = fjord(
        str(EXAMPLES / "orders_revenue.yaml"),
        "--set",
        f"decode.value={{format: avro, schemaFile: {tmp_path / 'order.avsc'}}}",
        env=env,
        timeout=60,
    )
    assert avro.returncode == 1
    assert "decode.value avro needs Spark's Avro package org.apache.spark:spark-avro_2.13:" in one_line_error(avro)


def test_cluster_and_query_problems_are_one_line(spark: SparkSession, kafka: BrokerProcess, tmp_path: Path) -> None:
    topic = new_topic(kafka.bootstrap, 2)
    produce(kafka.bootstrap, topic, [order(i) for i in range(10)], partitions=2)
    overrides = [
        f"source.bootstrap={kafka.bootstrap}",
        f"sink.path={tmp_path / 'out'}",
        f"sink.checkpoint={tmp_path / 'checkpoint'}",
    ]
    missing = fjord(
        str(EXAMPLES / "orders_revenue.yaml"),
        *[f"--set={item}" for item in overrides],
        "--set",
        "source.subscribe=no-such-topic",
        timeout=60,
    )
    assert missing.returncode == 1
    assert (
        one_line_error(missing) == f"fjord: source.subscribe: topic no-such-topic does not exist on {kafka.bootstrap}"
    )

    def failure(*more: str) -> PipelineError:
        with pytest.raises(PipelineError) as caught:
            spark_connector.run(load_pipeline(EXAMPLES / "orders_revenue.yaml", [*overrides, *more]), spark)
        assert "\n" not in str(caught.value)
        return caught.value

    bad_offset = failure(f"source.subscribe={topic}", f'source.startingOffsets={{"{topic}": {{"0": 2, "1": 99}}}}')
    assert str(bad_offset) == (
        f"source.startingOffsets: offset 99 of {topic}-1 is outside the partition's offsets [0, 5]"
    )
    assert bad_offset.exit_status == 1
    partial = failure(f"source.subscribe={topic}", f'source.startingOffsets={{"{topic}": {{"0": 2}}}}')
    assert str(partial).startswith("source.startingOffsets: option 'startingOffsets' must name exactly the subscribed")
    bad_sql = failure(f"source.subscribe={topic}", "transform.sql=SELECT nothing FROM source")
    assert str(bad_sql).startswith("transform.sql: [UNRESOLVED_COLUMN")
    assert bad_sql.exit_status == 2
    bad_schema = failure(f"source.subscribe={topic}", "decode.value.schema=amount DECIMAL(12,2), ts TIMESTAMP ((")
    assert str(bad_schema).startswith("decode.value: ")
    assert bad_schema.exit_status == 2
    unreachable = failure(f"source.bootstrap=127.0.0.1:{free_port()}", f"source.subscribe={topic}")
    assert str(unreachable).startswith("source.bootstrap: cannot reach the brokers at 127.0.0.1:")


def assert_filter_enrich_output(bootstrap: str, orders: list[tuple[str, dict[str, Any]]], source: str,
                                target: str) -> None:
    """What the filter_enrich example (YAML or SDP) must have written to ``target``: the orders of ``source`` of
    50 or more, each with its tier and the partition and offset it came from, and nothing else."""
    expected = []
    for (key, value), position in zip(orders, positions(source, len(orders)), strict=True):
        amount = Decimal(value["amount"])
        if amount >= 50:
            expected.append(
                (key, value["order_id"], value["customer"], amount, "large" if amount >= 100 else "medium", position)
            )
    written = []
    for _partition, key, raw, _headers in consume_all(bootstrap, target, 2):
        assert key is not None and raw is not None
        value = json.loads(raw, parse_float=Decimal)
        written.append(
            (
                key.decode(),
                value["order_id"],
                value["customer"],
                Decimal(value["amount"]),
                value["tier"],
                value["source"],
            )
        )
    assert 0 < len(expected) < len(orders)
    assert sorted(written) == sorted(expected)
