"""Bounded recovery (issue 12): a broker killed with SIGKILL over and over replays only the log written since the
previous restart, because each recovery (and each upload, and a timer) advances the partition's recovery point
(PARTITION's recovery offset with the producer snapshot), and no acknowledged record is lost or duplicated. The
in-process tests drive one partition over the real storage engine and crash it with ``halt``."""

from __future__ import annotations

import itertools
import json
import re
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker.partition.log_config import LogConfig
from broker.partition.meta_stream import COMPACT_MIN_RECORDS, KEY_PARTITION, KEY_PRODUCER_SNAPSHOTS
from broker.partition.partition_log import PartitionLog
from broker.partition.producer_state import decode_snapshot
from storage.config import BucketURL, StorageConfig
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine
from testkit.node_process import BrokerProcess
from testkit.waiting import eventually, eventually_async
from tests.broker.kafka_clients import topic_name
from tests.topics import create_topic
from wire.record_batch import Record, build_batch

_CYCLES = 4
_ACKS_PER_CYCLE = 800
#: The replay line each recovered partition logs; the counts are what the assertions read, never the time.
_REPLAY = r"recovering {where} after an unclean shutdown: replaying log \[(\d+), (\d+)\)"
_REPLAYED = r"recovered {where}: replayed (\d+) records \((\d+) batches, (\d+) bytes\) from offset (\d+)"


def _produce(bootstrap: str, topic: str, tag: str, stop: threading.Event, acked: dict[bytes, int]) -> None:
    """An idempotent producer sending ``tag``-numbered values until ``stop``; ``acked`` maps each acknowledged
    value to its offset. Bounded by the caller's stop (and by 20k sends)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 3000,
        }
    )

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked[msg.value()] = msg.offset()  # type: ignore[attr-defined]

    for i in range(20_000):
        if stop.is_set():
            break
        producer.produce(topic, value=f"{tag}-{i}".encode(), partition=0, on_delivery=delivered)
        if i % 100 == 99:
            producer.flush(2)  # a hundred in flight at a time: enough batches per cycle, a log quick to read back
    producer.flush(5)


def _read_back(bootstrap: str, topic: str, want: int) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "recovery-point", "enable.auto.commit": False})
    out: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])

        def caught_up() -> bool:
            for msg in consumer.consume(1000, 0.5):
                if not msg.error():
                    out.append((msg.offset(), msg.value()))
            return len(out) >= want

        eventually(caught_up, timeout=60, interval=0.01, what=lambda: f"{want} records, read {len(out)}")
    finally:
        consumer.close()
    return out


def _replay_range(broker: BrokerProcess, where: str) -> tuple[int, int]:
    match = eventually(
        lambda: re.search(_REPLAY.format(where=re.escape(where)), broker.log_text()),
        timeout=10,
        what=lambda: f"the replay line of {where}:\n{broker.log_text()[-3000:]}",
    )
    return int(match.group(1)), int(match.group(2))


def _produce_then_kill(broker: BrokerProcess, topic: str, tag: str, acked: dict[bytes, int]) -> None:
    """Produces until ``_ACKS_PER_CYCLE`` more records are acknowledged, then SIGKILLs the broker mid-stream."""
    stop = threading.Event()
    before = len(acked)
    worker = threading.Thread(target=_produce, args=(broker.bootstrap, topic, tag, stop, acked))
    worker.start()
    try:
        eventually(
            lambda: len(acked) >= before + _ACKS_PER_CYCLE or not worker.is_alive(),
            timeout=30,
            what=lambda: f"{_ACKS_PER_CYCLE} acknowledgements of {tag}, have {len(acked) - before}",
        )
        broker.kill()
    finally:
        stop.set()
        worker.join(timeout=30)
    assert len(acked) >= before + _ACKS_PER_CYCLE, f"{tag}: the producer stopped early"


def test_kill9_loop_replays_only_the_tail_after_the_last_recovery(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    broker = broker_factory()
    topic = topic_name("recovery-point")
    where = f"{topic}-0"
    create_topic(broker.bootstrap, topic)
    acked: dict[bytes, int] = {}
    ranges: list[tuple[int, int]] = []
    for cycle in range(_CYCLES):
        _produce_then_kill(broker, topic, f"c{cycle}", acked)
        broker = broker_factory(data_dir=tmp_path / "node")
        ranges.append(_replay_range(broker, where))
        replayed = re.search(_REPLAYED.format(where=re.escape(where)), broker.log_text())
        assert replayed is not None, f"no replay summary for {where}:\n{broker.log_text()[-3000:]}"
        start, end = ranges[-1]
        assert int(replayed.group(4)) == start
        assert int(replayed.group(1)) <= end - start
        assert end >= max(acked.values()) + 1, f"cycle {cycle}: acknowledged records beyond the recovered end {end}"
    for (_, previous_end), (start, _end) in itertools.pairwise(ranges):
        assert start >= previous_end, f"replay ranges {ranges}: a restart replayed what the previous one recovered"
    stored = _read_back(broker.bootstrap, topic, ranges[-1][1])
    values = [value for _, value in stored]
    duplicated = {v for v, n in Counter(values).items() if n > 1}
    assert not duplicated, f"{len(duplicated)} values stored twice, e.g. {sorted(duplicated)[:3]}"
    by_value = dict((value, offset) for offset, value in stored)
    missing = [v for v, offset in acked.items() if by_value.get(v) != offset]
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged records lost or moved, e.g. {missing[:3]}"


# ---------------------------------------------------------------------------------------------- in process
_PRODUCER_ID = 4000


class _Node:
    """One storage engine incarnation at a time over the same disk and metadata; ``crash`` is a SIGKILL."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.metadata = StreamMetadataStateMachine()
        self.engine = StorageEngine(self._config(1), self.metadata)
        self.uploads: list[dict[int, int]] = []

    def _config(self, node_epoch: int) -> StorageConfig:
        return StorageConfig(
            data_buckets=(BucketURL(0, "file", str(self.tmp_path / "objects")),),
            wal_url=BucketURL(0, "file", str(self.tmp_path / "wal")),
            cluster_id="test",
            node_id=1,
            node_epoch=node_epoch,
        )

    async def start(self) -> None:
        self.engine.add_upload_listener(lambda ends: self.uploads.append(dict(ends)))
        await self.engine.start()

    async def crash_and_restart(self) -> None:
        await self.engine.halt()
        self.engine = StorageEngine(self._config(self.engine.node.node_epoch + 1), self.metadata)
        await self.start()

    async def open(self, leader_epoch: int, config: LogConfig | None = None) -> PartitionLog:
        return await PartitionLog.open(
            streams=self.engine,
            kv=self.metadata,
            namespace="_fjord_test",
            topic="payments",
            partition=0,
            topic_id=uuid.UUID(int=12),
            leader_epoch=leader_epoch,
            config=config or LogConfig(),
        )


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[_Node]:
    node = _Node(tmp_path)
    await node.start()
    try:
        yield node
    finally:
        await node.engine.shutdown()


