"""The coordinator inside an in-process node (:mod:`tests.broker.inprocess_groups`): retention with aiokafka,
a broken ``__consumer_offsets`` partition, requests while it loads, a commit racing a group's upgrade.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from kio.schema.errors import ErrorCode

from broker.groups.consumer.consumer_protocol import assignment_bytes, subscription_bytes
from broker.groups.consumer.group import ConsumerGroup
from broker.groups.coordinator import GroupCoordinator
from broker.groups.offset_commits import OffsetCommit
from broker.groups.offsets_topic import OFFSETS_TOPIC
from broker.partition.manager import PartitionManager
from node.process import Node
from testkit.waiting import eventually_async
from tests.broker.inprocess_groups import (
    DAY_S,
    bootstrap,
    consumer_join,
    join_and_sync,
    join_request,
    loaded_coordinator,
)
from tests.topics import create_topic


async def committed(node: Node, group: str, tp: TopicPartition) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap(node), group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return await consumer.committed(tp)
    finally:
        await consumer.stop()


async def test_offsets_of_empty_groups_expire_and_live_subscriptions_are_kept(node_factory: Callable) -> None:  # type: ignore[type-arg]
    node: Node = await node_factory()
    topic = f"retained-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    await asyncio.to_thread(create_topic, bootstrap(node), topic)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap(node))
    await producer.start()
    try:
        for i in range(5):
            await producer.send_and_wait(topic, f"r{i}".encode(), partition=0)
    finally:
        await producer.stop()

    # "live" keeps consuming; "left" consumed and left; "manual" only ever committed (no group management).
    live = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap(node),
        group_id="live",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=30_000,
        heartbeat_interval_ms=1_000,
    )
    await live.start()
    left = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap(node),
        group_id="left",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await left.start()
    manual = AIOKafkaConsumer(bootstrap_servers=bootstrap(node), group_id="manual", enable_auto_commit=False)
    await manual.start()
    try:
        for consumer in (live, left):
            record = await consumer.getone()
            assert record.offset == 0
            await consumer.commit({tp: 1})
        manual.assign([tp])
        await manual.commit({tp: 4})
        await left.stop()
        await manual.stop()
        assert {g: await committed(node, g, tp) for g in ("live", "left", "manual")} == {
            "live": 1,
            "left": 1,
            "manual": 4,
        }

        coordinator = node.broker.groups
        assert await coordinator.expire_offsets() == 0  # nothing is old enough yet
        real = coordinator.clock
        coordinator.clock = lambda: real() + 8 * DAY_S
        try:
            assert await coordinator.expire_offsets() == 2
        finally:
            coordinator.clock = real
        assert {g: await committed(node, g, tp) for g in ("live", "left", "manual")} == {
            "live": 1,
            "left": None,
            "manual": None,
        }
        listed = {group_id for group_id, _ in await list_groups(node)}
        assert "live" in listed and "left" not in listed and "manual" not in listed
    finally:
        await live.stop()

    # The expiry was written as tombstones: a restarted node agrees.
    await node.stop()
    restarted: Node = await node_factory()
    value = await eventually_async(
        lambda: committed(restarted, "live", tp),
        timeout=30,
        what="the live group's offset after the restart (lost across it?)",
    )
    assert value == 1
    assert await committed(restarted, "left", tp) is None
    assert await committed(restarted, "manual", tp) is None


async def list_groups(node: Node) -> list[tuple[str, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap(node))
    await admin.start()
    try:
        return list(await admin.list_consumer_groups())
    finally:
        await admin.close()


async def test_a_broken_offsets_partition_fails_sync_and_commit_with_not_coordinator(node_factory: Callable) -> None:  # type: ignore[type-arg]
    node: Node = await node_factory()
    group = "fragile"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "input")
    joined = await coordinator.join_group(group, join_request())
    assert joined.error is ErrorCode.none and joined.generation_id == 1
    # Fault: the partition holding this group is closed underneath the coordinator.
    log = node.broker.partitions.get(OFFSETS_TOPIC, coordinator.partition_for(group))
    await log.close()
    synced = await coordinator.sync_group(
        group,
        member_id=joined.member_id,
        group_instance_id=None,
        generation_id=joined.generation_id,
        protocol_type=None,
        protocol_name=None,
        assignments={joined.member_id: b"A"},
    )
    assert synced.error is ErrorCode.not_coordinator
    # The member may still commit during the rebalance this caused, but the write cannot land.
    commit = await coordinator.commit_offsets(
        group,
        member_id=joined.member_id,
        group_instance_id=None,
        generation_id=joined.generation_id,
        offsets={("input", 0): OffsetCommit(offset=1, leader_epoch=-1, metadata=None)},
    )
    assert commit == {("input", 0): ErrorCode.not_coordinator}
    error, fetched = coordinator.fetch_offsets(group, [("input", 0)])
    assert error is ErrorCode.none
    assert [(f.offset, f.error) for f in fetched] == [(-1, ErrorCode.none)]  # nothing half-applied


async def test_non_consumer_groups_keep_their_offsets(node_factory: Callable) -> None:  # type: ignore[type-arg]
    """A live group of another protocol type (Kafka Connect, Schema Registry) cannot lose offsets to OffsetDelete
    or to retention: its subscriptions are opaque to the broker."""
    node: Node = await node_factory()
    group = "connect-cluster"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "configs")
    joined = await join_and_sync(coordinator, group, join_request(protocol_type="connect"), b"")
    commit = await coordinator.commit_offsets(
        group,
        member_id=joined.member_id,
        group_instance_id=None,
        generation_id=joined.generation_id,
        offsets={("configs", 0): OffsetCommit(offset=3, leader_epoch=-1, metadata="m")},
    )
    assert commit == {("configs", 0): ErrorCode.none}
    error, _ = await coordinator.delete_offsets(group, [("configs", 0)])
    assert error is ErrorCode.non_empty_group
    real = coordinator.clock
    coordinator.clock = lambda: real() + 30 * DAY_S
    try:
        assert await coordinator.expire_offsets() == 0
    finally:
        coordinator.clock = real
    error, fetched = coordinator.fetch_offsets(group, None)
    assert error is ErrorCode.none
    assert [(f.topic, f.partition, f.offset, f.metadata) for f in fetched] == [("configs", 0, 3, "m")]


async def test_requests_during_load_get_coordinator_load_in_progress(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    node: Node = await node_factory()
    group = "slow-to-load"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "input")
    commit = await coordinator.commit_offsets(
        group,
        member_id="",
        group_instance_id=None,
        generation_id=-1,
        offsets={("input", 0): OffsetCommit(offset=9, leader_epoch=-1, metadata=None)},
    )
    assert commit == {("input", 0): ErrorCode.none}
    await node.stop()

    # Fault: __consumer_offsets partitions open only when the test says so.
    gate = asyncio.Event()
    original = PartitionManager.wait_open

    async def slow_wait_open(self: PartitionManager, topic: str, partition: int, timeout: float) -> object:
        if topic == OFFSETS_TOPIC:
            await gate.wait()
        return await original(self, topic, partition, timeout)

    monkeypatch.setattr(PartitionManager, "wait_open", slow_wait_open)
    restarted: Node = await node_factory()
    loading: GroupCoordinator = restarted.broker.groups
    assert loading.coordinator_error(group) is ErrorCode.coordinator_load_in_progress
    assert (await loading.join_group(group, join_request())).error is ErrorCode.coordinator_load_in_progress
    assert loading.heartbeat(group, "m", None, 1) is ErrorCode.coordinator_load_in_progress
    assert loading.fetch_offsets(group, None) == (ErrorCode.coordinator_load_in_progress, [])
    assert loading.list_groups()[0] is ErrorCode.coordinator_load_in_progress
    gate.set()
    await loaded_coordinator(restarted, group)
    error, fetched = loading.fetch_offsets(group, None)
    assert error is ErrorCode.none
    assert [(f.topic, f.partition, f.offset) for f in fetched] == [("input", 0, 9)]
    assert loading.list_groups()[0] is ErrorCode.none


async def test_a_commit_under_way_while_the_group_upgrades_lands_in_the_consumer_group(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A classic member's commit acknowledged while a KIP-848 member's join turned the group into a consumer group
    is the offset the next owner of the partition reads (a lost one made it receive the record again)."""
    node: Node = await node_factory()
    group = "upgrading"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "input")
    request = join_request(metadata=subscription_bytes(["input"]))
    joined = await join_and_sync(coordinator, group, request, assignment_bytes({"input": frozenset({0})}, 0))

    # Fault: the commit's append waits until the test lets it finish.
    appending, finish = asyncio.Event(), asyncio.Event()
    append = coordinator._append

    async def held_append(group_id: str, records: object, **kwargs: int) -> int:
        if not appending.is_set():
            appending.set()
            await finish.wait()
        return await append(group_id, records, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(coordinator, "_append", held_append)
    commit = asyncio.create_task(
        coordinator.commit_offsets(
            group,
            member_id=joined.member_id,
            group_instance_id=None,
            generation_id=joined.generation_id,
            offsets={("input", 0): OffsetCommit(offset=70, leader_epoch=-1, metadata=None)},
        )
    )
    await asyncio.wait_for(appending.wait(), timeout=10)
    upgrade = await coordinator.consumer_group_heartbeat(group, consumer_join(str(uuid.uuid4())))
    assert upgrade.error is ErrorCode.none
    assert isinstance(coordinator.describe_consumer_group(group)[2], ConsumerGroup)
    finish.set()
    assert await asyncio.wait_for(commit, timeout=10) == {("input", 0): ErrorCode.none}
    error, fetched = coordinator.fetch_offsets(group, [("input", 0)])
    assert error is ErrorCode.none
    assert [(f.offset, f.error) for f in fetched] == [(70, ErrorCode.none)]
