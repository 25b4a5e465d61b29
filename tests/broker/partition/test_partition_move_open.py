"""A reassignment's target opening the partition after its source closed it (over the real storage engine of each
broker and one in-process stream metadata, as a move between two brokers).

A moved partition's producer waits for the source's close and then for the target's open. The target knows it opens
a moved partition (it read the meta stream id ahead, while the source closed it), so it reads the meta stream's
committed records while it opens the meta stream, opens the streams their LOG entry names as soon as the read is
back (rather than after the replay: a controller round trip less), and replays what it read when that is the whole
stream as its open found it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Sequence

from broker.partition.log_config import LogConfig
from broker.partition.partition_log import PartitionLog
from storage.engine import StorageEngine
from storage.errors import StorageError, WALUnavailableError
from storage.metadata.api import CommitStreamSetObjectRequest, NodeIdentity, StreamClose
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.stream_api import CommittedRecords, Stream, StreamClient
from wire.record_batch import Record, build_batch, decode_records, iter_batches

TOPIC_ID = uuid.UUID(int=9)
NAMESPACE = "_fjord_test"
PARTITION = 3


class OpenOrder:
    """The target's stream client, noting when each open is asked and answered and each read asked. Each open
    yields to the event loop once before it is answered, as a call to a remote controller does (the in-process
    metadata would answer at once, and the opens asked together would then run one after another). ``stale``: a
    read to answer instead of reading (one made before the source closed); ``held``: a stream whose open is answered
    only once ``release`` is set (a slow controller)."""

    def __init__(self, engine: StorageEngine, stale: CommittedRecords | None = None, held: int | None = None) -> None:
        self._engine = engine
        self._stale = stale
        self._held = held
        self.release = asyncio.Event()
        self.events: list[tuple[str, int]] = []

    async def create_stream(self, tags: Sequence[tuple[str, str]] = ()) -> int:
        return await self._engine.create_stream(tags)

    async def open_stream(self, stream_id: int, epoch: int) -> Stream:
        self.events.append(("ask", stream_id))
        await asyncio.sleep(0)
        if stream_id == self._held:
            await self.release.wait()
        stream = await self._engine.open_stream(stream_id, epoch)
        self.events.append(("opened", stream_id))
        return stream

    async def delete_stream(self, stream_id: int, epoch: int) -> None:
        await self._engine.delete_stream(stream_id, epoch)

    async def close_streams(self, closes: Sequence[tuple[Stream, int]]) -> None:
        await self._engine.close_streams(closes)

    async def read_committed(self, stream_id: int, max_bytes: int) -> CommittedRecords:
        self.events.append(("read", stream_id))
        if self._stale is not None:
            return self._stale
        return await self._engine.read_committed(stream_id, max_bytes)


async def _open(streams: StreamClient, metadata: StreamMetadataStateMachine, epoch: int, *,
                meta_id: int | None = None) -> PartitionLog:
    return await PartitionLog.open(
        streams=streams, kv=metadata, namespace=NAMESPACE, topic="moving", partition=PARTITION, topic_id=TOPIC_ID,
        leader_epoch=epoch, config=LogConfig(), meta_id=meta_id,
    )


async def _led_for_a_while(source: StorageEngine, metadata: StreamMetadataStateMachine, values: list[bytes]
                           ) -> PartitionLog:
    """The partition opened on the source with idempotent ``values`` appended and uploaded, as one that has led a
    while."""
    log = await _open(source, metadata, 0)
    now = int(time.time() * 1000)
    for sequence, value in enumerate(values):
        await log.append(build_batch([Record(None, value, (), now)], producer_id=7, producer_epoch=0,
                                     base_sequence=sequence))
    await source.force_upload()
    return log


def _values(records: bytes) -> list[bytes]:
    return [r.value or b"" for _, batch in iter_batches(records) for r in decode_records(batch)]


async def _carries_on(moved: PartitionLog, acked: list[bytes]) -> None:
    """The moved partition holds every record and takes the producer's next batch at the next offset (its producer
    state came with the meta stream's closing entries)."""
    assert _values((await moved.read(0, 1 << 20)).records) == acked
    now = int(time.time() * 1000)
    result = await moved.append(build_batch([Record(None, b"next", (), now)], producer_id=7, producer_epoch=0,
                                            base_sequence=len(acked)))
    assert result.base_offset == len(acked)


async def test_a_move_target_opens_the_log_streams_without_waiting_for_the_meta_streams_open(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], second_engine: StorageEngine,
) -> None:
    source, metadata = engine
    acked = [b"m1", b"m2", b"m3"]
    log = await _led_for_a_while(source, metadata, acked)
    log_id = log.log_stream_id
    meta_id = await PartitionLog.read_ahead(metadata, NAMESPACE, TOPIC_ID, PARTITION)  # while the source closes
    assert meta_id == log.meta_stream_id
    await log.close()
    client = OpenOrder(second_engine, held=meta_id)
    opening = asyncio.ensure_future(_open(client, metadata, 1, meta_id=meta_id))
    deadline = time.monotonic() + 10
    while ("ask", log_id) not in client.events and not opening.done() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    assert ("ask", log_id) in client.events, f"the log stream waited for the meta stream's open: {client.events}"
    assert ("opened", meta_id) not in client.events
    client.release.set()
    moved = await asyncio.wait_for(opening, 10)
    try:
        assert client.events[:2] == [("read", meta_id), ("ask", meta_id)], client.events
        await _carries_on(moved, acked)
    finally:
        await moved.close()


