"""Broker benchmark (issue 3, "Performance"): real ``fjord server start`` processes driven by confluent-kafka
clients, one Markdown table on stdout.

    .venv/bin/python bench/broker.py [--quick] [--only NAME ...] [--producers N] [--rounds N] [--dir DIR]

Every client runs in a process of its own (``multiprocessing``, spawn) so that librdkafka and the Python loops
feeding it never share the broker's GIL. Producers use the issue's settings: 1 KiB records, ``acks=all``,
``batch.size`` 1 MiB, ``linger.ms`` 5. Scenarios:

- ``produce-1p`` / ``produce-16p``: closed-loop produce of a fixed volume to a topic with 1 or 16 partitions,
  each on a fresh broker whose WAL cache (3 GiB) and upload threshold (2 GiB) keep uploads out of the run;
  MB/s from the first ``produce()`` to the end of ``flush()``; latency is librdkafka's per-message delivery
  latency (enqueue to acknowledgement, so it includes the client's own queue) sampled on every 64th record.
  ``produce-1p uploading`` (run by ``consume-catchup``) is the same with a 16 MiB upload threshold, so building
  and writing objects is part of it.
- ``consume-tail``: consume, from offset 0, what ``produce-1p`` just wrote; the data is still in the broker's
  LogCache, so this is the in-memory fetch path.
- ``consume-catchup``: a second broker with a small WAL cache and upload threshold is filled, then restarted
  (a clean stop uploads everything; the restarted broker's caches are cold), and the data is consumed from
  offset 0 - every byte comes from object storage through the block cache.
- ``e2e-latency``: a producer at a fixed 20 MB/s stamps each record with ``time.time_ns()`` as it hands it to
  librdkafka; a consumer already waiting at the log end takes (receive time - stamp), polling record by record.
  The broker has the cache sizes and upload threshold of ``config/server.properties`` (what ``make run`` serves
  with), so it uploads objects and evicts cached data while it is measured, as a broker does in use; the run is
  30 s so that several uploads fall into it.

Columns: MB/s (10^6 bytes of record values per second), records/s, latency p50/p99 in ms; for e2e-latency the
producer's own acknowledgement p99 (``ack p99``: linger + the produce round trip, so e2e minus ack is what the
fetch side adds); from the broker's histograms, whose p99 is the upper bound of its bucket: the Produce handling p99
(decoded request to encoded response: validation, WAL write and fdatasync, thread hand-offs), the event-loop lag
p99 (how late a 10 ms timer fired: time any request spent waiting for the loop, the GIL or a CPU) and the gen-2
garbage collections with the bucket bound of the longest; then the broker's peak RSS
during the scenario (psutil, sampled every 50 ms), the broker's CPU seconds (all threads) per GB of record values
(the figure to compare runs by on a shared machine: MB/s moves with other load, CPU per GB hardly does), the number
of object-store PUT and GET requests (the broker's ``fjord_object_store_*`` counters) and the
Produce/Fetch requests the broker served during the scenario (its Prometheus endpoint, ``metrics.port``), and
the scenario's duration. The object store is the local filesystem (``file://``) so S3 server CPU does not eat the
2 cores; it counts one request per call (a large object is one PUT here where S3 would take a multipart upload).

Transactions (issue 9), ``txn``: a 16-partition topic is written by an idempotent producer
(``produce-16p idempotent``), and on another fresh broker by a transactional producer committing every 100 ms
(``produce-16p transactional``; that broker has created and loaded ``__transaction_state`` first, as a running
cluster has it; the disk is synced and the broker quiet before every row). The transactional topic is then
read from offset 0 with ``isolation.level`` read_uncommitted and read_committed (``consume-16p read_uncommitted`` /
``read_committed``; see below for the order). Both produce rows take delivery reports for the sampled records only: a
Python callback per record cost the client about 1.7 CPU s/GB, and during each commit's flush, while librdkafka's
broker thread spins (flushing, it wakes at once whenever records wait for an in-flight slot), that CPU came out of
the broker's share of the 2 cores. Delivery is checked otherwise: the idempotent topic's end offsets must add up to
the records asked for (a shortfall is an error of the row), a transactional record that fails fails its commit, and
each read needs every record. The figures to compare are the transactional/idempotent and
read_committed/read_uncommitted ratios. Single runs of a few seconds move by half on a 2-core box, so the scenario
runs ``--rounds`` times (5): the table shows each row's median round, and the lines after it each round's ratios and
their medians. Within a round each isolation level is read twice, in ABBA order, and the faster read counts: one read
ran at about 160, 230 or 430 MB/s at both levels, by how the 2 cores happened to be shared between the broker
and the client's two busy threads, so a single read per level made the consume ratio a coin toss.

Security (issue 13), ``security``: one fresh broker with a PLAINTEXT, a SASL_PLAINTEXT and a SASL_SSL listener
(SCRAM-SHA-512 user made with ``--add-scram``, TLS certificates made for the run). A 16-partition topic is produced
and consumed over PLAINTEXT and another over SASL_SSL (``produce-16p`` / ``consume-16p`` PLAINTEXT and SASL_SSL: the
SASL_SSL/PLAINTEXT ratios are the figures to read); then ``scram-connect``: 1,000 new connections (200 with
``--quick``) each authenticate with SCRAM, 32 at a time, over SASL_PLAINTEXT and over SASL_SSL
(``bench/scram_storm.py``); records/s is authenticated connections per second.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import multiprocessing as mp
import os
import re
import resource
import shutil
import ssl
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

from bench.scram_storm import ScramStorm  # noqa: E402
from storage.config import read_properties  # noqa: E402
from testkit.node_process import BrokerProcess, start_broker  # noqa: E402
from testkit.tls_certs import CertificateAuthority  # noqa: E402

KiB = 1024
MiB = 1024 * KiB
MB = 1_000_000
RECORD = 1 * KiB
CLIENT_TIMEOUT_S = 120.0
_METRICS_PORT = re.compile(r"metrics served on http://[\d.]+:(\d+)/metrics")
_REQUESTS = re.compile(r'^fjord_broker_requests_total\{api="(\w+)"\} ([\d.e+]+)$', re.MULTILINE)
_STORE = re.compile(r"^fjord_object_store_(puts|gets)_total ([\d.e+]+)$", re.MULTILINE)
_LAG_BUCKET = re.compile(r'^fjord_broker_event_loop_lag_seconds_bucket\{le="([^"]+)"\} ([\d.e+]+)$', re.MULTILINE)
_GC_BUCKET = re.compile(
    r'^fjord_broker_gc_seconds_bucket\{generation="2",le="([^"]+)"\} ([\d.e+]+)$', re.MULTILINE
)
_PRODUCE_BUCKET = re.compile(
    r'^fjord_broker_request_seconds_bucket\{api="Produce",le="([^"]+)"\} ([\d.e+]+)$', re.MULTILINE
)
_STAMP = struct.Struct(">q")
SHIPPED_CONFIG = ROOT / "config" / "server.properties"
_CACHE_KEYS = ("s3.wal.cache.size", "s3.wal.upload.threshold", "s3.block.cache.size")

PRODUCER_CONFIG: dict[str, object] = {
    "acks": "all",
    "batch.size": 1 * MiB,
    "linger.ms": 5,
    "queue.buffering.max.kbytes": 32 * 1024,
    "queue.buffering.max.messages": 1_000_000,
    "enable.idempotence": False,
}
CONSUMER_CONFIG: dict[str, object] = {
    "enable.auto.commit": False,
    "fetch.max.bytes": 64 * MiB,
    "max.partition.fetch.bytes": 16 * MiB,
    "fetch.wait.max.ms": 100,
    "queued.max.messages.kbytes": 256 * 1024,
}


@dataclasses.dataclass(frozen=True)
class Sizes:
    produce_bytes: int
    catchup_bytes: int
    latency_seconds: float
    latency_rate: int
    #: New SCRAM connections per listener in the security scenario.
    scram_connections: int


FULL = Sizes(produce_bytes=1024 * MiB, catchup_bytes=512 * MiB, latency_seconds=30.0, latency_rate=20 * MB,
             scram_connections=1000)
QUICK = Sizes(produce_bytes=128 * MiB, catchup_bytes=64 * MiB, latency_seconds=5.0, latency_rate=20 * MB,
              scram_connections=200)
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_USER = "bench"
SCRAM_PASSWORD = "bench-scram-password"
#: New connections in flight at once in the SCRAM storm: a fleet of clients starting together, not one by one.
STORM_CONCURRENCY = 32


@dataclasses.dataclass(frozen=True)
class Job:
    """What one client process is asked to do (plain data: it crosses a process boundary)."""

    bootstrap: str
    topic: str
    partitions: int = 1
    #: Bytes of record values to produce, or records to consume.
    amount: int = 0
    #: Producer pacing in bytes/s (0: as fast as the broker takes them); stamped records carry their send time.
    rate: int = 0
    #: Consumer starts at the log end (latency scenario) instead of offset 0.
    from_end: bool = False
    #: Producer: "" (plain, no idempotence), "idempotent", or "transactional" (commit every ``commit_every_s``).
    mode: str = ""
    commit_every_s: float = 0.1
    #: Consumer isolation.level.
    isolation: str = "read_uncommitted"
    #: Client settings added to the producer's or consumer's (security.protocol, sasl.*, ssl.* for the security
    #: scenario); pairs rather than a dict so the job stays hashable plain data.
    client: tuple[tuple[str, str], ...] = ()
    #: Producer: delivery reports for the sampled records only (every 64th), not a Python callback per record, so the
    #: row's errors count only those records' failures; whoever runs the job then checks delivery otherwise (the
    #: ``txn`` scenario: end offsets, commits, the reads).
    sampled_reports_only: bool = False


@dataclasses.dataclass
class _Errors:
    count: int = 0
    last: str = ""

    def record(self, text: str) -> None:
        self.count += 1
        self.last = text


@dataclasses.dataclass
class ClientResult:
    """What one client process reports back (plain data: it crosses a process boundary)."""

    started: float
    finished: float
    records: int
    value_bytes: int
    latencies_ms: list[float]
    errors: int = 0
    error: str = ""
    #: CPU seconds of the whole client process (librdkafka's threads included).
    cpu_s: float = 0.0


@dataclasses.dataclass
class Row:
    scenario: str
    mb_s: float
    records_s: float
    p50_ms: float | None
    p99_ms: float | None
    rss_mib: float
    #: Broker CPU seconds (all threads) per GB of record values: unlike MB/s, barely moved by other load on the box.
    cpu_s_per_gb: float
    #: The same for the client processes together: a client near 1 CPU s per wall second is the bottleneck.
    client_cpu_s_per_gb: float
    #: Object-store PUT / GET requests during the scenario (the broker's fjord_object_store_* counters).
    store: str
    requests: str
    seconds: float
    note: str = ""
    #: e2e-latency only: the producer's own p99 (enqueue to acknowledgement, librdkafka's msg.latency()), so the
    #: e2e figure splits into linger + produce round trip versus what the fetch side adds.
    ack_p99_ms: float | None = None
    #: The broker's event-loop lag p99 (upper bound of its histogram bucket) and its gen-2 GC passes: how much of
    #: a request's wait was the loop being busy or stalled rather than the request's own work.
    lag_p99_ms: float | None = None
    gc2: str = "-"
    #: The broker's own Produce time p99 (decoded request to encoded response: validation, WAL write, fsync).
    produce_p99_ms: float | None = None


# -- client processes (top-level functions: they are spawned) ---------------------------------------------------


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def produce_worker(job: Job, results: Any) -> None:
    """Produces ``job.amount`` bytes of 1 KiB records (spread over the partitions by librdkafka)."""
    latencies: list[float] = []
    errors = _Errors()

    def sampled(err: Any, msg: Any) -> None:
        if err is not None:
            errors.record(str(err))
        else:
            latencies.append(msg.latency() * 1000)

    def unsampled(err: Any, msg: Any) -> None:
        if err is not None:
            errors.record(str(err))

    topic, rate = job.topic, job.rate
    config: dict[str, object] = {"bootstrap.servers": job.bootstrap, **PRODUCER_CONFIG, **dict(job.client)}
    transactional = job.mode == "transactional"
    if job.mode:
        config["enable.idempotence"] = True
    if transactional:
        config["transactional.id"] = f"bench-{os.getpid()}"
    producer = Producer(config)
    next_commit = 0.0
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
        next_commit = time.monotonic() + job.commit_every_s
    value = os.urandom(RECORD)
    count = job.amount // RECORD
    produce = producer.produce
    started = time.time()
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    stamped = rate > 0
    sent = 0
    try:
        while sent < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"produced only {sent} of {count} records in {CLIENT_TIMEOUT_S}s")
            if stamped:
                due = min(count, int((time.time() - started) * rate / RECORD) + 1)
                if sent >= due:
                    time.sleep(0.0005)
                    producer.poll(0)
                    continue
            else:
                due = count
            while sent < due:
                payload = _STAMP.pack(time.time_ns()) + value[8:] if stamped else value
                try:
                    if sent % 64 == 0:
                        produce(topic, payload, on_delivery=sampled)
                    elif job.sampled_reports_only:
                        produce(topic, payload)
                    else:
                        produce(topic, payload, on_delivery=unsampled)
                except BufferError:
                    producer.poll(0.005)
                    continue
                sent += 1
                if sent % 1024 == 0:
                    producer.poll(0)
                if transactional and sent % 64 == 0 and time.monotonic() >= next_commit:
                    producer.commit_transaction(max(deadline - time.monotonic(), 1.0))
                    producer.begin_transaction()
                    next_commit = time.monotonic() + job.commit_every_s
        if transactional:
            producer.commit_transaction(max(deadline - time.monotonic(), 1.0))
        left = producer.flush(max(deadline - time.monotonic(), 1.0))
        if left:
            raise TimeoutError(f"{left} records still undelivered at the deadline")
    except (KafkaException, TimeoutError) as exc:
        errors.record(f"{type(exc).__name__}: {exc}")
    results.put(
        ClientResult(started, time.time(), sent, sent * RECORD, latencies, errors.count, errors.last, _cpu_seconds())
    )


def consume_worker(job: Job, ready: Any, results: Any) -> None:
    """Reads ``job.amount`` records from offset 0 (or from the end, for the latency scenario, where every record
    carries its send time in its first 8 bytes)."""
    from_end, expect = job.from_end, job.amount
    consumer = Consumer(
        {
            "bootstrap.servers": job.bootstrap,
            "group.id": f"bench-{os.getpid()}",
            "isolation.level": job.isolation,
            **CONSUMER_CONFIG,
            **dict(job.client),
        }
    )
    partitions = [TopicPartition(job.topic, p) for p in range(job.partitions)]
    for tp in partitions:
        # The latency reader starts at the current end, resolved here so no fetch is spent finding it.
        tp.offset = consumer.get_watermark_offsets(tp, timeout=30)[1] if from_end else OFFSET_BEGINNING
    consumer.assign(partitions)
    consumer.consume(num_messages=1, timeout=0.5)  # connects and sends the first fetch before the producer starts
    ready.set()
    records = value_bytes = errors = 0
    error = ""
    latencies: list[float] = []
    started = 0.0
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while records < expect and time.monotonic() < deadline:
        if from_end:
            # consume() returns only when it has all num_messages or its timeout passed, which would add up to the
            # timeout to every latency; poll() hands over each record as soon as librdkafka has it.
            one = consumer.poll(0.5)
            batch = [one] if one is not None else []
        else:
            batch = consumer.consume(num_messages=20_000, timeout=0.5)
        if not batch:
            continue
        now = time.time_ns()
        if not started:
            started = time.time()
        for msg in batch:
            if msg.error() is not None:
                errors += 1
                error = str(msg.error())
                continue
            records += 1
            value_bytes += len(msg)
            if from_end:
                latencies.append((now - _STAMP.unpack_from(msg.value() or bytes(8))[0]) / 1e6)
    finished = time.time()
    if records < expect:
        errors += 1
        error = error or f"consumed {records} of {expect} records within {CLIENT_TIMEOUT_S}s"
    consumer.close()
    cpu = _cpu_seconds()
    results.put(ClientResult(started or finished, finished, records, value_bytes, latencies, errors, error, cpu))


# -- the broker side ----------------------------------------------------------------------------------------------


class Broker:
    """One broker process plus what the table reads from it: peak RSS, objects written, request counts."""

    def __init__(self, data_dir: Path, overrides: dict[str, str], args: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.overrides = {"metrics.port": "0", **overrides}
        self.args = args
        self.process: BrokerProcess | None = None
        self.metrics_port = 0

    def start(self) -> None:
        self.process = start_broker(self.data_dir, self.overrides, args=self.args)
        found = _METRICS_PORT.search(self.process.log_text())
        self.metrics_port = int(found.group(1)) if found else 0

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    @property
    def bootstrap(self) -> str:
        assert self.process is not None
        return self.process.bootstrap

    def endpoint(self, listener: str) -> tuple[str, int]:
        assert self.process is not None
        return self.process.endpoints[listener]

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.proc.pid

    def objects(self) -> int:
        store = self.data_dir / "objects"
        return sum(1 for p in store.rglob("*") if p.is_file()) if store.exists() else 0

    def requests(self) -> dict[str, float]:
        if not self.metrics_port:
            return {}
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
            text = response.read().decode()
        found = {api: float(value) for api, value in _REQUESTS.findall(text)}
        found.update({f"store {kind}": float(value) for kind, value in _STORE.findall(text)})
        found.update({f"lag le {le}": float(value) for le, value in _LAG_BUCKET.findall(text)})
        found.update({f"gc2 le {le}": float(value) for le, value in _GC_BUCKET.findall(text)})
        found.update({f"produce le {le}": float(value) for le, value in _PRODUCE_BUCKET.findall(text)})
        return found

    def warm_transactions(self) -> None:
        """Has the transaction coordinator create and load ``__transaction_state`` (50 partitions), as a running
        cluster has it: with :meth:`wait_quiet` after it, a transactional row measures transactions, not that
        one-time set-up running next to its first seconds."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "bench-warm-up"})
        producer.init_transactions(30)

    def wait_quiet(self, timeout_s: float = 30.0) -> None:
        """Until the broker uses under a tenth of a CPU over a quarter second (or ``timeout_s`` passed)."""
        proc = psutil.Process(self.pid)
        deadline = time.monotonic() + timeout_s
        before = sum(proc.cpu_times()[:2])
        while time.monotonic() < deadline:
            time.sleep(0.25)
            now = sum(proc.cpu_times()[:2])
            if now - before < 0.025:
                return
            before = now

    def end_offsets_total(self, topic: str, partitions: int) -> int:
        """The sum of the partitions' log end offsets (records, and transaction markers if any)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-end-offsets"})
        try:
            return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                       for p in range(partitions))
        finally:
            consumer.close()

    def create_topic(self, topic: str, partitions: int) -> None:
        client = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = client.create_topics([NewTopic(topic, partitions, 1)])
        futures[topic].result(timeout=30)

    @contextmanager
    def observed(self) -> Iterator[dict[str, Any]]:
        """Samples the broker's RSS while the block runs; yields a dict filled with the deltas on exit."""
        proc = psutil.Process(self.pid)
        peak = [proc.memory_info().rss]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                try:
                    peak[0] = max(peak[0], proc.memory_info().rss)
                except psutil.Error:
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        before_objects, before_requests = self.objects(), self.requests()
        before_cpu = proc.cpu_times()
        out: dict[str, Any] = {}
        sampler.start()
        try:
            yield out
        finally:
            stop.set()
            sampler.join()
            after = self.requests()
            cpu = proc.cpu_times()
            out["cpu_s"] = (cpu.user + cpu.system) - (before_cpu.user + before_cpu.system)
            out["rss_mib"] = peak[0] / MiB
            delta = {key: int(after.get(key, 0) - before_requests.get(key, 0)) for key in after}
            out["store"] = f"{delta.get('store puts', 0)} / {delta.get('store gets', 0)}"
            out["objects"] = self.objects() - before_objects
            out["lag_p99_ms"] = _bucket_percentile(delta, "lag le ", 0.99)
            out["produce_p99_ms"] = _bucket_percentile(delta, "produce le ", 0.99)
            gc2 = _bucket_counts(delta, "gc2 le ")
            passes = gc2[-1][1] if gc2 else 0
            worst = next((le for le, n in gc2 if n == passes), None) if passes else None
            out["gc2"] = f"{passes}" + (f" (≤ {worst * 1000:g} ms)" if worst is not None else "")
            out["requests"] = ", ".join(
                f"{api} {int(after.get(api, 0) - before_requests.get(api, 0))}" for api in ("Produce", "Fetch")
            )


