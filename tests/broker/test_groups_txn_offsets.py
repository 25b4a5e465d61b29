"""Offsets committed in a transaction (TxnOffsetCommit): pending until the marker, then committed or dropped,
and the same after the coordinator reloads ``__consumer_offsets`` from the log.

The node runs in the test's event loop so the test can call the group coordinator and write markers through the
same function the transaction coordinator and WriteTxnMarkers use; the partition, WAL and object store are real.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker.broker import Broker
from broker.groups.consumer.group import HeartbeatRequest
from broker.groups.coordinator import GroupCoordinator
from broker.groups.offset_commits import OffsetCommit
from broker.groups.offsets_schema import OffsetValue
from broker.groups.offsets_topic import OFFSETS_TOPIC
from broker.groups.txn_offsets import AppendedOffset, PendingTxnOffsets, newer
from metadata.controller_api import NewTopic
from node.process import Node
from testkit.waiting import eventually_async
from tests.broker.inprocess_groups import DAY_S, start_node
from wire.control_records import ControlRecordError, decode_marker, encode_marker_key, encode_marker_value

GROUP = "txn-group"
TOPIC = "input"


def _value(offset: int) -> OffsetValue:
    return OffsetValue(offset=offset, metadata="", commit_timestamp_ms=0, leader_epoch=-1, expire_timestamp_ms=None)


def test_pending_offsets_apply_on_commit_and_vanish_on_abort() -> None:
    pending = PendingTxnOffsets()
    pending.add(7, ("t", 0), AppendedOffset(_value(10), 100))
    pending.add(7, ("t", 0), AppendedOffset(_value(12), 105))
    pending.add(8, ("t", 1), AppendedOffset(_value(3), 106))
    assert pending.is_pending(("t", 0)) and pending.is_pending(("t", 1))
    assert pending.complete(8, commit=False) == {}
    assert not pending.is_pending(("t", 1))
    applied = pending.complete(7, commit=True)
    assert applied == {("t", 0): AppendedOffset(_value(12), 105)}
    assert not pending


def test_the_record_later_in_the_log_wins() -> None:
    candidate = AppendedOffset(_value(5), 50)
    assert newer(None, candidate)
    assert newer(49, candidate)
    # An ordinary OffsetCommit written after the transactional one is not overwritten by the later COMMIT.
    assert not newer(51, candidate)


def test_transaction_markers_round_trip_and_reject_truncated_records() -> None:
    commit = decode_marker(encode_marker_key(True), encode_marker_value(4))
    abort = decode_marker(encode_marker_key(False), encode_marker_value(9))
    assert commit is not None and commit.commit and commit.coordinator_epoch == 4
    assert abort is not None and not abort.commit and abort.coordinator_epoch == 9
    with pytest.raises(ControlRecordError):
        decode_marker(b"\x00", encode_marker_value(1))
    with pytest.raises(ControlRecordError):
        decode_marker(encode_marker_key(True), b"\x00\x00")


@pytest.fixture
async def node_dir(tmp_path: Path) -> AsyncIterator[Path]:
    yield tmp_path / "node"


def _broker(node: Node) -> Broker:
    assert node.broker is not None
    return node.broker


def _groups(node: Node) -> GroupCoordinator:
    return _broker(node).groups


async def _ready(node: Node) -> GroupCoordinator:
    groups = _groups(node)

    async def serving() -> bool:
        error, _, _ = await groups.find_coordinator(GROUP)
        return error is ErrorCode.none and groups.coordinator_error(GROUP) is ErrorCode.none

    await eventually_async(serving, timeout=30, what=f"the coordinator of {GROUP} to load")
    return groups


@dataclass(frozen=True)
class _Txn:
    """A producer's transaction holding the group's ``__consumer_offsets`` partition."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


async def _init(node: Node, transactional_id: str) -> tuple[int, int]:
    """InitProducerId of ``transactional_id`` at its (real) transaction coordinator, once that serves it."""
    txns = _broker(node).transactions

    async def serving() -> bool:
        error, _, _ = await txns.find_coordinator(transactional_id)
        return error is ErrorCode.none and txns.coordinator_error(transactional_id) is ErrorCode.none

    await eventually_async(serving, timeout=30, what=f"the coordinator of {transactional_id} to load")
    error, producer_id, epoch = await txns.init_producer_id(transactional_id, 60_000, None)
    assert error is ErrorCode.none
    return producer_id, epoch