async def test_an_open_that_is_not_a_moves_reads_the_meta_stream_once_it_is_open(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], second_engine: StorageEngine,
) -> None:
    """A restart's open, say: the meta stream's previous owner may not have closed it, so only the replay of the
    open stream knows which streams the partition has."""
    source, metadata = engine
    log = await _led_for_a_while(source, metadata, [b"x"])
    log_id = log.log_stream_id
    await log.close()
    client = OpenOrder(second_engine)
    moved = await _open(client, metadata, 1)
    try:
        assert client.events.index(("ask", log_id)) > client.events.index(("opened", moved.meta_stream_id))
        assert ("read", moved.meta_stream_id) not in client.events
    finally:
        await moved.close()


async def test_a_read_of_the_meta_stream_before_its_close_is_not_replayed(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], second_engine: StorageEngine,
) -> None:
    """What was read is replayed only when it is the whole stream the open found: a read that raced the source's
    close lacks the closing entries (here the producer state at the log end)."""
    source, metadata = engine
    acked = [b"a", b"b"]
    log = await _led_for_a_while(source, metadata, acked)
    meta_id = log.meta_stream_id
    now = int(time.time() * 1000)
    stale = await second_engine.read_committed(meta_id, 1 << 20)
    acked.append(b"c")
    await log.append(build_batch([Record(None, b"c", (), now)], producer_id=7, producer_epoch=0, base_sequence=2))
    await log.close()
    moved = await _open(OpenOrder(second_engine, stale), metadata, 1, meta_id=meta_id)
    try:
        await _carries_on(moved, acked)
    finally:
        await moved.close()


async def _acked_with_a_tail(source: StorageEngine, metadata: StreamMetadataStateMachine) -> tuple[PartitionLog,
                                                                                                   list[bytes]]:
    """A partition that led a while, with one more acknowledged record only in the source's WAL (not uploaded)."""
    acked = [b"u1", b"u2"]
    log = await _led_for_a_while(source, metadata, acked)
    now = int(time.time() * 1000)
    await log.append(build_batch([Record(None, b"w3", (), now)], producer_id=7, producer_epoch=0, base_sequence=2))
    return log, [*acked, b"w3"]


async def test_a_close_whose_closing_entries_the_wal_refuses_still_closes_the_streams_for_the_target(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], second_engine: StorageEngine,
) -> None:
    """The S3 WAL refusing appends for a moment (past s3.wal.unwritable.max.ms) as the source writes its closing
    meta entries: the close is unclean, but its streams are uploaded and closed at the controller all the same, so
    the target opens the partition (recovering it from its log) and serves every acknowledged record."""
    source, metadata = engine
    log, acked = await _acked_with_a_tail(source, metadata)
    meta_stream = log._state.meta.stream
    append = meta_stream.append
    refused: list[int] = []

    def refusing_once(payload: bytes, count: int) -> Awaitable[int]:
        if not refused:
            refused.append(count)
            raise WALUnavailableError("the WAL's storage has been unwritable for too long")
        return append(payload, count)

    meta_stream.append = refusing_once  # type: ignore[method-assign]
    await log.close()
    assert refused
    moved = await asyncio.wait_for(_open(second_engine, metadata, 1), 10)
    try:
        await _carries_on(moved, acked)
    finally:
        await moved.close()


async def test_a_close_whose_controller_call_fails_is_retried_for_the_target(
    engine: tuple[StorageEngine, StreamMetadataStateMachine], second_engine: StorageEngine,
) -> None:
    """The controller failing the close once its upload committed the last records (a controller failover): the
    streams, closed on the source's side already, are closed at the controller again, so the target opens the
    partition and serves every acknowledged record."""
    source, metadata = engine
    log, acked = await _acked_with_a_tail(source, metadata)
    commit, close = metadata.commit_stream_set_object, metadata.close_streams
    failed: list[str] = []

    async def commit_failing_its_closes(request: CommitStreamSetObjectRequest) -> None:
        if request.closes and "commit" not in failed:
            failed.append("commit")
            raise StorageError("the controller did not answer")
        await commit(request)

    async def close_failing_once(node: NodeIdentity, closes: Sequence[StreamClose]) -> None:
        if "close" not in failed:
            failed.append("close")
            raise StorageError("the controller did not answer")
        await close(node, closes)

    metadata.commit_stream_set_object = commit_failing_its_closes  # type: ignore[method-assign]
    metadata.close_streams = close_failing_once  # type: ignore[method-assign]
    await log.close()
    assert "close" in failed
    moved = await asyncio.wait_for(_open(second_engine, metadata, 1), 10)
    try:
        await _carries_on(moved, acked)
    finally:
        await moved.close()
