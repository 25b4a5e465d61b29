"""Pipelined Produce requests on one connection are appended in the order they were sent.

A producer keeps several requests in flight to one partition and reads its batches back in send order; Kafka
applies a connection's requests one after another. The broker runs them concurrently, so the first requests to
a partition that was created a moment ago (still opening) used to be overtaken by later ones.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient
from testkit.waiting import eventually
from tests.broker.kafka_clients import fetch_request, produce_request
from wire import codec, schema
from wire.record_batch import Record, build_batch, iter_records

REQUESTS = 60
TOPICS = 4


def _create(client: WireClient, topic: str) -> None:
    cls = codec.request_class(19, 7)
    entry = schema.build_nested(cls, "topics", name=topic, num_partitions=1, replication_factor=-1)
    response = client.request(schema.build(cls, topics=(entry,), timeout=5000))
    assert response.topics[0].error_code == ErrorCode.none, response


def _values(client: WireClient, topic: str, count: int) -> list[bytes | None]:
    values: list[bytes | None] = []

    def fetch() -> bool:
        response = client.request(fetch_request(topic, 0, len(values)))
        part = response.responses[0].partitions[0]
        assert part.error_code == ErrorCode.none, part
        values.extend(record.value for _, record in iter_records(part.records or b""))
        return len(values) >= count

    eventually(fetch, timeout=10, interval=0.01, what=lambda: f"{count} records of {topic}, {len(values)} read")
    return values


def test_pipelined_produce_to_a_new_partition_keeps_send_order(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    admin = wire(shared_broker.port)
    for _ in range(TOPICS):
        topic = f"produce-order-{uuid.uuid4().hex[:8]}"
        _create(admin, topic)
        producer = wire(shared_broker.port)
        # Sent right after the topic is created, a little apart, so some arrive while the partition opens.
        for i in range(REQUESTS):
            producer.send(produce_request(topic, 0, build_batch([Record(key=None, value=b"%d" % i)])))
            time.sleep(0.001)
        offsets = []
        for _ in range(REQUESTS):
            _, body = producer.receive(0, 9)
            part = body.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.none, part
            offsets.append(part.base_offset)
        assert offsets == list(range(REQUESTS)), f"{topic}: base offsets in send order"
        assert _values(admin, topic, REQUESTS) == [b"%d" % i for i in range(REQUESTS)], topic
