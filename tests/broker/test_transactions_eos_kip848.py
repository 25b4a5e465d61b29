"""Exactly-once under kill -9 with the KIP-848 consumer protocol: a consume-transform-produce loop (a confluent
consumer with ``group.protocol=consumer`` and ``read_committed``, a transactional producer committing each batch's
output with the batch's input offsets) runs while a feeder keeps adding input and the broker is killed (-9) at
seeded-random moments and restarted on the same data and port. The loop recovers as confluent documents it: a
retriable commit is retried, an abortable error aborts and rewinds the consumer to the committed offsets, a fatal
one replaces the producer (its successor's InitProducerId fences it and aborts what it left open). At the end every
input record is in the output exactly once, whatever was in flight at each kill.

Both finalized levels of ``transaction.version``: 2 (a new cluster's) and 1 (after kafka-features' downgrade, kept
across the restarts as a metadata record). librdkafka 2.16 sends the classic transaction requests at either level
(AddOffsetsToTxn, TxnOffsetCommit v3, EndTxn v1; no KIP-890 part 2), which a broker at level 2 serves as Kafka's
does; the v2 requests themselves are tested at the wire in test_transactions_v2.py.

Its own module: the broker is killed, and it listens on a fixed port so the running clients find it again.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, Producer, TopicPartition

from testkit.node_process import BrokerProcess, WireClient, start_broker
from tests.broker.cg_clients import unique
from tests.broker.test_features import SAFE_DOWNGRADE, features, update
from tests.reading import read_to_end
from tests.topics import create_topic
from wire.ports import free_port

INPUT_PARTITIONS, OUTPUT_PARTITIONS = 3, 2
KILLS = 3
#: Each parameter's whole run, feeder, kills and the final check included (the budget is 90 s).
DEADLINE_S = 75.0
OP_TIMEOUT_S = 20.0
#: Shorter than the longest downtime: some transactions open at a kill time out meanwhile (the coordinator aborts
#: them after the restart, and the producer learns it only at its next request), so the loop's recovery is needed.
TXN_TIMEOUT_MS = 3_000
#: A 10 s session: a restart (about a second) fits in it, so the loop's consumer keeps its membership.
OVERRIDES = {
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "300",
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.session.timeout.ms": "10000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
#: Every client of the loop: quick reconnects, and no KIP-1102 re-bootstrap. With one broker each kill leaves "all
#: brokers down", so librdkafka 2.16 would re-bootstrap and decommission the learned broker, and a
#: send_offsets_to_transaction whose group coordinator was that broker then hangs past its timeout (a client bug:
#: confluentinc/librdkafka#5511), so the test would measure the client and not the broker.
CLIENT = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "metadata.recovery.strategy": "none"}


@dataclass
class Node:
    """The one node, replaced by a new process at each restart; what the loop was doing at each kill."""

    data_dir: Path
    overrides: dict[str, str]
    process: BrokerProcess
    kills: list[str] = field(default_factory=list)
    phase: str = "starting"

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    def kill_and_restart(self, downtime_s: float) -> None:
        self.kills.append(f"kill at {self.phase}, down {downtime_s:.2f}s")
        self.process.kill()
        time.sleep(downtime_s)  # fault injection: the clients run against a dead broker meanwhile
        self.process = start_broker(self.data_dir, self.overrides)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    overrides = {**OVERRIDES, "listeners": f"PLAINTEXT://127.0.0.1:{free_port()},CONTROLLER://127.0.0.1:0"}
    started = Node(tmp_path / "node", overrides, start_broker(tmp_path / "node", overrides))
    yield started
    started.process.kill()


def _chaos(node: Node, seed: int, done: threading.Event) -> None:
    rng = random.Random(seed)
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(1.0, 4.0))  # fault injection: a seeded-random moment of the loop
            node.kill_and_restart(rng.uniform(0.0, 4.0))
        time.sleep(2.0)  # load on the last restarted broker too
    finally:
        done.set()


def _feed(bootstrap: str, topic: str, stop: threading.Event, errors: list[str]) -> None:
    """Input until ``stop``, a few records at a time; records it could not deliver are simply not input (the
    expected output is read back from the input topic)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 30_000, **CLIENT})
    sent = 0
    while not stop.is_set():
        for _ in range(5):
            producer.produce(topic, f"n{sent}".encode(), partition=sent % INPUT_PARTITIONS,
                             on_delivery=lambda err, _m: err is None or errors.append(str(err)))
            sent += 1
        producer.poll(0.03)
    producer.flush(40)


def _transform(message: Message) -> bytes:
    """The output of one input record: names its input, so a record transformed twice shows as a duplicate."""
    return b"%s@%d:%d" % ((message.value() or b"").upper(), message.partition(), message.offset())


def _new_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": TXN_TIMEOUT_MS, "linger.ms": 5, **CLIENT})
    producer.init_transactions(OP_TIMEOUT_S * 2)
    return producer


def _commit(producer: Producer) -> None:
    """commit_transaction, retried while its error is retriable (its outcome is then still to be learnt)."""
    for attempt in range(5):
        try:
            producer.commit_transaction(OP_TIMEOUT_S)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or attempt == 4:
                raise


def _rewind(consumer: Consumer) -> None:
    """Back to the committed offsets: what an aborted (or unknown) transaction consumed is consumed again."""
    for tp in consumer.committed(consumer.assignment(), timeout=OP_TIMEOUT_S):
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))


