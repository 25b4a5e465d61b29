"""KIP-848 consumer groups with real clients against a real broker process: confluent-kafka (librdkafka) with
``group.protocol=consumer`` joining, leaving and committing while records flow; static members; regex subscriptions;
the admin APIs beside classic groups; moving an empty group between the protocols; and hostile heartbeats, commits
and fetches on the wire (:mod:`tests.broker.cg_wire`).

One broker serves the module with short ``group.consumer.*`` intervals so that joins and hand-overs take well under a
second; every test uses its own topic and group names, and every wait is bounded.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
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
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, api_versions_request, start_broker
from testkit.waiting import eventually
from tests.broker import cg_wire
from tests.broker.cg_clients import (
    DEADLINE_S,
    commit,
    consumer_factory,
    described,
    partitions_of,
    poll_until,
    produce,
    unique,
)
from tests.topics import create_topic

#: Heartbeats every 300 ms and a 6 s session: members learn of a new assignment within a heartbeat.
CONSUMER_GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "300",
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "300",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "6000",
}


@pytest.fixture
def new_consumer() -> Iterator[Callable[..., Consumer]]:
    yield from consumer_factory()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module; it must stop cleanly."""
    process = start_broker(tmp_path_factory.mktemp("consumer-groups"), CONSUMER_GROUP_OVERRIDES)
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


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


def test_members_joining_and_leaving_under_load_consume_every_record_once(
    node: BrokerProcess, new_consumer: Callable[..., Consumer]
) -> None:
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
        """Every member owns partitions, each partition one member, and records went on flowing meanwhile."""
        wanted = len(consumed) + 100

        def check() -> bool:
            owned = [partitions_of(c) for c in consumers]
            split = all(owned) and sum(map(len, owned)) == 6 and set().union(*owned) == set(range(6))
            return split and len(consumed) >= wanted

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


def test_static_member_restarting_within_the_session_gets_its_partitions_back(
    node: BrokerProcess, new_consumer: Callable[..., Consumer]
) -> None:
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


def test_regex_subscription_picks_up_a_topic_created_after_joining(
    node: BrokerProcess, new_consumer: Callable[..., Consumer]
) -> None:
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
    # librdkafka 2.16 sends its regex subscriptions as one SubscribedTopicRegex, each pattern in parentheses.
    assert member.subscribed_topic_regex == f"(^{prefix}-.*)"

    create_topic(node.bootstrap, later, 3)
    produce(node.bootstrap, later, range(100, 130), 3)
    poll_until([consumer], lambda: len(seen.get(later, ())) == 30, record, what=lambda: f"later topic read: {seen}")
    assert {tp.topic for tp in consumer.assignment()} == {first, later}
    assert other not in seen
    consumer.close()


