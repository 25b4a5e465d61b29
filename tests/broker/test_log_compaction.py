"""Log compaction seen by real clients (confluent-kafka and kcat) against a real broker process: a compacted topic
keeps the latest value per key at its original offsets, tombstoned keys vanish after delete.retention.ms, the data
survives a restart, and ``__consumer_offsets`` compacts without losing a group's committed offsets."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from testkit.node_process import BrokerProcess
from testkit.waiting import eventually
from tests.broker.kafka_clients import topic_name
from tests.topics import create_topic

TIMEOUT = 20.0
#: Small cleaner settings keep the test fast: a check every 100 ms, any dirty share worth a round.
OVERRIDES = {
    "log.cleaner.backoff.ms": "100",
    "log.cleaner.min.cleanable.ratio": "0.01",
    "offsets.topic.num.partitions": "1",
}


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]]) -> list[tuple[int, bytes]]:
    """Produces in several small batches; returns (offset, key) of each record as the broker acknowledged it."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True})
    acked: list[tuple[int, bytes]] = []

    def done(err: object, message: object) -> None:
        assert err is None, err
        acked.append((message.offset(), message.key()))  # type: ignore[attr-defined]

    for i, (key, value) in enumerate(records):
        producer.produce(topic, value, key, partition=0, on_delivery=done)
        if i % 7 == 6:
            assert producer.flush(TIMEOUT) == 0
    assert producer.flush(TIMEOUT) == 0
    return sorted(acked)


def _consume_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from the beginning to the high watermark, with confluent-kafka."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic_name("reader"), "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT)
        consumer.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
        got: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and (not got or got[-1][0] < high - 1):
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            offset, key = message.offset(), message.key()
            assert offset is not None and key is not None
            got.append((offset, key, message.value()))
        return got
    finally:
        consumer.close()


def _cleaned_rounds(broker: BrokerProcess, topic: str) -> int:
    return len(re.findall(rf"{re.escape(topic)}-0: cleaned \[", broker.log_text()))


def test_compacted_topic_keeps_latest_values_drops_tombstones_and_survives_restart(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(OVERRIDES)
    topic = topic_name("changelog")
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": "compact", "delete.retention.ms": "300"})
    updates = [(b"key-%02d" % k, b"v%d-of-key-%02d" % (n, k)) for n in range(8) for k in range(20)]
    tombstones: list[tuple[bytes, bytes | None]] = [(b"key-%02d" % k, None) for k in range(5)]
    acked = _produce(broker.bootstrap, topic, [*updates, *tombstones])
    # The newest batch is never cleaned (Kafka's active segment): a batch of its own keeps the tombstones out of it.
    acked += _produce(broker.bootstrap, topic, [(b"tail", b"t1")])
    latest_offset = {key: offset for offset, key in acked}
    tail_offset = acked[-1][0]
    # One value per key, the latest; the tombstoned keys vanish once delete.retention.ms has passed, with no
    # further write needed (the round that drops them is due when the oldest kept tombstone expires).
    expected = [(latest_offset[b"key-%02d" % k], b"key-%02d" % k, b"v7-of-key-%02d" % k) for k in range(5, 20)]
    expected.append((tail_offset, b"tail", b"t1"))
    eventually(lambda: _cleaned_rounds(broker, topic), until=lambda rounds: rounds >= 2, timeout=TIMEOUT,
               interval=0.1, what=f"two cleaner rounds on {topic}")
    eventually(lambda: _consume_all(broker.bootstrap, topic), until=lambda got: got == expected, timeout=TIMEOUT,
               interval=0.1, what=f"{topic} to hold only the latest values {expected}")

    if shutil.which("kcat"):
        out = subprocess.run(
            [
                "kcat",
                "-C",
                "-b",
                broker.bootstrap,
                "-t",
                topic,
                "-p",
                "0",
                "-o",
                "beginning",
                "-e",
                "-q",
                "-f",
                "%o %k %s\\n",
            ],
            capture_output=True,
            timeout=TIMEOUT,
            check=True,
            text=True,
        ).stdout.split("\n")
        assert [line.split(" ") for line in out if line] == [[str(o), k.decode(), v.decode()] for o, k, v in expected]

    assert broker.stop() == 0, broker.log_text()
    restarted = broker_factory(OVERRIDES, data_dir=broker.data_dir)
    assert _consume_all(restarted.bootstrap, topic) == expected
    # Offsets go on after the restart, right after the old end.
    assert _produce(restarted.bootstrap, topic, [(b"after", b"restart")]) == [(tail_offset + 1, b"after")]


def test_consumer_offsets_compact_and_committed_offsets_survive_restart(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    broker = broker_factory(OVERRIDES)
    topic = topic_name("tracked")
    create_topic(broker.bootstrap, topic, partitions=2)
    group = topic_name("group")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        for n in range(150):
            consumer.commit(
                offsets=[TopicPartition(topic, 0, n), TopicPartition(topic, 1, 1000 + n)], asynchronous=False
            )
        eventually(lambda: _cleaned_rounds(broker, "__consumer_offsets"), until=lambda rounds: rounds >= 1,
                   timeout=TIMEOUT, interval=0.1, what="__consumer_offsets to be cleaned")
    finally:
        consumer.close()
    assert broker.stop() == 0, broker.log_text()

    restarted = broker_factory(OVERRIDES, data_dir=broker.data_dir)
    assert "__consumer_offsets-0" in restarted.log_text()
    consumer = Consumer({"bootstrap.servers": restarted.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=TIMEOUT)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 149), (1, 1149)]
    finally:
        consumer.close()


@pytest.mark.parametrize("policy", ["compact", "compact,delete"])
def test_compacted_topics_refuse_records_without_a_key(
    broker_factory: Callable[..., BrokerProcess], policy: str
) -> None:
    broker = broker_factory(OVERRIDES)
    topic = topic_name("keyed")
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": policy})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "retries": 0})
    errors: list[str] = []
    producer.produce(topic, b"no key", partition=0, on_delivery=lambda err, _: errors.append(str(err and err.name())))
    assert producer.flush(TIMEOUT) == 0
    assert errors == ["INVALID_RECORD"]
