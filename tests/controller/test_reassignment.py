"""Partition reassignment at the controller (DESIGN §9): validation and error codes, no leader while the source
closes, the target elected when the source's meta stream is closed or when the election timer fires, cancel."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from controller.controller import Controller
from metadata.controller_api import NewTopic, PartitionReassignment
from metadata.image import PartitionImage, partitions_being_reassigned
from metadata.kv_keys import partition_kv_key
from metadata.move_leader import client_leader, next_leader
from settings.endpoint import Endpoint
from settings.server import ServerConfig
from storage.metadata.api import NodeIdentity
from storage.namespace import namespace_for
from testkit.waiting import eventually_async

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[Controller]:
    config = ServerConfig.load(None, [f"log.dirs={tmp_path}", "num.partitions=1",
                                      "partition.reassignment.election.timeout.ms=600"])
    controller = await Controller.start(config)
    client = controller
    for node in (0, 1, 2):
        await client.register_broker(node, EP, None)
    [created] = await client.create_topics([NewTopic("orders", -1, -1, {0: [0]})], validate_only=False)
    assert created.error is ErrorCode.none
    yield controller
    await controller.close()


def _partition(controller: Controller) -> PartitionImage:
    found = controller.image.partition("orders", 0)
    assert found is not None
    return found


async def _open_meta_stream(controller: Controller, node: int) -> tuple[NodeIdentity, int, int]:
    """What the broker leading orders-0 did when it opened it: a meta stream under the partition's KV key."""
    image = controller.image
    partition = _partition(controller)
    identity = NodeIdentity(node, image.brokers[node].epoch)
    streams = controller.stream_metadata
    stream_id = await streams.create_stream(identity)
    await streams.open_stream(identity, stream_id, partition.leader_epoch)
    key = partition_kv_key(namespace_for(image.cluster_id), partition.topic_id, 0)
    await streams.put_kv(key, struct.pack(">q", stream_id))
    return identity, stream_id, partition.leader_epoch


async def _wait_leader(controller: Controller, leader: int, timeout: float) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    await eventually_async(lambda: _partition(controller).leader, until=lambda got: got == leader, timeout=timeout,
                           interval=0.02, what=f"broker {leader} to lead the partition")
    return loop.time() - start


async def test_invalid_requests_get_kafkas_error_codes(controller: Controller) -> None:
    results = await controller.alter_partition_reassignments([
        PartitionReassignment("orders", 0, (1, 2)),
        PartitionReassignment("nope", 0, (1,)),
        PartitionReassignment("orders", 7, (1,)),
    ])
    assert [r.error for r in results] == [ErrorCode.invalid_replica_assignment, ErrorCode.unknown_topic_or_partition,
                                          ErrorCode.unknown_topic_or_partition]
    assert results[0].message is not None and "one replica" in results[0].message
    assert "object storage" in results[0].message
    [unknown] = await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, (9,))])
    assert unknown.error is ErrorCode.invalid_replica_assignment and "broker 9" in (unknown.message or "")
    await controller.fence_broker(2, controller.image.brokers[2].epoch)
    [fenced] = await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, (2,))])
    assert fenced.error is ErrorCode.invalid_replica_assignment and "fenced" in (fenced.message or "")
    [cancel] = await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, None)])
    assert cancel.error is ErrorCode.no_reassignment_in_progress
    assert _partition(controller).leader == 0 and not partitions_being_reassigned(controller.image)


async def test_target_is_elected_once_the_source_closed_its_streams(controller: Controller) -> None:
    source, meta_id, epoch = await _open_meta_stream(controller, 0)
    [result] = await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, (1,))])
    assert result.error is ErrorCode.none
    moving = _partition(controller)
    assert (moving.leader, moving.replicas, moving.removing_replicas) == (-1, (1,), (0,))
    assert moving.leader_epoch == epoch + 1
    # What the brokers name to clients while the source closes (KIP-951 hints): the election's own choice.
    assert next_leader(controller.image, moving) == (1, epoch + 2)
    assert [name for name, _ in partitions_being_reassigned(controller.image)] == ["orders"]
    [elect] = await controller.elect_leaders([("orders", 0)])
    assert elect.error is ErrorCode.reassignment_in_progress
    await asyncio.sleep(0.2)  # time to elect the target, which must not happen while the source holds its streams
    assert _partition(controller).leader == -1  # the source still has its streams open
    await controller.stream_metadata.close_stream(source, meta_id, epoch)
    waited = await _wait_leader(controller, 1, timeout=5)
    assert waited < 0.5  # well before the 0.6 s election timer
    done = _partition(controller)
    assert (done.replicas, done.isr, done.removing_replicas, done.leader_epoch) == ((1,), (1,), (), epoch + 2)
    assert not partitions_being_reassigned(controller.image)
    assert next_leader(controller.image, done) is None


