"""Spark benchmark (issue 10 §4, issue 23): a batch read of a whole topic with the ``fjord`` source, reading
uploaded data straight from object storage and forced through the broker, in three kinds of Spark session, one
Markdown table on stdout.

    .venv/bin/python bench/spark.py [--size 1GB] [--partitions 16] [--modes classic,connect,standalone] [--dir DIR]

The cluster is one controller and one broker (``fjord server start`` processes; the direct path asks the
controller quorum where the data is) over a ``file://`` bucket, so no S3 server competes for the 2 cores. A topic
of ``--partitions`` partitions is filled with ``--size`` of 1 KiB records (``acks=all``, uncompressed random
bytes), the broker uploads all of it (a short upload interval; the run waits until the
controller's metadata shows every partition uploaded to its end), then each mode reads the whole topic twice,
``fjord.read=direct`` and ``fjord.read=broker``, after a small warm-up read through each:

- ``classic``: ``SparkSession.builder.master("local[*]")``, the driver and its Python workers on this machine;
- ``connect``: ``SparkSession.builder.remote("local[*]")``, a local Spark Connect server and a gRPC client, as SDP
  and hosted Spark run Python code;
- ``standalone``: a Spark standalone master and two workers (``testkit/spark_standalone.py``, one core and 1 GiB
  each), so the direct reads happen in the executors' Python workers; they reach the ``file://`` bucket because
  they run on this machine (on other hosts ``fjord.object.store`` must be a bucket every executor can read).

Each mode runs in its own process (``--measure MODE``; a Connect session cannot share a process with a classic
one). The Spark job sums ``length(value)`` so that every row is produced and nothing is collected on the driver.

Columns: rows/s and MB/s (10^6 bytes of record values per second, from the job's start to its end, planning
included), and the broker's CPU seconds (psutil, all threads, user + system) per GB of record values during the
read: what each path costs the broker. The default 1 GB classic run took about 1.5 minutes here (2 cores); on
2026-11-25 it gave direct 130,833 rows/s (134 MB/s, 0.1 broker CPU s/GB) and through the broker 57,273 rows/s
(58.6 MB/s, 2.9 s/GB): 2.3x the rate, 5% of the broker CPU. On 2026-11-29 (``--size 1GB``, 2.4 minutes in
all) classic/Connect/standalone gave direct 178.5/190.5/142.9 MB/s and through the broker 74.0/71.6/70.5 MB/s
(2.41x/2.66x/2.03x; Connect against classic: direct -6%, broker +3% in time); a run of the same minutes with other
jobs on the machine gave 1.51x/1.88x/1.92x. Both paths are bound by the Spark workers' Python
(the direct path decodes records in Python; the broker path gets them decoded by librdkafka), so the figures
move by tens of percent with the machine's other load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
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
from spark_connector.session_setup import AnySession  # noqa: E402
from spark_connector.storage_lookup import ClusterFacts, locate_ranges  # noqa: E402
from testkit.spark_standalone import start_standalone  # noqa: E402

RECORD_BYTES = 1024
TOPIC = "bench-spark"
UPLOAD_TIMEOUT_S = 300.0
MEASURE_TIMEOUT_S = 3600.0
WARM_UP_RECORDS = 100
MB = 1_000_000
MODES = ("classic", "connect", "standalone")
PATHS = ("direct", "broker")
RESULT = "RESULT "


@dataclass(frozen=True)
class Result:
    mode: str
    path: str
    rows: int
    value_bytes: int
    seconds: float
    broker_cpu_s: float

    def line(self) -> str:
        gb = self.value_bytes / 1e9
        return (
            f"| {self.mode} | {self.path} | {self.rows} | {self.rows / self.seconds:,.0f} | "
            f"{self.value_bytes / MB / self.seconds:.1f} | {self.broker_cpu_s / gb:.1f} | {self.seconds:.1f} |"
        )


def parse_size(text: str) -> int:
    """``--size``: bytes of record values, e.g. ``1GB``, ``256MB`` (powers of ten, as the MB/s column)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(GB|MB)\s*", text, re.IGNORECASE)
    if found is None:
        raise argparse.ArgumentTypeError(f"expected a size such as 1GB or 256MB, got {text!r}")
    return int(float(found.group(1)) * (1e9 if found.group(2).upper() == "GB" else MB))


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


@dataclass(frozen=True)
class Target:
    """What a measuring process reads: the broker, the bucket, the topic's partitions, the broker's process."""

    bootstrap: str
    store: str
    partitions: int
    broker_pid: int


def read(spark: AnySession, mode: str, target: Target, path: str, *, ending: str = "latest") -> Result:
    broker = psutil.Process(target.broker_pid)
    frame = (
        spark.read.format("fjord")
        .option("kafka.bootstrap.servers", target.bootstrap)
        .option("subscribe", TOPIC)
        .option("endingOffsets", ending)
        .option("fjord.object.store", target.store)
        .option("fjord.read", path)
        .load()
    )
    cpu = broker.cpu_times()
    started = time.monotonic()
    row = frame.selectExpr("count(*) AS n", "sum(length(value)) AS bytes").collect()[0]
    seconds = time.monotonic() - started
    after = broker.cpu_times()
    used = (after.user - cpu.user) + (after.system - cpu.system)
    return Result(mode, path, int(row.n), int(row.bytes), seconds, used)


