"""Transactions under failure: several transactional producers commit, abort and abandon transactions at random
while brokers holding transaction coordinators or partition leaders are killed (-9) and restarted; then one
read_committed scan checks the outcome of every transaction. The brokers' S3 traffic meanwhile passes through
testkit's fault-injecting proxy, misbehaving as S3 does (:data:`S3_FAULTS`): the kills' WAL failovers and restarts,
and every upload and read, meet SlowDown, InternalError, late answers and connections reset mid-body.

What must hold, whatever was killed when (Kafka's guarantees for read_committed):
- a transaction whose commit was acknowledged is wholly present;
- a transaction that was aborted, or abandoned by a producer that was replaced (its successor's InitProducerId
  fences it and the coordinator aborts it), is wholly absent;
- a transaction whose commit outcome the producer could not learn is wholly present or wholly absent;
- no record appears twice, and each producer's records keep their order within every partition.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import IsolationLevel, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from broker.transactions.log_schema import partition_for
from node.local_cluster import LocalCluster
from testkit.s3_fault_proxy import Faults, S3FaultProxy
from tests.cluster.cluster_support import SESSION_TIMEOUT_S, leaders, live_brokers, topic_name, wait_for
from tests.cluster.conftest import start_cluster
from tests.conftest import S3Server
from tests.reading import read_to_end
from tests.topics import create_topic

PARTITIONS = 6
PRODUCERS = 3
KILLS = 4
#: Seconds of load after the last restart, so transactions also run against the recovered brokers.
AFTER_CHAOS_S = 4.0
TXN_TIMEOUT_MS = 15_000
OP_TIMEOUT_S = 45.0
MAX_TXNS_PER_PRODUCER = 60
LOAD_DEADLINE_S = 150.0
#: S3 as issue 24's operator met it: 5% of requests answered 503 SlowDown, 2% 500 InternalError, 5% held up to
#: 400 ms, 1% of bodies cut by a connection reset half way.
S3_FAULTS = Faults(slow_down=0.05, internal_error=0.02, delay=0.05, delay_max_s=0.4, reset_mid_body=0.01)


@dataclass
class Ledger:
    """What each producer knows of its transactions' outcomes, by transaction key ``<producer>:<n>``."""

    committed: dict[str, list[str]] = field(default_factory=dict)
    aborted: dict[str, list[str]] = field(default_factory=dict)
    unknown: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, outcome: str, key: str, values: list[str]) -> None:
        with self.lock:
            getattr(self, outcome)[key] = values


def _new_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "linger.ms": 2,
            "message.timeout.ms": TXN_TIMEOUT_MS,
        }
    )
    producer.init_transactions(OP_TIMEOUT_S)
    return producer


def _commit(producer: Producer) -> str:
    """``committed``, ``aborted`` (the transaction had to be aborted and was), or ``unknown``."""
    for _ in range(5):
        try:
            producer.commit_transaction(OP_TIMEOUT_S)
            return "committed"
        except KafkaException as exc:
            error = exc.args[0]
            if error.retriable():
                continue
            if error.txn_requires_abort():
                producer.abort_transaction(OP_TIMEOUT_S)
                return "aborted"
            return "unknown"
    return "unknown"


def _run_producer(bootstrap: str, topic: str, name: str, *, seed: int, stop: threading.Event, ledger: Ledger) -> None:
    rng = random.Random(seed)
    producer: Producer | None = None
    for txn in range(MAX_TXNS_PER_PRODUCER):
        if stop.is_set():
            break
        key = f"{name}:{txn:03d}"
        values = [f"{key}:{i}" for i in range(rng.randint(1, 8))]
        outcome = "unknown"
        try:
            if producer is None:
                producer = _new_producer(bootstrap, name)
            producer.begin_transaction()
            for value in values:
                producer.produce(topic, value.encode(), partition=rng.randrange(PARTITIONS))
            choice = rng.random()
            if choice < 0.6:
                outcome = _commit(producer)
            elif choice < 0.85:
                producer.abort_transaction(OP_TIMEOUT_S)
                outcome = "aborted"
            else:
                # A producer that disappears mid-transaction: its replacement's InitProducerId fences it and the
                # coordinator aborts what it left open.
                producer.flush(OP_TIMEOUT_S)
                producer = None
                outcome = "aborted"
        except KafkaException as exc:
            error = exc.args[0]
            if producer is not None and error.txn_requires_abort():
                try:
                    producer.abort_transaction(OP_TIMEOUT_S)
                    outcome = "aborted"
                except KafkaException:
                    producer = None
            else:
                # Fatal or unclear: start over with a new instance (which fences this one); the transaction's
                # outcome is whatever the coordinator decided, all or nothing.
                producer = None
            with ledger.lock:
                ledger.errors.append(f"{key}: {error}")
        ledger.record(outcome, key, values)
        if outcome == "unknown":
            producer = None