def _idempotent(seq: int, n: int = 5) -> bytes:
    return build_batch(
        [Record(None, b"value-%d" % (seq + i), (), None) for i in range(n)],
        producer_id=_PRODUCER_ID,
        producer_epoch=0,
        base_sequence=seq,
    )


async def test_an_upload_advances_the_recovery_point_and_a_crash_replays_only_what_follows(
    node: _Node, caplog: pytest.LogCaptureFixture
) -> None:
    log = await node.open(leader_epoch=1)
    for seq in range(0, 50, 5):
        await log.append(_idempotent(seq))
    assert log.recovery_point == 0, "nothing was uploaded or checkpointed yet"
    await node.engine.force_upload()
    assert any(u.get(log.log_stream_id) == 50 for u in node.uploads), node.uploads
    log.uploaded(50)  # what the partition manager does when the engine reports the upload
    await eventually_async(lambda: log.recovery_point == 50, timeout=10, what="the recovery point to reach 50")
    await eventually_async(
        lambda: log._state.checkpoint.task is None, timeout=10, what="the checkpoint to be persisted"
    )
    partition = json.loads(log._state.meta.get(KEY_PARTITION) or b"{}")
    assert partition["r"] == 50 and partition["cs"] is False
    snapshot = log._state.meta.get(KEY_PRODUCER_SNAPSHOTS)
    assert snapshot is not None and decode_snapshot(snapshot)[0] == 50
    last = _idempotent(55)
    for seq in (50, 55):
        await log.append(_idempotent(seq))  # after the checkpoint: only in the WAL when the node dies

    await node.crash_and_restart()
    caplog.clear()
    with caplog.at_level("INFO", logger="broker.partition.partition_log.recovery"):
        log = await node.open(leader_epoch=2)
    try:
        assert "replaying log [50, 60)" in caplog.text, caplog.text
        assert "replayed 10 records (2 batches" in caplog.text, caplog.text
        assert log.log_end_offset == 60
        # Producer state rebuilt from the snapshot and the replayed tail: a retry is still a duplicate ...
        retried = await log.append(last)
        assert (retried.base_offset, retried.last_offset) == (55, 59)
        # ... and the recovery itself became the next recovery point.
        assert log.recovery_point == 60
    finally:
        await log.close()


