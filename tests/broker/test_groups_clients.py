"""Consumer groups with real clients (confluent-kafka / librdkafka, kafka-python) against a real broker process.

Every wait is bounded by a deadline; the broker runs with a short initial rebalance delay so a group of several
consumers forms in one generation without the tests sleeping for Kafka's default three seconds.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka import errors as kafka_errors
from kafka.admin import KafkaAdminClient
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from testkit.node_process import REPO, BrokerProcess, start_broker
from testkit.waiting import eventually
from tests.broker import cg_clients
from tests.topics import create_topic

GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "300", "num.partitions": "6"}
DEADLINE_S = 45.0
#: The shared polling loop (tests/broker/cg_clients.py) with this module's deadline.
poll_until = functools.partial(cg_clients.poll_until, timeout=DEADLINE_S)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module (every test uses its own topic and group names); it must stop cleanly."""
    process = start_broker(tmp_path_factory.mktemp("groups"), GROUP_OVERRIDES)
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(bootstrap: str, topic: str, count: int, partitions: int = 6, start: int = 0) -> None:
    """``count`` records spread round-robin over the partitions; the topic is auto-created on first use."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, key=str(i).encode(), value=f"value-{i}".encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def make_consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    config.update(extra)
    return Consumer(config)


def test_group_of_three_rebalances_when_one_leaves_and_consumes_each_record_once(node: BrokerProcess) -> None:
    topic, group = unique("orders"), unique("billing")
    create_topic(node.bootstrap, topic, 6)
    produce(node.bootstrap, topic, 300)
    consumers = [make_consumer(node.bootstrap, group) for _ in range(3)]
    for c in consumers:
        c.subscribe([topic])
    seen: dict[tuple[int, int], int] = {}

    def process(consumer: Consumer, message: Message) -> None:
        key = (message.partition(), message.offset())
        seen[key] = seen.get(key, 0) + 1
        # Commit every processed record before the next poll: the committed position is exact.
        consumer.commit(message=message, asynchronous=False)

    poll_until(
        consumers,
        lambda: len(seen) >= 300 and all(len(c.assignment()) == 2 for c in consumers),
        process,
    )
    first = [{tp.partition for tp in c.assignment()} for c in consumers]
    assert set().union(*first) == set(range(6))
    assert sum(len(a) for a in first) == 6  # disjoint

    leaving = consumers.pop()
    leaving.close()  # sends LeaveGroup: the others must take over its partitions at once
    produce(node.bootstrap, topic, 300, start=300)
    poll_until(
        consumers,
        lambda: len(seen) >= 600 and sum(len(c.assignment()) for c in consumers) == 6,
        process,
    )
    after = [{tp.partition for tp in c.assignment()} for c in consumers]
    assert set().union(*after) == set(range(6))
    assert all(len(a) == 3 for a in after)
    assert len(seen) == 600
    assert set(seen.values()) == {1}, {k: v for k, v in seen.items() if v != 1}
    for c in consumers:
        c.close()


def test_committed_offsets_survive_a_broker_restart(broker_factory: Callable[..., BrokerProcess]) -> None:
    first = broker_factory(overrides=GROUP_OVERRIDES)
    topic, group = unique("events"), unique("resume")
    create_topic(first.bootstrap, topic, 1)
    produce(first.bootstrap, topic, 20, partitions=1)
    consumer = make_consumer(first.bootstrap, group)
    consumer.subscribe([topic])
    got: list[Message] = []
    poll_until([consumer], lambda: len(got) >= 12, lambda c, m: got.append(m))
    consumer.commit(
        offsets=[TopicPartition(topic, 0, got[9].offset() + 1, metadata="checkpoint-10")], asynchronous=False
    )
    consumer.close()
    assert first.stop() == 0

    second = broker_factory(overrides=GROUP_OVERRIDES, data_dir=first.data_dir)
    admin = AdminClient({"bootstrap.servers": second.bootstrap})
    # The coordinator replays __consumer_offsets in the background; until then ListGroups says it is loading.
    eventually(lambda: {g.group_id for g in admin.list_consumer_groups().result(timeout=20).valid},
               until=lambda groups: group in groups, timeout=DEADLINE_S, interval=0.1,
               what=f"group {group} restored from __consumer_offsets")
    resumed = make_consumer(second.bootstrap, group)
    committed = resumed.committed([TopicPartition(topic, 0)], timeout=20)
    assert committed[0].offset == 10
    assert committed[0].metadata == "checkpoint-10"
    resumed.subscribe([topic])
    again: list[Message] = []
    poll_until([resumed], lambda: len(again) >= 10, lambda c, m: again.append(m))
    assert [m.offset() for m in again] == list(range(10, 20))
    resumed.close()


def test_static_member_rejoins_without_a_rebalance(node: BrokerProcess) -> None:
    topic, group = unique("static"), unique("static-group")
    create_topic(node.bootstrap, topic, 6)
    assignments: dict[str, list[set[int]]] = {"a": [], "b": [], "b2": []}

    def tracking(name: str) -> Callable[[Consumer, list[TopicPartition]], None]:
        def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            assignments[name].append({tp.partition for tp in partitions})

        return on_assign

    static = {"session.timeout.ms": 20000}
    a = make_consumer(node.bootstrap, group, **{"group.instance.id": "instance-a"}, **static)
    b = make_consumer(node.bootstrap, group, **{"group.instance.id": "instance-b"}, **static)
    a.subscribe([topic], on_assign=tracking("a"))
    b.subscribe([topic], on_assign=tracking("b"))
    poll_until([a, b], lambda: len(a.assignment()) == 3 and len(b.assignment()) == 3, lambda c, m: None)
    generations_of_a = len(assignments["a"])
    b_partitions = {tp.partition for tp in b.assignment()}
    b.close()  # a static member does not send LeaveGroup: its slot stays reserved for the session timeout

    b2 = make_consumer(node.bootstrap, group, **{"group.instance.id": "instance-b"}, **static)
    b2.subscribe([topic], on_assign=tracking("b2"))
    poll_until([a, b2], lambda: len(b2.assignment()) == 3, lambda c, m: None)
    assert {tp.partition for tp in b2.assignment()} == b_partitions
    # Give a rebalance, if one had been triggered, the time to reach the other member.
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        a.poll(0.1)
        b2.poll(0.1)
    assert len(assignments["a"]) == generations_of_a, assignments["a"]
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    [description] = [f.result(timeout=20) for f in admin.describe_consumer_groups([group]).values()]
    assert description.state == ConsumerGroupState.STABLE
    assert sorted(m.group_instance_id for m in description.members) == ["instance-a", "instance-b"]
    a.close()
    b2.close()


def test_cooperative_sticky_moves_only_what_it_must(node: BrokerProcess) -> None:
    topic, group = unique("coop"), unique("coop-group")
    create_topic(node.bootstrap, topic, 6)
    produce(node.bootstrap, topic, 60)
    revoked: dict[str, list[set[int]]] = {"first": [], "second": []}

    def on_revoke(name: str) -> Callable[[Consumer, list[TopicPartition]], None]:
        def callback(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            revoked[name].append({tp.partition for tp in partitions})

        return callback

    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    first = make_consumer(node.bootstrap, group, **coop)
    first.subscribe([topic], on_revoke=on_revoke("first"))
    seen: set[tuple[int, int]] = set()

    def process(consumer: Consumer, message: Message) -> None:
        seen.add((message.partition(), message.offset()))
        consumer.commit(message=message, asynchronous=False)

    poll_until([first], lambda: len(first.assignment()) == 6 and len(seen) >= 60, process)
    second = make_consumer(node.bootstrap, group, **coop)
    second.subscribe([topic], on_revoke=on_revoke("second"))
    poll_until([first, second], lambda: len(first.assignment()) == 3 and len(second.assignment()) == 3, process)
    # Incremental: the first member gave up exactly the three partitions that moved, nothing more.
    moved = {tp.partition for tp in second.assignment()}
    assert revoked["first"] == [moved]
    assert {tp.partition for tp in first.assignment()} == set(range(6)) - moved
    produce(node.bootstrap, topic, 60, start=60)
    poll_until([first, second], lambda: len(seen) >= 120, process)
    assert len(seen) == 120
    first.close()
    second.close()


def test_admin_clients_list_describe_delete_groups_and_offsets(node: BrokerProcess) -> None:

    topic, group, idle = unique("admin"), unique("live"), unique("idle")
    create_topic(node.bootstrap, topic, 2)
    produce(node.bootstrap, topic, 10, partitions=2)
    member = make_consumer(node.bootstrap, group, **{"client.id": "admin-test-client"})
    member.subscribe([topic])
    poll_until([member], lambda: len(member.assignment()) == 2, lambda c, m: None)
    member.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)], asynchronous=False)
    # A commit-only ("simple") group: no members, offsets only.
    loner = make_consumer(node.bootstrap, idle)
    loner.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 6)], asynchronous=False)
    loner.close()

    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(timeout=20)
    assert group in {g.group_id for g in stable.valid}
    assert idle not in {g.group_id for g in stable.valid}
    empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(timeout=20)
    assert idle in {g.group_id for g in empty.valid}

    [description] = [f.result(timeout=20) for f in admin.describe_consumer_groups([group]).values()]
    assert description.state == ConsumerGroupState.STABLE
    assert description.partition_assignor == "range"
    [m] = description.members
    assert m.client_id == "admin-test-client"
    assert m.host.startswith("/127.0.0.1")
    assert {tp.partition for tp in m.assignment.topic_partitions} == {0, 1}

    # A group with members cannot be deleted.
    with pytest.raises(KafkaException) as excinfo:
        admin.delete_consumer_groups([group])[group].result(timeout=20)
    assert "NON_EMPTY_GROUP" in str(excinfo.value) or "not empty" in str(excinfo.value).lower()

    kadmin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=20000)
    try:
        # OffsetFetch v8: both groups in one request.
        offsets = kadmin.list_group_offsets({group: None, idle: None})
        assert {tp.partition: o.offset for tp, o in offsets[group].items()} == {0: 3, 1: 4}
        assert {tp.partition: o.offset for tp, o in offsets[idle].items()} == {0: 5, 1: 6}
        # OffsetDelete: refused for a topic the live group still consumes, allowed for the idle group.
        refused = kadmin.delete_group_offsets(group, [KTopicPartition(topic, 0)])
        assert refused == {KTopicPartition(topic, 0): kafka_errors.GroupSubscribedToTopicError}
        deleted = kadmin.delete_group_offsets(idle, [KTopicPartition(topic, 0)])
        assert deleted == {KTopicPartition(topic, 0): kafka_errors.NoError}
        remaining = kadmin.list_group_offsets({idle: None})[idle]
        assert {tp.partition: o.offset for tp, o in remaining.items()} == {1: 6}
        described = kadmin.describe_groups([group])[group]
        assert described["group_state"] == "Stable"
        assert described["protocol_type"] == "consumer" and described["protocol_data"] == "range"
        assert [m["client_id"] for m in described["members"]] == ["admin-test-client"]
        listed = {g["group_id"]: g["group_state"] for g in kadmin.list_groups()}
        assert listed[group] == "Stable" and listed[idle] == "Empty"
        ghost = unique("never-existed")
        assert kadmin.delete_groups([idle, ghost]) == {idle: "OK", ghost: "GroupIdNotFoundError"}
        member.close()
    finally:
        kadmin.close()

    admin.delete_consumer_groups([group])[group].result(timeout=20)
    remaining_groups = {g.group_id for g in admin.list_consumer_groups().result(timeout=20).valid}
    assert group not in remaining_groups and idle not in remaining_groups
    [gone] = [f.result(timeout=20) for f in admin.describe_consumer_groups([group]).values()]
    assert gone.state == ConsumerGroupState.DEAD


def test_mixed_clients_agree_on_the_common_assignor(node: BrokerProcess) -> None:
    """kafka-python offers only roundrobin, librdkafka prefers range: the group must pick roundrobin."""

    topic, group = unique("mixed"), unique("mixed-group")
    create_topic(node.bootstrap, topic, 6)
    produce(node.bootstrap, topic, 60)
    python_consumer = KafkaConsumer(
        topic,
        bootstrap_servers=node.bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        partition_assignment_strategy=[RoundRobinPartitionAssignor],
        heartbeat_interval_ms=300,
        session_timeout_ms=6000,
    )
    rd_consumer = make_consumer(node.bootstrap, group, **{"partition.assignment.strategy": "range,roundrobin"})
    rd_consumer.subscribe([topic])
    seen: set[tuple[int, int]] = set()

    def all_read_and_assigned() -> bool:
        if len(seen) == 60 and len(python_consumer.assignment()) == 3 and len(rd_consumer.assignment()) == 3:
            return True
        for records in python_consumer.poll(timeout_ms=50).values():
            seen.update((r.partition, r.offset) for r in records)
        message = rd_consumer.poll(0.05)
        if message is not None and message.error() is None:
            seen.add((message.partition(), message.offset()))
        return False

    try:
        eventually(all_read_and_assigned, timeout=DEADLINE_S, interval=0.001, what=lambda: (
            f"60 records read and 3 partitions each: read {len(seen)}, assigned {python_consumer.assignment()} and "
            f"{rd_consumer.assignment()}"
        ))
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        [description] = [f.result(timeout=20) for f in admin.describe_consumer_groups([group]).values()]
        assert description.partition_assignor == "roundrobin"
        assert len(description.members) == 2
        # Round robin over one topic interleaves partitions between the two members.
        python_partitions = sorted(tp.partition for tp in python_consumer.assignment())
        assert python_partitions in ([0, 2, 4], [1, 3, 5])
    finally:
        python_consumer.close()
    poll_until([rd_consumer], lambda: len(rd_consumer.assignment()) == 6, lambda c, m: None)
    rd_consumer.close()


KAFKAJS = REPO / "tests" / "js" / "node_modules" / "kafkajs"
KAFKAJS_GROUP = """
const { Kafka, logLevel } = require(process.argv[1]);
const [broker, topic, group] = process.argv.slice(2);
(async () => {
  const kafka = new Kafka({ brokers: [broker], logLevel: logLevel.ERROR, clientId: 'kafkajs-groups' });
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: 2 }] });
  const producer = kafka.producer();
  await producer.connect();
  await producer.send({ topic, messages: [...Array(10).keys()].map((i) => ({ value: `v${i}`, partition: i % 2 })) });
  const consumer = kafka.consumer({ groupId: group, rebalanceTimeout: 10000 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let consumed = 0;
  await new Promise((resolve) => {
    consumer.run({ eachMessage: async () => { consumed += 1; if (consumed === 10) resolve(); } });
  });
  await consumer.disconnect();
  const [offsets] = await admin.fetchOffsets({ groupId: group, topics: [topic] });
  const { groups: [described] } = await admin.describeGroups([group]);
  await admin.deleteGroups([group]);
  const { groups: after } = await admin.listGroups();
  console.log(JSON.stringify({ consumed, offsets: offsets.partitions, state: described.state,
                               remaining: after.map((g) => g.groupId) }));
  await producer.disconnect();
  await admin.disconnect();
})().catch((e) => { console.error(e); process.exit(1); });
"""


@pytest.mark.skipif(shutil.which("node") is None or not KAFKAJS.is_dir(), reason="needs node and tests/js kafkajs")
def test_kafkajs_group_consumes_commits_and_is_deleted(node: BrokerProcess) -> None:
    topic, group = unique("js"), unique("js-group")
    result = subprocess.run(
        ["node", "-e", KAFKAJS_GROUP, str(KAFKAJS), node.bootstrap, topic, group],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["consumed"] == 10
    assert sorted((p["partition"], p["offset"]) for p in outcome["offsets"]) == [(0, "5"), (1, "5")]
    assert outcome["state"] == "Empty"
    assert group not in outcome["remaining"]
