"""Share groups (KIP-932, queues) with confluent-kafka's ``ShareConsumer`` against a real broker process: consumers
joining and all being assigned a partition they share; many consumers sharing one partition, each record handed to
one of them under a lock; acknowledgement by ACCEPT, RELEASE and REJECT; a consumer frozen or killed while it holds
locks; the delivery limit archiving a record that always fails; and share and consumer groups reading the same topic
side by side.

One broker serves the module with a short lock (2 s) and short heartbeats, so redelivery after a lost consumer takes
seconds; every test uses its own topic and group, and every wait is bounded.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, Message, Producer, ShareConsumer

from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker import share_wire
from tests.broker.cg_clients import consumer_factory, poll_until, produce, unique
from tests.broker.share_clients import drain, set_group_config, share_consumer_factory
from tests.topics import create_topic

LOCK_MS = 2000
SHARE_OVERRIDES = {
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.session.timeout.ms": "6000",
    "group.share.min.session.timeout.ms": "6000",
    "group.share.delivery.count.limit": "3",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("share-groups"), SHARE_OVERRIDES)
    yield process
    assert process.stop() == 0, process.log_text()


@pytest.fixture()
def share_consumer(broker: BrokerProcess) -> Iterator[Callable[..., ShareConsumer]]:
    yield from share_consumer_factory(lambda: broker.bootstrap)


def share_group(broker: BrokerProcess, topic: str, partitions: int = 1) -> str:
    """A new topic's share group reading from the earliest offset (the default is latest, as in Kafka)."""
    create_topic(broker.bootstrap, topic, partitions)
    group = unique("share")
    set_group_config(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    return group


def test_ten_consumers_on_one_partition_consume_every_record_once(
    broker: BrokerProcess, share_consumer: Callable[..., ShareConsumer]
) -> None:
    topic = unique("queue")
    group = share_group(broker, topic)
    # Batches of 20: a share fetch acquires whole batches (Kafka's batch-optimized mode, what librdkafka gets), so
    # one batch of all 2,000 would go to one consumer.
    produce(broker.bootstrap, topic, range(2000), partitions=1, batch_records=20)
    consumers = [share_consumer(group, topic) for _ in range(10)]
    seen: Counter[int] = Counter()
    by_consumer: Counter[int] = Counter()

    def got(consumer: ShareConsumer, message: Message) -> None:
        seen[int(message.value())] += 1
        by_consumer[id(consumer)] += 1

    drain(consumers, lambda: len(seen) == 2000, got, "every record to reach one of the ten consumers")
    for consumer in consumers:  # implicit acknowledgement: the next poll accepts what the last one returned
        consumer.poll(0.05)
        consumer.commit_sync(10)
    assert set(seen) == set(range(2000))
    assert max(seen.values()) == 1, {v: n for v, n in seen.items() if n > 1}
    assert len(by_consumer) > 1, "one consumer took the whole partition: nothing was shared"


def test_released_records_come_back_and_rejected_ones_never(
    broker: BrokerProcess, share_consumer: Callable[..., ShareConsumer]
) -> None:
    topic = unique("release")
    group = share_group(broker, topic)
    produce(broker.bootstrap, topic, range(100), partitions=1)
    consumer = share_consumer(group, topic, **{"share.acknowledgement.mode": "explicit"})
    first: dict[int, int] = {}
    again: Counter[int] = Counter()

    def judge(consumer: ShareConsumer, message: Message) -> None:
        value = int(message.value())
        if value not in first:
            first[value] = message.delivery_count() or 1
            kind = {0: AcknowledgeType.ACCEPT, 1: AcknowledgeType.RELEASE, 2: AcknowledgeType.REJECT}[value % 3]
        else:
            again[value] += 1
            kind = AcknowledgeType.ACCEPT
        consumer.acknowledge(message, kind)

    released = {v for v in range(100) if v % 3 == 1}
    drain([consumer], lambda: len(first) == 100 and set(again) >= released, judge, "released records to return")
    consumer.commit_sync(10)
    assert set(again) == released, "a rejected or accepted record came back, or a released one did not"


@pytest.mark.parametrize("signal_", [signal.SIGSTOP, signal.SIGKILL], ids=["frozen", "killed"])
def test_records_held_by_a_frozen_or_killed_consumer_go_to_the_others(
    broker: BrokerProcess, share_consumer: Callable[..., ShareConsumer], signal_: signal.Signals
) -> None:
    """A consumer that stops while holding locks: frozen (its connection stays open), its records come back when
    their locks run out; killed (the kernel closes its connection), its session ends and they come back at once.
    Either way they come back as redeliveries, and no other record is delivered twice."""
    topic = unique("held")
    group = share_group(broker, topic)
    produce(broker.bootstrap, topic, range(200), partitions=1)
    script = textwrap.dedent(
        f"""
        import time
        from confluent_kafka import ShareConsumer
        c = ShareConsumer({{"bootstrap.servers": "{broker.bootstrap}", "group.id": "{group}",
                            "share.acknowledgement.mode": "explicit"}})
        c.subscribe(["{topic}"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = [m for m in c.poll(0.2) if m.error() is None]
            if got:
                print(" ".join(str(int(m.value())) for m in got), flush=True)
                time.sleep(60)  # holds the locks until stopped
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline() if holder.stdout else ""
        held = {int(v) for v in line.split()}
        assert held, "the holding consumer got no records"
        holder.send_signal(signal_)
        stopped_at = time.monotonic()
        consumer = share_consumer(group, topic)
        seen: dict[int, int] = {}
        returned_at: list[float] = []

        def got(consumer: ShareConsumer, message: Message) -> None:
            value = int(message.value())
            assert value not in seen, f"record {value} delivered twice to the consumers still running"
            seen[value] = message.delivery_count() or 1
            if value in held and not returned_at:
                returned_at.append(time.monotonic())

        drain([consumer], lambda: len(seen) == 200, got, "the stopped consumer's records to be redelivered")
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert all(seen[v] == 2 for v in held), "a record the stopped consumer held did not come back as a redelivery"
    assert all(seen[v] == 1 for v in set(range(200)) - held)
    if signal_ == signal.SIGSTOP:  # the connection is open: only the lock's end gives the records back
        assert returned_at[0] - stopped_at >= LOCK_MS / 1000 * 0.5, "records came back long before their lock ended"


def test_a_record_that_always_fails_is_archived_at_the_delivery_limit(
    broker: BrokerProcess, share_consumer: Callable[..., ShareConsumer]
) -> None:
    topic = unique("poison")
    group = share_group(broker, topic)
    produce(broker.bootstrap, topic, range(10), partitions=1)
    consumer = share_consumer(group, topic, **{"share.acknowledgement.mode": "explicit"})
    deliveries: Counter[int] = Counter()

    def fail_poison(consumer: ShareConsumer, message: Message) -> None:
        value = int(message.value())
        deliveries[value] += 1
        consumer.acknowledge(message, AcknowledgeType.RELEASE if value == 4 else AcknowledgeType.ACCEPT)

    drain([consumer], lambda: deliveries[4] >= 3 and len(deliveries) == 10, fail_poison, "the poison record's tries")
    consumer.commit_sync(10)
    produce(broker.bootstrap, topic, [10], partitions=1)  # a later record still flows past the archived one
    drain([consumer], lambda: 10 in deliveries, fail_poison, "the record after the poison one")
    consumer.commit_sync(10)
    assert deliveries[4] == 3, "the record released every time was not archived at group.share.delivery.count.limit=3"


def test_share_and_consumer_groups_on_one_topic_each_see_every_record(
    broker: BrokerProcess, share_consumer: Callable[..., ShareConsumer]
) -> None:
    topic = unique("both")
    group = share_group(broker, topic, partitions=3)
    produce(broker.bootstrap, topic, range(300), partitions=3)
    sharers = [share_consumer(group, topic) for _ in range(2)]
    shared: set[int] = set()
    drain(sharers, lambda: len(shared) == 300, lambda c, m: shared.add(int(m.value())), "the share group's records")
    consumers = consumer_factory()
    new = next(consumers)
    try:
        classic = new(broker.bootstrap, unique("cg"))
        classic.subscribe([topic])
        consumed: set[int] = set()
        poll_until([classic], lambda: len(consumed) == 300, lambda c, m: consumed.add(int(m.value())))
    finally:
        next(consumers, None)
    assert shared == consumed == set(range(300))
    with WireClient(broker.port) as client:
        assert client  # the broker still answers after both kinds of group read the topic


def _described(broker: BrokerProcess, group: str) -> Any:
    with WireClient(broker.port) as client:
        return share_wire.describe(client, group)


def test_share_consumers_join_and_are_both_assigned_the_one_partition(broker: BrokerProcess) -> None:
    """Membership as ``kafka-share-groups --describe --members`` shows it: both consumers of a one-partition topic
    hold that partition (share groups share partitions), and a closed consumer leaves the group."""
    topic, group = unique("share-client-topic"), unique("share-client-group")
    topic_id = create_topic(broker.bootstrap, topic, 1).topic_id
    consumers = [
        ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "client.id": f"share-{i}"})
        for i in range(2)
    ]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])

        def members() -> list[Any]:
            for consumer in consumers:
                consumer.poll(0.2)
            described = _described(broker, group)
            return list(described.members) if described.error_code == 0 else []

        def both_assigned(found: list[Any]) -> bool:
            return len(found) == 2 and all(
                [(tp.topic_id, tuple(tp.partitions)) for tp in m.assignment.topic_partitions] == [(topic_id, (0,))]
                for m in found
            )

        found = eventually(members, until=both_assigned, timeout=30, interval=0.2, what="both consumers assigned")
        assert sorted(m.client_id for m in found) == ["share-0", "share-1"]
        assert all(m.subscribed_topic_names == (topic,) for m in found)
        assert _described(broker, group).group_state == "Stable"
        consumers.pop().close()
        eventually(lambda: len(_described(broker, group).members), until=lambda n: n == 1, timeout=15, interval=0.2,
                   what="the closed consumer to leave the group")
    finally:
        for consumer in consumers:
            consumer.close()
    eventually(lambda: _described(broker, group).group_state, until=lambda s: s == "Empty", timeout=15, interval=0.2,
               what="the group to be empty")


def test_a_read_committed_share_group_never_sees_an_aborted_transaction(
    broker: BrokerProcess, share_consumer: Callable[..., ShareConsumer]
) -> None:
    topic = unique("txn")
    group = share_group(broker, topic)
    set_group_config(broker.bootstrap, group, {"share.isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique("share-txn")})
    producer.init_transactions(30)
    for values, commit in ((range(0, 10), True), (range(100, 110), False), (range(10, 20), True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=str(value).encode(), partition=0)
        assert producer.flush(30) == 0  # in the log before the abort (else librdkafka drops them unsent)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    seen: set[int] = set()
    consumer = share_consumer(group, topic)
    drain([consumer], lambda: seen >= set(range(20)), lambda c, m: seen.add(int(m.value())),
          "the committed records")
    # Records are handed out in offset order, so the aborted ones (between the two commits) would have come first.
    assert seen == set(range(20)), f"aborted records were handed out: {sorted(seen - set(range(20)))}"
