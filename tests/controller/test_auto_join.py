"""``controller.quorum.auto.join.enable`` (KIP-853's auto-join), controllers in this process over real TCP on
127.0.0.1: a controller formatted with ``--no-initial-controllers`` adds itself once it has caught up, with its
metadata directory's id; an operator's later removal stands until it restarts (once per process, as Kafka 4.2's);
a controller whose metadata directory was replaced removes its former self and joins again; a static quorum refuses
the key at start."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from controller.quorum import QuorumController
from metadata.rpc.kafka_apis import REMOVE_RAFT_VOTER
from settings.kafka_uuid import new_kafka_uuid, parse_kafka_uuid
from settings.meta_properties import read_meta_properties
from settings.server import ServerConfig
from settings.storage_format import FormatRequest, format_storage
from storage.config import ConfigError
from testkit.waiting import eventually_async
from tests.controller.test_voter_changes_api import _FAST
from tests.quorum_fixtures import active_voter, ask_controller
from wire.ports import free_ports

pytestmark = pytest.mark.timeout(120)


class _Quorum:
    """Controller 1 formatted ``--standalone``; controller 2 formatted ``--no-initial-controllers`` with auto-join."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports = free_ports(2)
        self.cluster_id = new_kafka_uuid()
        self.running: dict[int, QuorumController] = {}

    def overrides(self, node_id: int, *extra: str) -> tuple[str, ...]:
        port = self.ports[node_id - 1]
        return (f"node.id={node_id}", "process.roles=controller", f"listeners=CONTROLLER://127.0.0.1:{port}",
                "controller.listener.names=CONTROLLER", f"log.dirs={self.root / f'c{node_id}'}",
                f"controller.quorum.bootstrap.servers=127.0.0.1:{self.ports[0]}", *_FAST, *extra)

    def format(self, node_id: int, **flag: bool) -> uuid.UUID:
        overrides = self.overrides(node_id)
        format_storage(FormatRequest(cluster_id=self.cluster_id, overrides=overrides, **flag))  # type: ignore[arg-type]
        meta = read_meta_properties(self.root / f"c{node_id}")
        assert meta is not None and meta.directory_id is not None
        return parse_kafka_uuid(meta.directory_id)

    async def start(self, node_id: int, *extra: str) -> QuorumController:
        quorum = await QuorumController.start(ServerConfig.load(None, list(self.overrides(node_id, *extra))))
        self.running[node_id] = quorum
        return quorum

    async def stop(self, node_id: int) -> None:
        await self.running.pop(node_id).stop(resign=False)


@pytest.fixture
async def quorum(tmp_path: Path) -> AsyncIterator[_Quorum]:
    made = _Quorum(tmp_path)
    made.format(1, standalone=True)
    try:
        await made.start(1)
        yield made
    finally:
        for node_id in list(made.running):
            await made.stop(node_id)


def _voters(quorum: QuorumController) -> dict[int, uuid.UUID | None]:
    return {v.node_id: v.directory_id for v in quorum.membership.voter_set.voters}


async def test_a_controller_adds_itself_and_an_operators_removal_stands_until_it_restarts(quorum: _Quorum) -> None:
    first = await active_voter([quorum.running[1]])
    directory = quorum.format(2, no_initial_controllers=True)
    second = await quorum.start(2, "controller.quorum.auto.join.enable=true")

    async def joined() -> bool:
        return _voters(first).get(2) == directory and _voters(second).get(2) == directory

    await eventually_async(joined, timeout=60, interval=0.1, what="controller 2 to add itself")
    assert set(_voters(first)) == {1, 2}

    # The operator removes it: it stays an observer (it joined once in this process: nothing asks again) ...
    # (its AddRaftVoter's response may still be on its way when its log already names it: the task ends on either)
    async def join_task_ended() -> bool:
        return "controller-2-auto-join" not in {task.get_name() for task in asyncio.all_tasks()}

    await eventually_async(join_task_ended, timeout=40, interval=0.1, what="controller 2's auto-join task to end")
    removed = await ask_controller(quorum.ports[0], REMOVE_RAFT_VOTER, 0, cluster_id=None, voter_id=2,
                                   voter_directory_id=directory)
    assert removed.error_code is ErrorCode.none, removed

    async def observing() -> bool:
        return set(_voters(second)) == {1}

    await eventually_async(observing, timeout=30, interval=0.1, what="controller 2 to learn it was removed")
    assert set(_voters(first)) == {1}
    # ... until it restarts, when it adds itself again.
    await quorum.stop(2)
    second = await quorum.start(2, "controller.quorum.auto.join.enable=true")
    await eventually_async(joined, timeout=60, interval=0.1, what="controller 2 to add itself after its restart")


async def test_a_replaced_metadata_directory_removes_its_former_self_then_joins(quorum: _Quorum) -> None:
    first = await active_voter([quorum.running[1]])
    quorum.format(2, no_initial_controllers=True)
    await quorum.start(2, "controller.quorum.auto.join.enable=true")
    await eventually_async(lambda: _has_voters(first, {1, 2}), timeout=60, interval=0.1, what="2 to join")
    # A third controller keeps a majority while controller 2's directory is replaced.
    quorum.ports.append(free_ports(1)[0])
    quorum.format(3, no_initial_controllers=True)
    await quorum.start(3, "controller.quorum.auto.join.enable=true")
    await eventually_async(lambda: _has_voters(first, {1, 2, 3}), timeout=60, interval=0.1, what="3 to join")
    old = _voters(first)[2]

    await quorum.stop(2)
    shutil.rmtree(quorum.root / "c2")
    replaced = quorum.format(2, no_initial_controllers=True)
    assert replaced != old
    await quorum.start(2, "controller.quorum.auto.join.enable=true")

    async def rejoined() -> bool:
        return _voters(first) == {1: _voters(first)[1], 2: replaced, 3: _voters(first)[3]}

    await eventually_async(rejoined, timeout=60, interval=0.1, what="2's new directory to replace its old one")
    leader = await active_voter(list(quorum.running.values()))
    await leader.controller.stream_metadata.put_kv("after", b"three voters again")


async def _has_voters(quorum: QuorumController, ids: set[int]) -> bool:
    return set(_voters(quorum)) == ids


def test_a_static_quorum_refuses_auto_join_at_start(tmp_path: Path) -> None:
    overrides = ["node.id=1", "process.roles=controller", "listeners=CONTROLLER://127.0.0.1:9093",
                 "controller.listener.names=CONTROLLER", f"log.dirs={tmp_path}",
                 "controller.quorum.voters=1@127.0.0.1:9093", "controller.quorum.auto.join.enable=true"]
    with pytest.raises(ConfigError, match=r"^controller\.quorum\.auto\.join\.enable: a controller joins a dynamic"):
        ServerConfig.load(None, overrides)
