"""kill -9 with a big WAL tail (issue 25): with ``s3.wal.upload.threshold`` raised so that tens of MB of acknowledged
records exist only in the WAL, a restarted node serves its partition as soon as the tail is replayed into its
LogCache and uploads it in the background, so the producer's acks resume as quickly as after a kill with a small
tail; a second kill -9 right after that (during the background upload) loses nothing either."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition

from testkit.node_process import BrokerProcess
from tests.broker.kafka_clients import topic_name
from tests.topics import create_topic

RECORD = b"x" * 1024
BIG_TAIL = 30_000  # records of 1 KiB: about 30 MB only in the WAL at the kill
SMALL_TAIL = 500
#: Far above what the restarts take here (about 1-2 s); the comparison with the small tail is the real check.
RESTART_BOUND_S = 20.0
TAIL_OVERRIDES = {
    "s3.wal.upload.threshold": "256MiB",
    "s3.wal.cache.size": "512MiB",
    "s3.wal.upload.interval.ms": "600000",
}


def _write(bootstrap: str, topic: str, count: int, start: int) -> list[tuple[int, bytes]]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20,
                         "batch.size": 1_000_000, "queue.buffering.max.kbytes": 262144})
    acked: list[tuple[int, bytes]] = []

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        acked.append((msg.offset(), msg.value()))  # type: ignore[attr-defined]

    for i in range(start, start + count):
        while True:
            try:
                producer.produce(topic, value=b"%d:" % i + RECORD, partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    assert len(acked) == count
    return acked


def _kill_and_restart(node: BrokerProcess, factory: Callable[..., BrokerProcess], topic: str) -> tuple[
        BrokerProcess, float]:
    """SIGKILL, restart on the same data, and the seconds until a produce to the partition is acknowledged."""
    node.proc.send_signal(signal.SIGKILL)
    node.proc.wait(timeout=30)
    killed = time.monotonic()
    restarted = factory(TAIL_OVERRIDES, data_dir=node.data_dir)
    producer = Producer({"bootstrap.servers": restarted.bootstrap, "acks": "all", "message.timeout.ms": 60000})
    offsets: list[int] = []
    producer.produce(topic, value=b"probe", partition=0, on_delivery=lambda e, m: offsets.append(m.offset()))
    assert producer.flush(60) == 0 and offsets and offsets[0] >= 0, restarted.log_text()
    return restarted, time.monotonic() - killed


def _read_back(bootstrap: str, topic: str) -> dict[int, bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tail", "enable.auto.commit": False,
                         "fetch.max.bytes": 8 * 1024 * 1024})
    out: dict[int, bytes] = {}
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
        deadline = time.monotonic() + 60
        while len(out) < high and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out[msg.offset()] = msg.value()
    finally:
        consumer.close()
    return out


def test_a_big_wal_tail_restarts_as_fast_as_a_small_one_and_loses_nothing(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    node = broker_factory(TAIL_OVERRIDES)
    topic = topic_name("tail")
    create_topic(node.bootstrap, topic)
    acked = _write(node.bootstrap, topic, SMALL_TAIL, 0)
    node, small_s = _kill_and_restart(node, broker_factory, topic)

    acked += _write(node.bootstrap, topic, BIG_TAIL, SMALL_TAIL)
    node, big_s = _kill_and_restart(node, broker_factory, topic)
    assert "serving them while they upload" in node.log_text(), node.log_text()[-3000:]
    assert big_s < RESTART_BOUND_S
    assert big_s < small_s + 3.0, f"a {BIG_TAIL // 1000} MB WAL tail restarted in {big_s:.2f} s, a small one in " \
                                  f"{small_s:.2f} s"

    node, _ = _kill_and_restart(node, broker_factory, topic)  # while the tail may still be uploading
    stored = _read_back(node.bootstrap, topic)
    missing = [offset for offset, value in acked if stored.get(offset) != value]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged records lost, e.g. offsets {missing[:5]}"
