"""Streams over the engine: offsets, durability-ordered confirmation, fetch across cache and objects, fencing,
trim, close, destroy."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from storage.errors import (
    NodeEpochExpiredError,
    OffsetOutOfRangeError,
    StorageError,
    StreamFencedError,
    StreamNotClosedError,
    StreamNotFoundError,
    StreamNotOpenedError,
    WALError,
)
from storage.metadata.api import CommitStreamSetObjectRequest, StreamState
from storage.metadata.record_codec import MetadataRecord
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.metadata.stream_records import StreamEndOffsetsRecord, StreamRecord, StreamSetObjectRecord
from storage.stream_record_batch import StreamRecordBatch
from storage.wal.base import WALRecord
from storage.wal.file import FileWAL
from testkit.waiting import eventually_async
from tests.storage.engine_support import make_engine, payload, small_config


async def test_append_assigns_offsets_at_call_time_and_fetch_reads_them_back(tmp_path: Path) -> None:
    engine = make_engine(small_config(tmp_path))
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), epoch=0)
        futures = []
        for i in range(20):
            assert stream.next_offset == i * 3
            futures.append(stream.append(payload(0, i), 3))
        assert stream.next_offset == 60
        assert await asyncio.gather(*futures) == [i * 3 for i in range(20)]
        assert stream.confirm_offset == 60
        result = await stream.fetch(0, 60, 10**9)
        assert [b.base_offset for b in result.batches] == [i * 3 for i in range(20)]
        assert [b.payload for b in result.batches] == [payload(0, i) for i in range(20)]
        # A start inside a batch returns that whole batch first.
        inside = await stream.fetch(4, 10, 10**9)
        assert [b.base_offset for b in inside.batches] == [3, 6, 9]
    finally:
        await engine.shutdown()


async def test_fetch_is_seamless_across_uploaded_objects_and_cache(tmp_path: Path) -> None:
    # 1000-byte appends, 16 KiB upload threshold: most data ends up in objects, the tail stays cached.
    engine = make_engine(small_config(tmp_path, wal_cache_size=16 * 1024))
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), epoch=0)
        for i in range(100):
            await stream.append(payload(stream.stream_id, i), 1)
        await engine.force_upload()  # everything committed...
        for i in range(100, 110):
            await stream.append(payload(stream.stream_id, i), 1)  # ...except this cached tail
        assert engine.stats().objects_uploaded >= 6
        first_cached = engine.log_cache.first_offset(stream.stream_id)
        assert first_cached is not None and first_cached > 0  # the head was evicted from the cache
        everything: list[StreamRecordBatch] = []
        offset = 0
        while offset < 110:
            result = await stream.fetch(offset, 110, 5000)
            assert result.batches, offset
            assert sum(b.size for b in result.batches[1:]) < 5000
            everything += result.batches
            offset = result.batches[-1].last_offset
        assert [b.payload for b in everything] == [payload(stream.stream_id, i) for i in range(110)]
        cold = await stream.fetch(0, 110, 10**9)
        assert not cold.cache_hit
        assert [b.base_offset for b in cold.batches] == list(range(110))
        hot = await stream.fetch(105, 110, 10**9)
        assert hot.cache_hit and [b.base_offset for b in hot.batches] == list(range(105, 110))
    finally:
        await engine.shutdown()


async def test_first_batch_is_returned_even_when_bigger_than_max_bytes(tmp_path: Path) -> None:
    engine = make_engine(small_config(tmp_path))
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), epoch=0)
        await stream.append(b"x" * 5000, 1)
        await stream.append(b"y" * 10, 1)
        cached = await stream.fetch(0, 2, 100)
        assert [b.size for b in cached.batches] == [5000]
        await engine.force_upload()
        engine.log_cache.forget(stream.stream_id)  # make the next read go to the object
        cold = await stream.fetch(0, 2, 100)
        assert [b.size for b in cold.batches] == [5000] and not cold.cache_hit
    finally:
        await engine.shutdown()


async def test_fetch_outside_the_stream_is_out_of_range(tmp_path: Path) -> None:
    engine = make_engine(small_config(tmp_path))
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), epoch=0)
        for i in range(10):
            await stream.append(payload(0, i), 1)
        with pytest.raises(OffsetOutOfRangeError, match=f"stream {stream.stream_id}"):
            await stream.fetch(11, 20, 1000)
        assert (await stream.fetch(10, 20, 1000)).batches == []  # at the end: empty, not an error
        await stream.trim(5)
        with pytest.raises(OffsetOutOfRangeError):
            await stream.fetch(4, 10, 1000)
        assert [b.base_offset for b in (await stream.fetch(5, 10, 10**6)).batches] == [5, 6, 7, 8, 9]
        with pytest.raises(OffsetOutOfRangeError):
            await stream.trim(11)
    finally:
        await engine.shutdown()


async def test_wait_for_append_wakes_on_append_and_times_out(tmp_path: Path) -> None:
    engine = make_engine(small_config(tmp_path))
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), epoch=0)
        assert not await stream.wait_for_append(0, 0.05)
        waiter = asyncio.ensure_future(stream.wait_for_append(0, 5))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        await stream.append(b"hello", 1)
        assert await asyncio.wait_for(waiter, 1)
    finally:
        await engine.shutdown()


async def test_readers_waiting_on_one_stream_are_woken_together_and_independently(tmp_path: Path) -> None:
    """Long-polling readers share the stream's wake-up: one giving up (a fetch cancelled or timed out) must not take
    the others' wake-up with it, one append wakes every reader it satisfies, and closing wakes the rest."""
    engine = make_engine(small_config(tmp_path))
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), epoch=0)
        quitter = asyncio.ensure_future(stream.wait_for_append(0, 5))
        short = asyncio.ensure_future(stream.wait_for_append(0, 0.05))
        readers = [asyncio.ensure_future(stream.wait_for_append(0, 5)) for _ in range(3)]
        further = asyncio.ensure_future(stream.wait_for_append(1, 5))
        await asyncio.sleep(0.01)
        quitter.cancel()
        assert await short is False
        assert not any(r.done() for r in readers)
        await stream.append(b"one", 1)
        assert await asyncio.wait_for(asyncio.gather(*readers), 1) == [True, True, True]
        await asyncio.sleep(0.01)
        assert not further.done(), "offset 1 is not readable yet"
        loop = asyncio.get_running_loop()
        started = loop.time()
        await stream.close()
        assert await asyncio.wait_for(further, 1) is False
        assert loop.time() - started < 4
    finally:
        await engine.shutdown()


