"""Partition reassignment benchmark (DESIGN §9): how long a partition holding ``--mb`` of data takes to move to
another broker under produce load, and how many acknowledged records the moves lose (must be 0).

A cluster of ``fjord server start`` processes on 127.0.0.1 (1 controller, 2 brokers, ``file://`` object storage
and file WALs under a temporary directory). One partition is filled with ``--mb`` MB, then an idempotent producer
keeps writing to it while kafka-python's admin client (what ``kafka-reassign-partitions.sh`` sends:
AlterPartitionReassignments) moves it back and forth ``--moves`` times. Per move:

- ``leads``: from the request to the Metadata of a broker naming the target as leader;
- ``serves``: from the request to the first acknowledgement of a produce the target accepted;
- ``reads``: the longest wait between two records read by a consumer tailing the partition (a classic ``Consumer``
  assigned at its end), of the waits ending from this move's request to the next one's.

At the end every partition is read back: ``lost`` counts acknowledged records that are missing, ``dup`` those read
twice.

    .venv/bin/python bench/reassign.py [--mb 100] [--moves 6] [--election-timeout-ms 10000]

On the 2-core development machine (100 MB, 6 moves): leads p50 126 ms / p99 314 ms, serves p50 163 ms / p99
361 ms, lost 0, dup 0. The first move of a run is the slowest (the target's first open of the partition).
On 2026-12-02 (10 MB, 16 moves, two CPU burners on the two cores): leads 14 / 46 ms, serves 48 / 296 ms, reads
45 / 251 ms (p50 / max; the producer writes a record about every 2 ms, so a wait of a few ms is no stall).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

from confluent_kafka import OFFSET_END, Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.cimpl import NewTopic  # noqa: E402
from kafka import TopicPartition as KafkaTopicPartition  # noqa: E402
from kafka.admin import KafkaAdminClient  # noqa: E402

from bench.stats import percentile  # noqa: E402
from node.local_cluster import LocalCluster, plan_cluster, wait_ready  # noqa: E402

TOPIC = "reassign-bench"
FILL_RECORD = 64 * 1024
MOVE_TIMEOUT_S = 120.0


@dataclass
class Load:
    """An idempotent producer writing numbered records to partition 0; the time of each acknowledgement."""

    bootstrap: str
    acked: list[tuple[float, int]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 20})

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                self.acked.append((time.monotonic(), int(msg.value())))
            else:
                self.failed.append(f"{msg.value()!r}: {err}")

        seq = 0
        while not self.stop.is_set():
            producer.produce(TOPIC, value=str(seq).encode(), partition=0, on_delivery=delivered)
            seq += 1
            producer.poll(0.002)
        producer.flush(120)


@dataclass
class Tail:
    """A consumer reading partition 0 from its end while the load writes it; the time of each record read."""

    bootstrap: str
    read: list[float] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "reassign-bench-tail",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_END)])
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    self.read.append(time.monotonic())
        finally:
            consumer.close()

    def longest_gap(self, start: float, end: float) -> float:
        """The longest wait between two records read, of the waits ending from ``start`` to ``end``."""
        times = self.read[:]
        return max((b - a for a, b in itertools.pairwise(times) if start <= b <= end), default=end - start)


def _fill(bootstrap: str, megabytes: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "batch.size": 1_000_000, "queue.buffering.max.kbytes": 262144})
    payload = b"x" * FILL_RECORD
    errors: list[str] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for _ in range(megabytes * 1024 * 1024 // FILL_RECORD):
        while True:
            try:
                producer.produce(TOPIC, value=payload, key=b"fill", partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(300)
    if remaining or errors:
        raise SystemExit(f"{remaining + len(errors)} fill records not acknowledged, e.g. {errors[:3]}")


def _leader(admin: AdminClient) -> int:
    topic = admin.list_topics(topic=TOPIC, timeout=10).topics.get(TOPIC)
    return -1 if topic is None or topic.error is not None else int(topic.partitions[0].leader)


def _read_load_values(bootstrap: str, expected: int, timeout: float) -> tuple[list[int], int]:
    """The load's values read back, and how many fill records were read before them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reassign-bench", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "fetch.max.bytes": 52428800})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[int] = []
    fill = 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(values) < expected:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None and msg.key() == b"fill":
                    fill += 1
                elif msg.error() is None:
                    values.append(int(msg.value() or b"-1"))
    finally:
        consumer.close()
    return values, fill


