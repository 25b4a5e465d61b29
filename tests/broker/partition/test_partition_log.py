"""PartitionLog over the real storage engine (file WAL + local object store on tmp_path, in-memory stream
metadata): validation errors, offsets, read limits, timestamps, leader epochs and reopen cycles."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from broker.partition.log_config import LogConfig
from broker.partition.partition_log import PartitionLog
from broker.partition.partition_log.append import validation_bytes
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.offload import INLINE_BYTES
from wire.batch_validation import validate_batch
from wire.errors import KafkaError
from wire.record_batch import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    Compression,
    Record,
    build_batch,
    decode_records,
    iter_batches,
)

TOPIC_ID = uuid.UUID(int=42)


async def _open(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], epoch: int, config: LogConfig | None = None
) -> PartitionLog:
    eng, metadata = engine
    return await PartitionLog.open(
        streams=eng,
        kv=metadata,
        namespace="_fjord_test",
        topic="orders",
        partition=3,
        topic_id=TOPIC_ID,
        leader_epoch=epoch,
        config=config or LogConfig(),
    )


def _batch(n: int, ts: int | None = None, size: int = 10) -> bytes:
    now = int(time.time() * 1000) if ts is None else ts
    return build_batch([Record(b"k%d" % i, b"v" * size, (), now + i) for i in range(n)])


async def test_offsets_continue_across_reopens_and_meta_stream_compacts(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    base_ts = 1_700_000_000_000
    end = 0
    for epoch in range(25):
        log = await _open(engine, epoch)
        assert log.log_end_offset == end and log.high_watermark == end
        result = await log.append(_batch(2, ts=base_ts + 10 * epoch))
        assert (result.base_offset, result.last_offset) == (end, end + 1)
        end += 2
        await log.close()
    log = await _open(engine, 25)
    try:
        # 26 opens wrote far more meta records than there are keys: the meta stream trimmed itself.
        assert log._state.meta.stream.start_offset > 0
        assert log.end_offset_for_epoch(3) == (3, 8)
        assert log.end_offset_for_epoch(25) == (25, 50)
        found = await log.offset_for_timestamp(base_ts + 10 * 7 + 1)
        assert found is not None and (found.offset, found.timestamp) == (15, base_ts + 71)
        read = await log.read(0, 1 << 20)
        offsets = [r.offset for _, batch in iter_batches(read.records) for r in decode_records(batch)]
        assert offsets == list(range(50))
        epochs = [h.partition_leader_epoch for h, _ in iter_batches(read.records)]
        assert epochs == list(range(25))
    finally:
        await log.close()


async def test_invalid_batches_are_rejected_with_kafka_codes(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    config = LogConfig(max_message_bytes=500, timestamp_after_max_ms=60_000)
    log = await _open(engine, 0, config)
    try:
        corrupt = bytearray(_batch(1))
        corrupt[-1] ^= 0x55
        cases = [
            (bytes(corrupt), ErrorCode.corrupt_message),
            (_batch(1, size=1000), ErrorCode.message_too_large),
            (_batch(1, ts=int(time.time() * 1000) + 3_600_000), ErrorCode.invalid_timestamp),
            (b"\x00" * 10, ErrorCode.corrupt_message),  # not even a batch header
            (b"\x00" * 30, ErrorCode.invalid_record),  # magic 0: an old message format, as Kafka answers it
            (build_batch([Record(None, b"x")], is_control=True), ErrorCode.invalid_record),
            (_batch(1) + _batch(2), ErrorCode.invalid_record),  # a client sends one batch per partition and request
        ]
        for records, code in cases:
            with pytest.raises(KafkaError) as info:
                await log.append(records)
            assert info.value.code == code, info.value
            assert "orders-3" in str(info.value)
        assert log.log_end_offset == 0  # nothing was appended
    finally:
        await log.close()


async def test_a_compressed_batch_checked_in_a_thread_keeps_its_place_before_the_next_append(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    # Large enough for its decompression to run in a thread (storage.offload); a small plain batch started right
    # after it must still come after it, as a connection's appends take offsets in the order they started.
    log = await _open(engine, 0, LogConfig(max_message_bytes=8 << 20))
    try:
        big = build_batch([Record(b"k", os.urandom(1024), (), None) for _ in range(2000)], compression=Compression.LZ4)
        assert validation_bytes(big) > INLINE_BYTES
        first = asyncio.ensure_future(log.append(big))
        second = asyncio.ensure_future(log.append(_batch(1)))
        done = await asyncio.wait_for(asyncio.gather(first, second), 30)
        assert [r.base_offset for r in done] == [0, 2000]
    finally:
        await log.close()


async def test_a_small_compressed_batch_decompressing_past_the_loops_room_is_checked_in_full(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    # A few KB of zstd that decompress to 2 MB: checked on the event loop into INLINE_BYTES at most, then again with
    # a batch's whole room in the checking thread, and appended (not refused as too large), still in its place.
    log = await _open(engine, 0, LogConfig(max_message_bytes=8 << 20))
    try:
        small = build_batch([Record(b"k", bytes(1024), (), None) for _ in range(2000)], compression=Compression.ZSTD)
        assert validation_bytes(small) <= INLINE_BYTES
        first = asyncio.ensure_future(log.append(small))
        second = asyncio.ensure_future(log.append(_batch(1)))
        done = await asyncio.wait_for(asyncio.gather(first, second), 30)
        assert [r.base_offset for r in done] == [0, 2000]
    finally:
        await log.close()


async def test_log_append_time_rewrites_timestamps_and_keeps_batches_valid(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    log = await _open(engine, 0, LogConfig(log_append_time=True))
    try:
        before = int(time.time() * 1000)
        result = await log.append(_batch(3, ts=1000))
        assert result.log_append_time_ms >= before
        read = await log.read(0, 1 << 20)
        header = validate_batch(read.records)  # CRC recomputed after the rewrite
        assert header.timestamp_type == LOG_APPEND_TIME
        assert {r.timestamp for r in decode_records(read.records)} == {result.log_append_time_ms}
    finally:
        await log.close()


async def test_a_producers_log_append_time_flag_is_refused_or_stored_as_the_topics_type(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    now = int(time.time() * 1000)
    flagged = build_batch([Record(b"k", b"v", (), now)], timestamp_type=LOG_APPEND_TIME)
    far = build_batch([Record(b"k", b"v", (), now + 7 * 86_400_000)], timestamp_type=LOG_APPEND_TIME)
    stamped = await _open(engine, 0, LogConfig(log_append_time=True))
    try:
        with pytest.raises(KafkaError) as info:
            await stamped.append(flagged)  # the broker stamps LogAppendTime, never the producer
        assert info.value.code == ErrorCode.invalid_timestamp
    finally:
        await stamped.close()
    created = await _open(engine, 1, LogConfig(timestamp_after_max_ms=3_600_000))
    try:
        with pytest.raises(KafkaError) as info:
            await created.append(far)  # checked as CreateTime whatever the flag says
        assert info.value.code == ErrorCode.invalid_timestamp
        await created.append(flagged)
        read = await created.read(0, 1 << 20)
        header = validate_batch(read.records)  # CRC recomputed after the type's rewrite
        assert (header.timestamp_type, header.max_timestamp) == (CREATE_TIME, now)
    finally:
        await created.close()


async def test_log_append_time_producer_state_and_retries_follow_the_brokers_clock(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    log = await _open(engine, 0, LogConfig(log_append_time=True))
    try:
        two_days_ago = int(time.time() * 1000) - 2 * 86_400_000  # the producer's clock is behind
        batch = build_batch(
            [Record(b"k", b"v", (), two_days_ago)], producer_id=7, producer_epoch=0, base_sequence=0
        )
        first = await log.append(batch)
        entry = log.producers.get(7)
        assert entry is not None and entry.last_timestamp == first.log_append_time_ms > two_days_ago
        retry = await log.append(batch)
        assert (retry.base_offset, retry.log_append_time_ms) == (first.base_offset, first.log_append_time_ms)
    finally:
        await log.close()


@pytest.mark.parametrize("log_append_time", [False, True])
async def test_several_batches_of_one_internal_append_get_consecutive_offsets_and_stay_valid(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], log_append_time: bool
) -> None:
    log = await _open(engine, 7, LogConfig(log_append_time=log_append_time))
    try:
        await log.append(_batch(2))
        sent = [_batch(3, size=50), _batch(1, size=5000), _batch(4, size=1)]
        result = await log.append(b"".join(sent), origin="coordinator")
        assert (result.base_offset, result.last_offset) == (2, 9)
        read = await log.read(2, 1 << 20)
        got = list(iter_batches(read.records))
        assert [h.base_offset for h, _ in got] == [2, 5, 6]
        assert [h.partition_leader_epoch for h, _ in got] == [7, 7, 7]
        for (header, stored), original in zip(got, sent, strict=True):
            validate_batch(stored)  # CRC holds after the rewrite
            assert header.size == len(original)
            # Records (keys, values, headers) come back exactly as sent; only offsets/epoch/append time differ.
            assert [(r.key, r.value) for r in decode_records(stored)] == [
                (r.key, r.value) for r in decode_records(original)
            ]
            if not log_append_time:
                assert bytes(stored[16:]) == original[16:]  # from the magic byte on: untouched
        offsets = [r.offset for _, batch in got for r in decode_records(batch)]
        assert offsets == list(range(2, 10))
    finally:
        await log.close()


async def test_read_limits_return_whole_batches_and_always_the_first(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    log = await _open(engine, 0)
    try:
        for _ in range(4):
            await log.append(_batch(5, size=200))  # ~1.1 KB batches
        one = await log.read(0, 10)
        assert [h.base_offset for h, _ in iter_batches(one.records)] == [0]
        none = await log.read(0, 10, min_one=False)
        assert none.records == b""
        two = await log.read(5, 2500)
        assert [h.base_offset for h, _ in iter_batches(two.records)] == [5, 10]
        with pytest.raises(KafkaError) as info:
            await log.read(21, 100)
        assert info.value.code == ErrorCode.offset_out_of_range
        assert (await log.read(20, 100)).records == b""
    finally:
        await log.close()


async def test_delete_records_trims_and_persists_log_start(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    config = LogConfig(index_interval_bytes=1)  # a time-index entry for every batch
    log = await _open(engine, 0, config)
    for i in range(3):
        await log.append(_batch(4, ts=1_000_000 + 100 * i))
    assert len(log.time_index) == 3
    assert await log.delete_records_before(6) == 6
    assert log._state.time.start_offset == 2  # the entries for offsets 0 and 4 are gone from the time stream
    with pytest.raises(KafkaError) as info:
        await log.delete_records_before(99)
    assert info.value.code == ErrorCode.offset_out_of_range
    await log.close()
    log = await _open(engine, 1, config)
    try:
        assert log.log_start_offset == 6
        assert len(log.time_index) == 1
        found = await log.offset_for_timestamp(1_000_000)  # older than everything kept: the first kept record
        assert found is not None and (found.offset, found.timestamp) == (6, 1_000_102)
        earliest = await log.offset_for_timestamp(-2)
        assert earliest is not None and earliest.offset == 6
        with pytest.raises(KafkaError):
            await log.read(2, 100)
    finally:
        await log.close()


async def test_delete_destroys_streams_and_kv_entry(engine: tuple[StorageEngine, StreamMetadataStateMachine]) -> None:
    _, metadata = engine
    log = await _open(engine, 0)
    await log.append(_batch(3))
    stream_ids = [log._state.log.stream_id, log._state.time.stream_id, log._state.meta.stream.stream_id]
    assert len(await metadata.get_streams(stream_ids)) == 3
    await log.delete()
    assert await metadata.get_kv(f"_fjord_test/{TOPIC_ID}/3") is None
    assert await metadata.get_streams(stream_ids) == []
    with pytest.raises(KafkaError) as info:
        await log.append(_batch(1))
    assert info.value.code == ErrorCode.not_leader_or_follower
    fresh = await _open(engine, 1)  # a topic re-created under the same id would start from scratch
    try:
        assert (fresh.log_start_offset, fresh.log_end_offset) == (0, 0)
    finally:
        await fresh.close()


async def test_partitions_closed_together_share_one_upload_and_close_cleanly(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    """A broker losing several partitions at once (a balancer moving them away) uploads their last records and
    closing meta entries in one block, and each reopens at its log end."""
    eng, metadata = engine

    async def open_partition(partition: int, epoch: int) -> PartitionLog:
        return await PartitionLog.open(streams=eng, kv=metadata, namespace="_fjord_test", topic="orders",
                                       partition=partition, topic_id=TOPIC_ID, leader_epoch=epoch, config=LogConfig())

    logs = [await open_partition(p, 0) for p in range(3)]
    for n, log in enumerate(logs):
        await log.append(_batch(n + 1))
    before = eng.stats().blocks_uploaded
    assert await PartitionLog.close_together(logs) == [None, None, None]
    assert eng.stats().blocks_uploaded == before + 1
    assert all(log.closed for log in logs)
    for n in range(3):
        log = await open_partition(n, 1)
        try:
            assert log.log_end_offset == n + 1
        finally:
            await log.close()


async def test_a_moved_partition_opens_from_its_closing_entries_alone(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    """A clean close leaves the meta stream holding only its live entries (the next opener replays those, from the
    object the close uploaded) and names the time index's newest entry, so the open reads nothing else; what a
    client asks of the reopened partition by timestamp is what it was before the move."""
    _, metadata = engine
    base_ts = 1_700_000_000_000
    log = await _open(engine, 0)
    for i in range(4):
        await log.append(_batch(2, ts=base_ts + 100 * i))
    await log.close()
    log = await _open(engine, 1)
    await log.append(_batch(2, ts=base_ts + 1000))
    meta_id = log._state.meta.stream.stream_id
    await log.close()
    (stream,) = await metadata.get_streams([meta_id])
    assert stream.end_offset - stream.start_offset == 4  # LOG, PARTITION, PRODUCER_SNAPSHOTS, LEADER_EPOCH_CHECKPOINT
    log = await _open(engine, 2)
    try:
        assert log._state.time_index.last is not None and log._state.time_index.last.offset == 8
        newest = await log.offset_for_timestamp(-3)
        assert newest is not None and (newest.offset, newest.timestamp) == (9, base_ts + 1001)
        found = await log.offset_for_timestamp(base_ts + 150)
        assert found is not None and (found.offset, found.timestamp) == (4, base_ts + 200)
        assert log.end_offset_for_epoch(1) == (1, 10)
    finally:
        await log.close()