def _bucket_counts(delta: dict[str, int], prefix: str) -> list[tuple[float, int]]:
    """Cumulative Prometheus histogram buckets (upper bound, count) found under ``prefix`` in a metrics delta."""
    return sorted((float(key[len(prefix):]), n) for key, n in delta.items() if key.startswith(prefix))


def _bucket_percentile(delta: dict[str, int], prefix: str, q: float) -> float | None:
    """The upper bound (ms) of the bucket holding quantile ``q``: a histogram cannot say more precisely."""
    buckets = _bucket_counts(delta, prefix)
    if not buckets or not buckets[-1][1]:
        return None
    rank = q * buckets[-1][1]
    return next(le * 1000 for le, n in buckets if n >= rank)


def _collect(ctx: Any, procs: list[Any], results: Any) -> list[ClientResult]:
    out: list[ClientResult] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S + 30
    while len(out) < len(procs) and time.monotonic() < deadline:
        try:
            out.append(results.get(timeout=1.0))
        except Exception:
            if not any(p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    if len(out) < len(procs):
        raise RuntimeError(f"{len(procs) - len(out)} client process(es) reported nothing (crashed or hung)")
    return out


def _row(name: str, results: list[ClientResult], observed: dict[str, Any], wall: float) -> Row:
    started = min(r.started for r in results)
    finished = max(r.finished for r in results)
    elapsed = max(finished - started, 1e-9)
    value_bytes = sum(r.value_bytes for r in results)
    records = sum(r.records for r in results)
    latencies = [x for r in results for x in r.latencies_ms]
    errors = [r.error for r in results if r.errors]
    return Row(
        name,
        value_bytes / elapsed / MB,
        records / elapsed,
        _percentile(latencies, 0.50),
        _percentile(latencies, 0.99),
        observed["rss_mib"],
        observed["cpu_s"] / max(value_bytes, 1) * 1e9,
        sum(r.cpu_s for r in results) / max(value_bytes, 1) * 1e9,
        observed["store"],
        observed["requests"],
        wall,
        note=f"{sum(r.errors for r in results)} errors: {errors[0]}" if errors else "",
        lag_p99_ms=observed.get("lag_p99_ms"),
        produce_p99_ms=observed.get("produce_p99_ms"),
        gc2=observed.get("gc2", "-"),
    )


def run_produce(ctx: Any, broker: Broker, name: str, job: Job, producers: int) -> Row:
    broker.create_topic(job.topic, job.partitions)
    results = ctx.Queue()
    share = dataclasses.replace(job, amount=job.amount // producers)
    procs = [ctx.Process(target=produce_worker, args=(share, results)) for _ in range(producers)]
    wall = time.monotonic()
    with broker.observed() as observed:
        for p in procs:
            p.start()
        got = _collect(ctx, procs, results)
    return _row(name, got, observed, time.monotonic() - wall)


def run_consume(ctx: Any, broker: Broker, name: str, job: Job) -> Row:
    results = ctx.Queue()
    ready = ctx.Event()
    proc = ctx.Process(target=consume_worker, args=(job, ready, results))
    wall = time.monotonic()
    with broker.observed() as observed:
        proc.start()
        got = _collect(ctx, [proc], results)
    return _row(name, got, observed, time.monotonic() - wall)


def run_scram_storm(broker: Broker, protocol: str, listener: str, ca: CertificateAuthority, connections: int) -> Row:
    """``connections`` new connections authenticated with SCRAM on ``listener``, ``STORM_CONCURRENCY`` at a time;
    records/s is authenticated connections per second, p50/p99 the connect-to-verified-server-final time."""
    host, port = broker.endpoint(listener)
    context = ssl.create_default_context(cafile=str(ca.cert_path)) if protocol == "SASL_SSL" else None
    storm = ScramStorm(host, port, SCRAM_MECHANISM, user=SCRAM_USER, password=SCRAM_PASSWORD, tls=context)
    wall = time.monotonic()
    with broker.observed() as observed:
        result = asyncio.run(storm.run(connections, STORM_CONCURRENCY, timeout_s=30.0))
    done = len(result.latencies_ms)
    note = (
        f"{done} of {connections} {SCRAM_MECHANISM} authentications over {protocol} in {result.seconds:.2f} s, "
        f"{STORM_CONCURRENCY} at a time; broker CPU {observed['cpu_s']:.1f} s"
    )
    if result.failures:
        note += f"; {result.failures} errors: {result.last_failure}"
    return Row(
        f"scram-connect {protocol}", 0.0, done / max(result.seconds, 1e-9), _percentile(result.latencies_ms, 0.5),
        _percentile(result.latencies_ms, 0.99), observed["rss_mib"], 0.0, 0.0, observed["store"], "-",
        time.monotonic() - wall, note=note, lag_p99_ms=observed.get("lag_p99_ms"), gc2=observed.get("gc2", "-"),
    )


def shipped_cache_sizes() -> dict[str, str]:
    """The LogCache size, upload threshold and block cache size ``make run`` serves with."""
    shipped = read_properties(SHIPPED_CONFIG)
    return {key: shipped[key] for key in _CACHE_KEYS if key in shipped}


def run_latency(ctx: Any, broker: Broker, sizes: Sizes) -> Row:
    topic = "bench-latency"
    broker.create_topic(topic, 1)
    total = int(sizes.latency_rate * sizes.latency_seconds) // RECORD * RECORD
    results = ctx.Queue()
    ready = ctx.Event()
    reader = Job(broker.bootstrap, topic, amount=total // RECORD, from_end=True)
    consumer = ctx.Process(target=consume_worker, args=(reader, ready, results))
    producer = ctx.Process(
        target=produce_worker, args=(Job(broker.bootstrap, topic, amount=total, rate=sizes.latency_rate), results)
    )
    wall = time.monotonic()
    with broker.observed() as observed:
        consumer.start()
        if not ready.wait(60):
            raise RuntimeError("latency consumer did not get its assignment within 60 s")
        producer.start()
        got = _collect(ctx, [consumer, producer], results)
    consumed = [r for r in got if r.latencies_ms and r.records == total // RECORD] or got
    reader_result = max(consumed, key=lambda r: len(r.latencies_ms))
    row = _row("e2e-latency", [reader_result], observed, time.monotonic() - wall)
    row.ack_p99_ms = _percentile([x for r in got if r is not reader_result for x in r.latencies_ms], 0.99)
    row.note = (row.note + f" fixed rate {sizes.latency_rate / MB:.0f} MB/s").strip()
    return row


# -- main ------------------------------------------------------------------------------------------------------


def _table(rows: list[Row], title: str) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    header = (
        "scenario", "MB/s", "records/s", "p50 ms", "p99 ms", "ack p99 ms", "broker produce p99 ms", "loop lag p99 ms",
        "gen-2 GCs", "broker RSS MiB", "broker CPU s/GB", "client CPU s/GB", "store PUT / GET", "requests", "seconds",
        "notes",
    )
    align = (
        "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---",
        "---:", "---",
    )
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for r in rows:
        cells = (
            r.scenario, f"{r.mb_s:.1f}", f"{r.records_s:,.0f}", ms(r.p50_ms), ms(r.p99_ms), ms(r.ack_p99_ms),
            ms(r.produce_p99_ms), ms(r.lag_p99_ms), r.gc2, f"{r.rss_mib:.0f}",
            f"{r.cpu_s_per_gb:.1f}", f"{r.client_cpu_s_per_gb:.1f}", r.store, r.requests, f"{r.seconds:.1f}",
            r.note,
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def median_rows(rounds: list[dict[str, Row]]) -> list[Row]:
    """Per scenario, the row of the round with the median MB/s (every column from that one run), its note listing
    every round's MB/s: a 2-core box moves single runs by half (a consume measured 150 and 390 MB/s back to back)."""
    out: list[Row] = []
    for name in rounds[0]:
        runs = sorted((got[name] for got in rounds), key=lambda r: r.mb_s)
        middle = dataclasses.replace(runs[len(runs) // 2])
        failed = [number for number, got in enumerate(rounds, 1) if "errors" in got[name].note]
        if failed and "errors" not in middle.note:  # a failure in any round shows (and fails the run)
            first = rounds[failed[0] - 1][name].note
            middle.note = f"{middle.note} errors in round(s) {failed}: {first};".strip()
        if len(runs) > 1:
            listed = ", ".join(f"{got[name].mb_s:.0f}" for got in rounds)
            middle.note = (middle.note + f" median of {len(runs)} rounds (MB/s: {listed})").strip()
        out.append(middle)
    return out


def ratio_line(rounds: list[dict[str, Row]], label: str, top: str, bottom: str) -> str:
    """``label``: the ratio of two scenarios' MB/s in each round, and its median (the figure to compare)."""
    each = [got[top].mb_s / got[bottom].mb_s if got[bottom].mb_s else 0.0 for got in rounds]
    listed = ", ".join(f"{x:.2f}" for x in each)
    return f"{label}: median {statistics.median(each):.2f}x over {len(each)} rounds ({listed})"


def _announce(name: str) -> None:
    """Starts a scenario on a quiet disk: what earlier scenarios wrote (gigabytes of WAL segments and objects,
    kept until the run ends) is flushed first, so its writeback does not compete with this scenario's fdatasyncs
    (produce-16p right after e2e-latency measured 200 instead of 240-400 MB/s without this)."""
    print(f"running {name} ...", file=sys.stderr, flush=True)
    os.sync()


SCENARIOS = ("produce-1p", "produce-16p", "consume-tail", "consume-catchup", "e2e-latency", "txn", "security")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small volumes (about a minute in all)")
    parser.add_argument("--only", nargs="+", choices=SCENARIOS, help="run only these scenarios")
    parser.add_argument("--producers", type=int, default=1, help="producer processes per produce scenario")
    parser.add_argument("--dir", type=Path, help="data directory (default: a temporary one, removed after)")
    parser.add_argument(
        "--rounds", type=int, default=5, help="rounds of the txn scenario, each on a fresh broker (medians reported)"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    sizes = QUICK if args.quick else FULL
    chosen = set(args.only or SCENARIOS)
    base = args.dir or Path(tempfile.mkdtemp(prefix="fjord-bench-"))
    ctx = mp.get_context("spawn")
    rows: list[Row] = []
    ratios: list[str] = []

    # Caches large enough that nothing is uploaded or evicted while a scenario runs (1 GiB from produce-1p stays
    # under the 2 GiB threshold): produce-1p/16p measure the produce path alone and consume-tail reads what
    # produce-1p left in the LogCache. The cost of uploading is measured by the catch-up
    # fill, whose broker uploads every 16 MiB as it goes.
    roomy = {"s3.wal.cache.size": "3GiB", "s3.wal.upload.threshold": "2GiB", "s3.block.cache.size": "64MiB"}
    hot = Broker(base / "hot", roomy)
    records_1p = sizes.produce_bytes // RECORD // args.producers * args.producers

    def produce_1p() -> None:
        job = Job(hot.bootstrap, "bench-1p", 1, sizes.produce_bytes)
        rows.append(run_produce(ctx, hot, "produce-1p", job, args.producers))

    def consume_tail() -> None:
        if "produce-1p" not in chosen:
            run_produce(ctx, hot, "produce-1p", Job(hot.bootstrap, "bench-1p", 1, sizes.produce_bytes), args.producers)
        rows.append(run_consume(ctx, hot, "consume-tail", Job(hot.bootstrap, "bench-1p", 1, records_1p)))

    def latency() -> None:
        cache = shipped_cache_sizes()
        shipped = Broker(base / "shipped", cache)
        shipped.start()
        try:
            row = run_latency(ctx, shipped, sizes)
        finally:
            shipped.stop()
        row.note += "; " + ", ".join(f"{key.removeprefix('s3.')} {value}" for key, value in cache.items())
        rows.append(row)

    def produce_16p() -> None:
        # A broker of its own, so it does not pay for uploading what produce-1p left behind.
        wide = Broker(base / "wide", roomy)
        wide.start()
        try:
            job = Job(wide.bootstrap, "bench-16p", 16, sizes.produce_bytes)
            rows.append(run_produce(ctx, wide, "produce-16p", job, args.producers))
        finally:
            wide.stop()

    def catchup() -> None:
        # Small WAL cache and upload threshold: the data is uploaded as it arrives; the restart empties every cache.
        cold = Broker(base / "cold", {"s3.wal.cache.size": "64MiB", "s3.wal.upload.threshold": "16MiB",
                                      "s3.block.cache.size": "64MiB"})
        cold.start()
        try:
            fill = run_produce(
                ctx, cold, "produce-1p uploading", Job(cold.bootstrap, "bench-catchup", 1, sizes.catchup_bytes), 1
            )
            fill.note = (fill.note + " upload threshold 16 MiB: includes building and writing the objects").strip()
            rows.append(fill)
            cold.stop()
            uploaded = cold.objects()
            cold.start()
            job = Job(cold.bootstrap, "bench-catchup", 1, sizes.catchup_bytes // RECORD)
            row = run_consume(ctx, cold, "consume-catchup", job)
            row.note = (row.note + f" read from {uploaded} objects after a restart (cold caches)").strip()
            rows.append(row)
        finally:
            cold.stop()

    def transactions() -> None:
        # Each produce row on a fresh broker (a broker's second 512 MiB ran 15-30% slower than its first, whatever
        # the mode, so sharing one broker favoured whichever row ran first), the reads on the transactional one, each
        # level twice in ABBA order (the faster counts), starting with the other level each round; every round repeats
        # the four rows, the table keeps each one's median round and the ratios' medians follow it.
        rounds: list[dict[str, Row]] = []
        amount = sizes.produce_bytes // 2
        records = amount // RECORD // args.producers * args.producers
        isolations = ["read_uncommitted", "read_committed"]
        for number in range(1, args.rounds + 1):
            got: dict[str, Row] = {}
            for mode in ("idempotent", "transactional"):
                os.sync()  # the last broker's writeback must not compete with this one's fdatasyncs (see _announce)
                txn = Broker(base / f"txn-{number}-{mode}", roomy)
                txn.start()
                try:
                    if mode == "transactional":
                        txn.warm_transactions()
                    txn.wait_quiet()
                    job = Job(txn.bootstrap, "bench-txn", 16, amount, mode=mode, sampled_reports_only=True)
                    row = got[f"produce-16p {mode}"] = run_produce(ctx, txn, f"produce-16p {mode}", job, args.producers)
                    if mode == "idempotent" and (landed := txn.end_offsets_total("bench-txn", 16)) != records:
                        row.note = f"{row.note}; errors: {landed} of {records} records in the topic".lstrip("; ")
                    if mode == "transactional":
                        for isolation in (*isolations, *reversed(isolations)):
                            os.sync()
                            txn.wait_quiet()
                            read = Job(txn.bootstrap, "bench-txn", 16, records, isolation=isolation)
                            name = f"consume-16p {isolation}"
                            row = run_consume(ctx, txn, name, read)
                            first = got.get(name)
                            if first is None:
                                got[name] = row
                                continue
                            faster, slower = (row, first) if row.mb_s > first.mb_s else (first, row)
                            if slower.note:  # the slower read's errors are kept
                                faster.note = f"{faster.note}; {slower.note}".lstrip("; ")
                            got[name] = faster
                        isolations.reverse()
                finally:
                    txn.stop()
                    shutil.rmtree(txn.data_dir, ignore_errors=True)
            rounds.append(got)
            print(f"  round {number}: " + ", ".join(f"{k} {r.mb_s:.1f}" for k, r in got.items()), file=sys.stderr)
        rows.extend(median_rows(rounds))
        for kind, a, b in (("produce-16p", "transactional", "idempotent"),
                           ("consume-16p", "read_committed", "read_uncommitted")):
            ratios.append(ratio_line(rounds, f"{kind} {a} / {b}", f"{kind} {a}", f"{kind} {b}"))

    def security() -> None:
        # One broker serving the same data on a PLAINTEXT, a SASL_PLAINTEXT and a SASL_SSL listener (SCRAM-SHA-512),
        # so the SASL_SSL / PLAINTEXT ratios compare like with like.
        ca = CertificateAuthority(base / "certs")
        server = ca.issue("server", server=True)
        secured = Broker(
            base / "security",
            {
                **roomy,
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL://127.0.0.1:0,SECURE://127.0.0.1:0,"
                "CONTROLLER://127.0.0.1:0",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT,"
                "SECURE:SASL_SSL",
                "sasl.enabled.mechanisms": SCRAM_MECHANISM,
                "ssl.keystore.location": str(server.keystore_path),
            },
            ("--add-scram", f"{SCRAM_MECHANISM}=[name={SCRAM_USER},password={SCRAM_PASSWORD}]"),
        )
        secured.start()
        try:
            amount = sizes.produce_bytes // 2
            records = amount // RECORD // args.producers * args.producers
            sasl = (("sasl.mechanism", SCRAM_MECHANISM), ("sasl.username", SCRAM_USER),
                    ("sasl.password", SCRAM_PASSWORD))
            tls = (("security.protocol", "SASL_SSL"), ("ssl.ca.location", str(ca.cert_path)), *sasl)
            for protocol, listener, client in (("PLAINTEXT", "PLAINTEXT", ()), ("SASL_SSL", "SECURE", tls)):
                host, port = secured.endpoint(listener)
                topic = f"bench-{protocol.lower()}"
                job = Job(f"{host}:{port}", topic, 16, amount, client=client)
                rows.append(run_produce(ctx, secured, f"produce-16p {protocol}", job, args.producers))
                read = Job(f"{host}:{port}", topic, 16, records, client=client)
                rows.append(run_consume(ctx, secured, f"consume-16p {protocol}", read))
            for protocol, listener in (("SASL_PLAINTEXT", "SASL"), ("SASL_SSL", "SECURE")):
                rows.append(run_scram_storm(secured, protocol, listener, ca, sizes.scram_connections))
        finally:
            secured.stop()

    try:
        if chosen & {"produce-1p", "consume-tail"}:
            hot.start()
            try:
                for name, step in (("produce-1p", produce_1p), ("consume-tail", consume_tail)):
                    if name in chosen:
                        _announce(name)
                        step()
            finally:
                hot.stop()
        for name, step in (
            ("e2e-latency", latency),
            ("produce-16p", produce_16p),
            ("consume-catchup", catchup),
            ("txn", transactions),
            ("security", security),
        ):
            if name in chosen:
                _announce(name)
                step()
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    title = (
        f"Fjord broker, {'quick' if args.quick else 'full'} run, {os.cpu_count()} CPUs (load average {load}), "
        f"{args.producers} producer process(es), 1 KiB records, acks=all, batch.size 1 MiB, linger.ms 5"
    )
    print(_table(rows, title))
    if ratios:
        print("\n" + "\n".join(ratios))
    if any(r.note and "errors" in r.note for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
