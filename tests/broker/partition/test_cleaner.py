"""The log cleaner over the real storage engine (file WAL + local objects on tmp_path, in-memory stream metadata):
batch filtering, a round's result, bounded memory, reads at removed offsets, reopen, and a crash at each point of a
round (the engine halted as a crash leaves it, then a new engine incarnation recovers)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.partition.cleaner import ENTRY_BYTES, CleanerStopped, clean_partition, cleanable
from broker.partition.log_config import LogConfig
from broker.partition.partition_log import PartitionLog, checkpoints
from storage.config import BucketURL, StorageConfig
from storage.engine import StorageEngine
from storage.errors import StorageError
from storage.metadata.state_machine import StreamMetadataStateMachine
from wire.errors import KafkaError
from wire.record_batch import (
    Compression,
    Record,
    build_batch,
    compute_crc,
    decode_records,
    filter_batch,
    iter_batches,
    parse_header,
)

TOPIC_ID = uuid.UUID(int=7)
COMPACT = LogConfig(compact=True, delete_retention_enabled=False, delete_retention_ms=60_000)
BIG_BUFFER = 1 << 20


def _config(tmp_path: Path, node_epoch: int) -> StorageConfig:
    return StorageConfig(
        data_buckets=(BucketURL(0, "file", str(tmp_path / "objects")),),
        wal_url=BucketURL(0, "file", str(tmp_path / "wal")),
        cluster_id="test",
        node_id=1,
        node_epoch=node_epoch,
        object_block_size=4 * 1024,
        wal_upload_threshold=32 * 1024,
    )


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """One engine incarnation at a time over the same disk and metadata; ``restart`` simulates a crash."""
    metadata = StreamMetadataStateMachine()
    state: dict[str, Any] = {"metadata": metadata, "epoch": 0}
    state["engine"] = StorageEngine(_config(tmp_path, 0), metadata)
    await state["engine"].start()

    async def crash_and_restart() -> StorageEngine:
        await state["engine"].halt()
        state["epoch"] = state["engine"].node.node_epoch + 1
        engine = StorageEngine(_config(tmp_path, state["epoch"]), metadata)
        await engine.start()
        state["engine"] = engine
        return engine

    state["restart"] = crash_and_restart
    try:
        yield state
    finally:
        await state["engine"].shutdown()


async def _open(state: dict[str, Any], epoch: int, config: LogConfig = COMPACT) -> PartitionLog:
    return await PartitionLog.open(
        streams=state["engine"],
        kv=state["metadata"],
        namespace="_fjord_test",
        topic="changelog",
        partition=0,
        topic_id=TOPIC_ID,
        leader_epoch=epoch,
        config=config,
    )


async def _read_all(log: PartitionLog, start: int | None = None, max_bytes: int = 700) -> list[Record]:
    """Every record from ``start`` to the high watermark, read in small pieces the way a consumer does."""
    position = log.log_start_offset if start is None else start
    out: list[Record] = []
    for _ in range(10_000):
        if position >= log.high_watermark:
            return out
        result = await log.read(position, max_bytes)
        assert result.records, f"read at {position} returned nothing below the high watermark {log.high_watermark}"
        for header, batch in iter_batches(result.records):
            out += [r for r in decode_records(batch) if r.offset >= position]
            position = header.next_offset
    raise AssertionError("read loop did not finish")


def _latest(records: list[Record]) -> dict[bytes | None, Record]:
    latest: dict[bytes | None, Record] = {}
    for record in records:
        latest[record.key] = record
    return latest


async def _fill(log: PartitionLog, rounds: int, keys: int, ts: int, per_batch: int = 3) -> list[Record]:
    """Appends ``rounds`` updates of each key, ``per_batch`` records per batch; returns what was written."""
    written: list[Record] = []
    pending: list[Record] = []
    for n in range(rounds):
        for k in range(keys):
            pending.append(Record(b"key-%d" % k, b"value-%d-%d" % (k, n) + b"." * 40, (), ts + len(written)))
            if len(pending) == per_batch:
                result = await log.append(build_batch(pending))
                written += [dataclasses.replace(r, offset=result.base_offset + i) for i, r in enumerate(pending)]
                pending = []
    if pending:
        result = await log.append(build_batch(pending))
        written += [dataclasses.replace(r, offset=result.base_offset + i) for i, r in enumerate(pending)]
    return written


# ---------------------------------------------------------------------------------------------- batch filtering
@pytest.mark.parametrize("codec", list(Compression))
def test_filtered_batch_keeps_offsets_producer_fields_codec_and_a_valid_crc(codec: Compression) -> None:
    records = [Record(b"k%d" % (i % 2), b"v%d" % i, (("h", b"x"),), 1_700_000_000_000 + i) for i in range(5)]
    batch = build_batch(records, producer_id=9, producer_epoch=2, base_sequence=40, compression=codec, base_offset=100)
    original = parse_header(batch)
    filtered = filter_batch(batch, lambda r: r.offset in (101, 103))
    assert filtered is not None
    header = parse_header(filtered)
    assert header.crc == compute_crc(filtered)
    assert header.compression is codec
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (100, 4, 2)
    same = ("producer_id", "producer_epoch", "base_sequence", "base_timestamp", "max_timestamp", "attributes")
    assert all(getattr(header, f) == getattr(original, f) for f in same)
    kept = decode_records(filtered)
    assert [(r.offset, r.key, r.value, r.timestamp, tuple(r.headers)) for r in kept] == [
        (101, b"k1", b"v1", 1_700_000_000_001, (("h", b"x"),)),
        (103, b"k1", b"v3", 1_700_000_000_003, (("h", b"x"),)),
    ]
    assert filter_batch(batch, lambda r: True) == batch
    assert filter_batch(batch, lambda r: False) is None


# ---------------------------------------------------------------------------------------------- rounds
async def test_round_keeps_the_latest_value_per_key_with_original_offsets(cluster: dict[str, Any]) -> None:
    log = await _open(cluster, 1)
    now = int(time.time() * 1000)
    written = await _fill(log, rounds=12, keys=5, ts=now - 1000)
    tail = await log.append(build_batch([Record(b"key-0", b"newest", (), now)]))
    size_before = log.size_bytes

    result = await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now)
    assert result is not None and result.end == tail.base_offset  # the newest batch is left alone
    assert log.cleaner_offset == tail.base_offset and log.size_bytes < size_before
    records = await _read_all(log)
    offsets = [r.offset for r in records]
    assert offsets == sorted(offsets)
    expected = _latest(written)
    # One value per key below the tail (the latest), plus the tail's record: nothing else survives.
    assert [(r.offset, r.key, r.value) for r in records] == sorted(
        [(r.offset, r.key, r.value) for r in expected.values()] + [(tail.base_offset, b"key-0", b"newest")]
    )

    # A fetch at a removed offset returns the next present batch.
    removed = written[0].offset
    assert removed not in offsets
    first = await log.read(removed, 1 << 20)
    first_header = next(iter_batches(first.records))[0]
    assert first_header.base_offset <= offsets[0] <= first_header.last_offset
    # ListOffsets earliest/latest are unchanged; a timestamp lookup answers a readable offset.
    assert (await log.offset_for_timestamp(-2)) is not None
    found = await log.offset_for_timestamp(now - 1000)
    assert found is not None and found.offset <= offsets[0]
    assert (await _read_all(log, found.offset))[0].offset == offsets[0]

    # New writes continue after the cleaned prefix; a second round over them (the tail aged) cleans again.
    more = await _fill(log, rounds=2, keys=5, ts=now)
    await log.append(build_batch([Record(b"key-9", b"tail", (), now)]))
    assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now) is not None
    records = await _read_all(log)
    below_tail = [r for r in records if r.key != b"key-9"]
    assert {r.key: r.value for r in below_tail} == {r.key: r.value for r in _latest(more).values()}
    assert len(below_tail) == 5

    # A clean close and reopen find the same data and sizes.
    size, cleaned = log.size_bytes, log.cleaned_bytes
    await log.close()
    log = await _open(cluster, 2)
    try:
        assert (log.size_bytes, log.cleaned_bytes) == (size, cleaned)
        assert [(r.offset, r.value) for r in await _read_all(log)] == [(r.offset, r.value) for r in records]
    finally:
        await log.close()


async def test_tombstones_are_dropped_delete_retention_after_their_first_cleaning(cluster: dict[str, Any]) -> None:
    """Kafka's KIP-534: the first round that keeps a tombstone stamps its batch with a delete horizon (now +
    delete.retention.ms), whatever the tombstone's own timestamp (an old CreateTime, as MirrorMaker keeps, or -1),
    and only a round past that horizon drops it; a consumer that read the value always gets that long to see the
    delete."""
    log = await _open(cluster, 1)
    now = int(time.time() * 1000)
    retention = COMPACT.delete_retention_ms
    old = now - 10 * retention
    await log.append(build_batch([Record(b"gone", b"v", (), old), Record(b"undated", b"v", (), old)]))
    await log.append(build_batch([Record(b"gone", None, (), old + 1)]))  # far older than delete.retention.ms
    await log.append(build_batch([Record(b"undated", None, (), -1)]))  # no timestamp at all
    await log.append(build_batch([Record(b"other", b"tail", (), now)]))
    try:
        assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now) is not None
        records = await _read_all(log)
        assert [(r.key, r.value, r.timestamp) for r in records] == [
            (b"gone", None, old + 1),
            (b"undated", None, -1),
            (b"other", b"tail", now),
        ]
        stored = (await log.read(log.log_start_offset, 1 << 20)).records
        horizons = [h.delete_horizon_ms for h, _ in iter_batches(stored)]
        assert horizons[:2] == [now + retention, now + retention]  # the tombstones' batches, stamped as Kafka's
        # Without any new write, a round is due at the horizon, and drops them; a round before it keeps them.
        horizon = log.tombstone_horizon_ms
        assert horizon == now + retention
        log.config = dataclasses.replace(COMPACT, min_cleanable_dirty_ratio=1.0)  # only the horizon makes it due
        assert not cleanable(log, horizon - 1) and cleanable(log, horizon)
        assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=horizon - 1) is None
        assert [r.key for r in await _read_all(log)] == [b"gone", b"undated", b"other"]
        assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=horizon) is not None
        assert [(r.key, r.value) for r in await _read_all(log)] == [(b"other", b"tail")]
        assert log.tombstone_horizon_ms is None
        await log.close()
        log = await _open(cluster, 2)
        assert [(r.key, r.value) for r in await _read_all(log)] == [(b"other", b"tail")]
    finally:
        await log.close()


async def test_a_tombstone_s_horizon_is_kept_from_its_first_cleaning_across_later_rounds(
    cluster: dict[str, Any],
) -> None:
    """A later round (new writes cleaned) keeps a stamped tombstone's horizon as it was, rather than restarting it,
    and a tombstone cleaned for the first time in that round gets its own."""
    log = await _open(cluster, 1)
    now = int(time.time() * 1000)
    retention = COMPACT.delete_retention_ms
    await log.append(build_batch([Record(b"a", None, (), now - 1000)]))
    await log.append(build_batch([Record(b"tail", b"1", (), now)]))
    try:
        assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now) is not None
        later = now + retention // 2
        await log.append(build_batch([Record(b"b", None, (), later)]))
        await log.append(build_batch([Record(b"tail", b"2", (), later)]))
        assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=later) is not None
        assert log.tombstone_horizon_ms == now + retention
        assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now + retention) is not None
        # The first tail value stays: the second is the newest batch, which no round reads yet.
        assert [(r.key, r.value) for r in await _read_all(log)] == [(b"tail", b"1"), (b"b", None), (b"tail", b"2")]
        assert log.tombstone_horizon_ms == later + retention
    finally:
        await log.close()


async def test_a_tiny_dedupe_buffer_converges_over_several_rounds(cluster: dict[str, Any]) -> None:
    log = await _open(cluster, 1)
    now = int(time.time() * 1000)
    written = await _fill(log, rounds=6, keys=10, ts=now - 1000, per_batch=2)
    await log.append(build_batch([Record(b"tail", b"t", (), now)]))
    try:
        rounds = 0
        full_rounds = 0
        while (result := await clean_partition(log, dedupe_buffer_bytes=3 * ENTRY_BYTES, now_ms=now)) is not None:
            rounds += 1
            full_rounds += result.map_full
            assert rounds < 100
        assert rounds > 3 and full_rounds == rounds - 1
        records = await _read_all(log)
        expected = _latest(written)
        assert [(r.offset, r.value) for r in records[:-1]] == sorted((r.offset, r.value) for r in expected.values())
    finally:
        await log.close()


async def test_compacted_topics_refuse_keyless_records(cluster: dict[str, Any]) -> None:
    log = await _open(cluster, 1)
    try:
        with pytest.raises(KafkaError) as info:
            await log.append(build_batch([Record(b"k", b"v"), Record(None, b"no key")]))
        assert info.value.code == ErrorCode.invalid_record
        assert log.log_end_offset == 0
    finally:
        await log.close()


async def test_keyless_records_written_before_the_switch_to_compact_are_cleaned_away(cluster: dict[str, Any]) -> None:
    """Kafka's cleaner drops a record without a key (Cleaner.shouldRetainRecord: invalid for compaction); the keyed
    records around it follow the usual rule."""
    log = await _open(cluster, 1, LogConfig(compact=False, delete_retention_enabled=True))
    now = int(time.time() * 1000)
    await log.append(build_batch([Record(None, b"a", (), now - 1000), Record(b"k", b"old", (), now - 1000)]))
    await log.append(build_batch([Record(b"k", b"new", (), now - 1000), Record(None, b"b", (), now - 1000)]))
    await log.append(build_batch([Record(b"j", b"only", (), now - 1000)]))
    await log.append(build_batch([Record(None, b"tail", (), now)]))  # the newest batch stays dirty
    log.config = COMPACT
    try:
        assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now) is not None
        assert [(r.offset, r.key, r.value) for r in await _read_all(log)] == [
            (2, b"k", b"new"),
            (4, b"j", b"only"),
            (5, None, b"tail"),
        ]
    finally:
        await log.close()


# ---------------------------------------------------------------------------------------------- crash points
def _crash_in_append(stream: Any) -> None:
    """Dies at the second append to ``stream`` (a round crashing while it writes, the first append made)."""
    real = stream.append
    calls = [0]

    def append(payload: bytes, count: int) -> Awaitable[int]:
        calls[0] += 1
        if calls[0] == 2:
            raise _Crash()
        return real(payload, count)  # type: ignore[no-any-return]

    stream.append = append


class _Crash(Exception):
    """Stands for the process dying at the injection point (the engine is halted right after)."""


@pytest.mark.parametrize("point", ["writing", "before-switch", "after-switch", "after-trim"])
async def test_a_crash_at_any_point_of_a_round_leaves_every_latest_value(
    cluster: dict[str, Any], point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = await _open(cluster, 1)
    now = int(time.time() * 1000)
    written = await _fill(log, rounds=5, keys=4, ts=now - 1000)
    await log.append(build_batch([Record(b"tail", b"t", (), now)]))
    if point in {"after-switch", "after-trim"}:
        # A first round so that the crashing round replaces an existing cleaned stream.
        assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now) is not None
        written += await _fill(log, rounds=2, keys=4, ts=now)
        await log.append(build_batch([Record(b"tail", b"t2", (), now)]))
    expected = {k: r.value for k, r in _latest(written).items()}

    real_begin = log.begin_cleaning

    async def begin() -> Any:
        stream = await real_begin()
        if point == "writing":
            _crash_in_append(stream)
        return stream

    monkeypatch.setattr(log, "begin_cleaning", begin)

    async def before_switch() -> None:
        if point == "before-switch":
            raise _Crash()

    real_trim = log._state.log.trim

    async def trim(offset: int) -> None:
        if point == "after-switch":
            raise _Crash()
        await real_trim(offset)
        if point == "after-trim":
            assert log._state.doomed(), "the replaced cleaned stream is named doomed before it is deleted"
            raise _Crash()

    monkeypatch.setattr(log._state.log, "trim", trim)

    async def no_cleanup(stream: Any) -> None:
        return None  # a crashed process cleans nothing up

    monkeypatch.setattr(log, "abandon_cleaning", no_cleanup)
    with pytest.raises(_Crash):
        await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now, after_write=before_switch)
    await cluster["restart"]()

    log = await _open(cluster, 2)
    try:
        assert log._state.doomed() == []  # whatever the crash left behind was deleted on open
        records = await _read_all(log)
        latest = {k: r.value for k, r in _latest(records).items() if k != b"tail"}
        assert latest == {k: v for k, v in expected.items() if k != b"tail"}
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets))
        # A round the crash interrupted before its switch runs again; one that switched left nothing dirty.
        again = await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now)
        assert (again is not None) == (point in ("writing", "before-switch"))
        records = await _read_all(log)
        assert len([r for r in records if r.key != b"tail"]) == 4
    finally:
        try:
            await log.close()
        except StorageError:
            pass


async def test_a_round_cancelled_after_its_switch_keeps_the_installed_stream(
    cluster: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shutdown cancels the cleaner task; if that lands after the switch, the new cleaned stream is the partition's
    own and must survive the round's clean-up."""
    log = await _open(cluster, 1)
    now = int(time.time() * 1000)
    written = await _fill(log, rounds=4, keys=3, ts=now - 1000)
    await log.append(build_batch([Record(b"tail", b"t", (), now)]))
    real_trim = log._state.log.trim

    async def trim(offset: int) -> None:
        await real_trim(offset)
        raise asyncio.CancelledError

    monkeypatch.setattr(log._state.log, "trim", trim)
    with pytest.raises(asyncio.CancelledError):
        await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now)
    monkeypatch.undo()
    await log.close()
    log = await _open(cluster, 2)
    try:
        records = await _read_all(log)
        assert [(r.offset, r.value) for r in records[:-1]] == sorted(
            (r.offset, r.value) for r in _latest(written).values()
        )
    finally:
        await log.close()


