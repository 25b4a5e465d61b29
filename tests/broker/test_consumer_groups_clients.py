"""KIP-848 consumer groups with real clients against a real broker process: confluent-kafka (librdkafka) with
``group.protocol=consumer`` joining, leaving and committing while records flow; static members; regex subscriptions;
the admin APIs beside classic groups; moving an empty group between the protocols; and hostile heartbeats, commits
and fetches on the wire (:mod:`tests.broker.cg_wire`).

One broker serves the module with short ``group.consumer.*`` intervals so that joins and hand-overs take well under a
second; every test uses its own topic and group names, and every wait is bounded.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka import errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, api_versions_request, start_broker
from testkit.waiting import eventually
from tests.broker import cg_wire
from tests.topics import create_topic

#: Heartbeats every 300 ms and a 6 s session: members learn of a new assignment within a heartbeat.
CONSUMER_GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "300",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "300",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "6000",
}
DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module; it must stop cleanly."""
    process = start_broker(tmp_path_factory.mktemp("consumer-groups"), CONSUMER_GROUP_OVERRIDES)
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def new_consumer() -> Iterator[Callable[..., Consumer]]:
    """``new_consumer(bootstrap, group, **config)``: a librdkafka consumer speaking the KIP-848 protocol (session
    and heartbeat are the broker's to set); any a test leaves open is closed at teardown, before the broker stops (a
    consumer left open keeps the interpreter from exiting)."""
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


