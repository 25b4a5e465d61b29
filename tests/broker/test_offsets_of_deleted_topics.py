"""A deleted topic's committed offsets go with it, as Kafka's group coordinator removes them (``onPartitionsDeleted``):
a topic created again under the same name is read from its start by a group that had read the old one, in both
group protocols; a commit-only group keeps its other topics' offsets; an offset an open transaction commits for the
deleted topic does not come back at its COMMIT; the removal survives a restart; and offsets of a topic deleted while
no coordinator served them go when their partition loads. Real clients (confluent-kafka) against a real broker
process, and an in-process node for the last; every wait is bounded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from broker.groups.offset_commits import OffsetCommit, OffsetCommits
from testkit.node_process import BrokerProcess, start_broker
from testkit.waiting import eventually, eventually_async
from tests.broker.cg_clients import DEADLINE_S, consumer_factory, poll_until, produce, unique
from tests.broker.inprocess_groups import bootstrap, loaded_coordinator, start_node
from tests.topics import create_topic, delete_topic

#: No offset committed, as OffsetFetch answers it (librdkafka's OFFSET_INVALID).
NO_OFFSET = -1001


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("deleted-topic-offsets"), {
        "group.initial.rebalance.delay.ms": "0",
        "group.consumer.heartbeat.interval.ms": "300",
        "group.consumer.min.heartbeat.interval.ms": "300",
    })
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


@pytest.fixture
def new_consumer() -> Iterator[Callable[..., Consumer]]:
    yield from consumer_factory()


def _create_again(bootstrap: str, topic: str) -> None:
    """Creates ``topic`` once its deletion has gone through (until then the name is taken)."""
    eventually(lambda: create_topic(bootstrap, topic, 1, check=False).error_code == 0, timeout=DEADLINE_S,
               interval=0.1, what=f"{topic} to be created again")


def _committed(bootstrap: str, group: str, partitions: list[TopicPartition]) -> dict[str, int]:
    """The group's committed offset of each partition, by topic (NO_OFFSET where none), as OffsetFetch answers."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, partitions)
    (future,) = admin.list_consumer_group_offsets([request], require_stable=False).values()
    return {tp.topic: tp.offset for tp in future.result(timeout=30).topic_partitions}


