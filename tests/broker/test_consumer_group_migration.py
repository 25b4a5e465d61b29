"""KIP-848's online migration with real clients: a rolling upgrade of a consuming application from the classic
protocol to the consumer protocol, its rollback, and ``group.consumer.migration.policy=disabled`` keeping the two
protocols apart.

confluent-kafka consumers (``group.protocol`` classic or consumer) are polled in turn from this thread while records
keep flowing; each record is committed synchronously as soon as it is received, so a record may be received twice
only if the commit after its first delivery failed (its member was losing the partition). Every wait is bounded.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from broker.groups.consumer.consumer_protocol import subscription_bytes
from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker.coordinator import find_coordinator
from tests.topics import create_topic
from wire import codec, schema
from wire.ports import free_port

PARTITIONS = 6
DEADLINE_S = 60.0
#: Short consumer-group time-outs (the heartbeat interval must stay below the session time-out) and a short
#: initial rebalance delay, so that a group of several members forms without waiting Kafka's defaults.
FAST_GROUPS = {
    "group.initial.rebalance.delay.ms": "300",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "6000",
}
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker with the default policy (bidirectional); every test uses its own topic and group."""
    process = start_broker(tmp_path_factory.mktemp("migration"), FAST_GROUPS)
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def req(api_key: int, version: int, /, **fields: Any) -> Any:
    return schema.build(codec.request_class(api_key, version), **fields)


