"""Transactions v2 (KIP-890 part 2) at the wire, as Kafka 4.2's Java producer sends it with ``transaction.version``
2 finalized: InitProducerId v5, Produce v12/v13 with no AddPartitionsToTxn (the broker adds the partition),
TxnOffsetCommit v5 with no AddOffsetsToTxn, EndTxn v5 whose every commit or abort bumps the epoch and answers it;
a read_committed consumer sees exactly the committed records and a zombie at an old epoch is fenced. Then the
same client at ``transaction.version`` 1 after ``kafka-features.sh downgrade``: Produce v12 without the partition
added is refused UNSUPPORTED_VERSION (Produce v11: TRANSACTION_ABORTABLE), and the v1 flow (AddPartitionsToTxn,
Produce v11, EndTxn v4) keeps its epoch."""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, api_versions_request
from testkit.waiting import eventually
from tests.broker.kafka_clients import fetch_request, topic_name
from tests.reading import read_to_end
from tests.topics import create_topic
from wire import codec, schema
from wire.record_batch import Record, build_batch, decode_records, iter_batches

_NOT_READY = frozenset(
    {ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator}
)


def _until_ready(client: WireClient, request: Any, what: str, code: Callable[[Any], int]) -> Any:
    def answered() -> Any:
        response = client.request(request)
        return None if code(response) in _NOT_READY else response

    return eventually(answered, timeout=30, what=what)


def find_coordinators(client: WireClient, transactional_id: str, group: str) -> None:
    cls = codec.request_class(10, 4)
    for key_type, key in ((1, transactional_id), (0, group)):
        found = _until_ready(client, schema.build(cls, key_type=key_type, coordinator_keys=(key,)),
                             f"FindCoordinator {key}", lambda r: r.coordinators[0].error_code)
        assert found.coordinators[0].error_code == ErrorCode.none


def init_producer_id(client: WireClient, transactional_id: str) -> tuple[int, int]:
    request = schema.build(codec.request_class(22, 5), transactional_id=transactional_id,
                           transaction_timeout=60_000, producer_id=-1, producer_epoch=-1)
    response = _until_ready(client, request, "InitProducerId", lambda r: r.error_code)
    assert response.error_code == ErrorCode.none, response
    return int(response.producer_id), int(response.producer_epoch)


def batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    return build_batch([Record(None, v) for v in values], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=True)


def produce(client: WireClient, version: int, transactional_id: str, topic: Any, records: bytes, *,
            partition: int = 0) -> Any:
    cls = codec.request_class(0, version)
    topic_cls = schema.field_entity(cls, "topic_data")
    by = {"topic_id": topic} if version >= 13 else {"name": topic}
    data = schema.build(topic_cls, **by, partition_data=(
        schema.build_nested(topic_cls, "partition_data", index=partition, records=records),))
    response = client.request(schema.build(cls, transactional_id=transactional_id, acks=-1, timeout=10_000,
                                           topic_data=(data,)))
    return response.responses[0].partition_responses[0]


def end_txn(client: WireClient, version: int, transactional_id: str, producer: tuple[int, int], commit: bool) -> Any:
    pid, epoch = producer
    return client.request(schema.build(codec.request_class(26, version), transactional_id=transactional_id,
                                       producer_id=pid, producer_epoch=epoch, committed=commit))


def txn_offset_commit(client: WireClient, transactional_id: str, group: str, producer: tuple[int, int],
                      offset: tuple[str, int]) -> ErrorCode:
    """TxnOffsetCommit v5 of ``offset`` (topic, offset of its partition 0), as a producer outside the group."""
    pid, epoch = producer
    topic, position = offset
    cls = codec.request_class(28, 5)
    topic_cls = schema.field_entity(cls, "topics")
    request = schema.build(cls, transactional_id=transactional_id, group_id=group, producer_id=pid,
                           producer_epoch=epoch, generation_id=-1, member_id="", topics=(
                               schema.build(topic_cls, name=topic, partitions=(schema.build_nested(
                                   topic_cls, "partitions", partition_index=0, committed_offset=position),)),))
    return ErrorCode(client.request(request).topics[0].partitions[0].error_code)


