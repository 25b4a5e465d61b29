"""What the transaction tests against a broker process share (``test_transactions_clients.py``,
``test_transactions_restart.py``): the broker settings they run with, a confluent-kafka transactional producer, and
the transaction APIs over a raw :class:`WireClient` (FindCoordinator, InitProducerId, AddPartitionsToTxn, EndTxn,
DescribeTransactions, ListTransactions, a transactional produce), each built from kio's schema so a test can send
exactly the values it means to.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from testkit.node_process import WireClient
from testkit.waiting import eventually
from tests.broker.kafka_clients import produce_request
from wire import codec, schema
from wire.record_batch import Record, build_batch

DEADLINE_S = 45.0
CLEANUP_MS = 300
OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": str(CLEANUP_MS)}


def transactional_producer(bootstrap: str, transactional_id: str, **extra: Any) -> Producer:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5}
    config.update(extra)
    return Producer(config)


def find_transaction_coordinator(client: WireClient, transactional_id: str) -> Any:
    request = schema.build(codec.request_class(10, 4), key_type=1, coordinator_keys=(transactional_id,))
    return eventually(
        lambda: client.request(request).coordinators[0],
        until=lambda c: c.error_code == ErrorCode.none,
        timeout=DEADLINE_S,
        what=f"a transaction coordinator for {transactional_id!r}",
    )


def init_producer_id(
    client: WireClient, transactional_id: str, *, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1
) -> Any:
    request = schema.build(
        codec.request_class(22, 4),
        transactional_id=transactional_id,
        transaction_timeout=timeout_ms,
        producer_id=pid,
        producer_epoch=epoch,
    )
    return client.request(request)


def add_partitions_request(transactional_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]]) -> Any:
    request_cls = codec.request_class(24, 3)
    topic_cls = schema.field_entity(request_cls, "v3_and_below_topics")
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    return schema.build(
        request_cls,
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=tuple(schema.build(topic_cls, name=t, partitions=tuple(ps)) for t, ps in topics.items()),
    )


def add_partitions_result(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (topic.name, part.partition_index): ErrorCode(part.partition_error_code)
        for topic in response.results_by_topic_v3_and_below
        for part in topic.results_by_partition
    }


def add_partitions(
    client: WireClient, transactional_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], ErrorCode]:
    return add_partitions_result(client.request(add_partitions_request(transactional_id, pid, epoch, partitions)))


def verify_partitions(
    client: WireClient, transactional_id: str, pid: int, epoch: int, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], ErrorCode]:
    request_cls = codec.request_class(24, 4)
    txn_cls = schema.field_entity(request_cls, "transactions")
    topic_cls = schema.field_entity(txn_cls, "topics")
    txn = schema.build(
        txn_cls,
        transactional_id=transactional_id,
        producer_id=pid,
        producer_epoch=epoch,
        verify_only=True,
        topics=tuple(schema.build(topic_cls, name=t, partitions=(p,)) for t, p in partitions),
    )
    response = client.request(schema.build(request_cls, transactions=(txn,)))
    assert response.error_code == ErrorCode.none
    return {
        (topic.name, part.partition_index): ErrorCode(part.partition_error_code)
        for result in response.results_by_transaction
        for topic in result.topic_results
        for part in topic.results_by_partition
    }


def end_txn(client: WireClient, transactional_id: str, pid: int, epoch: int, *, commit: bool, version: int = 3) -> Any:
    request = schema.build(
        codec.request_class(26, version),
        transactional_id=transactional_id,
        producer_id=pid,
        producer_epoch=epoch,
        committed=commit,
    )
    return ErrorCode(client.request(request).error_code)


@dataclass(frozen=True)
class DescribedTopic:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True)
class Described:
    error_code: ErrorCode
    transactional_id: str
    transaction_state: str
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    producer_id: int
    producer_epoch: int
    topics: tuple[DescribedTopic, ...]


class _Flexible:
    """Reads a flexible-version response by hand: DescribeTransactions answers a start time of -1 (no transaction
    started yet) exactly as Kafka does, which kio's datetime field refuses to decode."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def fixed(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self) -> str:
        n = self.uvarint() - 1
        self.pos += n
        return self.data[self.pos - n : self.pos].decode()

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def describe(client: WireClient, transactional_id: str) -> Described:
    request = schema.build(codec.request_class(65, 0), transactional_ids=(transactional_id,))
    correlation_id = client.send(request)
    reader = _Flexible(client.read_frame())
    assert reader.fixed(">i") == correlation_id
    reader.tags()
    reader.fixed(">i")  # throttle time
    states = []
    for _ in range(reader.uvarint() - 1):
        error, txn_id, state = ErrorCode(reader.fixed(">h")), reader.string(), reader.string()
        timeout, start, pid, epoch = reader.fixed(">i"), reader.fixed(">q"), reader.fixed(">q"), reader.fixed(">h")
        topics = []
        for _ in range(reader.uvarint() - 1):
            name = reader.string()
            partitions = tuple(reader.fixed(">i") for _ in range(reader.uvarint() - 1))
            reader.tags()
            topics.append(DescribedTopic(name, partitions))
        reader.tags()
        states.append(Described(error, txn_id, state, timeout, start, pid, epoch, tuple(topics)))
    [described] = states
    return described


def list_transactions(
    client: WireClient,
    states: tuple[str, ...] = (),
    pids: tuple[int, ...] = (),
    *,
    duration_ms: int = -1,
    pattern: str | None = None,
) -> Any:
    """ListTransactions v2 (v0's filters, v1's duration filter, v2's transactional-id pattern)."""
    request = schema.build(
        codec.request_class(66, 2),
        state_filters=states,
        producer_id_filters=pids,
        duration_filter=duration_ms,
        transactional_id_pattern=pattern,
    )
    return client.request(request)


def wait_state(client: WireClient, transactional_id: str, state: str) -> Any:
    return eventually(
        lambda: describe(client, transactional_id),
        until=lambda s: s.transaction_state == state,
        timeout=DEADLINE_S,
        what=lambda: f"{transactional_id!r} to reach {state} (now {describe(client, transactional_id)})",
    )


def log_end(client: WireClient, topic: str, partition: int) -> int:
    request_cls = codec.request_class(2, 8)
    topic_cls = schema.field_entity(request_cls, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    request = schema.build(
        request_cls,
        replica_id=-1,
        isolation_level=0,
        topics=(
            schema.build(
                topic_cls,
                name=topic,
                partitions=(schema.build(part_cls, partition_index=partition, current_leader_epoch=-1, timestamp=-1),),
            ),
        ),
    )
    [part] = client.request(request).topics[0].partitions
    assert part.error_code == ErrorCode.none
    return int(part.offset)


def transactional_batch(pid: int, epoch: int, value: bytes = b"v", base_sequence: int = 0) -> bytes:
    return build_batch(
        [Record(key=None, value=value, timestamp=int(time.time() * 1000))],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=base_sequence,
        is_transactional=True,
    )


def transactional_produce_request(transactional_id: str, topic: str, partition: int, batch: bytes) -> Any:
    request = produce_request(topic, partition, batch)
    return schema.build(
        type(request), transactional_id=transactional_id, acks=-1, timeout=10_000, topic_data=request.topic_data
    )


def produce_transactional(client: WireClient, transactional_id: str, topic: str, partition: int, batch: bytes) -> Any:
    [part] = client.request(
        transactional_produce_request(transactional_id, topic, partition, batch)
    ).responses[0].partition_responses
    return part
