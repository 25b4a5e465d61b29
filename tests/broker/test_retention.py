"""Retention (cleanup.policy=delete): retention.ms and retention.bytes move a partition's log start.

Three levels: the pure decision (:class:`RetentionPlanner`), a :class:`PartitionLog` over the real storage engine
(size accounting across trims and reopens), and a real broker process driven by confluent-kafka, where ListOffsets
earliest and a consumer reading from the beginning show what a user sees.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # the package's stubs do not re-export these
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from hypothesis import given
from hypothesis import strategies as st

from broker.partition.log_config import LogConfig
from broker.partition.partition_log import PartitionLog
from broker.partition.retention import (
    BatchSummary,
    HeadCache,
    Reason,
    RetentionPlanner,
    RetentionPolicy,
    enforce_retention,
)
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine
from testkit.node_process import BrokerProcess
from testkit.waiting import eventually
from tests.broker.kafka_clients import module_broker, topic_name
from wire.record_batch import Record, build_batch, iter_batches

NOW = 1_700_000_000_000
HOUR = 3_600_000
TIMEOUT = 15.0
CHECK_INTERVAL_MS = 200


# ---------------------------------------------------------------------- the pure decision
def _plan(
    policy: RetentionPolicy, batches: list[tuple[int, int]], *, log_start: int = 0
) -> tuple[RetentionPlanner, list[tuple[int, int, int, int]]]:
    """Feeds ``(max_timestamp, size)`` batches of two offsets each; returns the planner and the batches it saw."""
    laid_out = [(2 * i, 2 * i + 2, ts, size) for i, (ts, size) in enumerate(batches)]
    planner = RetentionPlanner(
        policy,
        now_ms=NOW,
        log_start=log_start,
        high_watermark=laid_out[-1][1] if laid_out else log_start,
        size_bytes=sum(size for _, nxt, _, size in laid_out if nxt > log_start),
    )
    seen = []
    for batch in laid_out:
        if not planner.wants_batches:
            break
        seen.append(batch)
        if not planner.offer(*batch):
            break
    return planner, seen


def test_time_retention_deletes_the_expired_prefix_up_to_the_first_recent_batch() -> None:
    policy = RetentionPolicy(True, HOUR, -1)
    batches = [(NOW - 3 * HOUR, 100), (NOW - 2 * HOUR, 50), (NOW - 1, 70), (NOW - 5 * HOUR, 80), (NOW, 10)]
    planner, seen = _plan(policy, batches)
    decision = planner.decision()
    assert decision is not None
    # The recent third batch protects the older fourth one behind it, as a recent segment does in Kafka.
    assert (decision.old_start, decision.new_start, decision.freed_bytes) == (0, 4, 150)
    assert decision.reason == Reason.TIME and decision.deleted_batches == 2
    assert len(seen) == 3  # stopped reading at the first batch it keeps


def test_a_partition_whose_every_batch_expired_becomes_empty() -> None:
    # As Kafka deletes its active segment once the high watermark reached the log end.
    planner, _ = _plan(RetentionPolicy(True, 0, -1), [(NOW - HOUR, 10)] * 4)
    decision = planner.decision()
    assert decision is not None and decision.new_start == 8 and decision.freed_bytes == 40
    single, _ = _plan(RetentionPolicy(True, -1, 0), [(NOW, 10)])
    decision = single.decision()
    assert decision is not None and (decision.new_start, decision.reason) == (2, Reason.SIZE)


def test_size_retention_keeps_at_least_retention_bytes() -> None:
    sizes = [100, 300, 120, 90, 200, 110, 60]
    limit = 350
    planner, _ = _plan(RetentionPolicy(True, -1, limit), [(NOW, s) for s in sizes])
    decision = planner.decision()
    assert decision is not None and decision.reason == Reason.SIZE
    kept = sizes[decision.new_start // 2 :]
    assert sum(kept) >= limit  # never below the limit...
    assert sum(kept) - kept[0] < limit  # ...and the oldest batch kept was needed to stay at it
    assert decision.freed_bytes == sum(sizes) - sum(kept)


def test_both_limits_delete_the_longer_prefix_and_say_why() -> None:
    batches = [(NOW - 2 * HOUR, 500), (NOW - 2 * HOUR, 500), (NOW, 500), (NOW, 500), (NOW, 500)]
    planner, _ = _plan(RetentionPolicy(True, HOUR, 1000), batches)
    decision = planner.decision()
    assert decision is not None and decision.new_start == 6
    assert decision.reason == Reason.TIME | Reason.SIZE
    assert decision.reason.describe() == "retention.ms and retention.bytes"


@pytest.mark.parametrize(
    "policy",
    [RetentionPolicy(False, 0, 0), RetentionPolicy(True, -1, -1)],
    ids=["compact-only topic", "retention.ms=-1 and retention.bytes=-1"],
)
def test_inactive_policies_read_nothing_and_delete_nothing(policy: RetentionPolicy) -> None:
    assert not policy.active
    planner, seen = _plan(policy, [(NOW - 10 * HOUR, 1000)] * 5)
    assert seen == [] and planner.decision() is None


def test_batches_without_timestamps_go_with_the_batch_after_them() -> None:
    # A batch with no timestamps does not hold back what follows it: it is deleted with the next expired batch...
    planner, _ = _plan(RetentionPolicy(True, HOUR, -1), [(-1, 10), (NOW - 2 * HOUR, 10), (-1, 10), (NOW, 10)])
    decision = planner.decision()
    assert decision is not None and (decision.new_start, decision.deleted_batches) == (4, 2)
    # ...and stays while the batch after it does.
    kept, _ = _plan(RetentionPolicy(True, HOUR, -1), [(-1, 10), (NOW, 10)])
    assert kept.decision() is None


def test_a_first_batch_straddling_the_log_start_is_deleted_whole() -> None:
    # DeleteRecords left the log start at 1, inside the first batch [0, 2): that batch still counts and goes whole.
    planner, _ = _plan(RetentionPolicy(True, HOUR, -1), [(NOW - 2 * HOUR, 40), (NOW, 40)], log_start=1)
    decision = planner.decision()
    assert decision is not None and (decision.old_start, decision.new_start, decision.freed_bytes) == (1, 2, 40)


def test_the_time_bound_applies_only_when_size_cannot_delete() -> None:
    def planner(retention_bytes: int) -> RetentionPlanner:
        policy = RetentionPolicy(True, HOUR, retention_bytes)
        return RetentionPlanner(policy, now_ms=NOW, log_start=0, high_watermark=6, size_bytes=30)

    assert planner(-1).time_bound(2) == 2 and planner(-1).time_bound(None) == 6
    assert planner(5).time_bound(2) == 6  # over retention.bytes: recent batches may go too


def test_a_known_unexpired_head_batch_means_nothing_to_read() -> None:
    def planner(retention_bytes: int, log_start: int = 0) -> RetentionPlanner:
        policy = RetentionPolicy(True, HOUR, retention_bytes)
        return RetentionPlanner(policy, now_ms=NOW, log_start=log_start, high_watermark=10, size_bytes=300)

    recent, expired = BatchSummary(0, 2, NOW - 1, 100), BatchSummary(0, 2, NOW - 2 * HOUR, 100)
    assert planner(-1).keeps(recent) and planner(-1, log_start=1).keeps(recent)
    assert not planner(-1).keeps(expired)
    assert not planner(-1, log_start=2).keeps(recent)  # the log start moved past it: another batch is the head
    assert not planner(100).keeps(recent)  # over retention.bytes: the head may go whatever its age


@given(
    st.lists(st.tuples(st.integers(-1, 2 * HOUR), st.integers(1, 500)), min_size=1, max_size=30),
    st.integers(-1, 2 * HOUR),
    st.integers(-1, 5000),
)
def test_decisions_cut_on_batch_boundaries_and_only_breached_batches(
    raw: list[tuple[int, int]], retention_ms: int, retention_bytes: int
) -> None:
    batches = [(NOW - age if age >= 0 else -1, size) for age, size in raw]
    planner, _ = _plan(RetentionPolicy(True, retention_ms, retention_bytes), batches)
    decision = planner.decision()
    if decision is None:
        return
    deleted = decision.new_start // 2
    assert decision.new_start % 2 == 0 and 0 < deleted <= len(batches)  # whole batches
    assert decision.freed_bytes == sum(size for _, size in batches[:deleted])
    remaining = sum(size for _, size in batches)
    cutoff = NOW - retention_ms
    for i, (ts, size) in enumerate(batches[:deleted]):
        # A batch without timestamps goes only with a later expired batch that goes too.
        aged = 0 <= ts < cutoff or (ts < 0 and any(0 <= t < cutoff for t, _ in batches[i + 1 : deleted]))
        expired = retention_ms >= 0 and aged
        fits = retention_bytes >= 0 and remaining - size >= retention_bytes
        assert expired or fits
        remaining -= size


# ---------------------------------------------------------------------- a PartitionLog over real storage
async def _open(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], epoch: int, config: LogConfig
) -> PartitionLog:
    eng, metadata = engine
    return await PartitionLog.open(
        streams=eng,
        kv=metadata,
        namespace="_fjord_test",
        topic="events",
        partition=0,
        topic_id=uuid.UUID(int=7),
        leader_epoch=epoch,
        config=config,
    )


def _batch(records: int, ts: int, value_size: int = 100) -> bytes:
    return build_batch([Record(b"k%d" % i, b"v" * value_size, (), ts + i) for i in range(records)])


async def test_size_follows_appends_trims_and_reopens(engine: tuple[StorageEngine, StreamMetadataStateMachine]) -> None:
    config = LogConfig(retention_ms=-1, retention_bytes=-1)
    now = int(time.time() * 1000)
    batches = [_batch(3, now - HOUR, 100 + 10 * i) for i in range(6)]
    log = await _open(engine, 0, config)
    for batch in batches:
        await log.append(batch)
    assert log.size_bytes == sum(len(b) for b in batches)
    # DeleteRecords inside the third batch deletes two whole batches; the cut one stays stored and counted.
    assert await log.delete_records_before(7) == 7
    assert log.size_bytes == sum(len(b) for b in batches[2:])
    await log.close()

    log = await _open(engine, 1, LogConfig(retention_ms=-1, retention_bytes=sum(len(b) for b in batches[3:])))
    try:
        assert log.size_bytes == sum(len(b) for b in batches[2:])  # persisted, not re-read
        decision = await enforce_retention(log)
        assert decision is not None and decision.reason == Reason.SIZE
        assert (decision.old_start, decision.new_start) == (7, 9)
        assert log.log_start_offset == 9 and log.size_bytes == sum(len(b) for b in batches[3:])
        assert await enforce_retention(log) is None  # at the limit now: nothing more to delete
        read = await log.read(9, 1 << 20)
        assert [h.base_offset for h, _ in iter_batches(read.records)] == [9, 12, 15]
    finally:
        await log.close()


async def test_time_retention_on_a_partition_log_deletes_up_to_the_first_recent_batch(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    now = int(time.time() * 1000)
    log = await _open(engine, 0, LogConfig(retention_ms=HOUR, retention_bytes=-1))
    try:
        for age in (5 * HOUR, 4 * HOUR, 3 * HOUR):
            await log.append(_batch(2, now - age))
        # Two and a half hours ago the batches of 5 and 4 hours had expired, not the one of 3 hours.
        decision = await enforce_retention(log, now - 5 * HOUR // 2)
        assert decision is not None and (decision.new_start, decision.reason) == (4, Reason.TIME)
        assert log.log_start_offset == 4 and log.high_watermark == 6
        earliest = await log.offset_for_timestamp(-2)
        assert earliest is not None and earliest.offset == 4
        # With a head cache, a check that keeps everything remembers the oldest batch, and one whose cutoff
        # passes it still deletes.
        await log.append(_batch(2, now))
        heads: HeadCache = {}
        before_expiry = now - 2 * HOUR - 1  # the batch at 4 (max timestamp now - 3 h + 1) is not an hour old yet
        assert await enforce_retention(log, before_expiry, heads) is None
        assert list(heads.values()) == [BatchSummary(4, 6, now - 3 * HOUR + 1, heads[(log.topic_id, 0)].size)]
        assert await enforce_retention(log, before_expiry, heads) is None
        decision = await enforce_retention(log, now, heads)
        assert decision is not None and (decision.old_start, decision.new_start) == (4, 6)
        assert log.log_start_offset == 6 and await enforce_retention(log, now, heads) is None
        # Once every batch expired the partition is empty, as Kafka deletes its active segment; appends go on.
        decision = await enforce_retention(log, now + 10 * HOUR, heads)
        assert decision is not None and (decision.new_start, log.log_start_offset, log.high_watermark) == (8, 8, 8)
        earliest = await log.offset_for_timestamp(-2)
        assert earliest is not None and earliest.offset == 8
        await log.close()
        log = await _open(engine, 1, LogConfig(retention_ms=HOUR, retention_bytes=-1))
        assert (log.log_start_offset, log.high_watermark) == (8, 8)  # empty, and so it reopens
        assert (await log.append(_batch(1, now))).base_offset == 8
    finally:
        await log.close()


# ---------------------------------------------------------------------- a real broker, real clients
@pytest.fixture(scope="module")
def retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from module_broker(
        tmp_path_factory.mktemp("retention-broker"), {"log.retention.check.interval.ms": str(CHECK_INTERVAL_MS)}
    )


@pytest.fixture(scope="module")
def admin(retention_broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": retention_broker.bootstrap})


def _create(admin: AdminClient, name: str, config: dict[str, str]) -> None:
    for future in admin.create_topics([NewTopic(name, 1, 1, config=config)]).values():
        future.result(timeout=TIMEOUT)


def _produce(
    bootstrap: str, topic: str, values: list[bytes], timestamp_ms: int, *, batch_each: bool = False, keyed: bool = False
) -> None:
    """Produces with explicit CreateTime timestamps; ``batch_each`` flushes per record (one batch each). ``keyed``
    keys each record by its value: compacted topics refuse keyless records, and distinct keys leave compaction
    nothing to remove."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, value in enumerate(values):
        producer.produce(topic, value, key=value if keyed else None, timestamp=timestamp_ms + i)
        if batch_each:
            assert producer.flush(TIMEOUT) == 0
    assert producer.flush(TIMEOUT) == 0


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"retention-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = _consumer(bootstrap)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT, cached=False)
        return int(low), int(high)
    finally:
        consumer.close()