async def test_close_uploads_and_a_higher_epoch_reopens_with_all_data(tmp_path: Path) -> None:
    metadata = StreamMetadataStateMachine()
    engine = make_engine(small_config(tmp_path), metadata)
    await engine.start()
    try:
        stream_id = await engine.create_stream()
        stream = await engine.open_stream(stream_id, epoch=0)
        pending = [asyncio.ensure_future(stream.append(payload(stream_id, i), 2)) for i in range(5)]
        await stream.close()  # waits for the in-flight appends, uploads, closes at the controller
        assert all(f.done() for f in pending)
        assert (await metadata.get_streams([stream_id]))[0].end_offset == 10
        with pytest.raises(StreamNotOpenedError):
            stream.append(b"late", 1)
        with pytest.raises(StreamFencedError):
            await engine.open_stream(stream_id, epoch=-2)
        reopened = await engine.open_stream(stream_id, epoch=1)
        assert (reopened.start_offset, reopened.next_offset) == (0, 10)
        result = await reopened.fetch(0, 10, 10**6)
        assert [b.payload for b in result.batches] == [payload(stream_id, i) for i in range(5)]
        assert {b.epoch for b in result.batches} == {0}
        await reopened.append(b"more", 1)
        assert reopened.confirm_offset == 11
    finally:
        await engine.shutdown()


async def test_a_stream_knows_how_much_of_it_is_in_object_storage(tmp_path: Path) -> None:
    """``uploaded_offset`` is what a reader of the bucket can see: the controller's committed end when the stream
    opened, raised by each upload of this node, never by an append that is only in the WAL."""
    metadata = StreamMetadataStateMachine()
    engine = make_engine(small_config(tmp_path), metadata)
    await engine.start()
    try:
        stream_id = await engine.create_stream()
        stream = await engine.open_stream(stream_id, epoch=0)
        await stream.append(payload(stream_id, 0), 4)
        assert (stream.confirm_offset, stream.uploaded_offset) == (4, 0)
        await engine.force_upload()
        assert stream.uploaded_offset == 4
        await stream.append(payload(stream_id, 1), 3)
        assert stream.uploaded_offset == 4
        await stream.close()
        reopened = await engine.open_stream(stream_id, epoch=1)
        assert (reopened.next_offset, reopened.uploaded_offset) == (7, 7)
    finally:
        await engine.shutdown()