def _chaos(cluster: LocalCluster, topic: str, names: list[str], seed: int, kills: list[str]) -> None:
    """Kills (-9) a broker holding a transaction coordinator or a partition leader, restarts it, and waits for it
    to serve again; ``KILLS`` times."""
    rng = random.Random(seed)
    bootstrap = cluster.bootstrap_servers
    for round_ in range(KILLS):
        time.sleep(rng.uniform(1.0, 3.0))
        if round_ % 2 == 0:
            states = leaders(bootstrap, "__transaction_state")
            name = rng.choice(names)
            victim = states[partition_for(name, len(states))]
            why = f"coordinator of {name}"
        else:
            placement = leaders(bootstrap, topic)
            partition = rng.randrange(PARTITIONS)
            victim = placement[partition]
            why = f"leader of {topic}-{partition}"
        if victim < 0:
            continue
        kills.append(f"broker {victim} ({why})")
        cluster.node(victim).kill()
        time.sleep(rng.uniform(0.5, SESSION_TIMEOUT_S + 1.0))
        cluster.node(victim).start()
        try:
            wait_for(f"broker {victim} back in Metadata", lambda v=victim: v in live_brokers(bootstrap), timeout=60)
        except AssertionError as exc:
            # Which nodes still run, and what each logged last, tell a broker that did not come back from brokers
            # that stopped answering (seen once in CI, with every Metadata attempt failing for 10 s).
            exited = {n.spec.node_id: n.proc.returncode for n in cluster.exited() if n.proc is not None}
            raise AssertionError(
                f"{exc}\nkills: {kills}\nexited (node: code): {exited}\n{cluster.table()}\n{cluster.logs(4000)}"
            ) from exc


def _open_partitions(bootstrap: str, topic: str) -> list[int]:
    """Partitions whose last stable offset is behind their end: a transaction is still open there."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ends: dict[IsolationLevel, dict[int, int]] = {}
    for isolation in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
        futures = admin.list_offsets(asked, isolation_level=isolation, request_timeout=10)
        ends[isolation] = {tp.partition: future.result(timeout=15).offset for tp, future in futures.items()}
    committed, everything = ends[IsolationLevel.READ_COMMITTED], ends[IsolationLevel.READ_UNCOMMITTED]
    return [p for p in range(PARTITIONS) if committed[p] != everything[p]]


@pytest.fixture
def misbehaving_cluster(tmp_path: Path, s3_server: S3Server) -> Iterator[tuple[LocalCluster, S3FaultProxy]]:
    """1 controller and 3 S3-WAL brokers whose S3 misbehaves as :data:`S3_FAULTS` says, from their start on."""
    with S3FaultProxy(s3_server.endpoint) as proxy:
        proxy.faults = S3_FAULTS
        started = start_cluster(
            tmp_path / "cluster",
            S3Server(proxy.endpoint),
            controllers=1,
            wal="s3",
            extra={"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"},
        )
        try:
            yield started, proxy
        finally:
            started.stop_all(timeout=30)


def test_transactions_keep_all_or_nothing_while_brokers_are_killed(
    misbehaving_cluster: tuple[LocalCluster, S3FaultProxy],
) -> None:
    cluster, proxy = misbehaving_cluster
    bootstrap = cluster.bootstrap_servers
    topic = topic_name("chaos-txn")
    create_topic(bootstrap, topic, PARTITIONS)
    leaders(bootstrap, topic, PARTITIONS)
    names = [topic_name(f"tx{i}") for i in range(PRODUCERS)]
    seed = random.randrange(1 << 30)
    ledger = Ledger()
    stop = threading.Event()
    workers = [
        threading.Thread(
            target=_run_producer,
            args=(bootstrap, topic, name),
            kwargs={"seed": seed + i, "stop": stop, "ledger": ledger},
            daemon=True,
        )
        for i, name in enumerate(names)
    ]
    for worker in workers:
        worker.start()
    kills: list[str] = []
    try:
        _chaos(cluster, topic, names, seed, kills)
        time.sleep(AFTER_CHAOS_S)
    finally:
        stop.set()
        deadline = time.monotonic() + LOAD_DEADLINE_S
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
    assert not any(w.is_alive() for w in workers), f"producers still running (seed {seed})"
    context = f"seed {seed}, kills {kills}, client errors {ledger.errors[:5]}, S3 faults {proxy.stats}"
    assert proxy.stats.slow_downs and proxy.stats.internal_errors and proxy.stats.delays, context
    assert ledger.committed, f"no transaction committed at all ({context})"

    # Every producer instance is gone; transactions they left open are aborted by the coordinator on timeout
    # (or already were by a successor). A read_committed reader stops at the last stable offset, so wait until
    # nothing is left open, then read.
    wait_for(
        f"no open transaction left in {topic} ({context})",
        lambda: not _open_partitions(bootstrap, topic),
        timeout=TXN_TIMEOUT_MS / 1000 + 60,
        interval=1.0,
    )
    seen = read_to_end(bootstrap, topic, PARTITIONS)
    values = [v.decode() for _, v in seen]
    assert len(values) == len(set(values)), f"records read twice ({context})"
    present = set(values)
    for key, expected in ledger.committed.items():
        missing = [v for v in expected if v not in present]
        assert not missing, f"committed transaction {key} lost {missing} ({context})"
    for key, expected in ledger.aborted.items():
        leaked = [v for v in expected if v in present]
        assert not leaked, f"aborted transaction {key} visible: {leaked} ({context})"
    for key, expected in ledger.unknown.items():
        found = [v for v in expected if v in present]
        assert not found or len(found) == len(expected), f"transaction {key} partly visible: {found} ({context})"
    # Order: within a partition, each producer's (transaction, index) pairs only grow.
    last: dict[tuple[int, str], tuple[int, int]] = {}
    for partition, raw in seen:
        name, txn, index = raw.decode().rsplit(":", 2)
        position = (int(txn), int(index))
        previous = last.get((partition, name))
        assert previous is None or previous < position, f"{raw!r} after {previous} in partition {partition} ({context})"
        last[(partition, name)] = position