def committed_values(client: WireClient, topic: str) -> list[bytes]:
    """Every data record a read_committed consumer reads, from offset 0 to the last stable offset."""
    out: list[bytes] = []
    request = dataclasses.replace(fetch_request(topic, 0, 0, version=12), isolation_level=1)
    part = client.request(request).responses[0].partitions[0]
    assert part.error_code == ErrorCode.none
    # As a Java consumer reads it: a batch of an aborted transaction (from its first offset to its ABORT marker)
    # is skipped.
    starts = sorted((a.first_offset, a.producer_id) for a in part.aborted_transactions or ())
    aborting: set[int] = set()
    for header, raw in iter_batches(part.records or b""):
        while starts and starts[0][0] <= header.base_offset:
            aborting.add(starts.pop(0)[1])
        if header.is_control:
            aborting.discard(header.producer_id)
        elif header.producer_id not in aborting:
            out.extend(r.value or b"" for r in decode_records(raw))
    return out


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=30)[0].offset)
    finally:
        consumer.close()


def topic_id(client: WireClient, topic: str) -> uuid.UUID:
    response = client.request(schema.build(codec.request_class(3, 12), topics=(
        schema.build_nested(codec.request_class(3, 12), "topics", name=topic, topic_id=uuid.UUID(int=0)),),
        allow_auto_topic_creation=False))
    return response.topics[0].topic_id


