"""Support for the cluster tests (no tests here): real controller and broker processes, real clients.

The processes are ``node.local_cluster``'s (what ``fjord cluster up`` runs), with timeouts shortened so failover
happens in seconds. Clients are confluent-kafka (librdkafka), as users run them; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from controller.shell import MetadataShell, build_tree
from controller.shell_sources import from_controllers
from metadata.rpc.connection import ControllerConnection
from node.local_cluster import REPO_ROOT, LocalCluster, quorum_leader
from testkit.waiting import eventually

FAST = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.fetch.timeout.ms": "600",
    "controller.quorum.election.backoff.max.ms": "300",
    "controller.quorum.request.timeout.ms": "1000",
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
    "s3.wal.upload.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    # Off unless a test is about it (test_cluster_balancer.py): the others place and move partitions themselves.
    "autobalancer.controller.enable": "false",
    # Off unless a test is about it (test_cluster_drain.py): a clean stop then closes partitions without first
    # moving them, as these tests expect (and teardowns stay short).
    "controlled.shutdown.enable": "false",
}
SESSION_TIMEOUT_S = 4.0


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def leaders(bootstrap: str, topic: str, partitions: int | None = None, timeout: float = 15.0) -> dict[int, int]:
    """partition -> leader id, from a broker's Metadata; with ``partitions``, waits (bounded) until that many
    partitions all have a leader (brokers learn of a new topic a moment after the one that created it)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def read() -> dict[int, int]:
        meta = admin.list_topics(topic=topic, timeout=10)
        found = meta.topics.get(topic)
        return {} if found is None or found.error is not None else {
            p.id: p.leader for p in found.partitions.values()
        }

    def complete() -> dict[int, int] | None:
        got = read()
        return got if len(got) == partitions and min(got.values()) >= 0 else None

    if partitions is None:
        return read()
    result: dict[int, int] = wait_for(f"{partitions} led partitions of {topic}", complete, timeout)
    return result


def live_brokers(bootstrap: str) -> set[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return set(admin.list_topics(timeout=10).brokers)


def request_once(port: int, request: Any, client_id: str, timeout: float = 10.0) -> Any:
    """Sends one Kafka request to the node listening on ``port`` on a connection of its own, and returns the answer."""

    async def send() -> Any:
        connection = ControllerConnection("127.0.0.1", port, client_id=client_id)
        await connection.connect(timeout=5)
        try:
            return await connection.request(request, timeout=timeout)
        finally:
            await connection.close()

    return asyncio.run(send())


def wait_for(what: str, check: Any, timeout: float, interval: float = 0.2) -> Any:
    """:func:`testkit.waiting.eventually` as the cluster tests use it: polls ``check()`` until it returns something
    truthy, and any exception it raises means "not yet" (a broker or controller in transition answers with errors
    for a while); AssertionError naming ``what`` and the last value or exception after ``timeout``."""
    return eventually(check, timeout=timeout, interval=interval, what=what, retry_on=(Exception,))


@dataclass
class ProduceLoad:
    """A producer thread sending numbered records (acks=all) until stopped; remembers what was acknowledged.
    ``idempotent``: with ``enable.idempotence``; ``partitions``: record ``n`` goes to partition ``n % partitions``
    (None: the producer's partitioner); ``timeout_s``: its ``message.timeout.ms``, and the bound on the final
    flush."""

    bootstrap: str
    topic: str
    idempotent: bool = False
    partitions: int | None = None
    timeout_s: float = 60
    acked: set[str] = field(default_factory=set)
    failed: list[str] = field(default_factory=list)
    sent: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ProduceLoad:
        self._thread = threading.Thread(target=self._run, name=f"produce-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        producer = Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": self.idempotent,
            "message.timeout.ms": int(self.timeout_s * 1000), "linger.ms": 5, "retry.backoff.ms": 100,
        })

        def delivered(err: KafkaError | None, msg: Any) -> None:
            value = msg.value().decode()
            if err is None:
                self.acked.add(value)
            else:
                self.failed.append(f"{value}: {err}")

        while not self._stop.is_set():
            where = {} if self.partitions is None else {"partition": self.sent % self.partitions}
            producer.produce(self.topic, value=f"r{self.sent}".encode(), on_delivery=delivered, **where)
            self.sent += 1
            producer.poll(0.01)
        producer.flush(self.timeout_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 30)
            assert not self._thread.is_alive(), "the producer did not finish flushing"

    def wait_acked(self, count: int, timeout: float) -> None:
        wait_for(f"{count} acknowledged records on {self.topic}", lambda: len(self.acked) >= count, timeout)


def produce(
    bootstrap: str, topic: str, values: Iterable[str], timeout: float = 60, batch_records: int = 10_000
) -> set[str]:
    """Sends ``values`` (acks=all), at most ``batch_records`` per batch, and returns those acknowledged."""
    acked: set[str] = set()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": int(timeout * 1000),
                         "batch.num.messages": batch_records})
    for value in values:
        producer.produce(topic, value=value.encode(),
                         on_delivery=lambda err, msg: acked.add((msg.value() or b"").decode()) if err is None else None)
        producer.poll(0)
    producer.flush(timeout)
    return acked


