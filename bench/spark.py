"""Spark benchmark (issue 10 §4): a batch read of a whole topic with the ``fjord`` source, reading uploaded data
straight from object storage and forced through the broker, one Markdown table on stdout.

    .venv/bin/python bench/spark.py [--mb 1024] [--partitions 16] [--dir DIR]

The cluster is one controller and one broker (``fjord server start`` processes; the direct path asks the
controller quorum where the data is) over a ``file://`` bucket, so no S3 server competes for the 2 cores. A topic
of ``--partitions`` partitions is filled with ``--mb`` MB of 1 KiB records (``acks=all``, uncompressed random
bytes), the broker uploads all of it (a short upload interval; the run waits until the
controller's metadata shows every partition uploaded to its end), then Spark (``local[*]``) reads the whole topic
twice: ``fjord.read=direct`` and ``fjord.read=broker``, after a small warm-up read through each. The Spark job
sums ``length(value)`` so that every row is produced and nothing is collected on the driver.

Columns: rows/s and MB/s (10^6 bytes of record values per second, from the job's start to its end, planning
included), and the broker's CPU seconds (psutil, all threads, user + system) per GB of record values during the
read: what each path costs the broker. The default 1 GB runs in about 1.5 minutes here (2 cores); on
2026-11-25 it gave direct 130,833 rows/s (134 MB/s, 0.1 broker CPU s/GB) and through the broker 57,273 rows/s
(58.6 MB/s, 2.9 s/GB): 2.3x the rate, 5% of the broker CPU. Both paths are bound by the Spark workers' Python
(the direct path decodes records in Python; the broker path gets them decoded by librdkafka), so the figures
move by tens of percent with the machine's other load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

import spark_connector  # noqa: E402 - after the path is set, as for the other benchmarks run as scripts
from node.local_cluster import LocalCluster, plan_cluster, wait_ready  # noqa: E402
from spark_connector.direct_plan import DirectRange  # noqa: E402
from spark_connector.offset_lookup import OffsetLookup  # noqa: E402
from spark_connector.offsets import OffsetRange  # noqa: E402
from spark_connector.options import parse_options  # noqa: E402
from spark_connector.storage_lookup import ClusterFacts, locate_ranges  # noqa: E402

RECORD_BYTES = 1024
TOPIC = "bench-spark"
UPLOAD_TIMEOUT_S = 300.0
WARM_UP_RECORDS = 100
MB = 1_000_000


@dataclass(frozen=True)
class Result:
    path: str
    rows: int
    value_bytes: int
    seconds: float
    broker_cpu_s: float

    def line(self) -> str:
        gb = self.value_bytes / 1e9
        return (
            f"| {self.path} | {self.rows} | {self.rows / self.seconds:,.0f} | "
            f"{self.value_bytes / MB / self.seconds:.1f} | {self.broker_cpu_s / gb:.1f} | {self.seconds:.1f} |"
        )


def produce(bootstrap: str, partitions: int, total_bytes: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future is done
    admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=1)])[TOPIC].result(timeout=30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 512 * 1024,
        }
    )
    count = total_bytes // RECORD_BYTES
    payload = os.urandom(RECORD_BYTES * 64)
    for i in range(count):
        start = (i % 63) * RECORD_BYTES
        while True:
            try:
                producer.produce(TOPIC, value=payload[start : start + RECORD_BYTES], partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise SystemExit("the producer could not deliver every record in 120 s")
    return count


def wait_uploaded(bootstrap: str, port: int, store: str, partitions: int) -> None:
    options = parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC}, streaming=False)
    lookup = OffsetLookup(options)
    tps = [(TOPIC, p) for p in range(partitions)]
    latest = lookup.latest(tps)
    facts = ClusterFacts([("127.0.0.1", port)], lookup.cluster_id(), lookup.topic_ids([TOPIC]))
    ranges = [OffsetRange(TOPIC, p, 0, latest[(TOPIC, p)]) for p in range(partitions)]
    deadline = time.monotonic() + UPLOAD_TIMEOUT_S
    while time.monotonic() < deadline:
        planned = locate_ranges(facts, store, ranges)
        if all(isinstance(t, DirectRange) and t.direct_end == t.offsets.end for t in planned):
            return
        time.sleep(1.0)
    raise SystemExit(f"the broker did not upload the whole topic within {UPLOAD_TIMEOUT_S:.0f} s")


def read(
    spark: SparkSession, bootstrap: str, store: str, path: str, broker: psutil.Process, *, ending: str = "latest"
) -> Result:
    frame = (
        spark.read.format("fjord")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", TOPIC)
        .option("endingOffsets", ending)
        .option("fjord.object.store", store)
        .option("fjord.read", path)
        .load()
    )
    cpu = broker.cpu_times()
    started = time.monotonic()
    row = frame.selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
    seconds = time.monotonic() - started
    after = broker.cpu_times()
    used = (after.user - cpu.user) + (after.system - cpu.system)
    return Result(path, int(row.n), int(row.bytes), seconds, used)


def warm_up(spark: SparkSession, bootstrap: str, store: str, partitions: int, broker: psutil.Process) -> None:
    """A small read through each path first, so that neither measured run pays for the JVM's and the Python
    workers' start (the first job of a session takes tens of seconds longer on this machine)."""
    by_partition = ", ".join(f'"{p}": {WARM_UP_RECORDS}' for p in range(partitions))
    for path in ("direct", "broker"):
        read(spark, bootstrap, store, path, broker, ending=f'{{"{TOPIC}": {{{by_partition}}}}}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="MB of 1 KiB records to write and read (default 1024)")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--dir", type=Path, default=None, help="where the cluster keeps its data (default: temp)")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="fjord-bench-spark-"))
    store = f"0@file://{root.resolve() / 'objects'}"
    extra = {
        "s3.wal.upload.threshold": "64MiB",
        "s3.wal.cache.size": "256MiB",
        "s3.wal.upload.interval.ms": "2000",
        "s3.block.cache.size": "128MiB",
    }
    cluster = LocalCluster(plan_cluster(root, controllers=1, brokers=1, object_store=store, extra=extra))
    cluster.start_all()
    try:
        asyncio.run(wait_ready(cluster, 60))
        broker_node = cluster.brokers[0]
        assert broker_node.proc is not None
        broker = psutil.Process(broker_node.proc.pid)
        bootstrap, port = broker_node.spec.address, broker_node.spec.port
        began = time.monotonic()
        count = produce(bootstrap, args.partitions, args.mb * MB)
        print(
            f"produced {count} records of {RECORD_BYTES} B to {args.partitions} partitions in "
            f"{time.monotonic() - began:.0f} s",
            file=sys.stderr,
        )
        wait_uploaded(bootstrap, port, store, args.partitions)
        os.environ["PYSPARK_PYTHON"] = sys.executable
        spark = (
            SparkSession.builder.master("local[*]")
            .appName("fjord-bench-spark")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark_connector.register(spark)
        try:
            warm_up(spark, bootstrap, store, args.partitions, broker)
            results = [read(spark, bootstrap, store, path, broker) for path in ("direct", "broker")]
        finally:
            spark.stop()
    finally:
        cluster.stop_all(timeout=60)
    print(
        f"\nBatch read of a whole topic: {count} records of {RECORD_BYTES} B ({args.mb} MB of values) over "
        f"{args.partitions} partitions, Spark local[*] on {os.cpu_count()} cores, file:// object store\n"
    )
    print("| fjord.read | rows | rows/s | MB/s | broker CPU s/GB | seconds |")
    print("|---|---:|---:|---:|---:|---:|")
    for result in results:
        print(result.line())
    direct, through = results
    print(
        f"\ndirect/broker rate: {direct.seconds and through.seconds / direct.seconds:.2f}x; broker CPU during the "
        f"direct read: {100 * direct.broker_cpu_s / max(through.broker_cpu_s, 1e-9):.0f}% of the broker read's"
    )


if __name__ == "__main__":
    main()
