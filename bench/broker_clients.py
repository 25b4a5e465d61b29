"""The client processes of ``bench/broker.py``: what one producer or consumer process is asked to do (``Job``),
what it reports back (``ClientResult``), and the two workers themselves, confluent-kafka clients with the
issue's settings. The workers are top-level functions because ``multiprocessing`` spawns them.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import random
import resource
import struct
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from bench import stats

KiB = 1024
MiB = 1024 * KiB
MB = 1_000_000
RECORD = 1 * KiB
CLIENT_TIMEOUT_S = 120.0
_STAMP = struct.Struct(">q")

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
    #: Producer ``compression.type`` ("none", "gzip", "snappy", "lz4", "zstd"); with a codec the values are
    #: partly compressible log lines (:func:`compressible_values`) instead of random bytes, which no codec shrinks.
    compression: str = "none"
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



def percentile(values: list[float], q: float) -> float | None:
    """The bench's percentile (bench/stats.py) of a client's samples, None when it took none."""
    return stats.percentile(values, q) if values else None


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


#: Distinct values a compressing producer cycles through: more than a 1 MiB batch holds, so no batch repeats one.
_VALUES = 4096
_WORDS = (
    "order", "payment", "shipped", "user", "cart", "checkout", "item", "price", "total", "failed", "retry", "ok",
    "warehouse", "region", "request", "response", "latency", "timeout", "session", "token", "granted", "denied",
)


def compressible_values(count: int = _VALUES) -> list[bytes]:
    """``count`` different 1 KiB values shaped like JSON log lines: a random id and 300 random bytes in base64 (which
    no codec shrinks much) among words from a small vocabulary (which every codec does). lz4 takes a 1 MiB batch of
    them to about 54%, zstd to about 43%."""
    rng = random.Random(7)
    values = []
    for i in range(count):
        blob = base64.b64encode(rng.randbytes(300)).decode()
        words = " ".join(rng.choice(_WORDS) for _ in range(160))
        line = (
            f'{{"ts":{1_700_000_000_000 + i},"level":"{rng.choice(["INFO", "WARN", "DEBUG"])}",'
            f'"id":"{rng.randbytes(8).hex()}","blob":"{blob}","msg":"{words}"}}'
        )
        values.append(line.encode()[:RECORD].ljust(RECORD, b" "))
    return values


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
    if job.compression != "none":
        config["compression.type"] = job.compression
    producer = Producer(config)
    next_commit = 0.0
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
        next_commit = time.monotonic() + job.commit_every_s
    values = compressible_values() if job.compression != "none" else [os.urandom(RECORD)]
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
                value = values[sent % len(values)]
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