def run(megabytes: int, moves: int, election_timeout_ms: int) -> int:
    with tempfile.TemporaryDirectory(prefix="fjord-reassign-bench-") as tmp:
        extra = {"partition.reassignment.election.timeout.ms": str(election_timeout_ms),
                 "broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "500"}
        cluster = LocalCluster(plan_cluster(Path(tmp), controllers=1, brokers=2, extra=extra))
        cluster.start_all()
        try:
            asyncio.run(wait_ready(cluster, 60))
            bootstrap = cluster.bootstrap_servers
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=30)
            started = time.monotonic()
            _fill(bootstrap, megabytes)
            print(f"filled {TOPIC}-0 with {megabytes} MB in {time.monotonic() - started:.1f} s")
            mover = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=60000)
            load = Load(bootstrap)
            thread = threading.Thread(target=load.run, daemon=True)
            thread.start()
            tail = Tail(bootstrap)
            tail_thread = threading.Thread(target=tail.run, daemon=True)
            tail_thread.start()
            leads: list[float] = []
            serves: list[float] = []
            moved_at: list[float] = []
            try:
                time.sleep(1.0)
                brokers = sorted(b.spec.node_id for b in cluster.brokers)
                for move in range(moves):
                    source = _leader(admin)
                    target = next(b for b in brokers if b != source)
                    t0 = time.monotonic()
                    result = mover.alter_partition_reassignments({KafkaTopicPartition(TOPIC, 0): [target]})
                    if any(error is not None for error in result.values()):
                        raise SystemExit(f"move {move} refused: {result}")
                    while _leader(admin) != target:
                        if time.monotonic() - t0 > MOVE_TIMEOUT_S:
                            raise SystemExit(f"move {move} to broker {target} did not finish")
                        time.sleep(0.01)
                    led = time.monotonic()
                    while not any(at > led for at, _ in load.acked[-50:]):
                        if time.monotonic() - t0 > MOVE_TIMEOUT_S:
                            raise SystemExit(f"broker {target} acknowledged nothing after move {move}")
                        time.sleep(0.005)
                    served = next(at for at, _ in load.acked[-50:] if at > led)
                    moved_at.append(t0)
                    leads.append(led - t0)
                    serves.append(served - t0)
                    print(f"move {move}: broker {source} -> {target}: leads after {leads[-1] * 1000:.0f} ms, "
                          f"serves after {serves[-1] * 1000:.0f} ms")
                    time.sleep(1.0)
                time.sleep(1.0)
            finally:
                load.stop.set()
                tail.stop.set()
                thread.join(timeout=150)
                tail_thread.join(timeout=30)
                mover.close()
            ends = [*moved_at[1:], time.monotonic()]
            stalls = [tail.longest_gap(start, end) for start, end in zip(moved_at, ends, strict=True)]
            print("reads' longest gap per move, ms:", " ".join(f"{s * 1000:.0f}" for s in stalls))
            acked = [value for _, value in load.acked]
            values, fill = _read_load_values(bootstrap, len(acked), timeout=120)
            fill_expected = megabytes * 1024 * 1024 // FILL_RECORD
            counts = Counter(values)
            lost = sum(1 for value in acked if value not in counts)
            duplicated = sum(1 for c in counts.values() if c > 1)
            print(f"\n{moves} moves of a {megabytes} MB partition under load ({len(acked)} records acknowledged, "
                  f"{len(load.failed)} failed)")
            print(f"{'':8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
            for name, sample in (("leads", leads), ("serves", serves), ("reads", stalls)):
                print(f"{name:8} {statistics.median(sample) * 1000:8.0f} {percentile(sample, 0.99) * 1000:8.0f} "
                      f"{max(sample) * 1000:8.0f}")
            print(f"lost {lost}, dup {duplicated}; fill records read {fill} of {fill_expected}")
            return 0 if lost == 0 and not load.failed and fill == fill_expected else 1
        finally:
            cluster.stop_all(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=100, help="data in the moved partition before the moves")
    parser.add_argument("--moves", type=int, default=6)
    parser.add_argument("--election-timeout-ms", type=int, default=10000)
    args = parser.parse_args()
    return run(args.mb, args.moves, args.election_timeout_ms)


if __name__ == "__main__":
    sys.exit(main())
