"""Durability across broker restarts: every acknowledged record survives SIGTERM and SIGKILL under produce load,
producer state survives (a retried batch is still recognised after the restart), and the objects the broker
wrote decode with ``fjord object dump``."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient
from tests.broker.kafka_clients import init_producer_id, list_offsets_request, produce_request, topic_name
from tests.topics import create_topic
from wire.record_batch import Record, build_batch

REPO = Path(__file__).resolve().parents[2]
_MAX_RECORDS = 20_000


def _produce_until_stopped(bootstrap: str, topic: str, stop: threading.Event, acked: dict[int, bytes]) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2, "message.timeout.ms": 3000, "retries": 0}
    )

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

    i = 0
    while not stop.is_set():
        if i >= _MAX_RECORDS:  # enough load; bounded so reading everything back stays quick
            producer.poll(0.05)
            continue
        try:
            producer.produce(topic, value=b"record-%d" % i, partition=0, on_delivery=delivered)
            i += 1
        except BufferError:
            producer.poll(0.01)
        if i % 100 == 0:
            producer.poll(0)
    producer.flush(5)


def _read_all(bootstrap: str, topic: str, end: int) -> dict[int, bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "durability", "enable.auto.commit": False})
    out: dict[int, bytes] = {}
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(out) < end and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out[msg.offset()] = msg.value()
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_acknowledged_records_survive_restart_under_load(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient], how: str
) -> None:
    first = broker_factory()
    topic = topic_name(f"durable-{how.lower()}")
    create_topic(first.bootstrap, topic)
    acked: dict[int, bytes] = {}
    stop = threading.Event()
    worker = threading.Thread(target=_produce_until_stopped, args=(first.bootstrap, topic, stop, acked))
    worker.start()
    deadline = time.monotonic() + 20
    while len(acked) < 3000 and time.monotonic() < deadline:
        time.sleep(0.05)
    if how == "SIGKILL":
        first.proc.send_signal(signal.SIGKILL)
    else:
        first.proc.send_signal(signal.SIGTERM)
    first.proc.wait(timeout=30)
    stop.set()
    worker.join(timeout=30)
    if how == "SIGTERM":
        assert first.proc.returncode == 0, first.log_text()
    snapshot = dict(acked)
    assert len(snapshot) >= 3000, f"only {len(snapshot)} records acknowledged before the {how}"

    second = broker_factory(data_dir=first.data_dir)
    latest = wire(second.port).request(list_offsets_request(topic, 0, -1)).topics[0].partitions[0]
    assert latest.error_code == ErrorCode.none
    assert latest.offset >= max(snapshot) + 1
    stored = _read_all(second.bootstrap, topic, latest.offset)
    missing = [o for o, v in snapshot.items() if stored.get(o) != v]
    assert not missing, (
        f"{len(missing)} of {len(snapshot)} acknowledged records lost or changed after {how}, e.g. {missing[:5]}; "
        f"read back {len(stored)} of {latest.offset}"
    )
    # The partition keeps appending after the restart, right after the recovered end.
    producer = Producer({"bootstrap.servers": second.bootstrap, "acks": "all"})
    offsets: list[int] = []
    producer.produce(topic, value=b"after", partition=0, on_delivery=lambda e, m: offsets.append(m.offset()))
    assert producer.flush(20) == 0
    assert offsets == [latest.offset]
    recovered = f"recovering {topic}-0 after an unclean shutdown" in second.log_text()
    assert recovered == (how == "SIGKILL"), "recovery must run exactly when the shutdown was not clean"


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_producer_state_survives_restart(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient], how: str
) -> None:
    first = broker_factory()
    topic = topic_name(f"pstate-{how.lower()}")
    create_topic(first.bootstrap, topic)
    client = wire(first.port)
    pid, epoch = init_producer_id(client)
    batches = [
        build_batch(
            [Record(None, b"v%d" % (seq + i), (), None) for i in range(2)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
        )
        for seq in (0, 2)
    ]
    for expected, records in zip((0, 2), batches, strict=True):
        part = client.request(produce_request(topic, 0, records)).responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (ErrorCode.none, expected)
    client.close()
    if how == "SIGKILL":
        first.kill()
    else:
        assert first.stop() == 0
    second = broker_factory(data_dir=first.data_dir)
    again = wire(second.port)
    retried = again.request(produce_request(topic, 0, batches[1])).responses[0].partition_responses[0]
    assert (retried.error_code, retried.base_offset) == (ErrorCode.none, 2)
    latest = again.request(list_offsets_request(topic, 0, -1)).topics[0].partitions[0]
    assert latest.offset == 4
    recovered = f"recovering {topic}-0 after an unclean shutdown" in second.log_text()
    assert recovered == (how == "SIGKILL")


def test_objects_written_by_the_broker_decode_with_object_dump(broker_factory: Callable[..., BrokerProcess]) -> None:
    node = broker_factory()
    topic = topic_name("dump")
    create_topic(node.bootstrap, topic)
    producer = Producer({"bootstrap.servers": node.bootstrap, "compression.type": "lz4"})
    for i in range(500):
        producer.produce(topic, value=b"x" * 100 + b"%d" % i, partition=0)
    assert producer.flush(20) == 0
    assert node.stop() == 0  # clean shutdown force-uploads every stream
    objects = sorted(p for p in (node.data_dir / "objects").rglob("*") if p.is_file())
    assert objects, "the broker wrote no objects"
    total_records = 0
    for path in objects:
        result = subprocess.run(
            [sys.executable, "-m", "node.cli", "object", "dump", "--records", str(path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, f"{path}: {result.stderr}"
        assert "indexStartPosition" in result.stdout
        total_records += result.stdout.count("StreamRecordBatch{")
    assert total_records > 0