async def test_a_move_whose_target_may_not_lead_names_no_leader_ahead(controller: Controller) -> None:
    """The election then picks the least loaded live broker, which only the controller knows when it elects: the
    brokers name nobody ahead rather than a broker the election may not pick. Clients were told the target at the
    election's epoch before it was fenced, so "no leader" keeps that epoch and the broker elected instead gets the
    one after it: no epoch is named for two brokers, and none goes backwards."""
    source, meta_id, epoch = await _open_meta_stream(controller, 0)
    await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, (1,))])
    assert client_leader(controller.image, _partition(controller)) == (1, epoch + 2)
    await controller.fence_broker(1, controller.image.brokers[1].epoch)
    assert next_leader(controller.image, _partition(controller)) is None
    assert client_leader(controller.image, _partition(controller)) == (-1, epoch + 2)
    await controller.stream_metadata.close_stream(source, meta_id, epoch)
    await eventually_async(lambda: _partition(controller).leader, until=lambda got: got in (0, 2), timeout=5,
                           interval=0.02, what="a live broker to lead the partition")
    assert _partition(controller).leader_epoch == epoch + 3


async def test_a_source_that_never_closes_loses_the_partition_when_the_timer_fires(controller: Controller) -> None:
    await _open_meta_stream(controller, 0)
    await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, (2,))])
    waited = await _wait_leader(controller, 2, timeout=5)
    assert waited >= 0.5
    assert not partitions_being_reassigned(controller.image)


async def test_cancel_gives_the_partition_back_to_its_source(controller: Controller) -> None:
    await _open_meta_stream(controller, 0)
    await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, (1,))])
    named = client_leader(controller.image, _partition(controller))
    assert named[0] == 1  # clients are sent to the target while the source closes
    [cancel] = await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, None)])
    assert cancel.error is ErrorCode.none
    after = _partition(controller)
    assert (after.leader, after.replicas, after.removing_replicas) == (0, (0,), ())
    # Past the epoch the target was named at: a client told of the source now takes it as newer (KIP-951 hints
    # are applied only when their epoch is), and no epoch ever meant two leaders.
    assert after.leader_epoch == named[1] + 1
    await asyncio.sleep(0.8)  # the timer of the cancelled move elects nobody
    assert _partition(controller).leader == 0


async def test_cancel_of_a_move_whose_source_may_not_lead_gives_the_partition_to_the_least_loaded_broker(
    controller: Controller,
) -> None:
    await _open_meta_stream(controller, 0)
    await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, (1,))])
    moving = _partition(controller)
    # The source dies mid-move: giving the partition back to it would leave it leaderless for good.
    await controller.fence_broker(0, controller.image.brokers[0].epoch, session_expired=True)
    [cancel] = await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, None)])
    assert cancel.error is ErrorCode.none
    after = _partition(controller)
    # Brokers 1 and 2 lead nothing: the lower id, which is also the target clients were named, one epoch up.
    assert (after.leader, after.replicas, after.isr, after.removing_replicas) == (1, (1,), (1,), ())
    assert after.leader_epoch == moving.leader_epoch + 1
    await asyncio.sleep(0.8)  # the timer of the cancelled move elects nobody else
    assert _partition(controller).leader == 1

    # A source in controlled shutdown may not lead either: the cancel leaves it to broker 2, leading the fewest.
    await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, (2,))])
    assert await controller.controlled_shutdown(1, controller.image.brokers[1].epoch) == 1
    [cancel] = await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, None)])
    assert cancel.error is ErrorCode.none
    assert (_partition(controller).leader, _partition(controller).replicas) == (2, (2,))


async def test_a_pending_reassignment_survives_a_restart(tmp_path: Path, controller: Controller) -> None:
    await _open_meta_stream(controller, 0)
    await controller.alter_partition_reassignments([PartitionReassignment("orders", 0, (1,))])
    await controller.close()
    reopened = await Controller.start(controller.config)
    try:
        moving = reopened.image.partition("orders", 0)
        assert moving is not None and moving.removing_replicas == (0,) and moving.leader == -1
        await reopened.take_snapshot()
        assert any(getattr(r, "removing_replicas", ()) == (0,) for r in reopened.snapshot_records())
    finally:
        await reopened.close()
