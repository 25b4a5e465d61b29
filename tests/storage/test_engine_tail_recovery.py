"""A restart serves its WAL tail before uploading it (issue 25): after a crash, ``start`` returns once the tail is
in the LogCache, not once it is in object storage, so a partition reopened at a higher leader epoch reads and
appends at once while the tail uploads in the background; a second crash during that upload loses nothing, and
the streams no partition reopened are closed once their tail is committed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage.config import BucketURL
from storage.engine import StorageEngine
from storage.errors import ObjectStoreError
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.objectstore.faulty import FaultyObjectStore
from storage.objectstore.local import LocalObjectStore
from tests.storage.engine_support import make_engine, payload, small_config
from tests.storage.test_engine_recovery import read_all

UPLOADED, TAIL = 12, 4  # batches per stream: the first are committed before the crash, the rest only in the WAL


async def crashed_with_a_tail(tmp_path: Path, metadata: StreamMetadataStateMachine) -> tuple[StorageEngine, list[int]]:
    engine = make_engine(small_config(tmp_path), metadata)
    await engine.start()
    ids = [await engine.create_stream() for _ in range(3)]
    streams = [await engine.open_stream(i, epoch=1) for i in ids]
    for n in range(UPLOADED):
        for s in streams:
            await s.append(payload(s.stream_id, n), 1)
    await engine.force_upload()
    for n in range(UPLOADED, UPLOADED + TAIL):
        for s in streams:
            await s.append(payload(s.stream_id, n), 1)
    await engine.halt()
    return engine, ids


def unreachable_store(tmp_path: Path) -> FaultyObjectStore:
    store = FaultyObjectStore(LocalObjectStore(tmp_path / "objects"))
    store.fail("put", ObjectStoreError("injected: bucket unreachable"))
    return store


async def committed_end(metadata: StreamMetadataStateMachine, stream_id: int) -> int:
    return (await metadata.get_streams([stream_id]))[0].end_offset


async def test_a_restart_serves_the_tail_while_object_storage_cannot_take_it(tmp_path: Path) -> None:
    metadata = StreamMetadataStateMachine()
    crashed, ids = await crashed_with_a_tail(tmp_path, metadata)
    store = unreachable_store(tmp_path)
    restarted = make_engine(small_config(tmp_path, node_epoch=crashed.node.node_epoch + 1), metadata, store=store)
    await asyncio.wait_for(restarted.start(), 10)  # would never return if it waited for the upload
    try:
        first, *others = ids
        stream = await restarted.open_stream(first, epoch=2)  # the partition's new leader epoch
        assert (stream.start_offset, stream.confirm_offset) == (0, UPLOADED + TAIL)
        assert await read_all(stream) == [payload(first, n) for n in range(UPLOADED + TAIL)]
        assert await stream.append(b"after the restart", 1) == UPLOADED + TAIL  # acknowledged: it is in the WAL
        assert await committed_end(metadata, first) == UPLOADED  # nothing of the tail is in object storage yet
        assert store.injected["put"] > 0

        store.heal()
        await asyncio.wait_for(restarted.recovered_tail_uploaded(), 30)
        await restarted.force_upload()
        assert await committed_end(metadata, first) == UPLOADED + TAIL + 1
        for other in others:  # not reopened: committed, then closed so another broker may open it
            assert await committed_end(metadata, other) == UPLOADED + TAIL
        assert [s.stream_id for s in await metadata.get_opening_streams(restarted.node)] == [first]
        assert await restarted.open_stream(first, epoch=2) is stream  # the same open, asked again
    finally:
        await restarted.shutdown()

    again = make_engine(small_config(tmp_path, node_epoch=crashed.node.node_epoch + 2), metadata)
    await again.start()
    try:
        reopened = await again.open_stream(first, epoch=3)
        expected = [payload(first, n) for n in range(UPLOADED + TAIL)] + [b"after the restart"]
        assert await read_all(reopened) == expected
    finally:
        await again.shutdown()


async def test_a_second_crash_during_the_background_upload_loses_nothing(tmp_path: Path) -> None:
    metadata = StreamMetadataStateMachine()
    crashed, ids = await crashed_with_a_tail(tmp_path, metadata)
    first, *others = ids
    second = make_engine(small_config(tmp_path, node_epoch=crashed.node.node_epoch + 1), metadata,
                         store=unreachable_store(tmp_path))
    await second.start()
    stream = await second.open_stream(first, epoch=2)
    for n in range(3):
        await stream.append(payload(first, 100 + n), 1)
    await second.halt()  # the second crash: the recovered tail was never uploaded

    third = make_engine(small_config(tmp_path, node_epoch=crashed.node.node_epoch + 2), metadata)
    await third.start()
    try:
        reopened = await third.open_stream(first, epoch=3)
        expected = [payload(first, n) for n in range(UPLOADED + TAIL)] + [payload(first, 100 + n) for n in range(3)]
        assert await read_all(reopened) == expected
        for other in others:
            moved = await third.open_stream(other, epoch=3)
            assert await read_all(moved) == [payload(other, n) for n in range(UPLOADED + TAIL)]
        await asyncio.wait_for(third.recovered_tail_uploaded(), 30)
        await third.force_upload()
        assert await committed_end(metadata, first) == UPLOADED + TAIL + 3
    finally:
        await third.shutdown()


async def test_a_tail_larger_than_the_cache_is_recovered_whole(tmp_path: Path) -> None:
    """The cache was made smaller than the WAL tail between the crash and the restart: recovery waits for room
    while earlier recovered blocks upload (blocks sealed because the cache was full included), and the streams
    are closed only once all of it is committed."""
    metadata = StreamMetadataStateMachine()
    big = {"wal_cache_size": 256 * 1024, "wal_upload_threshold": 128 * 1024}
    engine = make_engine(small_config(tmp_path, **big), metadata)
    await engine.start()
    ids = [await engine.create_stream() for _ in range(3)]
    streams = [await engine.open_stream(i, epoch=1) for i in ids]
    for n in range(40):  # 120 KB, under the upload threshold: all of it only in the WAL
        for s in streams:
            await s.append(payload(s.stream_id, n), 1)
    await engine.halt()

    restarted = make_engine(small_config(tmp_path, node_epoch=engine.node.node_epoch + 1), metadata)  # 64 KiB cache
    await asyncio.wait_for(restarted.start(), 30)
    try:
        await asyncio.wait_for(restarted.recovered_tail_uploaded(), 30)
        assert await metadata.get_opening_streams(restarted.node) == []
        for stream_id in ids:
            assert await committed_end(metadata, stream_id) == 40
            reopened = await restarted.open_stream(stream_id, epoch=2)
            assert await read_all(reopened) == [payload(stream_id, n) for n in range(40)]
    finally:
        await restarted.shutdown()


async def test_a_recovered_stream_led_elsewhere_and_back_is_read_from_its_objects(tmp_path: Path) -> None:
    """A restart recovers a tail no partition reopens here (the partition moved on while the node was down): it is
    committed and closed. Another broker appends past it and closes the stream trimmed, as a partition's meta
    stream is closed; when the stream comes back to this node, what it cached of the recovered tail must not answer
    its reads (they would end at the tail's last offset, and a partition replaying its meta stream would find
    nothing and start a new log)."""
    metadata = StreamMetadataStateMachine()
    crashed, ids = await crashed_with_a_tail(tmp_path, metadata)
    first = ids[0]
    restarted = make_engine(small_config(tmp_path, node_epoch=crashed.node.node_epoch + 1), metadata)
    await restarted.start()
    other_wal = BucketURL(0, "file", str(tmp_path / "other-wal"))
    other = make_engine(small_config(tmp_path, node_id=2, wal_url=other_wal), metadata)
    try:
        await asyncio.wait_for(restarted.recovered_tail_uploaded(), 30)
        await other.start()
        elsewhere = await other.open_stream(first, epoch=2)
        for n in range(UPLOADED + TAIL, UPLOADED + TAIL + 4):
            await elsewhere.append(payload(first, n), 1)
        trimmed_to = UPLOADED + TAIL + 2
        await other.close_streams([(elsewhere, trimmed_to)])

        back = await restarted.open_stream(first, epoch=3)
        assert (back.start_offset, back.confirm_offset) == (trimmed_to, UPLOADED + TAIL + 4)
        assert await read_all(back) == [payload(first, n) for n in range(trimmed_to, UPLOADED + TAIL + 4)]
    finally:
        await other.shutdown()
        await restarted.shutdown()
