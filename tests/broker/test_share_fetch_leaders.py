"""Where a share partition's leader is, as ShareFetch answers it (KIP-951's ``CurrentLeader`` and
``NodeEndpoints``): a partition led by another broker, and one being moved, named at its target and the epoch its
election will give it, as Metadata and the Produce and Fetch refusals name it. Served in process over the real share
partitions of ``test_share_handlers.py``."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.handlers.context import ConnectionState
from metadata.cluster_records import PartitionChangeRecord, RegisterBrokerRecord
from settings.endpoint import Endpoint
from tests.broker.test_share_handlers import IMAGE, TOPIC, UNKNOWN, Storage, fetch, parts, storage

__all__ = ["storage"]  # the fixture the tests take


async def test_fetch_errors_per_partition_and_where_the_leader_went(storage: Storage) -> None:
    node, conn = storage.node(), ConnectionState()
    response = await fetch(node, conn, 0, {TOPIC: {0: [], 2: [], 9: []}, UNKNOWN: {0: []}})
    assert response.error_code == ErrorCode.none
    got = parts(response)
    assert got[TOPIC, 0].error_code == ErrorCode.none
    assert got[TOPIC, 9].error_code == ErrorCode.unknown_topic_or_partition
    assert got[UNKNOWN, 0].error_code == ErrorCode.unknown_topic_id
    moved = got[TOPIC, 2]
    assert moved.error_code == ErrorCode.not_leader_or_follower
    assert (moved.current_leader.leader_id, moved.current_leader.leader_epoch) == (1, 3)
    assert [(n.node_id, n.host, n.port, n.rack) for n in response.node_endpoints] == [(1, "127.0.0.2", 9093, "r2")]


async def test_a_partition_being_moved_is_answered_with_its_target_as_metadata_names_it(storage: Storage) -> None:
    """Between a move's source letting go and its target's election, the refusal's hint is the target at its coming
    epoch (``metadata.move_leader``), as Metadata and the Produce and Fetch refusals name it, not "no leader"."""
    node, conn = storage.node(), ConnectionState()
    node.broker.controller.image = IMAGE.apply([
        RegisterBrokerRecord(2, 1, (Endpoint("PLAINTEXT", "127.0.0.3", 9094),), fenced=False),
        PartitionChangeRecord(str(TOPIC), 2, leader=-1, replicas=(2,), isr=(), removing_replicas=(1,)),
    ], 6)
    moving = parts(await fetch(node, conn, 0, {TOPIC: {2: []}}))[TOPIC, 2]
    assert moving.error_code == ErrorCode.not_leader_or_follower
    assert (moving.current_leader.leader_id, moving.current_leader.leader_epoch) == (2, 4)