def produce(bootstrap: str, topic: str, values: Iterable[int], partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
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


def wire_describe(node: BrokerProcess, group: str) -> Any:
    with WireClient(node.port) as client:
        return cg_wire.describe(client, group)


class BackgroundProducer:
    """A producer thread writing one numbered record every few milliseconds until stopped; ``delivered`` holds the
    number of every record the broker acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.delivered: set[int] = set()
        self._stop = threading.Event()
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
        self._thread = threading.Thread(target=self._run, args=(topic, partitions), daemon=True)
        self._failures: list[str] = []

    def _acked(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self.delivered.add(int(message.value()))
        else:
            self._failures.append(str(error))

    def _run(self, topic: str, partitions: int) -> None:
        i = 0
        while not self._stop.wait(0.004):  # pacing, not waiting: a steady trickle of records
            self._producer.produce(topic, value=str(i).encode(), partition=i % partitions, on_delivery=self._acked)
            self._producer.poll(0)
            i += 1

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert self._producer.flush(30) == 0
        assert not self._failures, self._failures[:5]

    def __exit__(self, *exc: object) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=10)


def test_members_joining_and_leaving_under_load_consume_every_record_once(node: BrokerProcess, new_consumer: Callable[..., Consumer]) -> None:
    topic, group = unique("cg-orders"), unique("cg-billing")
    create_topic(node.bootstrap, topic, 6)
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    consumed: dict[int, int] = {}
    overlaps: list[dict[str, set[int]]] = []
    samples = [0]

    def process(consumer: Consumer, message: Message) -> None:
        value = int(message.value())
        consumed[value] = consumed.get(value, 0) + 1
        commit(consumer, message)  # the committed position is exact

    def sample() -> None:
        """One ConsumerGroupDescribe: no partition may be in two members' current assignments."""
        owners: dict[int, str] = {}
        for member in described(admin, group).members:
            for tp in member.assignment.topic_partitions:
                if tp.partition in owners:
                    overlaps.append({owners[tp.partition]: {tp.partition}, member.member_id: {tp.partition}})
                owners[tp.partition] = member.member_id
        samples[0] += 1

    def run(consumers: list[Consumer], done: Callable[[], bool], what: str) -> None:
        def sampled_done() -> bool:
            sample()
            return done()

        poll_until(consumers, sampled_done, process, what=lambda: f"{what}: {[partitions_of(c) for c in consumers]}")

    def owns_all(consumers: list[Consumer]) -> Callable[[], bool]:
        def check() -> bool:
            owned = [partitions_of(c) for c in consumers]
            return all(owned) and sum(map(len, owned)) == 6 and set().union(*owned) == set(range(6))

        return check

    with BackgroundProducer(node.bootstrap, topic, 6) as producer:
        a = new_consumer(node.bootstrap, group, **{"client.id": "member-a"})
        a.subscribe([topic])
        run([a], lambda: len(partitions_of(a)) == 6 and len(consumed) >= 50, "a to own all six partitions")
        b = new_consumer(node.bootstrap, group, **{"client.id": "member-b"})
        b.subscribe([topic])
        run([a, b], owns_all([a, b]), "a and b to split the partitions")
        c = new_consumer(node.bootstrap, group, **{"client.id": "member-c"})
        c.subscribe([topic])
        run([a, b, c], owns_all([a, b, c]), "a, b and c to split the partitions")
        # One closes while another joins.
        d = new_consumer(node.bootstrap, group, **{"client.id": "member-d"})
        d.subscribe([topic])
        a.close()
        run([b, c, d], owns_all([b, c, d]), "b, c and d to split the partitions after a left")
        b.close()
        run([c, d], owns_all([c, d]), "c and d to take over b's partitions")
        producer.stop()
    everything = producer.delivered
    run([c, d], lambda: everything <= consumed.keys(), "every delivered record to be consumed")
    c.close()
    d.close()
    assert samples[0] > 10
    assert not overlaps, overlaps[:5]
    assert consumed.keys() == everything
    assert {k: n for k, n in consumed.items() if n != 1} == {}


def test_static_member_restarting_within_the_session_gets_its_partitions_back(node: BrokerProcess, new_consumer: Callable[..., Consumer]) -> None:
    topic, group = unique("cg-static"), unique("cg-static-group")
    create_topic(node.bootstrap, topic, 6)
    a = new_consumer(node.bootstrap, group, **{"group.instance.id": "instance-a"})
    b = new_consumer(node.bootstrap, group, **{"group.instance.id": "instance-b"})
    a.subscribe([topic])
    b.subscribe([topic])
    poll_until([a, b], lambda: len(partitions_of(a)) == 3 and len(partitions_of(b)) == 3)
    before = wire_describe(node, group)
    b_partitions = partitions_of(b)
    b.close()  # a static member leaves with epoch -2: its partitions stay reserved for the session timeout

    b2 = new_consumer(node.bootstrap, group, **{"group.instance.id": "instance-b"})
    b2.subscribe([topic])
    poll_until([a, b2], lambda: len(partitions_of(b2)) == 3)
    assert partitions_of(b2) == b_partitions
    assert len(partitions_of(a)) == 3
    after = wire_describe(node, group)
    assert after.group_epoch == before.group_epoch
    assert sorted(m.instance_id for m in after.members) == ["instance-a", "instance-b"]
    a.close()
    b2.close()


def test_regex_subscription_picks_up_a_topic_created_after_joining(node: BrokerProcess, new_consumer: Callable[..., Consumer]) -> None:
    prefix = unique("rx")
    first, later, other = f"{prefix}-first", f"{prefix}-later", unique("cg-unrelated")
    group = unique("cg-regex")
    create_topic(node.bootstrap, first, 2)
    create_topic(node.bootstrap, other, 2)
    produce(node.bootstrap, first, range(10), 2)
    produce(node.bootstrap, other, range(10), 2)
    consumer = new_consumer(node.bootstrap, group)
    consumer.subscribe([f"^{prefix}-.*"])
    seen: dict[str, set[int]] = {}

    def record(c: Consumer, m: Message) -> None:
        seen.setdefault(m.topic(), set()).add(int(m.value()))

    poll_until([consumer], lambda: len(seen.get(first, ())) == 10, record, what=lambda: f"first topic read: {seen}")
    member = wire_describe(node, group).members[0]
    assert member.subscribed_topic_regex is not None and prefix in member.subscribed_topic_regex

    create_topic(node.bootstrap, later, 3)
    produce(node.bootstrap, later, range(100, 130), 3)
    poll_until([consumer], lambda: len(seen.get(later, ())) == 30, record, what=lambda: f"later topic read: {seen}")
    assert {tp.topic for tp in consumer.assignment()} == {first, later}
    assert other not in seen
    consumer.close()