async def _begin(node: Node, transactional_id: str) -> _Txn:
    """What ``send_offsets_to_transaction`` starts with: InitProducerId, then AddOffsetsToTxn for the group."""
    producer_id, epoch = await _init(node, transactional_id)
    txns = _broker(node).transactions
    assert await txns.add_offsets(transactional_id, producer_id, epoch, GROUP) is ErrorCode.none
    return _Txn(transactional_id, producer_id, epoch)


async def _txn_commit(
    groups: GroupCoordinator, txn: _Txn, offsets: dict[tuple[str, int], int], *, api_version: int = 3
) -> dict[tuple[str, int], ErrorCode]:
    """A TxnOffsetCommit (v3 unless told: a transactions v1 client) naming no member."""
    return await groups.commit_transactional_offsets(
        GROUP,
        transactional_id=txn.transactional_id,
        producer_id=txn.producer_id,
        producer_epoch=txn.producer_epoch,
        member_id="",
        group_instance_id=None,
        generation_id=-1,
        offsets={tp: OffsetCommit(offset=o, leader_epoch=-1, metadata="in txn") for tp, o in offsets.items()},
        api_version=api_version,
    )


async def _commit_in_txn(groups: GroupCoordinator, txn: _Txn, offset: int) -> None:
    assert await _txn_commit(groups, txn, {(TOPIC, 0): offset}) == {(TOPIC, 0): ErrorCode.none}


async def _end(node: Node, txn: _Txn, *, commit: bool) -> None:
    """EndTxn at the transaction coordinator, and its marker written on the group's offsets partition."""
    error, _, _ = await _broker(node).transactions.end_txn(
        txn.transactional_id, txn.producer_id, txn.producer_epoch, commit
    )
    assert error is ErrorCode.none
    groups = _groups(node)
    log = _broker(node).partitions.get(OFFSETS_TOPIC, groups.partition_for(GROUP))
    assert log is not None

    async def ended() -> bool:
        return not log.has_ongoing_txn(txn.producer_id)

    await eventually_async(ended, timeout=30, what=f"the marker of {txn.transactional_id}")


def _fetched(groups: GroupCoordinator, *, require_stable: bool) -> tuple[int, ErrorCode]:
    error, [fetched] = groups.fetch_offsets(GROUP, [(TOPIC, 0)], require_stable=require_stable)
    assert error is ErrorCode.none
    return fetched.offset, fetched.error


async def test_transactional_offsets_are_invisible_until_committed_and_survive_a_restart(node_dir: Path) -> None:
    node = await start_node(node_dir)
    try:
        await _broker(node).controller.create_topics(
            [NewTopic(TOPIC, num_partitions=1, replication_factor=1)], validate_only=False
        )
        groups = await _ready(node)
        committed = await _begin(node, "app-committed")
        await _commit_in_txn(groups, committed, 10)
        # Pending: a stable fetch is told to retry, a plain fetch sees nothing committed yet.
        assert _fetched(groups, require_stable=True) == (-1, ErrorCode.unstable_offset_commit)
        assert _fetched(groups, require_stable=False) == (-1, ErrorCode.none)
        await _end(node, committed, commit=True)
        assert _fetched(groups, require_stable=True) == (10, ErrorCode.none)

        aborted = await _begin(node, "app-aborted")
        await _commit_in_txn(groups, aborted, 20)
        await _end(node, aborted, commit=False)
        assert _fetched(groups, require_stable=True) == (10, ErrorCode.none)

        still_open = await _begin(node, "app-open")
        await _commit_in_txn(groups, still_open, 30)
        assert _fetched(groups, require_stable=True) == (-1, ErrorCode.unstable_offset_commit)
    finally:
        await node.stop()

    # Reloaded from the log: the committed offset is back, the aborted one is gone, the open one still pending
    # and committed by a marker that arrives after the restart.
    node = await start_node(node_dir)
    try:
        groups = await _ready(node)
        assert _fetched(groups, require_stable=False) == (10, ErrorCode.none)
        assert _fetched(groups, require_stable=True) == (-1, ErrorCode.unstable_offset_commit)
        await _end(node, still_open, commit=True)
        assert _fetched(groups, require_stable=True) == (30, ErrorCode.none)
    finally:
        await node.stop()


