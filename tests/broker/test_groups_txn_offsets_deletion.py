"""Deleting offsets that an open transaction commits (OffsetDelete, DeleteGroups): an offset tombstone drops the
pending transactional offsets of its partition too, as Kafka's ``OffsetMetadataManager`` does, so the live state,
a full replay of ``__consumer_offsets`` and a replay after the cleaner dropped the transactional records below the
tombstones all agree.

Real node, partitions and transaction coordinator, as in :mod:`tests.broker.test_groups_txn_offsets`.
"""

from __future__ import annotations

from pathlib import Path

from kio.schema.errors import ErrorCode

from broker.groups.coordinator import GroupCoordinator
from broker.groups.offset_commits import OffsetCommit
from broker.groups.offsets_topic import OFFSETS_TOPIC
from broker.partition.cleaner import clean_partition
from metadata.controller_api import NewTopic
from node.process import Node
from tests.broker.inprocess_groups import start_node
from tests.broker.test_groups_txn_offsets import (
    GROUP,
    TOPIC,
    _begin,
    _broker,
    _commit_in_txn,
    _end,
    _fetched,
    _ready,
    _txn_commit,
    node_dir,
)

__all__ = ["node_dir"]  # the fixture, used by name


async def _plain_commit(groups: GroupCoordinator, offset: int, group: str = GROUP) -> None:
    committed = await groups.commit_offsets(
        group,
        member_id="",
        group_instance_id=None,
        generation_id=-1,
        offsets={(TOPIC, 0): OffsetCommit(offset=offset, leader_epoch=-1, metadata="")},
    )
    assert committed == {(TOPIC, 0): ErrorCode.none}


async def _compact_offsets_partition(node: Node, groups: GroupCoordinator) -> None:
    """Two commits of another group on the same partition, so the marker is not the newest batch, then one round
    of the cleaner."""
    here = groups.partition_for(GROUP)
    other = next(g for g in (f"other-{i}" for i in range(1000)) if groups.partition_for(g) == here)
    await _plain_commit(groups, 1, group=other)
    await _plain_commit(groups, 2, group=other)
    log = _broker(node).partitions.get(OFFSETS_TOPIC, groups.partition_for(GROUP))
    assert log is not None
    await clean_partition(log, dedupe_buffer_bytes=1 << 20)


async def test_offset_delete_drops_what_an_open_transaction_commits_live_and_after_replay_and_compaction(
    node_dir: Path,
) -> None:
    node = await start_node(node_dir)
    try:
        await _broker(node).controller.create_topics([NewTopic(TOPIC, 1, 1)], validate_only=False)
        groups = await _ready(node)
        await _plain_commit(groups, 5)
        txn = await _begin(node, "app-delete")
        await _commit_in_txn(groups, txn, 10)
        assert await groups.delete_offsets(GROUP, [(TOPIC, 0)]) == (ErrorCode.none, {(TOPIC, 0): ErrorCode.none})
        assert _fetched(groups, require_stable=True) == (-1, ErrorCode.none)
        await _end(node, txn, commit=True)
        assert _fetched(groups, require_stable=True) == (-1, ErrorCode.none)
    finally:
        await node.stop()

    node = await start_node(node_dir)  # a full replay
    try:
        groups = await _ready(node)
        assert _fetched(groups, require_stable=True) == (-1, ErrorCode.none)
        await _compact_offsets_partition(node, groups)
    finally:
        await node.stop()

    node = await start_node(node_dir)  # a replay of the compacted partition
    try:
        groups = await _ready(node)
        assert _fetched(groups, require_stable=True) == (-1, ErrorCode.none)
    finally:
        await node.stop()


async def test_a_group_deleted_while_a_transaction_commits_its_offsets_stays_deleted_after_a_reload(
    node_dir: Path,
) -> None:
    """DeleteGroups tombstones the offsets open transactions commit too (Kafka's deleteAllOffsets): their COMMIT
    marker commits nothing, live or when the partition is replayed."""
    node = await start_node(node_dir)
    try:
        await _broker(node).controller.create_topics([NewTopic(TOPIC, 2, 1)], validate_only=False)
        groups = await _ready(node)
        await _plain_commit(groups, 5)
        txn = await _begin(node, "app-deleted-group")
        await _commit_in_txn(groups, txn, 10)
        assert await _txn_commit(groups, txn, {(TOPIC, 1): 7}) == {(TOPIC, 1): ErrorCode.none}  # only pending
        assert await groups.delete_groups([GROUP]) == {GROUP: ErrorCode.none}
        await _end(node, txn, commit=True)
        assert _fetched(groups, require_stable=True) == (-1, ErrorCode.none)
        assert groups.describe_group(GROUP) == (ErrorCode.none, None)  # unknown: Dead to a client
    finally:
        await node.stop()

    node = await start_node(node_dir)
    try:
        groups = await _ready(node)
        error, fetched = groups.fetch_offsets(GROUP, [(TOPIC, 0), (TOPIC, 1)], require_stable=True)
        assert error is ErrorCode.none
        assert [(f.offset, f.error) for f in fetched] == [(-1, ErrorCode.none), (-1, ErrorCode.none)]
        assert groups.describe_group(GROUP) == (ErrorCode.none, None)  # unknown: Dead to a client
    finally:
        await node.stop()
