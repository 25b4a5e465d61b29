"""Share partitions over the real storage engine (file WAL, local objects under tmp_path, in-process stream
metadata): the share stream is created on first use, written before acknowledgements return, survives a crash
(the engine halted as by SIGKILL, then recovered from its WAL) and a move to a new leader epoch (a reassignment's
close and reopen), is checkpointed and trimmed, and read_committed groups never get aborted records."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.partition.log_config import LogConfig
from broker.partition.partition_log import PartitionLog
from broker.share.partition_state import AckBatch, AcquiredRange
from broker.share.record_states import AcknowledgeType, RecordState
from broker.share.registry import SharePartitions
from broker.share.store import IDLE_SNAPSHOT_LAG, SNAPSHOT_EVERY
from metadata.controller_api import ControllerClient
from settings.share_groups import ShareGroupConfig
from storage.config import BucketURL, StorageConfig
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine
from wire.record_batch import Record, build_batch, decode_records, iter_batches

TOPIC_ID = uuid.UUID(int=932)
GROUP = "queue-workers"
ACCEPT, RELEASE, REJECT = int(AcknowledgeType.ACCEPT), int(AcknowledgeType.RELEASE), int(AcknowledgeType.REJECT)


def share_config(**values: Any) -> ShareGroupConfig:
    """A group's settings: Kafka's defaults, with ``values`` instead where given."""
    defaults: dict[str, Any] = dict(
        session_timeout_ms=45_000, heartbeat_interval_ms=5_000, record_lock_duration_ms=30_000,
        delivery_count_limit=5, partition_max_record_locks=2_000, auto_offset_reset="latest", isolation_level=0,
    )
    return ShareGroupConfig(**(defaults | values))


class _Node:
    """One storage engine incarnation at a time over the same disk and metadata; :meth:`crash` is a SIGKILL."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.metadata = StreamMetadataStateMachine()
        self.engine = StorageEngine(self._config(1), self.metadata)

    def _config(self, node_epoch: int) -> StorageConfig:
        return StorageConfig(
            data_buckets=(BucketURL(0, "file", str(self.tmp_path / "objects")),),
            wal_url=BucketURL(0, "file", str(self.tmp_path / "wal")),
            cluster_id="test",
            node_id=1,
            node_epoch=node_epoch,
        )

    async def crash_and_restart(self) -> None:
        await self.engine.halt()
        self.engine = StorageEngine(self._config(self.engine.node.node_epoch + 1), self.metadata)
        await self.engine.start()

    async def open(self, leader_epoch: int) -> PartitionLog:
        return await PartitionLog.open(
            streams=self.engine, kv=self.metadata, namespace="_fjord_test", topic="jobs", partition=0,
            topic_id=TOPIC_ID, leader_epoch=leader_epoch, config=LogConfig(),
        )


class _Led:
    """The partitions 'this broker' leads: the one log the test has open (the partition manager's lookups)."""

    node_id = 1

    def __init__(self) -> None:
        self.log: PartitionLog | None = None

    @property
    def controller(self) -> ControllerClient:
        raise AssertionError("the test's partition is always open")

    def get_by_id(self, topic_id: uuid.UUID, partition: int) -> PartitionLog | None:
        log = self.log
        return log if log is not None and not log.closed and (topic_id, partition) == (TOPIC_ID, 0) else None

    def open_partitions(self) -> list[PartitionLog]:
        return [self.log] if self.log is not None and not self.log.closed else []

    async def wait_open(self, topic: str, partition: int, timeout: float) -> PartitionLog | None:
        return self.log


class _Clock:
    def __init__(self) -> None:
        self.now = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.now


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[_Node]:
    node = _Node(tmp_path)
    await node.engine.start()
    try:
        yield node
    finally:
        await node.engine.shutdown()


def _records(n: int, start: int = 0, ts: int | None = None) -> bytes:
    now = int(time.time() * 1000) if ts is None else ts
    return build_batch([Record(b"k", b"v%d" % (start + i), (), now) for i in range(n)])


def _values(batches: list[memoryview], acquired: list[AcquiredRange]) -> list[bytes]:
    """What a share consumer hands its application: the records inside the acquired ranges."""
    records = b"".join(batches)
    inside = [(r.first_offset, r.last_offset) for r in acquired]
    return [
        rec.value or b""
        for _, batch in iter_batches(records)
        for rec in decode_records(batch)
        if any(a <= rec.offset <= b for a, b in inside)
    ]


def _registry(led: _Led, config: ShareGroupConfig, clock: _Clock | None = None) -> SharePartitions:
    return SharePartitions(led, lambda group: config, clock_ms=clock or _Clock())