async def test_an_open_transaction_keeps_its_group_and_the_offset_it_commits_from_expiry(node_dir: Path) -> None:
    """Kafka's cleanupExpiredOffsets: a group whose only offsets are pending in an open transaction is not
    deleted (the COMMIT marker would find no group, and the exactly-once position would be lost), and an expired
    offset that an open transaction commits again is not expired."""
    node = await start_node(node_dir)
    try:
        await _broker(node).controller.create_topics(
            [NewTopic(TOPIC, num_partitions=1, replication_factor=1)], validate_only=False
        )
        groups = await _ready(node)
        first = await _begin(node, "app-first")
        await _commit_in_txn(groups, first, 42)
        assert await groups.expire_offsets() == 0
        await _end(node, first, commit=True)
        assert _fetched(groups, require_stable=True) == (42, ErrorCode.none)

        second = await _begin(node, "app-second")
        await _commit_in_txn(groups, second, 50)
        real = groups.clock
        groups.clock = lambda: real() + 8 * DAY_S
        try:
            assert await groups.expire_offsets() == 0  # 42 is old enough, but the transaction commits it again
        finally:
            groups.clock = real
        assert _fetched(groups, require_stable=False) == (42, ErrorCode.none)
        await _end(node, second, commit=True)
        assert _fetched(groups, require_stable=True) == (50, ErrorCode.none)
    finally:
        await node.stop()


async def test_a_kip848_member_with_an_old_epoch_is_told_illegal_generation(node_dir: Path) -> None:
    """Kafka's validateTransactionalOffsetCommit answers a stale member epoch ILLEGAL_GENERATION: the producer
    treats it as abortable (it aborts and rewinds), where STALE_MEMBER_EPOCH would be fatal to it."""
    node = await start_node(node_dir)
    try:
        await _broker(node).controller.create_topics(
            [NewTopic(TOPIC, num_partitions=1, replication_factor=1)], validate_only=False
        )
        groups = await _ready(node)
        member = str(uuid.uuid4())
        joined = await groups.consumer_group_heartbeat(
            GROUP,
            HeartbeatRequest(
                member_id=member, member_epoch=0, rebalance_timeout_ms=10_000, subscribed_topic_names=(TOPIC,)
            ),
        )
        assert joined.error is ErrorCode.none and joined.member_epoch >= 1
        txn = await _begin(node, "app-1")
        result = await groups.commit_transactional_offsets(
            GROUP,
            transactional_id=txn.transactional_id,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            member_id=member,
            group_instance_id=None,
            generation_id=joined.member_epoch - 1,
            offsets={(TOPIC, 0): OffsetCommit(offset=5, leader_epoch=-1, metadata=None)},
            api_version=3,
        )
        assert result == {(TOPIC, 0): ErrorCode.illegal_generation}

        async def anonymous(generation_id: int, group_instance_id: str | None = None) -> ErrorCode:
            """A TxnOffsetCommit naming no member: only epoch -1 with no member and no instance id skips the
            member checks of a group with members, as Kafka's validateOffsetCommit."""
            answered = await groups.commit_transactional_offsets(
                GROUP,
                transactional_id=txn.transactional_id,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                member_id="",
                group_instance_id=group_instance_id,
                generation_id=generation_id,
                offsets={(TOPIC, 0): OffsetCommit(offset=5, leader_epoch=-1, metadata=None)},
                api_version=3,
            )
            return answered[(TOPIC, 0)]

        assert await anonymous(-1) is ErrorCode.none
        assert await anonymous(-2) is ErrorCode.unknown_member_id
        assert await anonymous(-1, "instance-1") is ErrorCode.unknown_member_id
    finally:
        await node.stop()