def _commit_only(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    """Commits as an application that assigns its partitions itself (a group with no members)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_topic_created_again_is_read_from_its_start_by_a_group_that_read_the_old_one(
    node: BrokerProcess, new_consumer: Callable[..., Consumer], protocol: str
) -> None:
    topic, group = unique("recreated"), unique(f"readers-{protocol}")
    create_topic(node.bootstrap, topic, 1)
    produce(node.bootstrap, topic, range(300), 1)
    first = new_consumer(node.bootstrap, group, **{"group.protocol": protocol})
    first.subscribe([topic])
    read: list[Message] = []
    poll_until([first], lambda: len(read) >= 300, lambda _c, m: read.append(m), what="the old topic to be read")
    first.commit(message=read[-1], asynchronous=False)
    first.close()
    assert _committed(node.bootstrap, group, [TopicPartition(topic, 0)])[topic] == 300

    delete_topic(node.bootstrap, topic)
    eventually(lambda: _committed(node.bootstrap, group, [TopicPartition(topic, 0)])[topic] == NO_OFFSET,
               timeout=DEADLINE_S, interval=0.1, what="the deleted topic's committed offset to go")
    _create_again(node.bootstrap, topic)
    produce(node.bootstrap, topic, range(1000, 1500), 1)

    again = new_consumer(node.bootstrap, group, **{"group.protocol": protocol})
    again.subscribe([topic])
    values: list[int] = []
    poll_until([again], lambda: len(values) >= 500, lambda _c, m: values.append(int(m.value())),
               what=lambda: f"the new topic to be read whole ({len(values)} of 500)")
    assert values == list(range(1000, 1500))  # before, offsets 300-499 only: the first 300 records skipped


def test_only_the_deleted_topics_offsets_go_and_they_stay_gone_after_a_restart(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    data_dir = tmp_path_factory.mktemp("deleted-topic-offsets-restart")
    node = start_broker(data_dir)
    try:
        kept, doomed, group = unique("kept"), unique("doomed"), unique("commit-only")
        for topic in (kept, doomed):
            create_topic(node.bootstrap, topic, 1)
            produce(node.bootstrap, topic, range(50), 1)
        partitions = [TopicPartition(kept, 0), TopicPartition(doomed, 0)]
        _commit_only(node.bootstrap, group, [TopicPartition(kept, 0, 40), TopicPartition(doomed, 0, 30)])
        assert _committed(node.bootstrap, group, partitions) == {kept: 40, doomed: 30}

        delete_topic(node.bootstrap, doomed)
        eventually(lambda: _committed(node.bootstrap, group, partitions)[doomed] == NO_OFFSET,
                   timeout=DEADLINE_S, interval=0.1, what="the deleted topic's committed offset to go")
        assert _committed(node.bootstrap, group, partitions)[kept] == 40
        _create_again(node.bootstrap, doomed)
        assert node.stop() == 0, node.log_text()

        node = start_broker(data_dir)
        assert _committed(node.bootstrap, group, partitions) == {kept: 40, doomed: NO_OFFSET}
    finally:
        assert node.stop() == 0, node.log_text()


def test_an_offset_a_transaction_commits_for_a_deleted_topic_does_not_come_back_at_its_commit(
    node: BrokerProcess,
) -> None:
    source, output, group = unique("txn-source"), unique("txn-output"), unique("txn-readers")
    for topic in (source, output):
        create_topic(node.bootstrap, topic, 1)
    produce(node.bootstrap, source, range(20), 1)
    reader = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": unique("txn")})
    try:
        reader.subscribe([source])
        read: list[Message] = []
        poll_until([reader], lambda: len(read) >= 20, lambda _c, m: read.append(m), what="the source to be read")
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(output, value=b"derived")
        producer.send_offsets_to_transaction([TopicPartition(source, 0, 20)], reader.consumer_group_metadata(), 30)

        delete_topic(node.bootstrap, source)
        # The coordinator's tombstone must be in before the COMMIT marker decides the pending offset.
        eventually(lambda: f"group {group}: removed the committed offsets" in node.log_text(), timeout=DEADLINE_S,
                   interval=0.05, what="the coordinator to remove the pending offset of the deleted topic")
        producer.commit_transaction(30)
    finally:
        reader.close()
    _create_again(node.bootstrap, source)
    assert _committed(node.bootstrap, group, [TopicPartition(source, 0)])[source] == NO_OFFSET


async def _commit_then_delete_unseen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: str, doomed: str, group: str, *, create_again: bool
) -> dict[str, int]:
    """On an in-process node whose coordinator misses topic deletions (as one stopping or moving at that moment
    does): commits offset 7 of ``kept`` and 9 of ``doomed`` for ``group``, deletes ``doomed`` (and creates it again
    with ``create_again``), and returns what OffsetFetch answers for both then. The node is stopped."""
    monkeypatch.setattr(OffsetCommits, "forget_deleted_topics", lambda *_args: None)  # bound at the node's start
    node = await start_node(tmp_path)
    try:
        for topic in (kept, doomed):
            await asyncio.to_thread(create_topic, bootstrap(node), topic, 1)
        coordinator = await loaded_coordinator(node, group)
        committed = await coordinator.commit_offsets(
            group, member_id="", group_instance_id=None, generation_id=-1,
            offsets={(kept, 0): OffsetCommit(7, -1, ""), (doomed, 0): OffsetCommit(9, -1, "")},
        )
        assert set(committed.values()) == {ErrorCode.none}
        await asyncio.to_thread(delete_topic, bootstrap(node), doomed)
        if create_again:
            await asyncio.to_thread(_create_again, bootstrap(node), doomed)
        _, fetched = coordinator.fetch_offsets(group, [(kept, 0), (doomed, 0)])
        if create_again:
            _, every = coordinator.fetch_offsets(group, None)
            assert [(f.topic, f.offset) for f in every] == [(kept, 7)]
        return {f.topic: f.offset for f in fetched}
    finally:
        await node.stop()
        monkeypatch.undo()


@pytest.mark.timeout(120)
async def test_offsets_of_a_topic_deleted_while_no_coordinator_served_them_go_when_their_partition_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator misses the deletion: the next one to load the group's ``__consumer_offsets`` partition finds
    offsets of a topic the metadata no longer holds, and tombstones them; the group's offsets of a live topic
    stay."""
    kept, doomed, group = unique("kept"), unique("doomed"), unique("commit-only")
    missed = await _commit_then_delete_unseen(tmp_path, monkeypatch, kept, doomed, group, create_again=False)
    assert missed == {kept: 7, doomed: 9}

    node = await start_node(tmp_path)
    try:
        coordinator = await loaded_coordinator(node, group)

        async def offsets() -> dict[str, int]:
            _, fetched = coordinator.fetch_offsets(group, [(kept, 0), (doomed, 0)])
            return {f.topic: f.offset for f in fetched}

        await eventually_async(offsets, until=lambda found: found == {kept: 7, doomed: -1}, timeout=30,
                               what="the deleted topic's offset to go when the partition loads")
    finally:
        await node.stop()


@pytest.mark.timeout(120)
async def test_offsets_of_a_topic_deleted_and_created_again_unseen_are_not_the_new_topics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The coordinator misses the deletion and the topic is created again under the same name before anything
    tombstones the offsets: the commit recorded the old topic's id, so OffsetFetch answers no offset for the new
    topic at once (nor lists it among the group's), and the coordinator that loads the partition next tombstones
    it. (By name alone both looked alike, and the group started the new topic at the old one's position.)"""
    kept, doomed, group = unique("kept"), unique("reborn"), unique("commit-only")
    fetched = await _commit_then_delete_unseen(tmp_path, monkeypatch, kept, doomed, group, create_again=True)
    assert fetched == {kept: 7, doomed: -1}

    node = await start_node(tmp_path)
    try:
        coordinator = await loaded_coordinator(node, group)
        await eventually_async(
            lambda: coordinator._groups[group].offsets.get(doomed, 0) is None, timeout=30,
            what="the old topic's offset to be tombstoned when the partition loads",
        )
        _, fetched_now = coordinator.fetch_offsets(group, [(kept, 0), (doomed, 0)])
        assert {f.topic: f.offset for f in fetched_now} == {kept: 7, doomed: -1}
    finally:
        await node.stop()