async def test_acknowledged_records_never_come_back_after_a_crash(node: _Node) -> None:
    led = _Led()
    led.log = await node.open(0)
    for i in range(5):
        await led.log.append(_records(2, 2 * i))
    assert led.log.share_stream is None  # no share group touched it yet
    shares = _registry(led, share_config(auto_offset_reset="earliest"))
    share = await shares.get(GROUP, TOPIC_ID, 0)
    assert led.log.share_stream is not None
    now = int(time.time() * 1000)
    got = await share.fetch("m1", 1 << 20, 10, now)
    assert got.error == 0 and got.acquired == [AcquiredRange(0, 9, 1)]
    assert _values(got.records, got.acquired) == [b"v%d" % i for i in range(10)]
    code = await share.acknowledge("m1", [AckBatch(0, 3, (ACCEPT,)), AckBatch(4, 4, (REJECT,)),
                                          AckBatch(6, 7, (ACCEPT,))], now)
    assert code == 0
    await node.crash_and_restart()  # no close: the WAL is all there is

    led.log = await node.open(1)
    shares = _registry(led, share_config(auto_offset_reset="earliest"))
    assert await shares.summary(GROUP, TOPIC_ID, 0) == (5, 0, 1, 2)  # 6-7 acknowledged past the start: not lag
    share = await shares.get(GROUP, TOPIC_ID, 0)
    again = await share.fetch("m2", 1 << 20, 100, now)
    # 5, 8 and 9 were acquired, never acknowledged: handed out again. Acquisitions are not written (as in Kafka),
    # so the delivery the crash interrupted is not counted.
    assert again.acquired == [AcquiredRange(5, 5, 1), AcquiredRange(8, 9, 1)]
    assert _values(again.records, again.acquired) == [b"v5", b"v8", b"v9"]
    await led.log.close()


async def test_share_state_moves_with_the_partition_to_a_new_leader_epoch(node: _Node) -> None:
    led = _Led()
    led.log = await node.open(3)
    await led.log.append(_records(4))
    shares = _registry(led, share_config(auto_offset_reset="earliest"))
    share = await shares.get(GROUP, TOPIC_ID, 0)
    got = await share.fetch("m1", 1 << 20, 100, 0)
    assert await share.acknowledge("m1", [AckBatch(0, 1, (ACCEPT,))], 0) == 0
    first = led.log
    await first.close()  # the reassignment's source lets go; the share stream closes before the meta stream
    assert await share.acknowledge("m1", [AckBatch(2, 3, (ACCEPT,))], 0) == ErrorCode.not_leader_or_follower
    shares.forget("jobs", 0)

    led.log = await node.open(4)  # the target opens every stream at the new epoch
    assert led.log.share_stream is not None
    assert await shares.summary(GROUP, TOPIC_ID, 0) == (2, 0, 4, 0)
    moved = await shares.get(GROUP, TOPIC_ID, 0)
    assert moved is not share
    regot = await moved.fetch("m2", 1 << 20, 100, 0)
    assert got.acquired == [AcquiredRange(0, 3, 1)]
    assert regot.acquired == [AcquiredRange(2, 3, 1)]  # unacknowledged: handed out again; 0-1 never
    await led.log.close()


async def test_snapshots_bound_the_share_stream_and_replay_stays_exact(node: _Node) -> None:
    led = _Led()
    led.log = await node.open(0)
    total = 3 * SNAPSHOT_EVERY
    for i in range(total):
        await led.log.append(_records(1, i))
    shares = _registry(led, share_config(auto_offset_reset="earliest", partition_max_record_locks=10_000))
    share = await shares.get(GROUP, TOPIC_ID, 0)
    got = await share.fetch("m1", 1 << 20, total, 0)
    assert got.acquired == [AcquiredRange(0, total - 1, 1)]
    # One acknowledgement per record but the first: one update each, a snapshot every SNAPSHOT_EVERY.
    for offset in range(1, total):
        assert await share.acknowledge("m1", [AckBatch(offset, offset, (ACCEPT,))], 0) == 0
    stream = led.log.share_stream
    assert stream is not None
    assert stream.start_offset > 0, "the stream was never trimmed below a snapshot"
    assert stream.confirm_offset - stream.start_offset <= SNAPSHOT_EVERY + 1
    await node.crash_and_restart()

    led.log = await node.open(1)
    shares = _registry(led, share_config(auto_offset_reset="earliest", partition_max_record_locks=10_000))
    share = await shares.get(GROUP, TOPIC_ID, 0)
    assert share.state.start_offset == 0
    assert share.state.state_of(1) == (RecordState.ACKNOWLEDGED, 1, None)
    again = await share.fetch("m2", 1 << 20, total, 0)
    assert again.acquired == [AcquiredRange(0, 0, 1)]  # its delivery the crash cut short is not counted, as Kafka
    assert await share.acknowledge("m2", [AckBatch(0, 0, (ACCEPT,))], 0) == 0
    assert share.state.start_offset == total
    await led.log.close()