async def test_delete_records_trims_into_the_cleaned_prefix_and_past_it(cluster: dict[str, Any]) -> None:
    # compact,delete: DeleteRecords refuses a compact-only topic (POLICY_VIOLATION, as Kafka does).
    log = await _open(cluster, 1, dataclasses.replace(COMPACT, delete_retention_enabled=True))
    now = int(time.time() * 1000)
    written = await _fill(log, rounds=4, keys=6, ts=now - 1000)
    await log.append(build_batch([Record(b"tail", b"t", (), now)]))
    assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now) is not None
    survivors = sorted(r.offset for r in _latest(written).values())
    size = log.size_bytes

    # Into the cleaned prefix: the records from the new log start on stay readable, the size shrinks.
    cut = survivors[3]  # the start of the second kept batch: the first one is deleted whole
    assert await log.delete_records_before(cut) == cut
    assert [r.offset for r in await _read_all(log)][:-1] == survivors[3:]
    assert 0 < log.size_bytes < size and log.cleaned_bytes < log.size_bytes

    # Past the cleaner offset: the cleaned prefix is gone entirely, and later rounds still work.
    tail_offset = log.high_watermark - 1
    assert await log.delete_records_before(tail_offset) == tail_offset
    assert log.cleaned_bytes == 0
    more = await _fill(log, rounds=2, keys=2, ts=now)
    await log.append(build_batch([Record(b"tail", b"t2", (), now)]))
    assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now) is not None
    expected = sorted([(tail_offset, b"t"), *((r.offset, r.value) for r in _latest(more).values())])
    assert [(r.offset, r.value) for r in await _read_all(log)][:-1] == expected
    await log.close()
    log = await _open(cluster, 2, dataclasses.replace(COMPACT, delete_retention_enabled=True))
    try:
        assert log.log_start_offset == tail_offset
        assert [(r.offset, r.value) for r in await _read_all(log)][:-1] == expected
    finally:
        await log.close()


