"""UpdateRaftVoter (KIP-853), controllers in this process over real TCP on 127.0.0.1: a voter restarted on another
CONTROLLER port announces it and the quorum's log names it there (the leader then counts on it again), and the
request's refusals carry Kafka's codes and name the leader, changing nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from controller.quorum import QuorumController
from metadata.remote.quorum_admin import QuorumClient
from metadata.rpc.kafka_apis import UPDATE_RAFT_VOTER
from testkit.waiting import eventually_async
from tests.controller.test_auto_join import _Quorum, _voters, quorum
from tests.quorum_fixtures import active_voter, ask_controller
from wire import codec, schema
from wire.ports import free_ports

__all__ = ["quorum"]
pytestmark = pytest.mark.timeout(120)

AUTO_JOIN = "controller.quorum.auto.join.enable=true"


def _endpoint(controller: QuorumController, node_id: int) -> tuple[str, int] | None:
    voter = controller.membership.voter_set.get(node_id)
    return (voter.endpoints[0].host, voter.endpoints[0].port) if voter is not None and voter.endpoints else None


def _update(node_id: int, directory: uuid.UUID | None, port: int, *, epoch: int = -1, listener: str = "CONTROLLER",
            kraft: tuple[int, int] = (0, 1)) -> dict[str, Any]:
    cls = codec.request_class(UPDATE_RAFT_VOTER, 0)
    return {
        "cluster_id": None, "current_leader_epoch": epoch, "voter_id": node_id,
        "voter_directory_id": directory or uuid.UUID(int=0),
        "listeners": (schema.build_nested(cls, "listeners", name=listener, host="127.0.0.1", port=port),),
        "k_raft_version_feature": schema.build_nested(cls, "k_raft_version_feature", min_supported_version=kraft[0],
                                                      max_supported_version=kraft[1]),
    }


async def test_a_voter_restarted_on_another_port_announces_it(quorum: _Quorum) -> None:
    first = await active_voter([quorum.running[1]])
    quorum.format(2, no_initial_controllers=True)
    await quorum.start(2, AUTO_JOIN)
    old_port = quorum.ports[1]

    async def at(port: int) -> bool:
        return _endpoint(first, 2) == ("127.0.0.1", port)

    await eventually_async(lambda: at(old_port), timeout=60, interval=0.1, what="controller 2 to join")
    await quorum.stop(2)
    quorum.ports[1] = free_ports(1)[0]
    second = await quorum.start(2)  # no auto-join: a voter announces a moved listener whatever that key says
    await eventually_async(lambda: at(quorum.ports[1]), timeout=60, interval=0.1,
                           what="the leader's voter set to name controller 2's new port")
    await eventually_async(lambda: _at_in(second, quorum.ports[1]), timeout=30, interval=0.1,
                           what="controller 2's own log to name its new port")
    assert set(_voters(first)) == {1, 2}
    # Two voters: a commit needs controller 2, now reached where it listens.
    await first.controller.stream_metadata.put_kv("moved", b"2 on its new port")
    applied = await eventually_async(lambda: second.controller.stream_metadata.get_kv("moved"), timeout=30,
                                     interval=0.05, what="controller 2 to apply the write")
    assert applied == b"2 on its new port"


async def _at_in(controller: QuorumController, port: int) -> bool:
    return _endpoint(controller, 2) == ("127.0.0.1", port)


async def test_refusals_carry_kafkas_codes_and_name_the_leader(quorum: _Quorum) -> None:
    first = await active_voter([quorum.running[1]])
    directory = quorum.format(2, no_initial_controllers=True)
    await quorum.start(2, AUTO_JOIN)
    await eventually_async(lambda: _two(first), timeout=60, interval=0.1, what="controller 2 to join")
    port1, port2 = quorum.ports
    before = first.membership.voter_set
    epoch = first.driver.epoch

    async def refused(port: int, fields: dict[str, Any]) -> Any:
        answer = await ask_controller(port, UPDATE_RAFT_VOTER, 0, **fields)
        assert answer.current_leader.leader_id == 1 and answer.current_leader.leader_epoch == epoch, answer
        assert (answer.current_leader.host, answer.current_leader.port) == ("127.0.0.1", port1), answer
        return answer.error_code

    assert await refused(port2, _update(2, directory, port2)) is ErrorCode.not_leader_or_follower
    assert await refused(port1, _update(7, None, port2)) is ErrorCode.voter_not_found
    assert await refused(port1, _update(2, uuid.uuid4(), port2)) is ErrorCode.voter_not_found
    assert await refused(port1, _update(2, directory, port2, epoch=epoch - 1)) is ErrorCode.fenced_leader_epoch
    assert await refused(port1, _update(2, directory, port2, epoch=epoch + 1)) is ErrorCode.unknown_leader_epoch
    assert await refused(port1, _update(2, directory, port2, listener="OTHER")) is ErrorCode.invalid_request
    assert await refused(port1, _update(2, directory, port2, kraft=(0, 0))) is ErrorCode.invalid_request
    assert await refused(port1, _update(2, directory, 0)) is ErrorCode.invalid_request
    assert first.membership.voter_set == before
    # The endpoint it has already: accepted, and nothing appended.
    assert await refused(port1, _update(2, directory, port2, epoch=epoch)) is ErrorCode.none
    assert first.membership.voter_set == before


async def _two(controller: QuorumController) -> bool:
    return set(_voters(controller)) == {1, 2}


async def test_a_static_quorum_refuses_it(voters: list[QuorumController]) -> None:
    leader = await active_voter(voters)
    answer = await ask_controller(leader.config.listeners[0].port, UPDATE_RAFT_VOTER, 0, **_update(0, None, 1))
    assert answer.error_code is ErrorCode.unsupported_version


async def test_a_lone_voter_restarted_on_another_port_updates_itself(quorum: _Quorum) -> None:
    """The leader's old endpoint would not answer its own UpdateRaftVoter: it makes the change itself, and
    DescribeQuorum (what brokers and fjord metadata-quorum find the quorum with) names the new port."""
    await active_voter([quorum.running[1]])
    await quorum.stop(1)
    quorum.ports[0] = free_ports(1)[0]
    moved = await quorum.start(1)
    await active_voter([moved])
    await eventually_async(lambda: _at(moved, 1, quorum.ports[0]), timeout=30, interval=0.1,
                           what="controller 1's voter set to name its new port")
    status = await QuorumClient((("127.0.0.1", quorum.ports[0]),)).status()
    assert status.endpoints == {1: ("127.0.0.1", quorum.ports[0])}


async def _at(controller: QuorumController, node_id: int, port: int) -> bool:
    return _endpoint(controller, node_id) == ("127.0.0.1", port)
