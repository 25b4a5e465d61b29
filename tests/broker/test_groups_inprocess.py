"""Offset retention (offsets.retention.minutes) with aiokafka against an in-process node.

The node runs in the test's event loop so the coordinator's wall clock can be moved eight days ahead instead of
waiting a week; everything else (listener, partitions, WAL, object store on disk) is the real thing.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from broker_support import default_overrides

from broker.node import BrokerNode
from controller.config import ServerConfig

DAY_S = 86_400.0


async def start_node(data_dir: Path) -> BrokerNode:
    overrides = {**default_overrides(data_dir), "group.initial.rebalance.delay.ms": "0"}
    node = BrokerNode(ServerConfig.load(None, [f"{k}={v}" for k, v in overrides.items()]))
    await node.start()
    return node


@pytest.fixture
async def node_factory(tmp_path: Path) -> AsyncIterator[Callable[[], object]]:
    nodes: list[BrokerNode] = []

    async def factory() -> BrokerNode:
        node = await start_node(tmp_path / "node")
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        await node.stop()


def bootstrap(node: BrokerNode) -> str:
    return f"127.0.0.1:{node.server.bound_port}"


async def committed(node: BrokerNode, group: str, tp: TopicPartition) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap(node), group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return await consumer.committed(tp)
    finally:
        await consumer.stop()


async def test_offsets_of_empty_groups_expire_and_live_subscriptions_are_kept(node_factory: Callable) -> None:  # type: ignore[type-arg]
    node: BrokerNode = await node_factory()
    topic = f"retained-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap(node))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
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

        coordinator = node.groups
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
    restarted: BrokerNode = await node_factory()
    deadline = time.monotonic() + 30
    while (value := await committed(restarted, "live", tp)) is None:
        assert time.monotonic() < deadline, "the live group's offset was lost across the restart"
    assert value == 1
    assert await committed(restarted, "left", tp) is None
    assert await committed(restarted, "manual", tp) is None


async def list_groups(node: BrokerNode) -> list[tuple[str, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap(node))
    await admin.start()
    try:
        return list(await admin.list_consumer_groups())
    finally:
        await admin.close()