async def test_streams_closed_together_close_in_the_commit_of_their_last_upload(tmp_path: Path) -> None:
    """Two partitions closing at once (two ``close_streams`` calls): one metadata commit carries their last records
    and closes every stream (the meta-like one trimmed), which a moved partition's producer waits for, and not the
    records of a stream staying open (they upload later, as usual); a higher epoch then reopens each with all of
    its data."""
    commits: list[Sequence[MetadataRecord]] = []
    metadata = StreamMetadataStateMachine(sink=lambda records: _kept(commits, records))
    engine = make_engine(small_config(tmp_path), metadata)
    await engine.start()
    try:
        ids = [await engine.create_stream() for _ in range(4)]
        streams = [await engine.open_stream(stream_id, epoch=0) for stream_id in ids]
        staying = await engine.open_stream(await engine.create_stream(), epoch=0)
        for stream in [*streams, staying]:
            for i in range(3):
                await stream.append(payload(stream.stream_id, i), 1)
        commits.clear()
        first, second = streams[:2], streams[2:]
        await asyncio.gather(engine.close_streams([(first[0], -1), (first[1], 2)]),
                             engine.close_streams([(s, -1) for s in second]))
        closing = [c for c in commits if any(isinstance(r, StreamRecord) and r.state is StreamState.CLOSED for r in c)]
        assert len(closing) == 1 and any(isinstance(r, StreamSetObjectRecord) for r in closing[0])
        assert not any(isinstance(r, StreamEndOffsetsRecord) and staying.stream_id in dict(r.offsets)
                       for r in closing[0])
        assert (await metadata.get_streams([staying.stream_id]))[0].end_offset == 0
        await staying.append(payload(staying.stream_id, 3), 1)
        await engine.force_upload()
        assert (await metadata.get_streams([staying.stream_id]))[0].end_offset == 4
        assert [b.payload for b in (await staying.fetch(0, 4, 10**6)).batches] == [
            payload(staying.stream_id, i) for i in range(4)]
        infos = await metadata.get_streams(ids)
        assert {i.state for i in infos} == {StreamState.CLOSED}
        assert [(i.start_offset, i.end_offset) for i in infos] == [(0, 3), (2, 3), (0, 3), (0, 3)]
        for stream_id in ids:
            reopened = await engine.open_stream(stream_id, epoch=1)
            result = await reopened.fetch(reopened.start_offset, 3, 10**6)
            assert [b.payload for b in result.batches] == [
                payload(stream_id, i) for i in range(reopened.start_offset, 3)]
    finally:
        await engine.shutdown()


async def test_a_closing_stream_the_controller_refuses_leaves_the_others_closing(tmp_path: Path) -> None:
    """One stream of a close was closed behind the engine's back: the upload commits the others' records without
    it, and the streams still close (on their own call)."""
    metadata = StreamMetadataStateMachine()
    engine = make_engine(small_config(tmp_path), metadata)
    await engine.start()
    try:
        kept, lost = [await engine.open_stream(await engine.create_stream(), epoch=0) for _ in range(2)]
        for stream in (kept, lost):
            await stream.append(payload(stream.stream_id, 0), 1)
        await metadata.close_stream(engine.node, lost.stream_id, 0)
        await engine.close_streams([(kept, -1), (lost, -1)])
        infos = await metadata.get_streams([kept.stream_id, lost.stream_id])
        assert [(i.state, i.end_offset) for i in infos] == [(StreamState.CLOSED, 1), (StreamState.CLOSED, 0)]
        reopened = await engine.open_stream(kept.stream_id, epoch=1)
        assert (await reopened.fetch(0, 1, 10**6)).batches[0].payload == payload(kept.stream_id, 0)
    finally:
        await engine.shutdown()


async def test_a_controller_refusing_closes_in_a_commit_gets_them_on_their_own(tmp_path: Path) -> None:
    """A controller that does not know an upload commit's closes (an older one: INVALID_REQUEST) gets the upload
    without them and the close as a call of its own."""

    class Older(StreamMetadataStateMachine):
        async def commit_stream_set_object(self, request: CommitStreamSetObjectRequest) -> None:
            if request.closes:
                raise StorageError("CommitStreamSetObject: CommitStreamSetObjectRequest: 10 values for 9 fields")
            await super().commit_stream_set_object(request)

    metadata = Older()
    engine = make_engine(small_config(tmp_path), metadata)
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), epoch=0)
        await stream.append(payload(stream.stream_id, 0), 1)
        await engine.close_streams([(stream, -1)])
        (info,) = await metadata.get_streams([stream.stream_id])
        assert (info.state, info.end_offset) == (StreamState.CLOSED, 1)
    finally:
        await engine.shutdown()