def _read_from_beginning(bootstrap: str, topic: str, expected: int) -> list[tuple[int, bytes]]:
    consumer = _consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            offset, value = message.offset(), message.value()
            assert offset is not None and value is not None
            got.append((offset, value))
        return got
    finally:
        consumer.close()


def _settled(broker: BrokerProcess) -> None:
    """Lets a few retention checks run (for asserting that something was *not* deleted)."""
    time.sleep(4 * CHECK_INTERVAL_MS / 1000)


def test_retention_ms_deletes_old_records_and_consumers_start_after_them(
    retention_broker: BrokerProcess, admin: AdminClient
) -> None:
    bootstrap = retention_broker.bootstrap
    topic, compacted, forever = topic_name("ret-time"), topic_name("ret-compact"), topic_name("ret-forever")
    _create(admin, topic, {"retention.ms": str(HOUR)})
    _create(admin, compacted, {"cleanup.policy": "compact", "retention.ms": "1000", "retention.bytes": "1"})
    _create(admin, forever, {"retention.ms": "-1"})
    now = int(time.time() * 1000)
    old = [b"old-%d" % i for i in range(5)]
    new = [b"new-%d" % i for i in range(3)]
    for name in (topic, compacted, forever):
        keyed = name == compacted
        _produce(bootstrap, name, [b"k" + v for v in old], now - 3 * HOUR, keyed=keyed)  # one batch, 3 hours old
        _produce(bootstrap, name, [b"k" + v for v in new], now, keyed=keyed)

    eventually(lambda: _watermarks(bootstrap, topic)[0], until=lambda low: low == len(old), timeout=TIMEOUT,
               interval=0.1, what=f"{topic} to drop its old records (log start offset {len(old)})")
    assert _watermarks(bootstrap, topic) == (len(old), len(old) + len(new))
    got = _read_from_beginning(bootstrap, topic, len(new))
    assert got == [(len(old) + i, b"k" + v) for i, v in enumerate(new)]
    assert f"{topic}-0: log start offset 0 -> {len(old)} (retention:" in retention_broker.log_text()

    _settled(retention_broker)
    assert _watermarks(bootstrap, compacted) == (0, len(old) + len(new))  # compaction's business, not retention's
    assert _watermarks(bootstrap, forever) == (0, len(old) + len(new))
    assert len(_read_from_beginning(bootstrap, forever, len(old) + len(new))) == len(old) + len(new)


