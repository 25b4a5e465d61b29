"""Produce/consume with real Kafka clients against a real broker process: every compression codec, keys,
headers and timestamps preserved, across confluent-kafka (librdkafka), aiokafka, kafka-python, kcat and kafkajs.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTP
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTP

from testkit.node_process import BrokerProcess
from testkit.waiting import eventually, eventually_async
from tests.broker.kafka_clients import module_broker, run_kafkajs, topic_name
from tests.topics import create_topic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from module_broker(tmp_path_factory.mktemp("produce-consume"))


def consume_all(bootstrap: str, topic: str, expected: int, partition: int = 0, timeout: float = 20.0) -> list[object]:
    """Every message of one partition from offset 0 (assign, no group), bounded in time."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, "fetch.wait.max.ms": 100}
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    got: list[object] = []

    def poll() -> bool:
        msg = consumer.poll(0.5)
        if msg is not None:
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(f"consume error: {msg.error()}")
            else:
                got.append(msg)
        return len(got) >= expected

    try:
        eventually(poll, timeout=timeout, interval=0.01, what=lambda: f"{expected} messages, {len(got)} read")
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_round_trip_preserves_keys_headers_timestamps(kafka: BrokerProcess, codec: str) -> None:
    topic = topic_name(f"cf-{codec}")
    create_topic(kafka.bootstrap, topic)
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap, "compression.type": codec, "linger.ms": 20, "acks": "all"}
    )
    base_ts = 1_700_000_000_000
    sent = []
    for i in range(200):
        key = None if i % 10 == 0 else f"key-{i}".encode()
        value = (f"value-{i}-" * (1 + i % 7)).encode()
        headers = [("idx", str(i).encode()), ("codec", codec.encode())]
        producer.produce(topic, key=key, value=value, headers=headers, timestamp=base_ts + i)
        sent.append((key, value, headers, base_ts + i))
    assert producer.flush(20) == 0
    got = consume_all(kafka.bootstrap, topic, len(sent))
    assert [m.offset() for m in got] == list(range(len(sent)))  # type: ignore[attr-defined]
    assert [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in got] == [  # type: ignore[attr-defined]
        (k, v, h, ts) for k, v, h, ts in sent
    ]


def test_aiokafka_round_trip_every_codec(kafka: BrokerProcess) -> None:

    topic = topic_name("aio")
    create_topic(kafka.bootstrap, topic, partitions=len(CODECS))

    async def run() -> dict[int, list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]]]:
        for index, codec in enumerate(CODECS):
            producer = AIOKafkaProducer(
                bootstrap_servers=kafka.bootstrap, compression_type=None if codec == "none" else codec, acks="all"
            )
            await producer.start()
            try:
                batch = [
                    producer.send(
                        topic,
                        f"v{index}-{i}".encode(),
                        key=f"k{i}".encode(),
                        partition=index,
                        timestamp_ms=1_600_000_000_000 + i,
                        headers=[("h", codec.encode())],
                    )
                    for i in range(30)
                ]
                for fut in await asyncio.gather(*batch):
                    await fut
            finally:
                await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await consumer.start()
        out: dict[int, list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]]] = {}
        try:
            parts = [AioTP(topic, i) for i in range(len(CODECS))]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)

            async def fetch() -> bool:
                records = await consumer.getmany(timeout_ms=500)
                for tp, msgs in records.items():
                    out.setdefault(tp.partition, []).extend(
                        (m.key, m.value, list(m.headers), m.timestamp) for m in msgs
                    )
                return sum(len(v) for v in out.values()) >= 30 * len(CODECS)

            await eventually_async(fetch, timeout=20, interval=0.01, what=f"{30 * len(CODECS)} records of {topic}")
        finally:
            await consumer.stop()
        return out

    out = asyncio.run(run())
    for index, codec in enumerate(CODECS):
        assert out.get(index) == [
            (f"k{i}".encode(), f"v{index}-{i}".encode(), [("h", codec.encode())], 1_600_000_000_000 + i)
            for i in range(30)
        ], codec


