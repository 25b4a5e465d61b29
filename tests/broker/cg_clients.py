"""confluent-kafka (librdkafka) consumers speaking the KIP-848 protocol, for the consumer group tests
(``test_consumer_groups_clients.py``, ``test_consumer_groups_durability.py``): the consumer factory fixture, a commit
that rides out an epoch change, and bounded polling."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription

from testkit.waiting import eventually

DEADLINE_S = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def consumer_factory() -> Iterator[Callable[..., Consumer]]:
    """The body of a test module's consumer fixture: yields ``new(bootstrap, group, **config)``, a librdkafka
    consumer speaking the KIP-848 protocol (session and heartbeat are the broker's to set); any consumer a test
    leaves open is closed afterwards, before the module's broker stops (an open consumer keeps the interpreter from
    exiting)."""
    opened: list[Consumer] = []

    def new(bootstrap: str, group: str, **extra: Any) -> Consumer:
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 500,
        }
        config.update(extra)
        consumer = Consumer(config)
        opened.append(consumer)
        return consumer

    yield new
    for consumer in opened:
        try:
            consumer.close()
        except RuntimeError:
            pass  # closed by the test


def commit(consumer: Consumer, message: Message) -> None:
    """A synchronous commit of the record after ``message``, retried while the broker answers STALE_MEMBER_EPOCH:
    as in Kafka, a commit must carry the member's current epoch, and a heartbeat that just moved the epoch (a member
    joined or left) races the commit; librdkafka hands that retriable error to the application (the Java consumer
    retries it itself)."""

    def committed() -> bool:
        try:
            consumer.commit(message=message, asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.STALE_MEMBER_EPOCH:
                return False
            raise
        return True

    eventually(committed, timeout=10, interval=0.05, what=f"committing {message.topic()}/{message.partition()}")


def produce(bootstrap: str, topic: str, values: Iterable[int], partitions: int, *, batch_records: int = 10_000) -> None:
    """``batch_records``: at most that many records per batch (a share consumer acquires whole batches)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": batch_records})
    for i in values:
        producer.produce(topic, key=str(i).encode(), value=str(i).encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def poll_until(
    consumers: Iterable[Consumer],
    done: Callable[[], bool],
    on_message: Callable[[Consumer, Message], None] = lambda c, m: None,
    timeout: float = DEADLINE_S,
    what: str | Callable[[], str] = "the consumers to reach the awaited state",
) -> None:
    """Polls every consumer in turn (each poll is short) until ``done()``; fails after ``timeout`` seconds."""
    consumers = list(consumers)

    def polled_until_done() -> bool:
        if done():
            return True
        for consumer in consumers:
            message = consumer.poll(0.05)
            if message is None:
                continue
            assert message.error() is None, message.error()
            on_message(consumer, message)
        return done()

    eventually(polled_until_done, timeout=timeout, interval=0.001, what=what)  # the polls themselves wait


def described(admin: AdminClient, group: str) -> ConsumerGroupDescription:
    [description] = [f.result(timeout=20) for f in admin.describe_consumer_groups([group]).values()]
    return description


def partitions_of(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}