async def test_an_idle_group_does_not_keep_the_share_stream_from_being_trimmed(node: _Node) -> None:
    led = _Led()
    led.log = await node.open(0)
    total = 16 * SNAPSHOT_EVERY
    for i in range(total):
        await led.log.append(_records(1, i))
    shares = _registry(led, share_config(auto_offset_reset="earliest", partition_max_record_locks=10_000))
    idle = await shares.get("idle", TOPIC_ID, 0)
    assert (await idle.fetch("i1", 1 << 20, 1, 0)).acquired == [AcquiredRange(0, 0, 1)]
    assert await idle.acknowledge("i1", [AckBatch(0, 0, (ACCEPT,))], 0) == 0  # then it goes quiet
    busy = await shares.get(GROUP, TOPIC_ID, 0)
    assert (await busy.fetch("m1", 1 << 20, total, 0)).acquired == [AcquiredRange(0, total - 1, 1)]
    for offset in range(1, total):  # one update each
        assert await busy.acknowledge("m1", [AckBatch(offset, offset, (ACCEPT,))], 0) == 0
    stream = led.log.share_stream
    assert stream is not None
    assert stream.confirm_offset - stream.start_offset <= IDLE_SNAPSHOT_LAG + 2 * SNAPSHOT_EVERY < total // 2, (
        "the idle group's first snapshot kept the share stream from being trimmed")
    await node.crash_and_restart()

    led.log = await node.open(1)
    shares = _registry(led, share_config(auto_offset_reset="earliest", partition_max_record_locks=10_000))
    assert await shares.summary("idle", TOPIC_ID, 0) == (1, 0, 1, 0)  # its acknowledgement survived the trims
    again = await (await shares.get("idle", TOPIC_ID, 0)).fetch("i2", 1 << 20, 1, 0)
    assert again.acquired == [AcquiredRange(1, 1, 1)]
    await led.log.close()


@pytest.mark.parametrize(
    ("reset", "start"), [("earliest", 0), ("latest", 6), ("by_duration:PT1H", 4), ("by_duration:soon", 6)]
)
async def test_auto_offset_reset_picks_the_first_offset_once(node: _Node, reset: str, start: int) -> None:
    led = _Led()
    led.log = await node.open(0)
    now = int(time.time() * 1000)
    await led.log.append(_records(4, ts=now - 3 * 3_600_000))  # 0-3: three hours old
    await led.log.append(_records(2, ts=now - 60_000))  # 4-5: a minute old
    clock = _Clock()
    shares = _registry(led, share_config(auto_offset_reset=reset), clock)
    assert await shares.summary(GROUP, TOPIC_ID, 0) is None
    share = await shares.get(GROUP, TOPIC_ID, 0)
    assert share.state.start_offset == start
    await led.log.append(_records(1))  # 6
    await led.log.close()
    led.log = await node.open(1)
    shares = _registry(led, share_config(auto_offset_reset=reset), clock)
    # The start was persisted when the group first touched the partition: "latest" does not move on restart.
    assert await shares.summary(GROUP, TOPIC_ID, 0) == (start, 0, 1, 0)
    await led.log.close()


async def test_read_committed_never_hands_out_aborted_or_control_records(node: _Node) -> None:
    led = _Led()
    led.log = await node.open(0)
    now = int(time.time() * 1000)

    def txn_batch(pid: int, seq: int) -> bytes:
        return build_batch([Record(b"k", b"t%d-%d" % (pid, seq + i), (), now) for i in range(2)],
                           producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)

    await led.log.append(txn_batch(7, 0), transactional_id="app")  # 0-1 aborted
    await led.log.append(txn_batch(8, 0), transactional_id="app")  # 2-3 committed
    await led.log.append(_records(1, 100))  # 4 plain
    assert await led.log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False) == 5
    assert await led.log.write_txn_marker(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=True) == 6
    await led.log.append(txn_batch(9, 0), transactional_id="app")  # 7-8 open: beyond the LSO
    committed = share_config(auto_offset_reset="earliest", isolation_level=1)
    shares = SharePartitions(led, lambda group: committed if group == "rc" else share_config(
        auto_offset_reset="earliest"))
    rc = await shares.get("rc", TOPIC_ID, 0)
    got = await rc.fetch("m", 1 << 20, 100, now)
    assert got.acquired == [AcquiredRange(2, 4, 1)]  # 0-1 aborted and archived, 5-6 markers; 7-8 not stable
    assert _values(got.records, got.acquired) == [b"t8-0", b"t8-1", b"v100"]
    assert rc.state.state_of(0) is None and rc.state.state_of(5) == (RecordState.ARCHIVED, 0, None)
    assert not rc.available()
    assert await led.log.write_txn_marker(producer_id=9, producer_epoch=0, coordinator_epoch=0, commit=True) == 9
    assert rc.available()
    more = await rc.fetch("m", 1 << 20, 100, now)
    assert more.acquired == [AcquiredRange(7, 8, 1)]
    assert rc.state.start_offset == 2
    # read_uncommitted gets the aborted data too, never the markers.
    ru = await shares.get("ru", TOPIC_ID, 0)
    everything = await ru.fetch("m", 1 << 20, 100, now)
    assert everything.acquired == [AcquiredRange(0, 4, 1), AcquiredRange(7, 8, 1)]
    await led.log.close()