def test_a_kafka_42_producer_at_transaction_version_2(broker: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    client = wire(broker.port)
    finalized = {f.name: f.max_version_level for f in client.request(api_versions_request(4)).finalized_features}
    assert finalized["transaction.version"] == 2
    topic, group, txn = topic_name("tv2"), topic_name("tv2-app"), "tv2-producer"
    create_topic(client, topic)
    find_coordinators(client, txn, group)
    pid, epoch = init_producer_id(client, txn)

    # Transaction 1: Produce v12 with no AddPartitionsToTxn, offsets with no AddOffsetsToTxn, EndTxn v5 commit.
    first = produce(client, 12, txn, topic, batch(pid, epoch, 0, b"c1", b"c2"))
    assert first.error_code == ErrorCode.none, first
    assert txn_offset_commit(client, txn, group, (pid, epoch), (topic, 42)) == ErrorCode.none
    committed = end_txn(client, 5, txn, (pid, epoch), True)
    assert (committed.error_code, committed.producer_id, committed.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    # A retry of that EndTxn (its answer lost) is answered the same, and bumps nothing again: while the markers
    # are written, CONCURRENT_TRANSACTIONS (the client backs off), then success with the same id and epoch.
    retried = eventually(lambda: answer if (answer := end_txn(client, 5, txn, (pid, epoch), True)).error_code
                         != ErrorCode.concurrent_transactions else None, timeout=30, what="the retried EndTxn")
    assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (ErrorCode.none, pid, epoch + 1)

    # Transaction 2 at the bumped epoch, by topic id (Produce v13), aborted: the epoch is bumped again.
    second = produce(client, 13, txn, topic_id(client, topic), batch(pid, epoch + 1, 0, b"a1"))
    assert second.error_code == ErrorCode.none, second
    aborted = end_txn(client, 5, txn, (pid, epoch + 1), False)
    assert (aborted.error_code, aborted.producer_id, aborted.producer_epoch) == (ErrorCode.none, pid, epoch + 2)

    # Transaction 3, committed; a zombie still at the first epoch is fenced at the partition and the coordinator.
    third = produce(client, 12, txn, topic, batch(pid, epoch + 2, 0, b"c3"))
    assert third.error_code == ErrorCode.none, third
    zombie = produce(client, 12, txn, topic, batch(pid, epoch, 2, b"zombie"))
    assert zombie.error_code == ErrorCode.invalid_producer_epoch, zombie
    assert end_txn(client, 5, txn, (pid, epoch), True).error_code == ErrorCode.producer_fenced
    assert end_txn(client, 5, txn, (pid, epoch + 2), True).producer_epoch == epoch + 3

    seen: list[list[bytes]] = []
    assert eventually(lambda: seen.append(committed_values(client, topic)) or seen[-1] == [b"c1", b"c2", b"c3"]
                      or None, timeout=30, what=lambda: f"the committed records for read_committed: {seen[-1]}")
    assert committed_offset(broker.bootstrap, group, topic) == 42
    unknown = produce(client, 13, txn, uuid.uuid4(), batch(pid, epoch + 3, 0, b"x"))
    assert unknown.error_code == ErrorCode.unknown_topic_id
    # KIP-1228: a transactions v2 marker must be newer than the partition's epoch; one at that epoch with no
    # transaction open is a retry of the marker written already, answered without writing it again.
    assert write_marker_v2(client, topic, pid, epoch + 3) == ErrorCode.none
    assert write_marker_v2(client, topic, pid, epoch + 2) == ErrorCode.invalid_producer_epoch
    assert committed_values(client, topic) == [b"c1", b"c2", b"c3"]


def test_one_produce_adds_all_its_partitions(broker: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    """A Java producer's first Produce v12 of a transaction carries a batch for every partition it writes to this
    leader, and the leader adds each to the transaction. The partitions' adds take turns at the coordinator, which
    answers all but one CONCURRENT_TRANSACTIONS at first: as Kafka's leader, Fjord asks again rather than refuse the
    batches (which would cost the client a retry back-off, or an abort that waits for them)."""
    client = wire(broker.port)
    partitions = 6
    topic, txn = topic_name("tv2-many"), "tv2-many-producer"
    create_topic(client, topic, partitions=partitions)
    find_coordinators(client, txn, topic_name("tv2-many-app"))
    pid, epoch = init_producer_id(client, txn)
    cls = codec.request_class(0, 12)
    topic_cls = schema.field_entity(cls, "topic_data")
    data = schema.build(topic_cls, name=topic, partition_data=tuple(
        schema.build_nested(topic_cls, "partition_data", index=p, records=batch(pid, epoch, 0, b"r%d" % p))
        for p in range(partitions)))
    response = client.request(schema.build(cls, transactional_id=txn, acks=-1, timeout=10_000, topic_data=(data,)))
    answers = {p.index: ErrorCode(p.error_code) for p in response.responses[0].partition_responses}
    assert answers == dict.fromkeys(range(partitions), ErrorCode.none)
    assert end_txn(client, 5, txn, (pid, epoch), True).error_code == ErrorCode.none
    for p in range(partitions):
        seen = eventually(functools.partial(_read_committed, client, topic, p), timeout=30,
                          what=f"partition {p}'s committed record")
        assert seen == [b"r%d" % p]


def _read_committed(client: WireClient, topic: str, partition: int) -> list[bytes] | None:
    """The data records of ``partition`` a read_committed Fetch returns, None while there are none."""
    request = dataclasses.replace(fetch_request(topic, partition, 0, version=12), isolation_level=1)
    part = client.request(request).responses[0].partitions[0]
    values = [r.value or b"" for header, raw in iter_batches(part.records or b"") if not header.is_control
              for r in decode_records(raw)]
    return values or None


def write_marker_v2(client: WireClient, topic: str, pid: int, epoch: int) -> ErrorCode:
    cls = codec.request_class(27, 2)
    marker_cls = schema.field_entity(cls, "markers")
    topic_cls = schema.field_entity(marker_cls, "topics")
    marker = schema.build(marker_cls, producer_id=pid, producer_epoch=epoch, transaction_result=True,
                          coordinator_epoch=0, transaction_version=2,
                          topics=(schema.build(topic_cls, name=topic, partition_indexes=(0,)),))
    return ErrorCode(client.request(schema.build(cls, markers=(marker,))).markers[0].topics[0].partitions[0].error_code)


def test_the_same_client_at_transaction_version_1_after_a_downgrade(
    broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    client = wire(broker.port)
    cls = codec.request_class(57, 2)
    downgrade = schema.build(cls, feature_updates=(schema.build_nested(
        cls, "feature_updates", feature="transaction.version", max_version_level=1, upgrade_type=2),))
    assert client.request(downgrade).error_code == ErrorCode.none
    finalized = {f.name: f.max_version_level for f in client.request(api_versions_request(4)).finalized_features}
    assert finalized["transaction.version"] == 1
    topic, group, txn = topic_name("tv1"), topic_name("tv1-app"), "tv1-producer"
    create_topic(client, topic)
    find_coordinators(client, txn, group)
    pid, epoch = init_producer_id(client, txn)

    # Transactions v2 behaviour is refused: the broker adds no partition to a transaction at level 1 (Kafka 4
    # answers UNSUPPORTED_VERSION), and a v1 produce to a partition not added is TRANSACTION_ABORTABLE (v11+).
    refused = produce(client, 12, txn, topic, batch(pid, epoch, 0, b"no"))
    assert refused.error_code == ErrorCode.unsupported_version, refused
    not_added = produce(client, 11, txn, topic, batch(pid, epoch, 0, b"no"))
    assert not_added.error_code == ErrorCode.transaction_abortable, not_added

    # The v1 flow a Kafka 4.2 producer uses at level 1 (its versions capped below the v2 ones).
    add_cls = codec.request_class(24, 3)
    add = schema.build(add_cls, v3_and_below_transactional_id=txn, v3_and_below_producer_id=pid,
                       v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
                           schema.build_nested(add_cls, "v3_and_below_topics", name=topic, partitions=(0,)),))
    assert client.request(add).results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert produce(client, 11, txn, topic, batch(pid, epoch, 0, b"v1")).error_code == ErrorCode.none
    committed = end_txn(client, 4, txn, (pid, epoch), True)
    assert committed.error_code == ErrorCode.none
    add = schema.build(add_cls, v3_and_below_transactional_id=txn, v3_and_below_producer_id=pid,
                       v3_and_below_producer_epoch=epoch, v3_and_below_topics=(
                           schema.build_nested(add_cls, "v3_and_below_topics", name=topic, partitions=(0,)),))
    # v1: the next transaction keeps the epoch (CONCURRENT_TRANSACTIONS while the markers are still written).
    added = eventually(
        lambda: None if (part := client.request(add).results_by_topic_v3_and_below[0].results_by_partition[0])
        .partition_error_code == ErrorCode.concurrent_transactions else part,
        timeout=30, what="the next transaction at the same epoch")
    assert added.partition_error_code == ErrorCode.none
    assert produce(client, 11, txn, topic, batch(pid, epoch, 1, b"v1-again")).error_code == ErrorCode.none
    assert end_txn(client, 4, txn, (pid, epoch), False).error_code == ErrorCode.none
    assert eventually(lambda: committed_values(client, topic) == [b"v1"] or None, timeout=30,
                      what="the committed record for read_committed")

    # librdkafka (confluent-kafka 2.16) speaks transactions v1 whatever the level: it keeps working at level 1.
    rdkafka_topic = topic_name("tv1-rdkafka")
    create_topic(client, rdkafka_topic, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic_name("tv1-rdkafka")})
    producer.init_transactions(30)
    for round_ in range(3):
        producer.begin_transaction()
        for i in range(4):
            producer.produce(rdkafka_topic, f"r{round_}-{i}".encode(), partition=i % 2)
        if round_ == 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    seen = sorted(v.decode() for _, v in read_to_end(broker.bootstrap, rdkafka_topic, 2))
    assert seen == sorted(f"r{r}-{i}" for r in (0, 2) for i in range(4))


def test_a_v2_transaction_continues_across_a_restart(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient]
) -> None:
    first = broker_factory()
    client = wire(first.port)
    topic, group, txn = topic_name("tv2-restart"), topic_name("tv2-restart-app"), "tv2-restarted"
    create_topic(client, topic)
    find_coordinators(client, txn, group)
    pid, epoch = init_producer_id(client, txn)
    assert produce(client, 12, txn, topic, batch(pid, epoch, 0, b"before")).error_code == ErrorCode.none
    assert end_txn(client, 5, txn, (pid, epoch), True).producer_epoch == epoch + 1
    client.close()
    assert first.stop() == 0, first.log_text()

    second = broker_factory(data_dir=first.data_dir)
    client = wire(second.port)
    find_coordinators(client, txn, group)
    # The EndTxn retried after the restart is still told from a new one: answered with the epoch it bumped to.
    retried = eventually(lambda: answer if (answer := end_txn(client, 5, txn, (pid, epoch), True)).error_code
                         not in (*_NOT_READY, ErrorCode.concurrent_transactions) else None, timeout=30,
                         what="the retried EndTxn after the restart")
    assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    after = produce(client, 12, txn, topic, batch(pid, epoch + 1, 0, b"after"))
    assert after.error_code == ErrorCode.none, after
    assert end_txn(client, 5, txn, (pid, epoch + 1), True).producer_epoch == epoch + 2
    assert eventually(lambda: committed_values(client, topic) == [b"before", b"after"] or None, timeout=30,
                      what="both transactions for read_committed")