async def _kept(commits: list[Sequence[MetadataRecord]], records: Sequence[MetadataRecord]) -> None:
    commits.append(list(records))


async def test_two_nodes_open_is_fenced_until_the_owner_closes(tmp_path: Path) -> None:
    metadata = StreamMetadataStateMachine()
    first = make_engine(small_config(tmp_path / "a", node_id=1), metadata)
    second = make_engine(small_config(tmp_path / "b", node_id=2), metadata, store=first.store)
    await first.start()
    await second.start()
    try:
        stream_id = await first.create_stream()
        owned = await first.open_stream(stream_id, epoch=3)
        await owned.append(b"one", 1)
        with pytest.raises(StreamNotClosedError):
            await second.open_stream(stream_id, epoch=4)
        with pytest.raises(StreamFencedError):
            await second.open_stream(stream_id, epoch=3)
        await owned.close()
        taken = await second.open_stream(stream_id, epoch=4)
        assert taken.next_offset == 1
        assert (await taken.fetch(0, 1, 100)).batches[0].payload == b"one"
    finally:
        await second.shutdown()
        await first.shutdown()


async def test_destroy_deletes_the_stream(tmp_path: Path) -> None:
    metadata = StreamMetadataStateMachine()
    engine = make_engine(small_config(tmp_path), metadata)
    await engine.start()
    try:
        stream_id = await engine.create_stream(tags=(("topic", "t"),))
        stream = await engine.open_stream(stream_id, 0)
        await stream.append(b"gone", 1)
        await stream.destroy()
        assert await metadata.get_streams([stream_id]) == []
        with pytest.raises(StreamNotFoundError):
            await engine.open_stream(stream_id, 1)
    finally:
        await engine.shutdown()


async def test_engine_rejects_use_before_start_and_after_shutdown(tmp_path: Path) -> None:
    engine = make_engine(small_config(tmp_path))
    with pytest.raises(StorageError, match="not running"):
        await engine.create_stream()
    await engine.start()
    await engine.shutdown()
    with pytest.raises(StorageError, match="not running"):
        await engine.create_stream()


async def test_concurrent_writers_keep_per_stream_order(tmp_path: Path) -> None:
    engine = make_engine(small_config(tmp_path))
    await engine.start()
    try:
        streams = [await engine.open_stream(await engine.create_stream(), 0) for _ in range(8)]

        async def writer(stream_index: int) -> None:
            stream = streams[stream_index]
            for i in range(40):
                await stream.append(payload(stream.stream_id, i, 300), 1)

        await asyncio.gather(*(writer(i) for i in range(8)))
        await engine.force_upload()
        for stream in streams:
            got = (await stream.fetch(0, 40, 10**9)).batches
            assert [b.payload for b in got] == [payload(stream.stream_id, i, 300) for i in range(40)]
        stats = engine.stats()
        assert stats.appends == 320 and stats.bytes_appended == 320 * 300
        assert stats.stream_set_objects >= 1  # many small streams share stream-set objects
    finally:
        await engine.shutdown()


async def test_upload_interval_uploads_a_quiet_cache(tmp_path: Path) -> None:
    metadata = StreamMetadataStateMachine()
    engine = make_engine(small_config(tmp_path, wal_upload_interval_ms=100), metadata)
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), 0)
        await stream.append(b"small and alone", 1)  # far below the upload threshold
        await eventually_async(lambda: engine.wal.used_bytes, until=lambda used: used == 0, timeout=5, interval=0.02,
                               what="the WAL to be trimmed (once the record is uploaded and committed)")
        assert (await metadata.get_streams([stream.stream_id]))[0].end_offset == 1
        assert engine.stats().objects_uploaded == 1
    finally:
        await engine.shutdown()


async def test_a_failed_wal_append_makes_the_stream_unwritable_and_frees_its_room(tmp_path: Path) -> None:
    engine = make_engine(small_config(tmp_path))
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), 0)
        await stream.append(b"ok", 1)
        await engine.wal.close()  # the disk went away under the WAL
        with pytest.raises(StorageError):
            await stream.append(b"lost", 1)
        with pytest.raises(StreamFencedError, match=f"stream {stream.stream_id}"):
            stream.append(b"refused", 1)
        assert stream.confirm_offset == 1
        assert engine.log_cache.stats().unuploaded == 2  # only the acknowledged append holds cache room
        assert [b.payload for b in (await stream.fetch(0, 1, 100)).batches] == [b"ok"]
    finally:
        await engine.shutdown()