class Application:
    """A consuming application whose instances are replaced one by one: the records produced, and how often each
    was received and whether its commit failed."""

    def __init__(self, node: BrokerProcess, topic: str, group: str) -> None:
        self.node = node
        self.topic = topic
        self.group = group
        self.instances: dict[str, Consumer] = {}
        self.received: Counter[tuple[int, int]] = Counter()
        #: Who received each record, in order, and the partitions each instance held, as they changed: what a
        #: failure names.
        self.receivers: dict[tuple[int, int], list[str]] = {}
        self.held: list[tuple[float, str, list[int]]] = []
        self._last_held: dict[str, list[int]] = {}
        self._start = time.monotonic()
        self.uncommitted: set[tuple[int, int]] = set()
        self.produced: set[tuple[int, int]] = set()
        self._next_offset = [0] * PARTITIONS
        self._producer = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5})

    def produce(self, count: int) -> None:
        for i in range(count):
            partition = i % PARTITIONS
            self._producer.produce(self.topic, value=f"record-{i}".encode(), partition=partition)
            self.produced.add((partition, self._next_offset[partition]))
            self._next_offset[partition] += 1
        assert self._producer.flush(30) == 0

    def start(self, name: str, protocol: str, strategy: str = "range,roundrobin") -> None:
        config: dict[str, Any] = {
            "bootstrap.servers": self.node.bootstrap,
            "group.id": self.group,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
        if protocol == "classic":
            config.update(
                {"session.timeout.ms": 6000, "heartbeat.interval.ms": 300, "partition.assignment.strategy": strategy}
            )
        consumer = Consumer(config)
        consumer.subscribe([self.topic])
        self.instances[name] = consumer

    def stop(self, name: str) -> None:
        """Closes an instance: it leaves the group (LeaveGroup, or a heartbeat with epoch -1)."""
        self.instances.pop(name).close()

    def _poll_all(self) -> None:
        for name, consumer in self.instances.items():
            self._note_held(name, consumer)
            for _ in range(20):
                message = consumer.poll(0.02)
                if message is None:
                    break
                if message.error():
                    continue
                key = (message.partition(), message.offset())
                self.received[key] += 1
                self._note_held(name, consumer)
                self.receivers.setdefault(key, []).append(f"{name} at {time.monotonic() - self._start:.2f}s")
                try:
                    consumer.commit(message=message, asynchronous=False)
                except KafkaException:
                    self.uncommitted.add(key)

    def _note_held(self, name: str, consumer: Consumer) -> None:
        held = sorted(tp.partition for tp in consumer.assignment())
        if self._last_held.get(name) != held:
            self._last_held[name] = held
            self.held.append((time.monotonic(), name, held))

    def settle(self, what: str) -> None:
        """Polls every instance until every record produced so far was received and each instance holds
        partitions: the group rebalanced around the last change."""

        def settled() -> bool:
            self._poll_all()
            return set(self.received) >= self.produced and all(c.assignment() for c in self.instances.values())

        eventually(settled, timeout=DEADLINE_S, interval=0.01, what=lambda: f"{what}: {self.progress()}")

    def progress(self) -> str:
        assignments = {n: sorted(tp.partition for tp in c.assignment()) for n, c in self.instances.items()}
        return f"{len(set(self.received) & self.produced)}/{len(self.produced)} received; assignments {assignments}"

    def assert_each_record_once(self) -> None:
        assert set(self.received) == self.produced
        again = {key for key, times in self.received.items() if times > 1}
        twice = sorted(again - self.uncommitted)
        assert not twice, (
            f"received twice though committed: {[(k, self.receivers[k]) for k in twice]}; held: {self._history(twice)}"
        )

    def _history(self, keys: list[tuple[int, int]]) -> str:
        """When each instance was first seen holding what it held, for the partitions of ``keys``."""
        partitions = {p for p, _ in keys}
        return "; ".join(f"{t - self._start:.2f}s {n} {h}" for t, n, h in self.held if partitions & set(h) or not h)

    def close(self) -> None:
        for name in list(self.instances):
            self.stop(name)


@pytest.fixture
def application(node: BrokerProcess) -> Iterator[Application]:
    topic = unique("migrating")
    create_topic(node.bootstrap, topic, PARTITIONS)
    app = Application(node, topic, unique("app"))
    try:
        yield app
    finally:
        app.close()


def group_type(node: BrokerProcess, group: str) -> ConsumerGroupType:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(timeout=15)
    return description.type


def listed_type(node: BrokerProcess, group: str) -> str | None:
    """The group's type as ListGroups v5 lists it."""
    with WireClient(node.port) as client:
        response = client.request(req(16, 5, states_filter=(), types_filter=()))
    return next((g.group_type for g in response.groups if g.group_id == group), None)


def member_types(node: BrokerProcess, group: str) -> list[int]:
    """ConsumerGroupDescribe v1's member type of each member of a consumer group."""
    with WireClient(node.port) as client:
        response = client.request(req(69, 1, group_ids=(group,), include_authorized_operations=False))
    (described,) = response.groups
    assert described.error_code == ErrorCode.none, described.error_message
    return sorted(m.member_type for m in described.members)


@pytest.mark.parametrize("strategy", ["range,roundrobin", "cooperative-sticky"])
def test_rolling_upgrade_from_classic_to_consumer_protocol(
    node: BrokerProcess, application: Application, strategy: str
) -> None:
    """Eager classic members give everything up before they rejoin; cooperative ones keep what they may keep."""
    application.produce(300)
    for i in range(3):
        application.start(f"classic-{i}", "classic", strategy)
    application.settle("three classic members consume")
    assert group_type(node, application.group) is ConsumerGroupType.CLASSIC

    for i in range(3):
        application.start(f"new-{i}", "consumer")
        application.produce(120)
        application.settle(f"new member {i} joined")
        if i == 0:
            # The first new-protocol member converted the group; the classic members stay in it as such.
            assert listed_type(node, application.group) == "consumer"
            assert member_types(node, application.group) == [CLASSIC_MEMBER_TYPE] * 3 + [CONSUMER_MEMBER_TYPE]
        application.stop(f"classic-{i}")
        application.produce(120)
        application.settle(f"classic member {i} left")

    assert member_types(node, application.group) == [CONSUMER_MEMBER_TYPE] * 3
    assert group_type(node, application.group) is ConsumerGroupType.CONSUMER
    application.assert_each_record_once()


@pytest.mark.parametrize("strategy", ["range,roundrobin", "cooperative-sticky"])
def test_rollback_from_consumer_to_classic_protocol(
    node: BrokerProcess, application: Application, strategy: str
) -> None:
    application.produce(300)
    for i in range(3):
        application.start(f"new-{i}", "consumer")
    application.settle("three consumer-protocol members consume")
    assert group_type(node, application.group) is ConsumerGroupType.CONSUMER

    for i in range(3):
        application.start(f"classic-{i}", "classic", strategy)
        application.produce(120)
        application.settle(f"classic member {i} joined")
        if i < 2:
            # Still a consumer group while a consumer-protocol member remains; the classic ones show as such.
            types = member_types(node, application.group)
            assert types.count(CLASSIC_MEMBER_TYPE) == i + 1
        application.stop(f"new-{i}")
        application.produce(120)
        application.settle(f"consumer-protocol member {i} left")

    # The last consumer-protocol member left: the group went back to the classic protocol and rebalanced.
    assert group_type(node, application.group) is ConsumerGroupType.CLASSIC
    assert listed_type(node, application.group) == "classic"
    application.assert_each_record_once()


def consumer_heartbeat_join(client: WireClient, group: str, topic: str) -> Any:
    """A ConsumerGroupHeartbeat v0 join of a new member subscribing to ``topic``."""
    return client.request(
        req(
            68,
            0,
            group_id=group,
            member_id=str(uuid.uuid4()),
            member_epoch=0,
            instance_id=None,
            rack_id=None,
            rebalance_timeout=30_000,
            subscribed_topic_names=(topic,),
            server_assignor=None,
            topic_partitions=(),
        )
    )


def classic_join(client: WireClient, group: str, topic: str, protocol_type: str = "consumer") -> Any:
    """A JoinGroup v5 with one ``range`` protocol subscribing to ``topic``, repeated with the member id the first
    answer required."""
    protocol = schema.build_nested(
        codec.request_class(11, 5), "protocols", name="range", metadata=subscription_bytes([topic])
    )
    fields = {
        "group_id": group,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "group_instance_id": None,
        "protocol_type": protocol_type,
        "protocols": (protocol,),
    }
    answer = client.request(req(11, 5, member_id="", **fields))
    if answer.error_code == ErrorCode.member_id_required:
        answer = client.request(req(11, 5, member_id=answer.member_id, **fields))
    return answer


def test_a_classic_group_of_another_protocol_type_is_not_upgraded(node: BrokerProcess) -> None:
    group, topic = unique("connect"), unique("configs")
    with WireClient(node.port) as client:
        find_coordinator(client, group)
        joined = classic_join(client, group, topic, protocol_type="connect")
        assert joined.error_code == ErrorCode.none
        refused = consumer_heartbeat_join(client, group, topic)
        assert refused.error_code == ErrorCode.group_id_not_found
        assert "consumer embedded protocol" in (refused.error_message or "")
    assert listed_type(node, group) == "classic"


def test_disabled_policy_keeps_the_protocols_apart(broker_factory: Callable[..., BrokerProcess]) -> None:
    node = broker_factory({**FAST_GROUPS, "group.consumer.migration.policy": "DISABLED"})
    topic = unique("apart")
    create_topic(node.bootstrap, topic, PARTITIONS)
    classic = Application(node, topic, unique("classic"))
    modern = Application(node, topic, unique("modern"))
    try:
        classic.start("classic-0", "classic")
        modern.start("new-0", "consumer")
        classic.produce(60)
        modern.produced = set(classic.produced)
        classic.settle("a classic group with a member")
        modern.settle("a consumer group with a member")
        with WireClient(node.port) as client:
            assert consumer_heartbeat_join(client, classic.group, topic).error_code == ErrorCode.group_id_not_found
            assert classic_join(client, modern.group, topic).error_code == ErrorCode.inconsistent_group_protocol
        assert group_type(node, classic.group) is ConsumerGroupType.CLASSIC
        assert group_type(node, modern.group) is ConsumerGroupType.CONSUMER
    finally:
        classic.close()
        modern.close()


def test_a_mixed_group_survives_a_coordinator_restart(broker_factory: Callable[..., BrokerProcess]) -> None:
    """The classic members of a consumer group are in its records: a restarted coordinator still knows them as
    classic members (with their session time-outs), and the migration goes on; so is the downgrade."""
    overrides = {**FAST_GROUPS, "listeners": f"PLAINTEXT://127.0.0.1:{free_port()},CONTROLLER://127.0.0.1:0"}
    first = broker_factory(overrides)
    topic = unique("restarted")
    create_topic(first.bootstrap, topic, PARTITIONS)
    app = Application(first, topic, unique("app"))
    try:
        app.produce(120)
        for i in range(2):
            app.start(f"classic-{i}", "classic")
        app.settle("two classic members consume")
        app.start("new-0", "consumer")
        app.settle("a consumer-protocol member joined")
        assert member_types(first, app.group) == [CLASSIC_MEMBER_TYPE] * 2 + [CONSUMER_MEMBER_TYPE]

        assert first.stop() == 0, first.log_text()
        app.node = second = broker_factory(overrides, data_dir=first.data_dir)
        assert member_types(second, app.group) == [CLASSIC_MEMBER_TYPE] * 2 + [CONSUMER_MEMBER_TYPE]
        app.produce(120)
        app.settle("the members came back to the restarted coordinator")
        assert member_types(second, app.group) == [CLASSIC_MEMBER_TYPE] * 2 + [CONSUMER_MEMBER_TYPE]

        app.stop("new-0")
        app.produce(120)
        app.settle("the consumer-protocol member left")
        assert group_type(second, app.group) is ConsumerGroupType.CLASSIC

        # The downgrade is durable too: the consumer group's records were tombstoned, the classic group's written.
        assert second.stop() == 0, second.log_text()
        app.node = third = broker_factory(overrides, data_dir=first.data_dir)
        assert group_type(third, app.group) is ConsumerGroupType.CLASSIC
        app.produce(120)
        app.settle("the classic members came back to the restarted coordinator")
        assert group_type(third, app.group) is ConsumerGroupType.CLASSIC
        app.assert_each_record_once()
    finally:
        app.close()