def test_admin_apis_tell_consumer_groups_from_classic_ones(
    node: BrokerProcess, new_consumer: Callable[..., Consumer]
) -> None:
    topic, group, classic_group = unique("cg-admin"), unique("cg-new"), unique("cg-classic")
    create_topic(node.bootstrap, topic, 2)
    produce(node.bootstrap, topic, range(10), 2)
    member = new_consumer(node.bootstrap, group, **{"client.id": "cg-admin-client"})
    member.subscribe([topic])
    classic = new_consumer(node.bootstrap, classic_group, **{"group.protocol": "classic"})
    classic.subscribe([topic])
    read: list[int] = []

    def consume(consumer: Consumer, message: Message) -> None:
        if consumer is member:
            read.append(message.offset())
            commit(consumer, message)

    poll_until([member, classic], lambda: len(read) == 10 and len(partitions_of(classic)) == 2, consume)

    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    consumer_type = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(timeout=20).valid
    classic_type = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(timeout=20).valid
    assert group in {g.group_id for g in consumer_type} and classic_group not in {g.group_id for g in consumer_type}
    assert classic_group in {g.group_id for g in classic_type} and group not in {g.group_id for g in classic_type}
    assert {g.type for g in consumer_type} == {ConsumerGroupType.CONSUMER}

    description = described(admin, group)
    assert description.type == ConsumerGroupType.CONSUMER
    assert description.state == ConsumerGroupState.STABLE
    assert description.partition_assignor == "uniform"
    [m] = description.members
    assert m.client_id == "cg-admin-client"
    assert m.host.startswith("/127.0.0.1")
    assert {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions} == {(topic, 0), (topic, 1)}
    assert described(admin, classic_group).type == ConsumerGroupType.CLASSIC

    # DescribeGroups (kafka-python's admin) shows the consumer group as Kafka does: readable members.
    kadmin = KafkaAdminClient(bootstrap_servers=node.bootstrap, request_timeout_ms=20000)
    try:
        old_view = kadmin.describe_groups([group])[group]
    finally:
        kadmin.close()
    assert old_view["group_state"] == "Stable"
    assert old_view["protocol_type"] == "consumer" and old_view["protocol_data"] == "uniform"
    [old_member] = old_view["members"]
    assert old_member["client_id"] == "cg-admin-client"
    assert old_member["member_id"] == m.member_id
    assert old_member["member_metadata"]["topics"] == [topic]
    assert old_member["member_assignment"]["assigned_partitions"] == [{"topic": topic, "partitions": [0, 1]}]

    with pytest.raises(KafkaException) as refused:
        admin.delete_consumer_groups([group])[group].result(timeout=20)
    assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    member.close()
    eventually(lambda: described(admin, group).state, until=lambda s: s == ConsumerGroupState.EMPTY, timeout=10,
               interval=0.1, what="the consumer group to be empty once its member left")

    # The reset-offsets path: offsets of an empty consumer group set and read back by an admin.
    reset = [TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 2)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, reset)])[group].result(timeout=20)
    listed = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])]
    )[group].result(timeout=20)
    assert {tp.partition: tp.offset for tp in listed.topic_partitions} == {0: 1, 1: 2}

    admin.delete_consumer_groups([group])[group].result(timeout=20)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(timeout=20).valid}
    after = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])]
    )[group].result(timeout=20)
    assert {tp.partition: tp.offset for tp in after.topic_partitions} == {0: -1001, 1: -1001}  # no offsets left
    classic.close()


def test_an_empty_group_moves_between_the_protocols_keeping_its_offsets(
    node: BrokerProcess, new_consumer: Callable[..., Consumer]
) -> None:
    topic, group = unique("cg-migrate"), unique("cg-migrating")
    create_topic(node.bootstrap, topic, 1)
    produce(node.bootstrap, topic, range(30), 1)
    tp = KTopicPartition(topic, 0)
    old = KafkaConsumer(topic, bootstrap_servers=node.bootstrap, group_id=group, enable_auto_commit=False,
                        auto_offset_reset="earliest", heartbeat_interval_ms=300, session_timeout_ms=6000)
    try:
        read: list[int] = []
        eventually(lambda: read.extend(r.offset for rs in old.poll(timeout_ms=100).values() for r in rs)
                   or len(read) >= 10, timeout=DEADLINE_S, what="the classic consumer to read 10 records")
        old.commit({tp: OffsetAndMetadata(10, "", -1)})
    finally:
        old.close()

    new = new_consumer(node.bootstrap, group)
    new.subscribe([topic])
    offsets: list[int] = []

    def take(consumer: Consumer, message: Message) -> None:
        offsets.append(message.offset())
        if message.offset() == 19:
            commit(consumer, message)

    poll_until([new], lambda: len(offsets) >= 10, take, what=lambda: f"the new-protocol member to read: {offsets}")
    assert offsets[:10] == list(range(10, 20))
    assert wire_describe(node, group).error_code == ErrorCode.none  # a consumer group now
    new.close()

    again = new_consumer(node.bootstrap, group, **{"group.protocol": "classic"})
    again.subscribe([topic])
    resumed: list[int] = []
    poll_until([again], lambda: len(resumed) >= 10, lambda c, m: resumed.append(m.offset()),
               what=lambda: f"the classic member to resume: {resumed}")
    assert resumed[:10] == list(range(20, 30))
    assert wire_describe(node, group).error_code == ErrorCode.group_id_not_found  # classic again
    again.close()


def joined_member(client: WireClient, group: str, topic: str) -> tuple[str, int, dict[uuid.UUID, tuple[int, ...]]]:
    """A member joined over the wire and settled: (member id, epoch, partitions)."""
    member_id = str(uuid.uuid4())
    cg_wire.await_coordinator(client, group)
    joined = cg_wire.heartbeat(client, group, member_id, 0, topics=(topic,), owned={})
    assert joined.error_code == ErrorCode.none, joined
    epoch, owned = joined.member_epoch, cg_wire.assigned(joined)
    settled = cg_wire.heartbeat(client, group, member_id, epoch, topics=(topic,), owned=owned)
    assert settled.error_code == ErrorCode.none, settled
    return member_id, settled.member_epoch, owned