def test_altering_retention_ms_takes_effect_without_a_restart(
    retention_broker: BrokerProcess, admin: AdminClient
) -> None:
    bootstrap = retention_broker.bootstrap
    topic = topic_name("ret-altered")
    _create(admin, topic, {"retention.ms": str(90 * 24 * HOUR)})
    now = int(time.time() * 1000)
    _produce(bootstrap, topic, [b"ancient"] * 4, now - 30 * 24 * HOUR)
    _produce(bootstrap, topic, [b"fresh"] * 2, now)
    _settled(retention_broker)
    assert _watermarks(bootstrap, topic) == (0, 6)

    resource = ConfigResource(
        "topic",
        topic,
        incremental_configs=[ConfigEntry("retention.ms", str(HOUR), incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=TIMEOUT)
    eventually(lambda: _watermarks(bootstrap, topic)[0], until=lambda low: low == 4, timeout=TIMEOUT, interval=0.1,
               what=f"the altered retention.ms to trim {topic} (log start offset 4)")
    assert [v for _, v in _read_from_beginning(bootstrap, topic, 2)] == [b"fresh", b"fresh"]


def test_retention_bytes_keeps_the_newest_data(retention_broker: BrokerProcess, admin: AdminClient) -> None:
    bootstrap = retention_broker.bootstrap
    topic = topic_name("ret-bytes")
    limit, value_size, count = 2000, 500, 16
    _create(admin, topic, {"retention.bytes": str(limit)})
    values = [b"%02d" % i + b"x" * (value_size - 2) for i in range(count)]
    _produce(bootstrap, topic, values, int(time.time() * 1000), batch_each=True)

    eventually(lambda: _watermarks(bootstrap, topic)[0], timeout=TIMEOUT, interval=0.1,
               what=f"{topic} to shrink to retention.bytes")
    _settled(retention_broker)
    low, high = _watermarks(bootstrap, topic)
    assert high == count
    got = _read_from_beginning(bootstrap, topic, count - low)
    assert got == [(offset, values[offset]) for offset in range(low, count)]  # the newest, contiguous, intact
    kept_bytes = (count - low) * value_size
    assert kept_bytes >= limit - value_size  # about retention.bytes stays (batch overhead counts towards it)...
    assert kept_bytes <= limit + value_size  # ...and not much more than one batch beyond it


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_the_partition_size_survives_a_restart_and_a_crash(
    broker_factory: Callable[..., BrokerProcess], how: str
) -> None:
    """retention.bytes counts what was written before the restart: without it the log would grow past the limit."""
    overrides = {"log.retention.check.interval.ms": str(CHECK_INTERVAL_MS)}
    first = broker_factory(overrides=overrides)
    topic = topic_name("ret-restart")
    limit, value_size = 3000, 500
    _create(AdminClient({"bootstrap.servers": first.bootstrap}), topic, {"retention.bytes": str(limit)})
    before = [b"a%02d" % i + b"x" * (value_size - 3) for i in range(5)]  # about 2.8 kB: within the limit
    _produce(first.bootstrap, topic, before, int(time.time() * 1000), batch_each=True)
    _settled(first)
    assert _watermarks(first.bootstrap, topic) == (0, len(before))
    if how == "SIGKILL":
        first.kill()
    else:
        assert first.stop() == 0

    second = broker_factory(overrides=overrides, data_dir=first.data_dir)
    after = [b"b%02d" % i + b"x" * (value_size - 3) for i in range(3)]  # alone, well within the limit
    _produce(second.bootstrap, topic, after, int(time.time() * 1000), batch_each=True)
    eventually(lambda: _watermarks(second.bootstrap, topic)[0], timeout=TIMEOUT, interval=0.1,
               what=f"{topic} to shrink to retention.bytes")
    _settled(second)
    low, high = _watermarks(second.bootstrap, topic)
    assert high == len(before) + len(after)
    assert 0 < low < len(before)  # old data went first, and only as much as needed
    kept = (high - low) * value_size
    assert limit - value_size <= kept <= limit + value_size
