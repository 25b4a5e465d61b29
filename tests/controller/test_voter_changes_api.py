"""AddRaftVoter and RemoveRaftVoter (KIP-853) on the CONTROLLER listener, with controllers in this process over real
TCP on 127.0.0.1: what each refusal answers (Kafka's error codes, nothing changed), and the voters a dynamic quorum
ends with. The whole operator flow with real processes and a broker is tests/node/test_controller_voter_changes.py."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from controller.quorum import QuorumController
from metadata.rpc.kafka_apis import ADD_RAFT_VOTER, REMOVE_RAFT_VOTER
from settings.kafka_uuid import new_kafka_uuid, parse_kafka_uuid
from settings.meta_properties import read_meta_properties
from settings.server import ServerConfig
from settings.storage_format import FormatRequest, format_storage
from testkit.waiting import eventually_async
from tests.quorum_fixtures import active_voter, ask_controller
from wire import codec, schema
from wire.ports import free_ports

pytestmark = pytest.mark.timeout(90)

_FAST = ("controller.quorum.election.timeout.ms=200", "controller.quorum.fetch.timeout.ms=400",
         "controller.quorum.request.timeout.ms=500")


def _add(node_id: int, port: int, directory: uuid.UUID, listener: str = "CONTROLLER", **extra: Any) -> dict[str, Any]:
    cls = codec.request_class(ADD_RAFT_VOTER, 1)
    return {"voter_id": node_id, "voter_directory_id": directory, "cluster_id": None, "ack_when_committed": True,
            "listeners": (schema.build_nested(cls, "listeners", name=listener, host="127.0.0.1", port=port),),
            **extra}


@pytest.fixture
async def dynamic(tmp_path: Path) -> AsyncIterator[tuple[list[QuorumController], list[int]]]:
    """Controller 1 formatted --standalone, controller 2 formatted --no-initial-controllers, both running."""
    ports = free_ports(2)
    cluster_id = new_kafka_uuid()
    configs = []
    for node_id, port, flag in ((1, ports[0], "standalone"), (2, ports[1], "no_initial_controllers")):
        overrides = (f"node.id={node_id}", "process.roles=controller", f"listeners=CONTROLLER://127.0.0.1:{port}",
                     "controller.listener.names=CONTROLLER", f"log.dirs={tmp_path / f'c{node_id}'}",
                     f"controller.quorum.bootstrap.servers=127.0.0.1:{ports[0]}", *_FAST)
        format_storage(FormatRequest(cluster_id=cluster_id, overrides=overrides, **{flag: True}))  # type: ignore[arg-type]
        configs.append(ServerConfig.load(None, list(overrides)))
    started: list[QuorumController] = []
    try:
        for config in configs:
            started.append(await QuorumController.start(config))
        yield started, ports
    finally:
        for quorum in started:
            await quorum.stop(resign=False)


async def test_a_static_quorum_refuses_voter_changes_as_kafka_at_kraft_version_0(
    voters: list[QuorumController],
) -> None:
    leader = await active_voter(voters)
    port = leader.config.listeners[0].port
    answer = await ask_controller(port, ADD_RAFT_VOTER, 1, **_add(9, 1, uuid.uuid4()))
    assert answer.error_code is ErrorCode.unsupported_version
    assert "kraft.version feature is 0" in answer.error_message and "controller.quorum.voters" in answer.error_message
    answer = await ask_controller(port, REMOVE_RAFT_VOTER, 0, cluster_id=None, voter_id=0,
                                  voter_directory_id=uuid.UUID(int=0))
    assert answer.error_code is ErrorCode.unsupported_version
    assert all(q.driver.node.voters == frozenset({0, 1, 2}) for q in voters)
    # kraft.version is supported (0-1) but at 0, so not finalized, as Kafka's ApiVersions says of a static quorum
    # (kafka-features upgrade makes it dynamic: tests/controller/test_kraft_version_upgrade.py).
    versions = await ask_controller(port, 18, 4, client_software_name="test", client_software_version="1")
    assert {(f.name, f.min_version, f.max_version) for f in versions.supported_features} >= {("kraft.version", 0, 1)}
    assert "kraft.version" not in {f.name for f in versions.finalized_features}
    assert "metadata.version" in {f.name for f in versions.finalized_features}


async def test_a_dynamic_quorum_refuses_bad_changes_then_adds_and_removes_a_controller(
    dynamic: tuple[list[QuorumController], list[int]],
) -> None:
    (first, second), (port1, port2) = dynamic
    await active_voter([first])
    meta = read_meta_properties(second.config.metadata_dir)
    assert meta is not None and meta.directory_id is not None
    directory = parse_kafka_uuid(meta.directory_id)

    wrong_cluster = await ask_controller(port1, ADD_RAFT_VOTER, 1,
                                         **_add(2, port2, directory, cluster_id=new_kafka_uuid()))
    assert wrong_cluster.error_code is ErrorCode.inconsistent_cluster_id
    no_controller_listener = await ask_controller(port1, ADD_RAFT_VOTER, 1,
                                                  **_add(2, port2, directory, listener="OTHER"))
    assert no_controller_listener.error_code is ErrorCode.invalid_request
    assert "CONTROLLER" in no_controller_listener.error_message
    negative = await ask_controller(port1, ADD_RAFT_VOTER, 1, **_add(-3, port2, directory))
    assert negative.error_code is ErrorCode.invalid_request and "negative" in negative.error_message
    no_port = await ask_controller(port1, ADD_RAFT_VOTER, 1, **_add(2, 0, directory))
    assert no_port.error_code is ErrorCode.invalid_request and "no host or port" in no_port.error_message
    never_fetched = await ask_controller(port1, ADD_RAFT_VOTER, 0, **_add(7, 1, uuid.uuid4()))
    assert never_fetched.error_code is ErrorCode.request_timed_out
    observer = await ask_controller(port2, ADD_RAFT_VOTER, 1, **_add(2, port2, directory))
    assert observer.error_code is ErrorCode.not_leader_or_follower
    only_voter = await ask_controller(port1, REMOVE_RAFT_VOTER, 0, cluster_id=None, voter_id=1,
                                      voter_directory_id=uuid.UUID(int=0))
    assert only_voter.error_code is ErrorCode.voter_not_found
    assert first.driver.node.voters == frozenset({1})

    async def add() -> Any:
        answer = await ask_controller(port1, ADD_RAFT_VOTER, 1, **_add(2, port2, directory))
        return answer if answer.error_code is ErrorCode.none else None

    await eventually_async(add, timeout=30, interval=0.2, what="controller 2 added once it caught up")
    assert first.driver.node.voters == frozenset({1, 2}) == second.driver.node.voters
    assert first.voters == {1: ("127.0.0.1", port1), 2: ("127.0.0.1", port2)} == second.voters
    other_directory = await ask_controller(port1, REMOVE_RAFT_VOTER, 0, cluster_id=None, voter_id=2,
                                           voter_directory_id=uuid.uuid4())
    assert other_directory.error_code is ErrorCode.voter_not_found

    removed = await ask_controller(port1, REMOVE_RAFT_VOTER, 0, cluster_id=None, voter_id=1,
                                   voter_directory_id=uuid.UUID(int=0))
    assert removed.error_code is ErrorCode.none
    new_leader = await active_voter([second])
    assert new_leader is second and second.driver.node.voters == frozenset({2})
    await second.controller.stream_metadata.put_kv("after", b"2 alone")
    assert await second.controller.stream_metadata.get_kv("after") == b"2 alone"
