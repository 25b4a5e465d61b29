"""Exactly-once with real clients against a real broker process: consume-transform-produce with the input offsets
committed inside the transaction, and transactional producers of every client library read back by a
read_committed consumer (committed records exactly once, aborted ones never).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaProducer

from testkit.node_process import BrokerProcess
from testkit.waiting import eventually
from tests.broker.kafka_clients import module_broker, run_kafkajs, topic_name
from tests.metrics_scrape import metrics_url, sample, scrape
from tests.reading import read_to_end
from tests.topics import create_topic

DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from module_broker(tmp_path_factory.mktemp("eos"))


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return [tp.offset for tp in got]
    finally:
        consumer.close()


def test_consume_transform_produce_commits_output_and_input_offsets_together(kafka: BrokerProcess) -> None:
    source, sink, group = topic_name("eos-in"), topic_name("eos-out"), topic_name("eos-app")
    create_topic(kafka.bootstrap, source, partitions=3)
    create_topic(kafka.bootstrap, sink, partitions=2)
    feeder = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True})
    inputs = [f"n{i}" for i in range(300)]
    for i, value in enumerate(inputs):
        feeder.produce(source, value.encode(), partition=i % 3)
    assert feeder.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"app-{group}"})
    producer.init_transactions(30)
    consumer.subscribe([source])
    seen = 0
    rounds = 0
    aborted_once = False
    deadline = time.monotonic() + DEADLINE_S
    try:
        while seen < len(inputs):
            assert time.monotonic() < deadline, f"transformed {seen} of {len(inputs)} records"
            batch = [m for m in consumer.consume(num_messages=50, timeout=1.0) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for msg in batch:
                producer.produce(sink, (msg.value() or b"").upper(), partition=msg.partition() % 2)
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
            )
            rounds += 1
            if rounds == 2 and not aborted_once:
                # An aborted round: its output must never be read and its offsets never committed, so the same
                # input is consumed again from the last committed position.
                aborted_once = True
                producer.flush(30)  # abort_transaction() drops what the client has not sent yet: send it first
                producer.abort_transaction(30)
                committed = consumer.committed(consumer.assignment(), timeout=30)
                for tp in committed:
                    consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))
                continue
            producer.commit_transaction(30)
            seen += len(batch)
    finally:
        consumer.close()

    assert aborted_once
    out = read_to_end(kafka.bootstrap, sink, 2)
    assert sorted(v.decode() for _, v in out) == sorted(v.upper() for v in inputs)
    # read_uncommitted also sees the aborted round's records: the isolation level is what hid them.
    uncommitted = read_to_end(kafka.bootstrap, sink, 2, isolation="read_uncommitted")
    assert len(uncommitted) > len(out)
    assert committed_offsets(kafka.bootstrap, group, source, 3) == [100, 100, 100]


def _assert_committed_only(kafka: BrokerProcess, topic: str, committed: list[str], aborted: list[str]) -> None:
    values = [v.decode() for _, v in read_to_end(kafka.bootstrap, topic, 1)]
    assert values == committed
    everything = [v.decode() for _, v in read_to_end(kafka.bootstrap, topic, 1, isolation="read_uncommitted")]
    assert sorted(everything) == sorted(committed + aborted)


def test_kafka_python_transactional_producer(kafka: BrokerProcess) -> None:
    topic = topic_name("txn-kp")
    create_topic(kafka.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id=f"kp-{topic}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, f"c{i}".encode(), partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, f"a{i}".encode(), partition=0)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"c5", partition=0)
        producer.commit_transaction()
    finally:
        producer.close(timeout=10)
    _assert_committed_only(kafka, topic, [f"c{i}" for i in range(6)], [f"a{i}" for i in range(5)])


def test_aiokafka_transactional_producer(kafka: BrokerProcess) -> None:
    topic = topic_name("txn-aio")
    create_topic(kafka.bootstrap, topic)

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id=f"aio-{topic}")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(5):
                    await producer.send(topic, f"c{i}".encode(), partition=0)
            await producer.begin_transaction()
            for i in range(5):
                await producer.send(topic, f"a{i}".encode(), partition=0)
            await producer.flush()
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())
    _assert_committed_only(kafka, topic, [f"c{i}" for i in range(5)], [f"a{i}" for i in range(5)])


def test_kafkajs_transactional_producer(kafka: BrokerProcess) -> None:
    topic = topic_name("txn-kjs")
    create_topic(kafka.bootstrap, topic)
    script = """
const { Kafka, logLevel } = require('kafkajs');
const [broker, topic] = process.argv.slice(1);
(async () => {
  const kafka = new Kafka({ clientId: 'fjord-test', brokers: [broker], logLevel: logLevel.NOTHING });
  const producer = kafka.producer({ transactionalId: `kjs-${topic}`, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const committed = await producer.transaction();
  await committed.send({ topic, messages: [0, 1, 2].map((i) => ({ partition: 0, value: `c${i}` })) });
  await committed.commit();
  const aborted = await producer.transaction();
  await aborted.send({ topic, messages: [0, 1].map((i) => ({ partition: 0, value: `a${i}` })) });
  await aborted.abort();
  await producer.disconnect();
  console.log(JSON.stringify('done'));
})().catch((e) => { console.error(e); process.exit(1); });
"""
    assert run_kafkajs(script, kafka.bootstrap, topic) == "done"
    _assert_committed_only(kafka, topic, ["c0", "c1", "c2"], ["a0", "a1"])


def test_a_commit_writes_its_markers_on_every_partition_in_a_few_wal_flushes(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """A commit's markers are written on all its partitions at once, so the WAL makes them durable together (one
    at a time, a 16-partition commit took 18 WAL flushes), and the producer's next AddPartitionsToTxn, which waits
    for them, waits that much less."""
    node = broker_factory(overrides={"metrics.port": "0"})
    url = metrics_url(node.log_text())

    def wal() -> tuple[float, float]:
        """(appends made durable, WAL flushes)"""
        text = scrape(url)
        appends, flushes = sample(text, "fjord_wal_appends_total"), sample(text, "fjord_wal_flush_seconds_count")
        assert appends is not None and flushes is not None, text
        return appends, flushes

    def settled() -> tuple[float, float] | None:
        """The WAL counters once nothing else is written: unchanged for half a second."""
        first = wal()
        time.sleep(0.5)
        return first if wal() == first else None

    partitions = 16
    topic = topic_name("markers")
    create_topic(node.bootstrap, topic, partitions=partitions)
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": f"markers-{topic}"})
    producer.init_transactions(30)
    for _ in range(2):  # the first commit also has __transaction_state created and loaded: the second is measured
        producer.begin_transaction()
        for partition in range(partitions):
            producer.produce(topic, b"v", partition=partition)
        assert producer.flush(30) == 0
        appends_before, flushes_before = eventually(settled, timeout=DEADLINE_S, what="the WAL to go quiet")
        producer.commit_transaction(30)
    # PrepareCommit, a marker per partition and CompleteCommit: every one of them durable.
    _, flushes = eventually(
        wal, until=lambda now: now[0] - appends_before >= partitions + 2, timeout=DEADLINE_S, what="the markers"
    )
    assert flushes - flushes_before <= 6, f"{flushes - flushes_before} WAL flushes for {partitions} markers"