def consume_all(bootstrap: str, topic: str, partitions: int, expected: set[str], timeout: float) -> list[str]:
    """Reads every partition from the beginning until ``expected`` is all seen (or ``timeout``); returns every
    value read, duplicates included."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not expected <= set(seen):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.append((msg.value() or b"").decode())
    finally:
        consumer.close()
    return seen


def active_controller(cluster: LocalCluster, exclude: Iterable[int] = ()) -> int | None:
    skip = set(exclude)
    specs = [n.spec for n in cluster.controllers if n.running and n.spec.node_id not in skip]
    return asyncio.run(quorum_leader(specs))


def kill_active_controller(cluster: LocalCluster) -> tuple[int, int, float]:
    """Kills the active controller (SIGKILL) and waits for another voter to win the election: (victim, successor,
    seconds from the kill to the successor being active)."""
    victim = active_controller(cluster)
    assert victim is not None, "no active controller to kill"
    killed_at = time.monotonic()
    cluster.node(victim).kill()

    def elected() -> tuple[int] | None:  # a tuple: node 0 may be the successor, and 0 is falsy
        leader = active_controller(cluster, exclude=[victim])
        return None if leader is None else (leader,)

    (successor,) = wait_for("a new active controller", elected, timeout=10, interval=0.05)
    return victim, successor, time.monotonic() - killed_at


def assert_all_consumed(bootstrap: str, topic: str, partitions: int, acked: set[str], timeout: float = 60) -> list[str]:
    """Reads ``topic`` until every acknowledged value is seen; fails naming what was lost. Returns what was read."""
    seen = consume_all(bootstrap, topic, partitions, acked, timeout=timeout)
    missing = acked - set(seen)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    return seen


def metadata_shell(cluster: LocalCluster, *commands: str, via: str = "controllers") -> str:
    """Runs ``fjord metadata shell --controllers ... -c ...`` (``via="bootstrap"``: ``--bootstrap`` brokers) and
    returns its output (exit 0 required)."""
    nodes = cluster.controllers if via == "controllers" else cluster.brokers
    addresses = ",".join(n.spec.address for n in nodes if n.running)
    argv = [sys.executable, "-m", "node.cli", "metadata", "shell", f"--{via}", addresses]
    for command in commands:
        argv += ["-c", command]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False)
    assert result.returncode == 0, f"metadata shell failed ({result.returncode}):\n{result.stderr}"
    return result.stdout


def shell_in_process(cluster: LocalCluster) -> MetadataShell:
    """The shell ``fjord metadata shell --controllers`` runs, loaded once in this process (one subprocess per
    command would cost seconds of start-up each)."""
    addresses = [("127.0.0.1", n.spec.quorum_port) for n in cluster.controllers if n.running]
    loaded = asyncio.run(from_controllers(addresses))
    return MetadataShell(build_tree(loaded.records, loads=loaded.loads))


def table_rows(text: str) -> list[list[str]]:
    """The rows (without header) of a table the shell printed, split on whitespace."""
    lines = [line.split() for line in text.strip().splitlines() if line.strip()]
    return lines[1:]


def data_dir_of(cluster: LocalCluster, node_id: int) -> Path:
    return cluster.node(node_id).spec.data_dir


@dataclass
class OrderedLoad:
    """An idempotent producer thread sending ``<partition>:<seq>`` to each partition in turn until stopped; remembers
    which sequence numbers each partition acknowledged. ``only``: the partitions to send to (default: all)."""

    bootstrap: str
    topic: str
    partitions: int
    only: tuple[int, ...] | None = None
    acked: dict[int, list[int]] = field(default_factory=dict)
    #: When each acknowledgement arrived (``time.monotonic()``), per partition, in the order of ``acked``.
    acked_at: dict[int, list[float]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> OrderedLoad:
        self.acked = {p: [] for p in range(self.partitions)}
        self.acked_at = {p: [] for p in range(self.partitions)}
        self._thread = threading.Thread(target=self._run, name=f"ordered-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": 90000,
                "linger.ms": 5,
                "retry.backoff.ms": 50,
            }
        )

        def delivered(err: KafkaError | None, msg: Any) -> None:
            partition, seq = (msg.value() or b"").decode().split(":")
            if err is None:
                self.acked[int(partition)].append(int(seq))
                self.acked_at[int(partition)].append(time.monotonic())
            else:
                self.failed.append(f"{partition}:{seq}: {err}")

        seq = 0
        targets = range(self.partitions) if self.only is None else self.only
        while not self._stop.is_set():
            for partition in targets:
                producer.produce(
                    self.topic, value=f"{partition}:{seq}".encode(), partition=partition, on_delivery=delivered
                )
            seq += 1
            producer.poll(0.005)
        producer.flush(90)

    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def longest_gap(self, partition: int, since: float, until: float) -> float:
        """The longest wait, between ``since`` and ``until`` (``time.monotonic()``), for the next acknowledgement of
        ``partition``: what its producer notices of a move (records go out every few milliseconds)."""
        times = [since, *(t for t in list(self.acked_at[partition]) if since < t < until), until]
        return max(later - earlier for earlier, later in itertools.pairwise(times))

    def wait_more(self, extra: int, timeout: float) -> None:
        target = self.count() + extra
        wait_for(f"{target} records acknowledged on {self.topic}", lambda: self.count() >= target, timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
            assert not self._thread.is_alive(), "the producer did not finish flushing"

    def assert_read_exactly_once(self, bootstrap: str, timeout: float = 60) -> None:
        """Reads every partition to the end: each holds exactly the acknowledged sequence numbers, in order."""
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": topic_name("check"),
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
        seen: dict[int, list[int]] = {p: [] for p in range(self.partitions)}
        expected = self.count()
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and sum(len(v) for v in seen.values()) < expected:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    partition, seq = (msg.value() or b"").decode().split(":")
                    seen[int(partition)].append(int(seq))
        finally:
            consumer.close()
        for partition in range(self.partitions):
            acked = self.acked[partition]
            assert seen[partition] == sorted(acked), (
                f"{self.topic}-{partition}: {len(acked)} acknowledged, {len(seen[partition])} read; lost "
                f"{sorted(set(acked) - set(seen[partition]))[:5]}, extra "
                f"{sorted(set(seen[partition]) - set(acked))[:5]}"
            )
