"""Waiting for a partition to open (``PartitionManager.wait_open``), as the group and transaction coordinators wait
for their internal partitions: waiters cancelled twice, as a stopping coordinator cancels its loads, must leave the
broker able to open partitions and to answer later waiters.

On Python 3.11 the wait used to run in a task of ``asyncio.wait_for``'s own; a caller cancelled a second time while
that task re-acquired the lock left it holding the lock for good, so every later open hung (a broker's stop then ran
out of its shutdown budget with its streams still open, and their new leaders could not open them).

Real node: embedded controller, real storage engine on disk.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from metadata.controller_api import NewTopic
from node.process import Node
from settings.server import ServerConfig
from testkit.node_process import default_overrides

WAITERS = 25
BOUND_S = 30.0


async def _start(data_dir: Path) -> Node:
    node = Node(ServerConfig.load(None, [f"{k}={v}" for k, v in default_overrides(data_dir).items()]))
    await node.start()
    return node


async def test_waiters_cancelled_twice_leave_the_broker_opening_partitions(tmp_path: Path) -> None:
    node = await _start(tmp_path / "node")
    try:
        broker = node.broker
        assert broker is not None
        topic = "opened-after-cancelled-waits"
        waiters = [asyncio.create_task(broker.partitions.wait_open(topic, 0, BOUND_S)) for _ in range(WAITERS)]
        await asyncio.sleep(0.05)
        for waiter in waiters:
            waiter.cancel()
        await asyncio.sleep(0)
        for waiter in waiters:
            waiter.cancel()
        async with asyncio.timeout(BOUND_S):
            outcomes = await asyncio.gather(*waiters, return_exceptions=True)
        assert all(isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes

        async with asyncio.timeout(BOUND_S):
            await broker.controller.create_topics([NewTopic(topic, 1, 1)], validate_only=False)
            log = await broker.partitions.wait_open(topic, 0, BOUND_S)
        assert log is not None and log.topic == topic
    finally:
        await node.stop()


async def test_a_waiter_is_answered_none_once_its_time_is_up(tmp_path: Path) -> None:
    node = await _start(tmp_path / "node")
    try:
        broker = node.broker
        assert broker is not None
        async with asyncio.timeout(BOUND_S):
            assert await broker.partitions.wait_open("never-created", 0, 0.2) is None
    finally:
        await node.stop()
