"""A reassignment's target opening the partition with what it read ahead while the source still had it open (over
the real storage engine of each broker and one in-process stream metadata, as a move between two brokers).

A moved partition's producer waits for the source's close and then for the target's open. The target reads the
partition's meta stream id and the streams the meta stream's committed LOG entry names while the source closes; its
open then asks the controller for all of them at once instead of opening the log and time streams only after the
meta stream's replay (one controller round trip, a Raft commit, less). What it read ahead is checked against the LOG
entry the replay finds.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import pytest

from broker.partition.log_config import LogConfig
from broker.partition.partition_log import PartitionLog
from storage.config import BucketURL, StorageConfig
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.stream_api import CommittedRecords, Stream, StreamClient
from wire.errors import KafkaError
from wire.record_batch import Record, build_batch, decode_records, iter_batches

TOPIC_ID = uuid.UUID(int=9)
NAMESPACE = "_fjord_test"
PARTITION = 3


class OpenOrder:
    """The target's stream client, noting when each open is asked and when it is answered. Each open yields to the
    event loop once before it is answered, as a call to a remote controller does (the in-process metadata would
    answer at once, and the opens asked together would then run one after another)."""

    def __init__(self, engine: StorageEngine) -> None:
        self._engine = engine
        self.events: list[tuple[str, int]] = []

    async def create_stream(self, tags: Sequence[tuple[str, str]] = ()) -> int:
        return await self._engine.create_stream(tags)

    async def open_stream(self, stream_id: int, epoch: int) -> Stream:
        self.events.append(("ask", stream_id))
        await asyncio.sleep(0)
        stream = await self._engine.open_stream(stream_id, epoch)
        self.events.append(("opened", stream_id))
        return stream

    async def delete_stream(self, stream_id: int, epoch: int) -> None:
        await self._engine.delete_stream(stream_id, epoch)

    async def close_streams(self, closes: Sequence[tuple[Stream, int]]) -> None:
        await self._engine.close_streams(closes)

    async def read_committed(self, stream_id: int, max_bytes: int) -> CommittedRecords:
        self.events.append(("read", stream_id))
        return await self._engine.read_committed(stream_id, max_bytes)


@pytest.fixture
async def target(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], tmp_path: Path
) -> AsyncIterator[StorageEngine]:
    """A second broker's engine over the same object storage and metadata as ``engine`` (node 1)."""
    _, metadata = engine
    other = StorageEngine(
        StorageConfig(
            data_buckets=(BucketURL(0, "file", str(tmp_path / "objects")),),
            wal_url=BucketURL(0, "file", str(tmp_path / "wal-2")),
            cluster_id="test",
            node_id=2,
        ),
        metadata,
    )
    await other.start()
    try:
        yield other
    finally:
        await other.shutdown()


async def _open(streams: StreamClient, metadata: StreamMetadataStateMachine, epoch: int, *,
                meta_id: int | None = None, hinted: Mapping[str, int] | None = None) -> PartitionLog:
    return await PartitionLog.open(
        streams=streams, kv=metadata, namespace=NAMESPACE, topic="moving", partition=PARTITION, topic_id=TOPIC_ID,
        leader_epoch=epoch, config=LogConfig(), meta_id=meta_id, hinted=hinted,
    )


async def _led_for_a_while(source: StorageEngine, metadata: StreamMetadataStateMachine, values: list[bytes]
                           ) -> PartitionLog:
    """The partition opened on the source with ``values`` appended and uploaded, as one that has led a while."""
    log = await _open(source, metadata, 0)
    now = int(time.time() * 1000)
    for value in values:
        await log.append(build_batch([Record(None, value, (), now)]))
    await source.force_upload()
    return log


def _values(records: bytes) -> list[bytes]:
    return [r.value or b"" for _, batch in iter_batches(records) for r in decode_records(batch)]


async def test_a_target_opens_the_streams_it_read_ahead_together_with_the_meta_stream(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], target: StorageEngine,
) -> None:
    source, metadata = engine
    acked = [b"m1", b"m2", b"m3"]
    log = await _led_for_a_while(source, metadata, acked)
    log_id = log.log_stream_id
    # Read by the target while the source still has the partition open.
    meta_id = await PartitionLog.read_ahead(metadata, NAMESPACE, TOPIC_ID, PARTITION)
    assert meta_id == log.meta_stream_id
    hinted = await PartitionLog.read_streams_ahead(target, meta_id, f"moving-{PARTITION}")
    assert hinted.keys() == {"log", "tim"}  # no txn or share stream yet
    assert hinted["log"] == log_id
    time_id = hinted["tim"]
    assert time_id not in (log_id, meta_id)

    await log.close()
    client = OpenOrder(target)
    moved = await _open(client, metadata, 1, meta_id=meta_id, hinted=hinted)
    try:
        asked = [stream_id for event, stream_id in client.events if event == "ask"]
        assert sorted(asked) == sorted([meta_id, log_id, time_id])
        assert client.events.index(("opened", meta_id)) > client.events.index(("ask", log_id)), (
            f"the log stream was asked for only after the meta stream was open: {client.events}")
        assert client.events.index(("opened", meta_id)) > client.events.index(("read", meta_id)), (
            f"the meta stream was read only once it was open: {client.events}")
        assert _values((await moved.read(0, 1 << 20)).records) == acked
        now = int(time.time() * 1000)
        assert (await moved.append(build_batch([Record(None, b"m4", (), now)]))).base_offset == len(acked)
    finally:
        await moved.close()


async def test_without_a_read_ahead_the_target_opens_the_log_stream_after_the_meta_stream(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], target: StorageEngine,
) -> None:
    """The order the read ahead saves: the LOG entry naming the log stream is read from the open meta stream (an open
    that is not a move's, a restart's say, reads nothing before its streams are open)."""
    source, metadata = engine
    log = await _led_for_a_while(source, metadata, [b"x"])
    log_id = log.log_stream_id
    await log.close()
    client = OpenOrder(target)
    moved = await _open(client, metadata, 1)
    try:
        assert client.events.index(("ask", log_id)) > client.events.index(("opened", moved.meta_stream_id))
        assert ("read", moved.meta_stream_id) not in client.events
    finally:
        await moved.close()


async def test_a_read_ahead_the_log_entry_contradicts_fails_the_open_and_leaves_nothing_open(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], target: StorageEngine,
) -> None:
    source, metadata = engine
    acked = [b"a", b"b"]
    log = await _led_for_a_while(source, metadata, acked)
    meta_id, log_id = log.meta_stream_id, log.log_stream_id
    time_id = (await PartitionLog.read_streams_ahead(target, meta_id, f"moving-{PARTITION}"))["tim"]
    await log.close()
    with pytest.raises(KafkaError, match=f"stream {time_id} was read ahead as its log stream, but its LOG entry "
                                         f"names stream {log_id}"):
        await _open(target, metadata, 1, meta_id=meta_id, hinted={"log": time_id, "tim": log_id})
    # Nothing was left open at epoch 1: the next open, at the next epoch and without the read ahead, has it all.
    reopened = await _open(target, metadata, 2)
    try:
        assert _values((await reopened.read(0, 1 << 20)).records) == acked
    finally:
        await reopened.close()