async def test_deleting_a_partition_deletes_its_cleaned_stream_too(cluster: dict[str, Any]) -> None:
    log = await _open(cluster, 1)
    now = int(time.time() * 1000)
    await _fill(log, rounds=3, keys=2, ts=now - 1000)
    await log.append(build_batch([Record(b"tail", b"t", (), now)]))
    assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now) is not None
    assert log._state.stored.cleaned is not None
    ids = [log._state.log.stream_id, log._state.stored.cleaned.stream_id, log._state.meta.stream.stream_id]
    metadata: StreamMetadataStateMachine = cluster["metadata"]
    assert len(await metadata.get_streams(ids)) == 3
    await log.delete()
    assert await metadata.get_streams(ids) == []


async def test_leadership_lost_during_a_round_abandons_it_and_the_next_leader_cleans(cluster: dict[str, Any]) -> None:
    log = await _open(cluster, 1)
    now = int(time.time() * 1000)
    written = await _fill(log, rounds=3, keys=3, ts=now - 1000)
    await log.append(build_batch([Record(b"tail", b"t", (), now)]))

    async def lose_leadership() -> None:
        await log.close()  # what the partition manager does when the controller moves the partition

    assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now, after_write=lose_leadership) is None
    log = await _open(cluster, 2)
    try:
        assert log._state.doomed() == [] and log._state.stored.cleaned is None
        assert [r.offset for r in await _read_all(log)] == [*(r.offset for r in written), log.high_watermark - 1]
        assert await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now) is not None
        assert len(await _read_all(log)) == 4
    finally:
        await log.close()


