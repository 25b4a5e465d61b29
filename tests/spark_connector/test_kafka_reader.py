"""A Spark task's reader (``spark_connector.kafka_reader``) against a real broker, with a leader change injected into
its watermark lookup: a lookup that meets the partition's old leader (NOT_LEADER_FOR_PARTITION while a partition moves
or fails over) is asked again instead of failing the task, which stopped a streaming query in a test of a pipeline
through a broker's kill -9; an error that is not a leader change still fails it at once."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from spark_connector.kafka_reader import _watermarks
from spark_connector.offsets import OffsetRange
from testkit.node_process import BrokerProcess
from tests.broker.broker_fixtures import shared_broker

__all__ = ["shared_broker"]  # imported so that pytest finds the fixture: one node for the module


class _LeaderMoving:
    """A real consumer whose first ``failures`` watermark lookups fail with ``code`` (the fault injected)."""

    def __init__(self, consumer: Consumer, failures: int, code: int) -> None:
        self._consumer, self._failures, self._code, self.calls = consumer, failures, code, 0

    def get_watermark_offsets(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls <= self._failures:
            raise KafkaException(KafkaError(self._code))
        return self._consumer.get_watermark_offsets(*args, **kwargs)


def test_a_watermark_lookup_meeting_a_leader_change_is_asked_again(shared_broker: BrokerProcess) -> None:
    bootstrap = f"127.0.0.1:{shared_broker.port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.create_topics([NewTopic("reader-moving", 1)]).values()
    future.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        producer.produce("reader-moving", str(i).encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        moving = _LeaderMoving(consumer, 2, KafkaError.NOT_LEADER_FOR_PARTITION)
        assert _watermarks(moving, OffsetRange("reader-moving", 0, 0, 3)) == (0, 3)  # type: ignore[arg-type]
        assert moving.calls == 3
        broken = _LeaderMoving(consumer, 1, KafkaError.TOPIC_AUTHORIZATION_FAILED)
        with pytest.raises(KafkaException):
            _watermarks(broken, OffsetRange("reader-moving", 0, 0, 3))  # type: ignore[arg-type]
        assert broken.calls == 1
    finally:
        consumer.close()