def _input_ends(consumer: Consumer, topic: str) -> list[int]:
    return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=OP_TIMEOUT_S)[1]
            for p in range(INPUT_PARTITIONS)]


def _all_committed(consumer: Consumer, topic: str, ends: list[int]) -> bool:
    committed = consumer.committed([TopicPartition(topic, p) for p in range(INPUT_PARTITIONS)], timeout=OP_TIMEOUT_S)
    return [tp.offset for tp in committed] == ends


@pytest.mark.parametrize("transaction_version", [2, 1])
def test_consume_transform_produce_stays_exactly_once_while_the_broker_is_killed(
    node: Node, transaction_version: int
) -> None:
    seed = random.randrange(1 << 30)
    started = time.monotonic()
    with WireClient(node.process.port) as client:
        if transaction_version == 1:
            assert update(client, ("transaction.version", 1, SAFE_DOWNGRADE)).error_code == 0
        assert features(client)[1]["transaction.version"] == transaction_version
    source, sink, group = unique("eos848-in"), unique("eos848-out"), unique("eos848-app")
    bootstrap = node.bootstrap
    create_topic(bootstrap, source, INPUT_PARTITIONS)
    create_topic(bootstrap, sink, OUTPUT_PARTITIONS)

    chaos_done = threading.Event()
    feed_errors: list[str] = []
    feeder = threading.Thread(target=_feed, args=(bootstrap, source, chaos_done, feed_errors), daemon=True)
    chaos = threading.Thread(target=_chaos, args=(node, seed, chaos_done), daemon=True)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", **CLIENT})
    consumer.subscribe([source])
    transactional_id = f"eos848-{group}"
    producer = _new_producer(bootstrap, transactional_id)
    committed_txns, recoveries, errors = 0, 0, Counter[str]()
    ends: list[int] | None = None

    def context() -> str:
        return (f"seed {seed}, transaction.version {transaction_version}, {committed_txns} transactions committed, "
                f"{recoveries} recoveries, errors {dict(errors)}, kills {node.kills}, feeder errors {feed_errors[:3]}")

    feeder.start()
    chaos.start()
    try:
        while True:
            assert time.monotonic() - started < DEADLINE_S, f"the loop did not finish ({context()})"
            if ends is None and not feeder.is_alive():
                ends = _input_ends(consumer, source)
            node.phase = "consuming"
            batch = consumer.consume(num_messages=50, timeout=0.3)
            for message in batch:
                if message.error() is not None:
                    errors[message.error().name()] += 1
                    assert not message.error().fatal(), f"{message.error()} ({context()})"
            records = [m for m in batch if m.error() is None]
            if not records:
                if ends is not None and _all_committed(consumer, source, ends):
                    break
                continue
            try:
                node.phase = "producing"
                producer.begin_transaction()
                for message in records:
                    producer.produce(sink, _transform(message), partition=message.partition() % OUTPUT_PARTITIONS)
                node.phase = "sending offsets"
                consumed = {TopicPartition(source, p) for p in {m.partition() for m in records}}
                producer.send_offsets_to_transaction(consumer.position(list(consumed)),
                                                     consumer.consumer_group_metadata(), OP_TIMEOUT_S)
                node.phase = "committing"
                _commit(producer)
                committed_txns += 1
            except KafkaException as exc:
                error = exc.args[0]
                errors[error.name()] += 1
                recoveries += 1
                node.phase = "recovering"
                if error.txn_requires_abort():
                    try:
                        producer.abort_transaction(OP_TIMEOUT_S)
                    except KafkaException as abort_error:
                        errors[f"abort: {abort_error.args[0].name()}"] += 1
                        producer = _new_producer(bootstrap, transactional_id)
                else:
                    # Fatal (fenced) or an outcome still unknown: a new instance fences this one, and the
                    # coordinator completes or aborts what it left, all or nothing.
                    producer = _new_producer(bootstrap, transactional_id)
                _rewind(consumer)
    finally:
        chaos_done.set()
        chaos.join(30)
        feeder.join(45)
        consumer.close()

    assert len(node.kills) == KILLS, context()
    with WireClient(node.process.port) as client:
        assert features(client)[1]["transaction.version"] == transaction_version, context()
    inputs = read_to_end(bootstrap, source, INPUT_PARTITIONS)
    expected = Counter(b"%s@%d:%d" % (value.upper(), partition, offset)
                       for partition, offset, value in _with_offsets(inputs))
    got = Counter(value for _, value in read_to_end(bootstrap, sink, OUTPUT_PARTITIONS))
    assert committed_txns > KILLS, context()
    lost, duplicated = expected - got, {v: n for v, n in got.items() if n > 1}
    unexpected = got - expected
    assert not (lost or duplicated or unexpected), (
        f"{len(lost)} lost (e.g. {sorted(lost)[:3]}), {len(duplicated)} duplicated (e.g. {sorted(duplicated)[:3]}), "
        f"{len(unexpected)} unexpected of {sum(expected.values())} input records ({context()})"
    )


def _with_offsets(records: list[tuple[int, bytes]]) -> Iterator[tuple[int, int, bytes]]:
    """The input records with their offsets: the input topic has no transactions or gaps, so a partition's n-th
    record is at offset n."""
    next_offset: dict[int, int] = {}
    for partition, value in records:
        offset = next_offset.get(partition, 0)
        next_offset[partition] = offset + 1
        yield partition, offset, value