def test_hostile_heartbeats_get_kafka_errors_and_leave_the_group_alone(node: BrokerProcess) -> None:
    topic, group = unique("cg-hostile"), unique("cg-hostile-group")
    create_topic(node.bootstrap, topic, 2)
    with WireClient(node.port) as client:
        member_id, epoch, owned = joined_member(client, group, topic)
        assert sum(len(p) for p in owned.values()) == 2
        before = cg_wire.describe(client, group)
        join = {"topics": (topic,), "owned": {}}
        hostile = {
            "wrong epoch": (ErrorCode.fenced_member_epoch,
                            lambda: cg_wire.heartbeat(client, group, member_id, epoch + 5, owned=owned)),
            "unknown member": (ErrorCode.unknown_member_id,
                               lambda: cg_wire.heartbeat(client, group, str(uuid.uuid4()), epoch, owned=owned)),
            "3000-char regex": (ErrorCode.invalid_regular_expression, lambda: cg_wire.heartbeat(
                client, group, str(uuid.uuid4()), 0, regex="a" * 3000, owned={})),
            "look-ahead regex": (ErrorCode.invalid_regular_expression, lambda: cg_wire.heartbeat(
                client, group, str(uuid.uuid4()), 0, regex="(?=secret).*", owned={})),
            "unknown assignor": (ErrorCode.unsupported_assignor, lambda: cg_wire.heartbeat(
                client, group, str(uuid.uuid4()), 0, assignor="no-such-assignor", **join)),
            "no rebalance timeout": (ErrorCode.invalid_request, lambda: cg_wire.heartbeat(
                client, group, str(uuid.uuid4()), 0, rebalance_timeout_ms=-1, **join)),
            "owned partitions on join": (ErrorCode.invalid_request, lambda: cg_wire.heartbeat(
                client, group, str(uuid.uuid4()), 0, topics=(topic,), owned=owned)),
            "40 KiB member id": (ErrorCode.invalid_request, lambda: cg_wire.heartbeat(
                client, group, "m" * 40 * 1024, 0, **join)),
        }
        answers = {name: send().error_code for name, (_, send) in hostile.items()}
        assert answers == {name: code for name, (code, _) in hostile.items()}
        after = cg_wire.describe(client, group)
        assert after.group_epoch == before.group_epoch
        assert [(m.member_id, m.member_epoch) for m in after.members] == [(member_id, epoch)]
        assert client.request(api_versions_request(3)).error_code == ErrorCode.none
        still = cg_wire.heartbeat(client, group, member_id, epoch, owned=owned)
        assert (still.error_code, still.member_epoch) == (ErrorCode.none, epoch)


def test_commits_and_fetches_at_a_stale_member_epoch_are_refused(node: BrokerProcess) -> None:
    topic, group = unique("cg-stale"), unique("cg-stale-group")
    create_topic(node.bootstrap, topic, 2)
    with WireClient(node.port) as a_client, WireClient(node.port) as b_client:
        a, a_epoch, a_owned = joined_member(a_client, group, topic)
        assert cg_wire.commit(a_client, group, a, a_epoch, topic=topic, offsets={0: 5}) == {0: ErrorCode.none}
        b, _, _ = joined_member(b_client, group, topic)  # the group epoch moves on: a gives up one partition

        def a_reconciled() -> int | None:
            nonlocal a_owned
            answer = cg_wire.heartbeat(a_client, group, a, current[0], owned=a_owned)
            assert answer.error_code == ErrorCode.none, answer
            if answer.assignment is not None:
                a_owned = cg_wire.assigned(answer)
            current[0] = answer.member_epoch
            return answer.member_epoch if answer.member_epoch > a_epoch else None

        current = [a_epoch]
        new_epoch = eventually(a_reconciled, timeout=10, interval=0.1, what="member a to reach the new epoch")
        stale = cg_wire.commit(a_client, group, a, a_epoch, topic=topic, offsets={0: 7})
        assert stale == {0: ErrorCode.stale_member_epoch}
        kept = next(iter(a_owned.values()))[0]
        assert cg_wire.commit(a_client, group, a, new_epoch, topic=topic, offsets={kept: 7}) == {kept: ErrorCode.none}
        stale_fetch = cg_wire.fetch_offsets(a_client, group, a, a_epoch, topic=topic, partitions=(0, 1))
        assert stale_fetch.error_code == ErrorCode.stale_member_epoch
        fetched = cg_wire.fetch_offsets(a_client, group, a, new_epoch, topic=topic, partitions=(0, 1))
        assert fetched.error_code == ErrorCode.none
        assert {p.partition_index: p.committed_offset for t in fetched.topics for p in t.partitions}[kept] == 7
        assert b in {m.member_id for m in cg_wire.describe(a_client, group).members}