def warm_up(spark: AnySession, target: Target) -> None:
    """A small read through each path first, so that neither measured run pays for the JVM's and the Python
    workers' start (the first job of a session takes tens of seconds longer on this machine)."""
    by_partition = ", ".join(f'"{p}": {WARM_UP_RECORDS}' for p in range(target.partitions))
    for path in PATHS:
        read(spark, "warm-up", target, path, ending=f'{{"{TOPIC}": {{{by_partition}}}}}')


def session(mode: str, master: str) -> AnySession:
    """The mode's session: classic ``local[*]`` or on the standalone ``master``, or a local Spark Connect server."""
    builder = SparkSession.builder.remote("local[*]") if mode == "connect" else SparkSession.builder.master(master)
    builder = (
        builder.appName(f"fjord-bench-spark-{mode}")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
    )
    if mode == "standalone":
        builder = builder.config("spark.executor.memory", "512m")  # fits the workers' 1 GiB
    spark = builder.getOrCreate()
    if mode != "connect":
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def measure(args: argparse.Namespace) -> None:
    """``--measure MODE``, in a process of its own: the warm-up and both reads, each result a JSON line."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    target = Target(args.bootstrap, args.store, args.partitions, args.broker_pid)
    spark = session(args.measure, args.master)
    try:
        spark_connector.register(spark)
        warm_up(spark, target)
        for path in PATHS:
            result = read(spark, args.measure, target, path)
            print(RESULT + json.dumps(result.__dict__), flush=True)
    finally:
        spark.stop()


def run_mode(mode: str, master: str, target: Target) -> list[Result]:
    argv = [sys.executable, __file__, "--measure", mode, "--master", master, "--bootstrap", target.bootstrap,
            "--store", target.store, "--partitions", str(target.partitions), "--broker-pid", str(target.broker_pid)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    began = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=MEASURE_TIMEOUT_S, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the {mode} run failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    print(f"{mode}: {time.monotonic() - began:.0f} s in all", file=sys.stderr)
    return [Result(**json.loads(line[len(RESULT):])) for line in done.stdout.splitlines() if line.startswith(RESULT)]


def summary(results: list[Result]) -> list[str]:
    """The targets: direct at least 2x the broker's rate in every mode; Connect within 10% of classic."""
    by = {(r.mode, r.path): r for r in results}
    lines = []
    for mode in MODES:
        if (mode, "direct") in by:
            direct, through = by[(mode, "direct")], by[(mode, "broker")]
            lines.append(
                f"{mode}: direct/broker rate {through.seconds / direct.seconds:.2f}x; broker CPU during the direct "
                f"read {100 * direct.broker_cpu_s / max(through.broker_cpu_s, 1e-9):.0f}% of the broker read's"
            )
    if ("connect", "direct") in by and ("classic", "direct") in by:
        costs = ", ".join(
            f"{path} {100 * (by[('connect', path)].seconds / by[('classic', path)].seconds - 1):+.0f}%"
            for path in PATHS
        )
        lines.append(f"Spark Connect against classic (time): {costs}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("1GB"),
                        help="record values to write and read, e.g. 1GB (default) or 256MB")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--modes", default=",".join(MODES), help=f"a comma-separated subset of {','.join(MODES)}")
    parser.add_argument("--dir", type=Path, default=None, help="where the cluster keeps its data (default: temp)")
    parser.add_argument("--measure", choices=MODES, help=argparse.SUPPRESS)
    for internal in ("--master", "--bootstrap", "--store"):
        parser.add_argument(internal, help=argparse.SUPPRESS)
    parser.add_argument("--broker-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args)
        return
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    if unknown := set(modes) - set(MODES):
        parser.error(f"--modes: unknown {sorted(unknown)}; choose from {','.join(MODES)}")
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
    results: list[Result] = []
    try:
        asyncio.run(wait_ready(cluster, 60))
        broker_node = cluster.brokers[0]
        assert broker_node.proc is not None
        bootstrap, port = broker_node.spec.address, broker_node.spec.port
        began = time.monotonic()
        count = produce(bootstrap, args.partitions, args.size)
        print(
            f"produced {count} records of {RECORD_BYTES} B to {args.partitions} partitions in "
            f"{time.monotonic() - began:.0f} s",
            file=sys.stderr,
        )
        wait_uploaded(bootstrap, port, store, args.partitions)
        target = Target(bootstrap, store, args.partitions, broker_node.proc.pid)
        for mode in modes:
            if mode == "standalone":
                spark_cluster = start_standalone(root / "spark-standalone", workers=2, env={"PYTHONPATH": str(ROOT)})
                try:
                    results += run_mode(mode, spark_cluster.url, target)
                finally:
                    spark_cluster.stop()
            else:
                results += run_mode(mode, "local[*]", target)
    finally:
        cluster.stop_all(timeout=60)
    print(
        f"\nBatch read of a whole topic: {count} records of {RECORD_BYTES} B ({args.size / MB:.0f} MB of values) "
        f"over {args.partitions} partitions, {os.cpu_count()} cores, file:// object store; classic and connect "
        "local[*], standalone a master and two 1-core workers\n"
    )
    print("| mode | fjord.read | rows | rows/s | MB/s | broker CPU s/GB | seconds |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for result in results:
        print(result.line())
    print()
    for line in summary(results):
        print(line)


if __name__ == "__main__":
    main()