async def test_min_compaction_lag_keeps_young_records_dirty(cluster: dict[str, Any]) -> None:
    log = await _open(cluster, 1, dataclasses.replace(COMPACT, min_compaction_lag_ms=60_000))
    now = int(time.time() * 1000)
    await _fill(log, rounds=2, keys=2, ts=now - 120_000)  # old enough
    young = await _fill(log, rounds=2, keys=2, ts=now - 1000)
    await log.append(build_batch([Record(b"tail", b"t", (), now)]))
    try:
        result = await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now)
        assert result is not None
        # The round stopped at the first batch younger than the lag: those records are all still there.
        assert result.end <= young[0].offset
        offsets = [r.offset for r in await _read_all(log)]
        assert all(r.offset in offsets for r in young)
    finally:
        await log.close()


async def test_a_stop_request_abandons_the_round_and_deletes_its_stream(
    cluster: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    log = await _open(cluster, 1)
    now = int(time.time() * 1000)
    written = await _fill(log, rounds=4, keys=3, ts=now - 1000)
    await log.append(build_batch([Record(b"tail", b"t", (), now)]))
    asked = [0]

    def stop_in_the_write_pass() -> bool:
        asked[0] += 1
        return asked[0] > 6  # past the key-map pass (5 batches), into the write pass

    with pytest.raises(CleanerStopped):
        await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now, should_stop=stop_in_the_write_pass)
    assert log._state.doomed() == [] and log._state.stored.cleaned is None
    await log.close()
    caplog.clear()
    caplog.set_level(logging.INFO, logger="broker.partition.partition_log")
    log = await _open(cluster, 2)
    try:
        # The partition closed cleanly (its meta stream was left intact), so the open recovers nothing.
        assert "opened changelog-0" in caplog.text and "recovering" not in caplog.text
        assert [r.offset for r in await _read_all(log)][:-1] == [r.offset for r in written]
    finally:
        await log.close()