def test_kafka_python_idempotent_round_trip(kafka: BrokerProcess) -> None:

    topic = topic_name("kp")
    create_topic(kafka.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, compression_type="gzip", acks="all")
    try:
        futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0) for i in range(50)]
        offsets = [f.get(timeout=20).offset for f in futures]
    finally:
        producer.close(timeout=10)
    assert offsets == list(range(50))
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        consumer.assign([KpTP(topic, 0)])
        consumer.seek(KpTP(topic, 0), 0)
        got = []

        def poll() -> bool:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend((m.offset, m.key, m.value) for m in batch)
            return len(got) >= 50

        eventually(poll, timeout=20, interval=0.01, what=f"50 records of {topic}")
    finally:
        consumer.close()
    assert got == [(i, b"k%d" % i, b"v%d" % i) for i in range(50)]


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_round_trip(kafka: BrokerProcess, codec: str, tmp_path: Path) -> None:
    kcat = shutil.which("kcat") or "/usr/bin/kcat"
    topic = topic_name(f"kcat-{codec}")
    create_topic(kafka.bootstrap, topic)
    lines = [f"key{i}:value {i} {codec}" for i in range(40)]
    produce = subprocess.run(
        [
            kcat,
            "-b",
            kafka.bootstrap,
            "-P",
            "-t",
            topic,
            "-p",
            "0",
            "-K",
            ":",
            "-z",
            codec,
            "-X",
            "enable.idempotence=true",
        ],
        input="\n".join(lines) + "\n",
        text=True,
        capture_output=True,
        check=False,
        timeout=30,
    )
    assert produce.returncode == 0, produce.stderr
    consume = subprocess.run(
        [kcat, "-b", kafka.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J"],
        text=True,
        capture_output=True,
        check=False,
        timeout=30,
    )
    assert consume.returncode == 0, consume.stderr
    records = [json.loads(line) for line in consume.stdout.splitlines() if line.strip()]
    assert [(r["offset"], r["key"], r["payload"]) for r in records] == [
        (i, f"key{i}", f"value {i} {codec}") for i in range(40)
    ]


def test_kafkajs_round_trip(kafka: BrokerProcess) -> None:
    topic = topic_name("kjs")
    create_topic(kafka.bootstrap, topic)
    script = """
const { Kafka, CompressionTypes, logLevel } = require('kafkajs');
const [broker, topic] = process.argv.slice(1);
(async () => {
  const kafka = new Kafka({ clientId: 'fjord-test', brokers: [broker], logLevel: logLevel.NOTHING });
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  for (const compression of [CompressionTypes.None, CompressionTypes.GZIP]) {
    await producer.send({ topic, acks: -1, compression, messages: Array.from({ length: 20 }, (_, i) => ({
      key: `k${i}`, value: `v${i}-${compression}`, headers: { c: `${compression}` }, timestamp: `${1650000000000 + i}`,
    })) });
  }
  await producer.disconnect();
  const consumer = kafka.consumer({ groupId: `g-${topic}`, maxWaitTimeInMs: 200 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const got = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timeout with ${got.length} messages`)), 25000);
    consumer.run({ eachMessage: async ({ message }) => {
      got.push([Number(message.offset), message.key.toString(), message.value.toString(),
                message.headers.c.toString(), message.timestamp]);
      if (got.length === 40) { clearTimeout(timer); resolve(); }
    } });
  });
  await consumer.disconnect();
  console.log(JSON.stringify(got));
})().catch((e) => { console.error(e); process.exit(1); });
"""
    got = run_kafkajs(script, kafka.bootstrap, topic, timeout=60)
    expected = [
        [batch * 20 + i, f"k{i}", f"v{i}-{codec}", str(codec), str(1650000000000 + i)]
        for batch, codec in enumerate([0, 1])
        for i in range(20)
    ]
    assert got == expected
