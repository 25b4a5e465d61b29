"""Controlled shutdown and UnregisterBroker at the controller (``controller.decisions.controlled_shutdown``): a broker
asking to shut down has its partitions moved to the least loaded other brokers and is never given leadership again until
it registers anew; it may stop once they moved; only a stopped broker is unregistered, with Kafka's error codes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from controller.controller import Controller
from controller.decisions import balancing
from metadata.cluster_records import NO_LEADER
from metadata.controller_api import NewTopic, PartitionReassignment
from metadata.errors import ControllerError
from settings.endpoint import Endpoint
from settings.server import ServerConfig

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[Controller]:
    controller = await Controller.start(ServerConfig.load(None, [f"log.dirs={tmp_path}"]))
    yield controller
    await controller.close()


async def _cluster(controller: Controller) -> dict[int, int]:
    epochs = {node: await controller.register_broker(node, EP, None) for node in (1, 2, 3)}
    assignments = {p: [(1, 3, 3, 2, 3)[p]] for p in range(5)}  # broker 3 leads 0..4's partitions 1, 2, 4
    [created] = await controller.create_topics([NewTopic("orders", -1, -1, assignments)], validate_only=False)
    assert created.error is ErrorCode.none
    return epochs


def _leaders(controller: Controller) -> dict[int, int]:
    return {p: part.leader for p, part in controller.image.topics_by_name["orders"].partitions.items()}


async def test_partitions_move_to_the_least_loaded_and_the_broker_may_then_stop(
    controller: Controller, tmp_path: Path
) -> None:
    epochs = await _cluster(controller)
    assert await controller.controlled_shutdown(3, epochs[3]) == 3
    assert controller.image.brokers[3].in_controlled_shutdown
    moving = controller.image.topics_by_name["orders"].partitions
    # Sources closed nothing yet: leaderless, on their way to 2 (leads one) and 1 (leads one), then the lesser.
    assert {p: (m.leader, m.replicas, m.removing_replicas) for p, m in moving.items() if m.reassigning} == {
        1: (NO_LEADER, (1,), (3,)),
        2: (NO_LEADER, (2,), (3,)),
        4: (NO_LEADER, (1,), (3,)),
    }
    # Asked again while the moves wait: nothing new, the same count.
    assert await controller.controlled_shutdown(3, epochs[3]) == 3
    assert await controller.complete_reassignments() == 0  # never-opened partitions have no streams to close
    assert _leaders(controller) == {0: 1, 1: 1, 2: 2, 3: 2, 4: 1}
    assert await controller.controlled_shutdown(3, epochs[3]) == 0

    # Never given leadership again: not a reassignment target, not balanced over, not where new partitions go,
    # not a preferred leader elected, not a fenced leader's heir.
    [refused] = await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, (3,))])
    assert refused.error is ErrorCode.invalid_replica_assignment and "shutting down" in (refused.message or "")
    decision = balancing.plan(controller.image, balancing.Settings(), {1: 999.0, 2: 999.0, 3: 999.0})
    assert all(move.target != 3 for move in decision.moves) and 3 not in decision.leads
    [fresh] = await controller.create_topics([NewTopic("fresh", 4, -1)], validate_only=False)
    assert fresh.error is ErrorCode.none
    assert {p.leader for p in controller.image.topics_by_name["fresh"].partitions.values()} == {1, 2}
    [preferred] = await controller.create_topics([NewTopic("preferred", -1, -1, {0: [3, 2]})], validate_only=False)
    assert preferred.error is ErrorCode.none
    [election] = await controller.elect_leaders([("preferred", 0)])
    assert election.error is ErrorCode.preferred_leader_not_available
    assert controller.image.topics_by_name["preferred"].partitions[0].leader == 2
    assert await controller.fence_broker(2, epochs[2])
    assert set(_leaders(controller).values()) == {1}

    # Durable: a restarted controller (log replay, then a snapshot) still knows; a new registration clears it.
    await controller.take_snapshot()
    await controller.close()
    restarted = await Controller.start(ServerConfig.load(None, [f"log.dirs={tmp_path}"]))
    try:
        assert restarted.image.brokers[3].in_controlled_shutdown
        await restarted.register_broker(3, EP, None)
        assert not restarted.image.brokers[3].in_controlled_shutdown
    finally:
        await restarted.close()


async def test_an_excluded_broker_takes_partitions_only_when_no_other_is_left(tmp_path: Path) -> None:
    """A drained broker (in ``autobalancer.controller.exclude.broker.ids``) leads nothing, so "the fewest" would
    pick it first; a heartbeat of a superseded registration changes nothing."""
    config = ServerConfig.load(None, [f"log.dirs={tmp_path}", "autobalancer.controller.exclude.broker.ids=2"])
    controller = await Controller.start(config)
    try:
        epochs = await _cluster(controller)
        assert await controller.controlled_shutdown(3, epochs[3] + 1) == 0  # stale epoch: no controlled shutdown
        assert not controller.image.brokers[3].in_controlled_shutdown
        assert await controller.controlled_shutdown(3, epochs[3]) == 3
        moving = controller.image.topics_by_name["orders"].partitions.values()
        assert {m.replicas for m in moving if m.reassigning} == {(1,)}
        assert await controller.complete_reassignments() == 0
        assert await controller.controlled_shutdown(1, epochs[1]) == 4  # only broker 2 is left: it takes them
        moving = controller.image.topics_by_name["orders"].partitions.values()
        assert {m.replicas for m in moving if m.reassigning} == {(2,)}
    finally:
        await controller.close()


async def test_the_last_broker_may_stop_at_once(controller: Controller) -> None:
    epoch = await controller.register_broker(1, EP, None)
    await controller.create_topics([NewTopic("solo", 2, -1)], validate_only=False)
    assert await controller.controlled_shutdown(1, epoch) == 0  # nobody to hand its partitions to
    assert {p.leader for p in controller.image.topics_by_name["solo"].partitions.values()} == {1}


async def test_unregister_only_a_stopped_broker(controller: Controller) -> None:
    epochs = await _cluster(controller)
    with pytest.raises(ControllerError) as unknown:
        await controller.unregister_broker(7)
    assert unknown.value.error is ErrorCode.broker_id_not_registered
    with pytest.raises(ControllerError) as live:
        await controller.unregister_broker(3)
    assert live.value.error is ErrorCode.invalid_request and "stop it first" in live.value.message
    assert await controller.fence_broker(3, epochs[3])
    await controller.unregister_broker(3)
    assert sorted(controller.image.brokers) == [1, 2]
    assert 3 not in _leaders(controller).values()