async def test_a_fenced_node_fails_appends_instead_of_waiting_forever(tmp_path: Path) -> None:
    metadata = StreamMetadataStateMachine()
    engine = make_engine(small_config(tmp_path, wal_cache_size=16 * 1024), metadata)
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), 0)
        await stream.append(b"before", 1)
        await metadata.register_node(engine.node.node_id, engine.node.node_epoch + 1)  # a newer incarnation
        with pytest.raises(NodeEpochExpiredError):
            for i in range(100):  # fills the cache; its uploads are rejected
                await asyncio.wait_for(stream.append(payload(stream.stream_id, i), 1), 5)
        assert (await metadata.get_streams([stream.stream_id]))[0].end_offset == 0  # nothing became visible
    finally:
        await engine.shutdown()


async def test_concurrent_opens_and_closes_of_one_stream_are_serialized(tmp_path: Path) -> None:
    metadata = StreamMetadataStateMachine()
    engine = make_engine(small_config(tmp_path), metadata)
    await engine.start()
    try:
        stream_id = await engine.create_stream()
        first, second = await asyncio.gather(engine.open_stream(stream_id, 0), engine.open_stream(stream_id, 0))
        assert first is second  # one writer, not two competing for the same offsets
        await first.append(b"x", 1)
        await asyncio.gather(first.close(), first.close())  # both wait for the same close
        assert first.closed
        with pytest.raises(StreamNotOpenedError):
            first.append(b"late", 1)
        reopened = await engine.open_stream(stream_id, 1)
        await reopened.append(b"y", 1)
        closing = asyncio.ensure_future(reopened.close())
        await asyncio.sleep(0)
        again = await engine.open_stream(stream_id, 2)  # waits for the close in progress, then reopens
        assert closing.done() and again.next_offset == 2
        assert [b.payload for b in (await again.fetch(0, 2, 100)).batches] == [b"x", b"y"]
    finally:
        await engine.shutdown()


class LosingWAL:
    """Fault injection over the real file WAL: one chosen append fails (slowly), the others succeed."""

    def __init__(
        self, inner: FileWAL, stream_id: int, offset: int, *, fail_after: float = 0.1, others_after: float = 0.0
    ) -> None:
        self.inner = inner
        self.doomed = (stream_id, offset)
        self.fail_after = fail_after
        self.others_after = others_after

    async def append(self, batch: StreamRecordBatch) -> WALRecord:
        if (batch.stream_id, batch.base_offset) == self.doomed:
            await asyncio.sleep(self.fail_after)
            raise WALError(f"injected: append of stream {batch.stream_id} offset {batch.base_offset} lost")
        record = await self.inner.append(batch)
        if self.others_after:
            await asyncio.sleep(self.others_after)
        return record

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_appends_after_a_lost_one_fail_and_give_their_room_back(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    wal = FileWAL(config.wal_url.path, segment_size=config.wal_segment_size, preallocate=False)
    engine = make_engine(config, wal=LosingWAL(wal, stream_id=0, offset=1))
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), 0)
        await stream.append(b"kept", 1)
        lost = stream.append(b"lost", 1)
        after = stream.append(b"durable but after a hole", 1)
        with pytest.raises(WALError):
            await lost
        with pytest.raises(StreamFencedError):
            await after  # it reached the WAL, but offset 1 never will: it cannot be confirmed
        assert stream.confirm_offset == 1
        assert engine.log_cache.stats().unuploaded == 4  # only b"kept" still holds cache room
    finally:
        await engine.shutdown()


async def test_an_append_made_durable_after_its_predecessor_failed_does_not_hold_the_wal_back(tmp_path: Path) -> None:
    config = small_config(tmp_path)
    wal = FileWAL(config.wal_url.path, segment_size=config.wal_segment_size, preallocate=False)
    engine = make_engine(config, wal=LosingWAL(wal, stream_id=0, offset=1, fail_after=0.0, others_after=0.05))
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), 0)
        await stream.append(b"kept", 1)
        lost = stream.append(b"lost", 1)
        after = stream.append(b"durable only once offset 1 has failed", 1)
        with pytest.raises(WALError):
            await lost
        with pytest.raises(StreamFencedError, match="offset 2"):
            await after
        assert engine.log_cache.stats().unuploaded == 4  # only b"kept" still holds cache room
        other = await engine.open_stream(await engine.create_stream(), 0)
        await other.append(b"more", 1)
        await engine.force_upload()
        assert engine.stats().wal_bytes == 0  # everything durable is uploaded or dropped: the WAL is trimmed
    finally:
        await engine.shutdown()
