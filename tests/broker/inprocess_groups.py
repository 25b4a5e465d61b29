"""An in-process node for the group coordinator's tests: it runs in the test's event loop, so that a test can move
the coordinator's wall clock (days ahead instead of waiting) and break the real ``__consumer_offsets`` partition
under a live group; everything else (listener, partitions, WAL, object store on disk) is the real thing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.groups.classic.group import JoinRequest
from broker.groups.classic.state import JoinResult
from broker.groups.consumer.group import HeartbeatRequest
from broker.groups.coordinator import GroupCoordinator
from node.process import Node
from settings.server import ServerConfig
from testkit.node_process import default_overrides
from testkit.waiting import eventually_async
from tests.topics import create_topic

DAY_S = 86_400.0


async def start_node(data_dir: Path) -> Node:
    overrides = {
        **default_overrides(data_dir),
        "group.initial.rebalance.delay.ms": "0",
        # The coordinator's clock moves eight days ahead; the tombstones it then writes must not be refused as
        # too far in the future (Kafka's default allows one hour).
        "log.message.timestamp.after.max.ms": str(int(9 * DAY_S * 1000)),
    }
    node = Node(ServerConfig.load(None, [f"{k}={v}" for k, v in overrides.items()]))
    await node.start()
    return node


@pytest.fixture
async def node_factory(tmp_path: Path) -> AsyncIterator[Callable[[], object]]:
    nodes: list[Node] = []

    async def factory() -> Node:
        node = await start_node(tmp_path / "node")
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        await node.stop()


def bootstrap(node: Node) -> str:
    return f"127.0.0.1:{node.broker.server.bound_port}"


async def loaded_coordinator(node: Node, group: str) -> GroupCoordinator:
    coordinator: GroupCoordinator = node.broker.groups
    error, node_id, _ = await coordinator.find_coordinator(group)
    assert (error, node_id) == (ErrorCode.none, node.node_id)
    await eventually_async(
        lambda: coordinator.coordinator_error(group),
        until=lambda error: error is ErrorCode.none,
        timeout=30,
        what=f"the coordinator of group {group} to load",
    )
    return coordinator


def join_request(
    member_id: str = "", protocol_type: str = "consumer", metadata: bytes = b"\x00\x00\x00\x00\x00\x00"
) -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        group_instance_id=None,
        client_id="in-process",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type=protocol_type,
        protocols=(("range", metadata),),
        require_known_member_id=False,
    )


async def join_and_sync(
    coordinator: GroupCoordinator, group: str, request: JoinRequest, assignment: bytes
) -> JoinResult:
    """The group's one member, its leader, joined and synced with ``assignment`` (nothing when empty)."""
    joined = await coordinator.join_group(group, request)
    synced = await coordinator.sync_group(
        group,
        member_id=joined.member_id,
        group_instance_id=None,
        generation_id=joined.generation_id,
        protocol_type=request.protocol_type,
        protocol_name="range",
        assignments={joined.member_id: assignment} if assignment else {},
    )
    assert synced.error is ErrorCode.none
    return joined


def consumer_join(member_id: str, topic: str = "input") -> HeartbeatRequest:
    """A new member's first ConsumerGroupHeartbeat (KIP-848), subscribed to ``topic``."""
    return HeartbeatRequest(
        member_id=member_id, member_epoch=0, rebalance_timeout_ms=10_000, subscribed_topic_names=(topic,)
    )


async def coordinating(
    node_factory: Callable[[], Awaitable[Node]], group: str, topic: str, partitions: int
) -> tuple[Node, GroupCoordinator]:
    """A started node whose coordinator serves ``group``, with ``topic`` created for the group to consume."""
    node = await node_factory()
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), topic, partitions)
    return node, coordinator