async def test_a_crash_right_after_a_switch_keeps_an_idempotent_producer_s_last_sequence(
    cluster: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A producer's last batch cleaned away (another writer's record superseded its key), then a crash before any
    checkpoint after the switch is durable: its producer state comes back from the switch itself, so its next batch
    is taken, not refused OUT_OF_ORDER_SEQUENCE (Kafka's cleaner keeps the producer's last batch header for this)."""
    log = await _open(cluster, 1)
    now = int(time.time() * 1000)

    def idempotent(key: bytes, sequence: int) -> bytes:
        return build_batch([Record(key, b"p", (), now)], producer_id=4242, producer_epoch=0, base_sequence=sequence)

    await log.append(idempotent(b"a", 0))
    await log.append(idempotent(b"b", 1))
    await log.append(build_batch([Record(b"b", b"other", (), now)]))
    await log.append(build_batch([Record(b"tail", b"t", (), now)]))

    async def lost_in_the_crash(state: Any) -> None:
        state.checkpoint.task = None  # the background checkpoints the crash comes before

    monkeypatch.setattr(checkpoints, "_checkpoint", lost_in_the_crash)
    result = await clean_partition(log, dedupe_buffer_bytes=BIG_BUFFER, now_ms=now)
    assert result is not None and log.cleaner_offset > 1
    await cluster["restart"]()
    monkeypatch.undo()
    log = await _open(cluster, 2)
    try:
        assert (await log.append(idempotent(b"c", 2))).base_offset == 4
    finally:
        await log.close()