async def test_lock_time_out_releases_records_and_wakes_long_polls(node: _Node) -> None:
    led = _Led()
    led.log = await node.open(0)
    await led.log.append(_records(3))
    clock = _Clock()
    shares = _registry(led, share_config(auto_offset_reset="earliest", record_lock_duration_ms=1_000,
                                             delivery_count_limit=2), clock)
    share = await shares.get(GROUP, TOPIC_ID, 0)
    got = await share.fetch("crashed-consumer", 1 << 20, 100, clock.now)
    assert got.acquired == [AcquiredRange(0, 2, 1)] and not share.available()
    woken = shares.wait_for_change()
    assert shares.tick(clock.now + 999) == []
    clock.now += 1_000
    for write in shares.tick():
        assert await write == 0
    await asyncio.wait_for(woken, 1)
    assert share.available()
    assert await share.acknowledge("crashed-consumer", [AckBatch(0, 0, (ACCEPT,))], clock.now) == (
        ErrorCode.invalid_record_state)
    again = await share.fetch("other", 1 << 20, 100, clock.now)
    assert again.acquired == [AcquiredRange(0, 2, 2)]
    clock.now += 1_000
    for write in shares.tick():
        await write
    assert share.state.start_offset == 3  # the second time-out reached the delivery limit: archived
    await led.log.close()


async def test_long_polls_that_end_without_a_change_leave_nothing_behind(node: _Node) -> None:
    """An idle cluster's share consumers long-poll all day: each poll that times out cancels its wait, and the
    registry must not keep those waits until the next change (memory growing with polls)."""
    led = _Led()
    led.log = await node.open(0)
    shares = _registry(led, share_config())
    for _ in range(10_000):
        shares.wait_for_change().cancel()  # what ShareFetch does at MaxWaitMs when nothing changed
    live = [shares.wait_for_change() for _ in range(3)]
    assert len(shares._waiters) <= 1_000, "cancelled long-poll waits pile up until the next change"
    shares._notify()
    assert all(w.done() and not w.cancelled() for w in live)  # the live ones are still woken
    await led.log.close()


async def test_reset_delete_and_group_deletion(node: _Node) -> None:
    led = _Led()
    led.log = await node.open(0)
    await led.log.append(_records(10))
    shares = _registry(led, share_config(auto_offset_reset="earliest"))
    await shares.get(GROUP, TOPIC_ID, 0)
    await shares.get("other", TOPIC_ID, 0)
    assert shares.groups_on(TOPIC_ID, 0) == ["other", GROUP]
    await shares.reset(GROUP, TOPIC_ID, 0, 7)
    assert await shares.summary(GROUP, TOPIC_ID, 0) == (7, 1, 0, 0)
    got = await (await shares.get(GROUP, TOPIC_ID, 0)).fetch("m", 1 << 20, 100, 0)
    assert got.acquired == [AcquiredRange(7, 9, 1)]
    await shares.delete_group_state("other")
    assert await shares.summary("other", TOPIC_ID, 0) is None
    await shares.delete(GROUP, TOPIC_ID, 0)
    assert shares.groups_on(TOPIC_ID, 0) == []
    await led.log.close()
    led.log = await node.open(1)
    shares = _registry(led, share_config(auto_offset_reset="earliest"))
    assert await shares.summary(GROUP, TOPIC_ID, 0) is None and await shares.summary("other", TOPIC_ID, 0) is None
    await led.log.close()


async def test_a_write_that_cannot_be_made_durable_is_an_error_code_not_an_exception(node: _Node) -> None:
    led = _Led()
    led.log = await node.open(0)
    await led.log.append(_records(4))
    shares = _registry(led, share_config(auto_offset_reset="earliest"))
    share = await shares.get(GROUP, TOPIC_ID, 0)
    await share.fetch("m1", 1 << 20, 100, 0)
    stream = led.log.share_stream
    assert stream is not None
    await stream.close()  # fenced under the partition's feet: the share stream can no longer be written
    assert await share.acknowledge("m1", [AckBatch(0, 1, (ACCEPT,))], 0) == ErrorCode.not_leader_or_follower
    writes = shares.tick(10**15)  # 2-3 time out; the lock timer's write fails the same way
    assert len(writes) == 1
    assert await writes[0] == ErrorCode.not_leader_or_follower
    await led.log.close()