async def test_the_time_bound_checkpoints_a_partition_written_to_between_uploads(node: _Node) -> None:
    log = await node.open(leader_epoch=1)
    try:
        log.config = LogConfig(checkpoint_interval_ms=1)
        log.maybe_checkpoint()  # nothing appended since the open: nothing to checkpoint
        assert log._state.checkpoint.task is None
        await log.append(_idempotent(0))
        await eventually_async(
            lambda: log.maybe_checkpoint() or log.recovery_point == 5,
            timeout=10,
            what=lambda: f"the timer to checkpoint offset 5, recovery point {log.recovery_point}",
        )
        await eventually_async(lambda: log._state.checkpoint.task is None, timeout=10, what="the checkpoint to finish")
        assert json.loads(log._state.meta.get(KEY_PARTITION) or b"{}")["r"] == 5
        log.uploaded(5)  # an upload of what the checkpoint already covers starts nothing
        assert log._state.checkpoint.task is None
    finally:
        await log.close()


async def test_an_open_transaction_before_the_recovery_point_survives_a_crash(node: _Node) -> None:
    """The snapshot (v2) holds open transactions: a replay that starts after a transaction's first batch still
    knows it is open, so read_committed consumers stay below it."""
    log = await node.open(leader_epoch=1)
    await log.append(_idempotent(0))  # 0-4
    txn = build_batch(
        [Record(b"k", b"in a transaction", (), None)],
        producer_id=_PRODUCER_ID + 1,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    await log.append(txn, transactional_id="payments-txn")  # 5, left open
    await node.engine.force_upload()
    log.uploaded(6)
    await eventually_async(lambda: log.recovery_point == 6, timeout=10, what="the recovery point to reach 6")
    await eventually_async(
        lambda: log._state.checkpoint.task is None, timeout=10, what="the checkpoint to be persisted"
    )
    await log.append(_idempotent(5))  # 6-10, replayed after the crash

    await node.crash_and_restart()
    log = await node.open(leader_epoch=2)
    try:
        assert log.log_end_offset == 11
        assert log.has_ongoing_txn(_PRODUCER_ID + 1)
        assert log.last_stable_offset == 5
    finally:
        await log.close()


async def test_an_open_reads_only_the_newest_time_index_entry_and_lookups_by_time_stay_exact(node: _Node) -> None:
    """The time stream holds an entry per index interval of the whole log (10,000 for 10 GB): an open reads only its
    newest entry, so it does not grow with the partition, and the first lookup by timestamp reads the rest."""
    config = LogConfig(index_interval_bytes=1)  # an entry for every batch: batch i has timestamps 10_000 * i + j
    log = await node.open(leader_epoch=1, config=config)

    def timed(i: int) -> bytes:
        return build_batch([Record(None, b"v", (), 10_000 * i + j) for j in range(5)])

    for i in range(40):
        await log.append(timed(i))
    await node.engine.force_upload()
    log.uploaded(200)
    await eventually_async(lambda: log.recovery_point == 200, timeout=10, what="the recovery point to reach 200")
    await eventually_async(
        lambda: log._state.checkpoint.task is None, timeout=10, what="the checkpoint to be persisted"
    )
    for i in range(40, 45):
        await log.append(timed(i))  # replayed after the crash, which re-adds their entries
    expected = {ts: await log.offset_for_timestamp(ts) for ts in (0, 3, 10_001, 155_000, 399_999, 420_002, 440_004)}
    assert all(found is not None for found in expected.values())

    await node.crash_and_restart()
    log = await node.open(leader_epoch=2, config=config)
    try:
        assert log.log_end_offset == 225
        assert len(log.time_index) <= 1 + 5, "the open read the whole time stream"
        assert log._state.time.confirm_offset - log._state.time.start_offset == 45, "the replay wrote entries twice"
        for ts, found in expected.items():
            assert await log.offset_for_timestamp(ts) == found, ts
        assert len(log.time_index) == 45
        assert await log.offset_for_timestamp(450_000) is None
    finally:
        await log.close()


async def test_a_crash_loop_keeps_the_meta_stream_short(node: _Node) -> None:
    """Each open writes a few meta entries and compacts the stream in the background; the compaction's trim waits
    for an upload. In a crash loop whose only uploads are each restart's recovered tail, that trim never ran and
    every restart replayed a longer meta stream. The replay now trims what it finds superseded once the tail holding
    the live entries is uploaded, so the stream stays a couple of compactions long."""
    lengths = []
    for cycle in range(12):
        log = await node.open(leader_epoch=cycle + 1)
        meta = log._state.meta.stream
        lengths.append(meta.next_offset - meta.start_offset)
        await log.append(_idempotent(5 * cycle))
        await node.engine.recovered_tail_uploaded()
        log.meta_uploaded()  # what the partition manager does on each upload
        await eventually_async(
            lambda: log._state.meta._trimming is None or log._state.meta._trimming.done(),  # noqa: B023
            timeout=10,
            what="the meta stream's trim",
        )
        await node.crash_and_restart()
    log = await node.open(leader_epoch=13)
    try:
        assert log.log_end_offset == 60  # nothing lost on the way
        assert max(lengths[6:]) <= 2 * COMPACT_MIN_RECORDS, lengths
    finally:
        await log.close()
