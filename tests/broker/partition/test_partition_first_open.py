"""Two brokers opening a brand-new partition at once (over the real storage engine and in-process stream metadata).

In a cluster this happens when the partition's first leader is fenced (a missed heartbeat on a loaded machine)
while it opens the partition: its stream-metadata writes wait for the fence to lift, and meanwhile the new leader
opens the partition, finds no KV entry either, and takes writes. The two must end up on one meta stream, so that
stream epochs order them; with one meta stream each, the records acknowledged through the streams whose KV entry
was overwritten are gone at the next open (the first records of a new topic's partition, lost).

The fault injected: the first leader's creation of the meta stream is held until the new leader has opened the
partition and acknowledged records.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Sequence

import pytest

from broker.partition.log_config import LogConfig
from broker.partition.partition_log import PartitionLog
from broker.partition.partition_log.opening import open_stream
from storage.engine import StorageEngine
from storage.errors import StorageError
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.stream_api import Stream, StreamClient
from wire.errors import KafkaError
from wire.record_batch import Record, build_batch, decode_records, iter_batches

TOPIC_ID = uuid.UUID(int=7)


class HeldCreate:
    """The engine, except that creating the meta stream waits until ``release`` is set (a fenced broker's
    stream-metadata write waiting for its fence to lift)."""

    def __init__(self, engine: StorageEngine) -> None:
        self._engine = engine
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def create_stream(self, tags: Sequence[tuple[str, str]] = ()) -> int:
        if ("type", "meta") in tags:
            self.reached.set()
            await self.release.wait()
        return await self._engine.create_stream(tags)

    async def open_stream(self, stream_id: int, epoch: int) -> Stream:
        return await self._engine.open_stream(stream_id, epoch)

    async def delete_stream(self, stream_id: int, epoch: int) -> None:
        await self._engine.delete_stream(stream_id, epoch)

    async def close_streams(self, closes: Sequence[tuple[Stream, int]]) -> None:
        await self._engine.close_streams(closes)


async def _open(streams: StreamClient, metadata: StreamMetadataStateMachine, epoch: int) -> PartitionLog:
    return await PartitionLog.open(
        streams=streams, kv=metadata, namespace="_fjord_test", topic="fresh", partition=4, topic_id=TOPIC_ID,
        leader_epoch=epoch, config=LogConfig(),
    )


def _values(records: bytes) -> list[bytes]:
    return [r.value or b"" for _, batch in iter_batches(records) for r in decode_records(batch)]


async def test_a_partition_opened_by_its_old_and_new_leader_at_once_keeps_every_acknowledged_record(
    engine: tuple[StorageEngine, StreamMetadataStateMachine],
) -> None:
    eng, metadata = engine
    held = HeldCreate(eng)
    old_leader = asyncio.ensure_future(_open(held, metadata, 0))
    await asyncio.wait_for(held.reached.wait(), 10)  # it found no KV entry and is about to create the partition
    new_leader = await _open(eng, metadata, 1)
    now = int(time.time() * 1000)
    acked = [b"r4", b"r10", b"r16", b"r22"]
    for value in acked:
        await new_leader.append(build_batch([Record(None, value, (), now)]))
    held.release.set()
    # The old leader must not end up with a partition of its own that takes writes (it is fenced by the new
    # leader's epoch instead); before the fix it opened fresh streams and overwrote the KV entry.
    with pytest.raises((StorageError, KafkaError)):
        stale = await asyncio.wait_for(old_leader, 30)
        await stale.close()
    await new_leader.close()
    reopened = await _open(eng, metadata, 2)
    try:
        read = await reopened.read(0, 1 << 20)
        assert _values(read.records) == acked, "acknowledged records lost at the next open"
    finally:
        await reopened.close()


async def test_a_wait_for_a_streams_previous_owner_is_logged_when_it_starts_and_when_it_ends(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], second_engine: StorageEngine,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A new leader waits while the old one (or a WAL failover's replay) still has the partition's streams open. A
    failover keeps every partition of the dead broker waiting for seconds, retrying every 100 ms: the log says
    when the wait starts and how long it took, not one line per retry."""
    old_owner, _ = engine
    stream_id = await old_owner.create_stream((("type", "log"),))
    old = await old_owner.open_stream(stream_id, 0)
    caplog.set_level(logging.INFO, logger="broker.partition.partition_log.opening")
    waiting = asyncio.ensure_future(open_stream(second_engine, stream_id, 1, "waiting-0"))
    await asyncio.sleep(0.45)  # several retries
    assert not waiting.done()
    await old_owner.close_streams([(old, 0)])
    reopened = await asyncio.wait_for(waiting, 5)
    assert reopened.stream_id == stream_id
    lines = [r.getMessage() for r in caplog.records if f"stream {stream_id} of waiting-0" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "is still open elsewhere; retrying every 100 ms" in lines[0]
    assert re.search(r"opened after waiting 0\.[4-9]\d* s for its previous owner", lines[1]), lines[1]