def test_a_group_whose_last_member_left_without_committing_is_empty(
    node: BrokerProcess, new_consumer: Callable[..., Consumer]
) -> None:
    topic, group = unique("cg-left"), unique("cg-left-group")
    create_topic(node.bootstrap, topic, 1)
    member = new_consumer(node.bootstrap, group)
    member.subscribe([topic])
    poll_until([member], lambda: len(partitions_of(member)) == 1)
    member.close()
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    state = eventually(lambda: described(admin, group).state, until=lambda s: s != ConsumerGroupState.STABLE,
                       timeout=10, interval=0.1, what="the group to notice its member left")
    assert state == ConsumerGroupState.EMPTY


def test_a_crashed_members_partitions_move_only_when_its_session_ends(
    node: BrokerProcess, new_consumer: Callable[..., Consumer]
) -> None:
    """A member that stops heartbeating (a crashed process) keeps its partitions until its session times out (6 s
    here): only then does the surviving member get them, never while both could be reading them."""
    topic, group = unique("cg-crash"), unique("cg-crash-group")
    create_topic(node.bootstrap, topic, 4)
    with WireClient(node.port) as client:
        crashed, _, owned = joined_member(client, group, topic)
    last_heartbeat = time.monotonic()
    assert sum(len(p) for p in owned.values()) == 4
    survivor = new_consumer(node.bootstrap, group)
    survivor.subscribe([topic])
    poll_until([survivor], lambda: len(partitions_of(survivor)) == 4, timeout=20,
               what=lambda: f"the survivor to take over: {partitions_of(survivor)}")
    took_over_after = time.monotonic() - last_heartbeat
    assert 5.0 <= took_over_after < 15.0, took_over_after
    members = wire_describe(node, group).members
    assert crashed not in {m.member_id for m in members} and len(members) == 1


def test_a_static_member_back_during_a_rebalance_leaves_no_partition_unowned(node: BrokerProcess) -> None:
    topic, group = unique("cg-static-back"), unique("cg-static-back-group")
    create_topic(node.bootstrap, topic, 2)
    with WireClient(node.port) as client:
        cg_wire.await_coordinator(client, group)
        first = cg_wire.heartbeat(client, group, "first", 0, topics=(topic,), owned={}, instance_id="instance-1")
        owned = cg_wire.assigned(first)
        assert cg_wire.heartbeat(client, group, "first", first.member_epoch, owned=owned,
                                 instance_id="instance-1").error_code == ErrorCode.none
        second = cg_wire.heartbeat(client, group, "second", 0, topics=(topic,), owned={}, instance_id="instance-2")
        # instance-1 shuts down (a static leave) before it has given up the partition that goes to instance-2 ...
        left = cg_wire.heartbeat(client, group, "first", -2, owned=owned, instance_id="instance-1")
        assert left.error_code == ErrorCode.none
        # ... and comes back under a new member id.
        back = cg_wire.heartbeat(client, group, "first-again", 0, topics=(topic,), owned={},
                                 instance_id="instance-1")
        assert back.error_code == ErrorCode.none
        members = {"first-again": [back.member_epoch, cg_wire.assigned(back)], "second": [second.member_epoch, {}]}

        def every_partition_owned() -> set[int] | None:
            for member_id, state in members.items():
                answer = cg_wire.heartbeat(client, group, member_id, state[0], owned=state[1])
                assert answer.error_code == ErrorCode.none, answer
                state[0] = answer.member_epoch
                if answer.assignment is not None:
                    state[1] = cg_wire.assigned(answer)
            owned_now = {p for _, assigned in members.values() for parts in assigned.values() for p in parts}
            return owned_now if owned_now == {0, 1} else None

        eventually(every_partition_owned, timeout=3, interval=0.2, what="both partitions to be owned")
