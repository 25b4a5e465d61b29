"""Offsets and fetch behaviour against a real broker: ListOffsets (earliest/latest/by timestamp/max timestamp),
OFFSET_OUT_OF_RANGE, DeleteRecords, long polling woken by appends, incremental fetch sessions, and idempotent
producers whose retried batches are not appended twice."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient
from testkit.waiting import eventually
from tests.broker.kafka_clients import (
    ResponseDroppingProxy,
    fetch_request,
    init_producer_id,
    list_offsets_request,
    module_broker,
    produce_request,
    topic_name,
)
from tests.topics import create_topic
from wire import codec, schema
from wire.compression import Compression
from wire.record_batch import Record, build_batch, iter_records


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from module_broker(tmp_path_factory.mktemp("offsets"))


def _produce(bootstrap: str, topic: str, count: int, timestamp: Callable[[int], int] | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 7})
    for i in range(count):
        kwargs = {"timestamp": timestamp(i)} if timestamp else {}
        producer.produce(topic, value=f"m{i}".encode(), partition=0, **kwargs)
    assert producer.flush(20) == 0


def _partition(response: object) -> object:
    return response.responses[0].partitions[0]  # type: ignore[attr-defined]


def test_list_offsets_earliest_latest_and_by_timestamp(kafka: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    topic = topic_name("ts")
    create_topic(kafka.bootstrap, topic)
    base = 1_700_000_000_000
    _produce(kafka.bootstrap, topic, 60, timestamp=lambda i: base + 1000 * i)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "ts"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 60)
        queries = [TopicPartition(topic, 0, base + 1000 * i) for i in (0, 17, 59)]
        found = [consumer.offsets_for_times([q], timeout=10)[0].offset for q in queries]
        assert found == [0, 17, 59]
        # Between two records: the first record at or after the time.
        between = consumer.offsets_for_times([TopicPartition(topic, 0, base + 1000 * 30 + 1)], timeout=10)
        assert between[0].offset == 31
        # After the newest record: no offset (-1 = end/unknown per client).
        after = consumer.offsets_for_times([TopicPartition(topic, 0, base + 10_000_000)], timeout=10)
        assert after[0].offset in (-1, 60)
    finally:
        consumer.close()
    client = wire(kafka.port)
    newest = client.request(list_offsets_request(topic, 0, -3)).topics[0].partitions[0]
    assert (newest.error_code, newest.offset, newest.timestamp) == (ErrorCode.none, 59, base + 59_000)
    # A negative timestamp no ListOffsets version knows is UNSUPPORTED_VERSION, as Kafka's ReplicaManager answers.
    unknown = client.request(list_offsets_request(topic, 0, -7)).topics[0].partitions[0]
    assert (unknown.error_code, unknown.offset) == (ErrorCode.unsupported_version, -1)


def test_a_fetch_asking_more_min_bytes_than_max_bytes_is_answered_when_it_holds_max_bytes(
    kafka: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    """Kafka's handleFetchRequest waits for at most min(min_bytes, max_bytes): an answer capped at max_bytes (by the
    request, or by a consumer_byte_rate quota) can never reach a larger min_bytes, so it must not wait max_wait."""
    topic = topic_name("minmax")
    create_topic(kafka.bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    producer.produce(topic, value=b"x" * 5000, partition=0)  # one batch larger than max_bytes: answered whole
    assert producer.flush(20) == 0
    client = wire(kafka.port)
    request = dataclasses.replace(
        fetch_request(topic, 0, 0, max_wait_ms=60_000, min_bytes=100_000), max_bytes=1000
    )
    started = time.monotonic()
    part = _partition(client.request(request))
    assert part.error_code == ErrorCode.none and part.records  # type: ignore[attr-defined]
    assert time.monotonic() - started < 30, "the fetch waited for min_bytes it could never hold"


def test_fetch_out_of_range_and_unknown_partition(kafka: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    topic = topic_name("oor")
    create_topic(kafka.bootstrap, topic)
    _produce(kafka.bootstrap, topic, 5)
    client = wire(kafka.port)
    part = _partition(client.request(fetch_request(topic, 0, 1000)))
    assert part.error_code == ErrorCode.offset_out_of_range  # type: ignore[attr-defined]
    assert part.high_watermark == 5  # type: ignore[attr-defined]
    missing = _partition(client.request(fetch_request(topic, 7, 0)))
    assert missing.error_code == ErrorCode.unknown_topic_or_partition  # type: ignore[attr-defined]
    # A consumer with auto.offset.reset=earliest positioned past the end gets back to real data.
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "oor", "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 1000)])

        def message() -> Message | None:
            polled = consumer.poll(0.5)
            return polled if polled is not None and not polled.error() else None

        msg = eventually(message, timeout=15, interval=0.01, what="a message after the reset to earliest")
        assert msg.offset() == 0
    finally:
        consumer.close()


def test_delete_records_moves_log_start(kafka: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    topic = topic_name("del")
    create_topic(kafka.bootstrap, topic)
    _produce(kafka.bootstrap, topic, 100)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 40)], operation_timeout=10)
    result = next(iter(futures.values())).result(timeout=15)
    assert result.low_watermark == 40
    client = wire(kafka.port)
    earliest = client.request(list_offsets_request(topic, 0, -2)).topics[0].partitions[0]
    assert earliest.offset == 40
    below = _partition(client.request(fetch_request(topic, 0, 10)))
    assert below.error_code == ErrorCode.offset_out_of_range  # type: ignore[attr-defined]
    assert below.log_start_offset == 40  # type: ignore[attr-defined]
    beyond = admin.delete_records([TopicPartition(topic, 0, 500)], operation_timeout=10)
    with pytest.raises(Exception, match=r"OFFSET_OUT_OF_RANGE|out of range"):
        next(iter(beyond.values())).result(timeout=15)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "del", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        offsets: list[int] = []

        def poll() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                offsets.append(msg.offset())
            return len(offsets) >= 60

        eventually(poll, timeout=20, interval=0.01, what=f"60 records of {topic} after the deletion")
        assert offsets == list(range(40, 100))
    finally:
        consumer.close()


def _delete_records(client: WireClient, topic: str, partitions: range, offset: int = -1) -> list[tuple[int, int]]:
    """DeleteRecords v2 of ``partitions`` up to ``offset`` (-1: the high watermark): each one's (error code, low
    watermark)."""
    request = codec.request_class(21, 2)
    parts = tuple(
        schema.build_nested(schema.field_entity(request, "topics"), "partitions", partition_index=i, offset=offset)
        for i in partitions
    )
    topic_entry = schema.build_nested(request, "topics", name=topic, partitions=parts)
    answer = client.request(schema.build(request, topics=(topic_entry,), timeout=10_000))
    return [(p.error_code, p.low_watermark) for p in answer.topics[0].partitions]


def test_delete_records_is_refused_on_internal_and_compact_only_topics(
    kafka: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    """As Kafka refuses it: an internal topic is INVALID_TOPIC_EXCEPTION (ReplicaManager), a topic whose
    cleanup.policy lacks delete POLICY_VIOLATION (Partition.deleteRecordsOnLeader); nothing is deleted."""
    client = wire(kafka.port)
    topic = topic_name("del-policy")
    create_topic(kafka.bootstrap, topic)
    _produce(kafka.bootstrap, topic, 3)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": topic, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)  # __consumer_offsets has data now
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    offsets_partitions = range(len(admin.list_topics(timeout=10).topics["__consumer_offsets"].partitions))
    refused = _delete_records(client, "__consumer_offsets", offsets_partitions)
    assert refused == [(ErrorCode.invalid_topic_exception, -1)] * len(offsets_partitions)
    ends = [client.request(list_offsets_request("__consumer_offsets", i, -1)).topics[0].partitions[0].offset
            for i in offsets_partitions]
    starts = [client.request(list_offsets_request("__consumer_offsets", i, -2)).topics[0].partitions[0].offset
              for i in offsets_partitions]
    assert any(ends) and not any(starts)
    # The internal check comes after the existence check, as Kafka's KafkaApis makes it.
    missing = _delete_records(client, "__consumer_offsets", range(999, 1000))
    assert missing == [(ErrorCode.unknown_topic_or_partition, -1)]

    for policy, expected in (("compact", ErrorCode.policy_violation), ("compact,delete", ErrorCode.none)):
        compacted = topic_name("del-compact")
        create_topic(kafka.bootstrap, compacted, config={"cleanup.policy": policy})
        producer = Producer({"bootstrap.servers": kafka.bootstrap})
        for i in range(4):
            producer.produce(compacted, key=b"k%d" % i, value=b"v", partition=0)
        assert producer.flush(20) == 0
        [(code, low)] = _delete_records(client, compacted, range(1), 2)
        assert (code, low) == (expected, 2 if expected == ErrorCode.none else -1), policy
        start = client.request(list_offsets_request(compacted, 0, -2)).topics[0].partitions[0].offset
        assert start == (2 if expected == ErrorCode.none else 0), policy


def test_long_poll_is_woken_by_an_append(kafka: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    topic = topic_name("poll")
    create_topic(kafka.bootstrap, topic)
    client = wire(kafka.port)
    started = time.monotonic()
    empty = _partition(client.request(fetch_request(topic, 0, 0, max_wait_ms=300)))
    waited = time.monotonic() - started
    assert empty.records in (b"", None) and 0.25 <= waited < 3.0  # type: ignore[attr-defined]

    timer = threading.Timer(0.5, _produce, args=(kafka.bootstrap, topic, 1))
    started = time.monotonic()
    timer.start()
    try:
        part = _partition(client.request(fetch_request(topic, 0, 0, max_wait_ms=10_000)))
    finally:
        timer.join()
    elapsed = time.monotonic() - started
    assert part.records and elapsed < 5.0  # type: ignore[attr-defined]
    assert [r.value for _, r in iter_records(part.records)] == [b"m0"]  # type: ignore[attr-defined]


def test_incremental_fetch_session(kafka: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    topic = topic_name("session")
    create_topic(kafka.bootstrap, topic)
    _produce(kafka.bootstrap, topic, 3)
    client = wire(kafka.port)
    full = client.request(fetch_request(topic, 0, 0, session_id=0, session_epoch=0))
    assert full.error_code == ErrorCode.none and full.session_id != 0
    assert _partition(full).high_watermark == 3  # type: ignore[attr-defined]
    # Incremental: move the position to the end; nothing new there, so the partition is left out.
    quiet = client.request(fetch_request(topic, 0, 3, session_id=full.session_id, session_epoch=1))
    assert quiet.error_code == ErrorCode.none and quiet.responses == ()
    _produce(kafka.bootstrap, topic, 2)
    news = client.request(fetch_request(None, 0, 0, session_id=full.session_id, session_epoch=2))
    part = _partition(news)
    assert part.high_watermark == 5  # type: ignore[attr-defined]
    assert [r.offset for _, r in iter_records(part.records)][-2:] == [3, 4]  # type: ignore[attr-defined]
    stale = client.request(fetch_request(None, 0, 0, session_id=full.session_id, session_epoch=2))
    assert stale.error_code == ErrorCode.invalid_fetch_session_epoch
    unknown = client.request(fetch_request(None, 0, 0, session_id=full.session_id + 1, session_epoch=1))
    assert unknown.error_code == ErrorCode.fetch_session_id_not_found


def test_retried_idempotent_batch_is_not_duplicated(kafka: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    topic = topic_name("idem")
    create_topic(kafka.bootstrap, topic)
    client = wire(kafka.port)
    pid, epoch = init_producer_id(client)

    def batch(seq: int) -> bytes:
        records = [Record(b"k", f"seq{seq + i}".encode(), (), None) for i in range(3)]
        return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    def send(records: bytes) -> object:
        return client.request(produce_request(topic, 0, records)).responses[0].partition_responses[0]

    first = batch(0)
    original = send(first)
    retried = send(first)  # the same bytes again, as a producer retry after a lost response
    assert (original.error_code, original.base_offset) == (ErrorCode.none, 0)  # type: ignore[attr-defined]
    assert (retried.error_code, retried.base_offset) == (ErrorCode.none, 0)  # type: ignore[attr-defined]
    gap = send(batch(10))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number  # type: ignore[attr-defined]
    nxt = send(batch(3))
    assert (nxt.error_code, nxt.base_offset) == (ErrorCode.none, 3)  # type: ignore[attr-defined]
    part = _partition(client.request(fetch_request(topic, 0, 0)))
    values = [r.value for _, r in iter_records(part.records)]  # type: ignore[attr-defined]
    assert values == [f"seq{i}".encode() for i in range(6)]


def test_idempotent_client_with_lost_responses_has_no_duplicates(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """confluent-kafka with enable.idempotence through a proxy that drops every 4th Produce response and cuts
    the connection: the client retries batches the broker already appended; each value must appear once."""
    proxy = ResponseDroppingProxy(every=4)
    try:
        # Clients learn the proxy's address from Metadata, so every connection goes through it. The broker binds
        # port 0 and reports the port it got, which the proxy then forwards to.
        node = broker_factory(
            overrides={
                "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
            }
        )
        listen_port = node.listener_ports["PLAINTEXT"]
        proxy.start(listen_port)
        bootstrap = f"127.0.0.1:{proxy.port}"
        topic = topic_name("idem-cf")
        create_topic(bootstrap, topic)
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "linger.ms": 5,
                "batch.num.messages": 100,
                "message.timeout.ms": 60_000,
                "reconnect.backoff.ms": 10,
            }
        )
        errors: list[object] = []
        total = 3000
        for i in range(total):
            producer.produce(
                topic, value=b"%d" % i, partition=0, on_delivery=lambda e, m: errors.append(e) if e else None
            )
            if i % 100 == 0:
                producer.poll(0.01)
        assert producer.flush(60) == 0 and not errors
        assert proxy.dropped > 0, "the proxy dropped no responses: no retry was exercised"
        values = [m.value() for m in _consume(f"127.0.0.1:{listen_port}", topic, total)]
    finally:
        proxy.stop()
    assert values == [b"%d" % i for i in range(total)]


def _consume(bootstrap: str, topic: str, count: int) -> list[object]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idem", "enable.auto.commit": False})
    out: list[object] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is not None and not msg.error():
                out.append(msg)
            elif msg is None and len(out) >= count:
                break  # one quiet poll after the expected count: any duplicate would have shown up by now
    finally:
        consumer.close()
    return out


def _topic_id(client: WireClient, topic: str) -> uuid.UUID:
    request_cls = codec.request_class(3, 12)
    wanted = schema.build(schema.field_entity(request_cls, "topics"), topic_id=None, name=topic)
    response = client.request(
        schema.build(
            request_cls, topics=(wanted,), allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
    )
    return response.topics[0].topic_id  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", [13, 15])
def test_fetch_by_topic_id(kafka: BrokerProcess, wire: Callable[[int], WireClient], version: int) -> None:
    topic = topic_name(f"tid{version}")
    create_topic(kafka.bootstrap, topic)
    _produce(kafka.bootstrap, topic, 4)
    client = wire(kafka.port)
    topic_id = _topic_id(client, topic)
    request = fetch_request(topic, 0, 0, version=version)
    request_topic = schema.build(
        schema.field_entity(type(request), "topics"), topic_id=topic_id, partitions=request.topics[0].partitions
    )
    response = client.request(dataclasses.replace(request, topics=(request_topic,)))
    assert response.responses[0].topic_id == topic_id
    part = response.responses[0].partitions[0]
    assert part.error_code == ErrorCode.none and part.high_watermark == 4
    assert [r.value for _, r in iter_records(part.records)] == [b"m0", b"m1", b"m2", b"m3"]
    unknown = schema.build(
        schema.field_entity(type(request), "topics"), topic_id=uuid.uuid4(), partitions=request.topics[0].partitions
    )
    missing = client.request(dataclasses.replace(request, topics=(unknown,)))
    assert missing.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_id


def test_produce_acks_and_transactional_refusal(kafka: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    topic = topic_name("acks")
    create_topic(kafka.bootstrap, topic)
    client = wire(kafka.port)
    records = build_batch([Record(None, b"fire-and-forget")])
    client.send(produce_request(topic, 0, records, acks=0))
    marker = client.send(fetch_request(topic, 0, 0, max_wait_ms=2000))
    got, body = client.receive(1, 12)
    assert got == marker  # acks=0 got no response: the next frame answers the fetch
    assert [r.value for _, r in iter_records(body.responses[0].partitions[0].records)] == [b"fire-and-forget"]

    bad = client.request(produce_request(topic, 0, records, acks=2)).responses[0].partition_responses[0]
    assert bad.error_code == ErrorCode.invalid_required_acks
    # acks=0 that fails has no response to carry the error: the connection closes, as Kafka closes it, so the
    # producer refreshes its metadata instead of sending into the void.
    doomed = wire(kafka.port)
    doomed.send(produce_request(topic, 9, records, acks=0))  # no partition 9
    assert doomed.is_closed_by_peer(timeout=10)
    # A batch naming a producer id needs a sequence number; zstd needs Produce v7 (Kafka's LogValidator and
    # ProduceRequest checks).
    unsequenced = build_batch([Record(None, b"u")], producer_id=4242, producer_epoch=0, base_sequence=-1)
    refused_seq = client.request(produce_request(topic, 0, unsequenced)).responses[0].partition_responses[0]
    assert refused_seq.error_code == ErrorCode.invalid_record
    zstd = build_batch([Record(None, b"z")], compression=Compression.ZSTD)
    old = client.request(produce_request(topic, 0, zstd, version=6)).responses[0].partition_responses[0]
    assert old.error_code == ErrorCode.unsupported_compression_type
    new = client.request(produce_request(topic, 0, zstd, version=7)).responses[0].partition_responses[0]
    assert new.error_code == ErrorCode.none
    # Transactional records need the request's transactional id, as Kafka's produce authorization checks.
    pid, epoch = init_producer_id(client)
    transactional = build_batch(
        [Record(None, b"t")], producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True
    )
    refused = client.request(produce_request(topic, 0, transactional)).responses[0].partition_responses[0]
    assert refused.error_code == ErrorCode.transactional_id_authorization_failed


def test_offset_for_leader_epoch_and_describe_producers(
    kafka: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    topic = topic_name("epochs")
    create_topic(kafka.bootstrap, topic)
    client = wire(kafka.port)
    pid, epoch = init_producer_id(client)
    records = build_batch(
        [Record(None, b"a"), Record(None, b"b")], producer_id=pid, producer_epoch=epoch, base_sequence=0
    )
    assert client.request(produce_request(topic, 0, records)).responses[0].partition_responses[0].error_code == 0

    request_cls = codec.request_class(23, 4)
    topic_cls = schema.field_entity(request_cls, "topics")
    part = schema.build(
        schema.field_entity(topic_cls, "partitions"), partition=0, current_leader_epoch=-1, leader_epoch=0
    )
    answer = (
        client.request(
            schema.build(request_cls, replica_id=-1, topics=(schema.build(topic_cls, topic=topic, partitions=(part,)),))
        )
        .topics[0]
        .partitions[0]
    )
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (ErrorCode.none, 0, 2)

    describe_cls = codec.request_class(61, 0)
    wanted = schema.build(schema.field_entity(describe_cls, "topics"), name=topic, partition_indexes=(0,))
    described = client.request(schema.build(describe_cls, topics=(wanted,))).topics[0].partitions[0]
    assert described.error_code == ErrorCode.none
    assert [(p.producer_id, p.producer_epoch, p.last_sequence) for p in described.active_producers] == [(pid, epoch, 1)]
    # A name no topic can have, as Kafka's Topic.validate judges it: not an unknown topic.
    illegal = schema.build(schema.field_entity(describe_cls, "topics"), name="bad/name", partition_indexes=(0,))
    refused = client.request(schema.build(describe_cls, topics=(illegal,))).topics[0].partitions[0]
    assert refused.error_code == ErrorCode.invalid_topic_exception and "bad/name" in refused.error_message


def test_init_producer_id_bumps_epoch_and_fences_the_old_one(
    kafka: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    topic = topic_name("bump")
    create_topic(kafka.bootstrap, topic)
    client = wire(kafka.port)
    pid, epoch = init_producer_id(client)
    other_pid, _ = init_producer_id(client)
    assert other_pid != pid

    def send(producer_epoch: int, seq: int) -> object:
        records = build_batch([Record(None, b"x")], producer_id=pid, producer_epoch=producer_epoch, base_sequence=seq)
        return client.request(produce_request(topic, 0, records)).responses[0].partition_responses[0]

    assert send(epoch, 0).error_code == ErrorCode.none  # type: ignore[attr-defined]
    bump = schema.build(
        codec.request_class(22, 4),
        transactional_id=None,
        transaction_timeout=60_000,
        producer_id=pid,
        producer_epoch=epoch,
    )
    bumped = client.request(bump)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (ErrorCode.none, pid, epoch + 1)
    assert send(epoch + 1, 0).error_code == ErrorCode.none  # type: ignore[attr-defined]
    assert send(epoch, 1).error_code == ErrorCode.invalid_producer_epoch  # type: ignore[attr-defined]


def test_deleting_a_topic_destroys_its_partition_streams(
    kafka: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    topic = topic_name("gone")
    create_topic(kafka.bootstrap, topic)
    _produce(kafka.bootstrap, topic, 10)
    client = wire(kafka.port)
    request_cls = codec.request_class(20, 6)
    victim = schema.build(schema.field_entity(request_cls, "topics"), name=topic, topic_id=uuid.UUID(int=0))
    deleted = client.request(schema.build(request_cls, topics=(victim,), timeout=10_000))
    assert deleted.responses[0].error_code == ErrorCode.none
    eventually(lambda: f"deleted the streams of {topic}-0" in kafka.log_text(), timeout=15, interval=0.1,
               what=f"the broker to log 'deleted the streams of {topic}-0'")
    gone = _partition(client.request(fetch_request(topic, 0, 0)))
    assert gone.error_code == ErrorCode.unknown_topic_or_partition  # type: ignore[attr-defined]


def test_topic_configs_are_enforced(kafka: BrokerProcess, wire: Callable[[int], WireClient]) -> None:
    topic = topic_name("cfg")
    create_topic(
        kafka.bootstrap, topic, config={"message.timestamp.type": "LogAppendTime", "max.message.bytes": "2000"}
    )
    client = wire(kafka.port)
    before = int(time.time() * 1000)
    small = build_batch([Record(None, b"tiny", (), 1000)])
    answer = client.request(produce_request(topic, 0, small)).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.none
    assert answer.log_append_time is not None and answer.log_append_time.timestamp() * 1000 >= before - 1
    stored = [r for _, r in iter_records(_partition(client.request(fetch_request(topic, 0, 0))).records)]  # type: ignore[attr-defined]
    assert [r.timestamp for r in stored] == [int(answer.log_append_time.timestamp() * 1000)]
    big = build_batch([Record(None, b"x" * 5000)])
    too_large = client.request(produce_request(topic, 0, big)).responses[0].partition_responses[0]
    assert too_large.error_code == ErrorCode.message_too_large

    # A config altered later reaches the partition that is already open.
    incremental = codec.request_class(44, 1)
    raise_limit = schema.build_nested(
        schema.field_entity(incremental, "resources"), "configs", name="max.message.bytes", config_operation=0,
        value="10000",
    )
    resource = schema.build_nested(
        incremental, "resources", resource_type=2, resource_name=topic, configs=(raise_limit,)
    )
    (altered,) = client.request(schema.build(incremental, resources=(resource,), validate_only=False)).responses
    assert altered.error_code == ErrorCode.none

    def produce_big() -> int:
        code = client.request(produce_request(topic, 0, big)).responses[0].partition_responses[0].error_code
        assert code in (ErrorCode.none, ErrorCode.message_too_large), code
        return int(code)

    eventually(produce_big, until=lambda code: code == ErrorCode.none, timeout=10,
               what="the raised max.message.bytes to accept the big batch")


def test_fetch_max_bytes_bounds_a_response_that_asks_for_more(
    broker_factory: Callable[..., BrokerProcess], wire: Callable[[int], WireClient]
) -> None:
    """Kafka's broker-wide fetch.max.bytes caps every Fetch response below the request's own max_bytes (50 MiB
    here), always returning the first batch whole."""
    node = broker_factory(overrides={"fetch.max.bytes": "4096"})
    topic = topic_name("fetch-max")
    create_topic(node.bootstrap, topic)
    client = wire(node.port)
    for i in range(8):  # eight batches of about 1.1 KB
        batch = build_batch([Record(None, b"%d" % i + b"x" * 1000, (), None)])
        response = client.request(produce_request(topic, 0, batch))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    part = _partition(client.request(fetch_request(topic, 0, 0, partition_max_bytes=50 << 20)))
    offsets = [record.offset for _, record in iter_records(part.records)]  # type: ignore[attr-defined]
    assert 1 <= len(offsets) <= 4, f"{len(offsets)} records in a response capped at 4096 bytes"
    assert len(part.records) <= 4096  # type: ignore[attr-defined]
    assert offsets == list(range(len(offsets)))
