"""Recovery: after a crash, every acknowledged append is readable once the streams are reopened with a higher
epoch; after a clean shutdown, a restart finds everything uploaded and nothing to replay."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import struct
import sys
import textwrap
from pathlib import Path
from typing import Any

from storage.errors import ObjectStoreError
from storage.metadata.record_codec import decode_record
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.objectstore.faulty import FaultyObjectStore
from storage.objectstore.local import LocalObjectStore
from storage.stream_api import Stream
from storage.stream_record_batch import StreamRecordBatch
from storage.wal.base import WALRecord
from storage.wal.file import FileWAL
from tests.storage.engine_support import make_engine, payload, small_config

ROOT = Path(__file__).resolve().parents[2]


async def read_all(stream: Stream) -> list[bytes]:
    out: list[bytes] = []
    offset = stream.start_offset
    while offset < stream.confirm_offset:
        result = await stream.fetch(offset, stream.confirm_offset, 64 * 1024)
        out += [b.payload for b in result.batches]
        assert result.next_offset is not None
        offset = result.next_offset
    return out


async def test_crash_with_data_only_in_the_wal_loses_no_acknowledged_append(tmp_path: Path) -> None:
    metadata = StreamMetadataStateMachine()
    config = small_config(tmp_path)
    engine = make_engine(config, metadata)
    await engine.start()
    ids = [await engine.create_stream() for _ in range(3)]
    streams = [await engine.open_stream(i, epoch=1) for i in ids]
    for n in range(12):  # some of this is uploaded (blocks fill at 16 KiB) ...
        for s in streams:
            await s.append(payload(s.stream_id, n), 1)
    await engine.force_upload()
    for n in range(12, 16):  # ... and this (12 KB, below the 16 KiB threshold) only in the WAL and LogCache
        for s in streams:
            await s.append(payload(s.stream_id, n), 1)
    committed = {s.stream_id: s.end_offset for s in await metadata.get_streams(ids)}
    assert all(end == 12 for end in committed.values())
    await engine.halt()  # crash: no upload, no close

    restarted = make_engine(small_config(tmp_path, node_epoch=engine.node.node_epoch + 1), metadata)
    await restarted.start()
    try:
        assert restarted.stats().recovered_batches == 12
        await restarted.recovered_tail_uploaded()
        assert await metadata.get_opening_streams(restarted.node) == []  # closed once their tail was uploaded
        for stream_id in ids:
            stream = await restarted.open_stream(stream_id, epoch=2)
            assert (stream.start_offset, stream.confirm_offset) == (0, 16)
            assert await read_all(stream) == [payload(stream_id, n) for n in range(16)]
            await stream.append(b"after recovery", 1)
        assert restarted.wal.used_bytes > 0
    finally:
        await restarted.shutdown()


async def test_clean_shutdown_then_restart_replays_nothing(tmp_path: Path) -> None:
    metadata = StreamMetadataStateMachine()
    engine = make_engine(small_config(tmp_path), metadata)
    await engine.start()
    stream_id = await engine.create_stream()
    stream = await engine.open_stream(stream_id, epoch=0)
    for n in range(30):
        await stream.append(payload(stream_id, n), 2)
    await engine.shutdown()
    assert stream.closed

    restarted = make_engine(small_config(tmp_path, node_epoch=engine.node.node_epoch + 1), metadata)
    await restarted.start()
    try:
        assert restarted.stats().recovered_batches == 0
        reopened = await restarted.open_stream(stream_id, epoch=1)
        assert reopened.confirm_offset == 60
        assert await read_all(reopened) == [payload(stream_id, n) for n in range(30)]
    finally:
        await restarted.shutdown()


async def test_recovery_skips_streams_another_node_took_over(tmp_path: Path) -> None:
    metadata = StreamMetadataStateMachine()
    config = small_config(tmp_path)
    engine = make_engine(config, metadata)
    await engine.start()
    stream_id = await engine.create_stream()
    stream = await engine.open_stream(stream_id, epoch=0)
    await stream.append(b"durable", 1)
    await stream.close()
    stream = await engine.open_stream(stream_id, epoch=1)
    await stream.append(b"only in the WAL", 1)
    await engine.halt()
    # While node 1 is down its stream is closed for it (the controller's failover path) and node 2 takes over.
    await metadata.close_stream(engine.node, stream_id, 1)
    takeover = make_engine(
        small_config(tmp_path / "other", node_id=2), metadata, store=LocalObjectStore(tmp_path / "objects")
    )
    await takeover.start()
    moved = await takeover.open_stream(stream_id, epoch=2)
    assert moved.confirm_offset == 1
    restarted = make_engine(small_config(tmp_path, node_epoch=engine.node.node_epoch + 1), metadata)
    await restarted.start()
    try:
        assert restarted.stats().recovered_batches == 0  # not ours any more: its WAL tail is not replayed
        assert (await metadata.get_streams([stream_id]))[0].end_offset == 1
        assert [b.payload for b in (await moved.fetch(0, 1, 100)).batches] == [b"durable"]
    finally:
        await restarted.shutdown()
        await takeover.shutdown()


CHILD = textwrap.dedent(
    """
    import asyncio, json, os, struct, sys
    from tests.storage.engine_support import make_engine, payload, small_config
    from storage.metadata.state_machine import StreamMetadataStateMachine
    from storage.metadata.record_codec import encode_record
    from pathlib import Path

    log = os.open({log!r}, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    async def sink(records):
        data = b"".join(struct.pack(">I", len(e)) + e for e in map(encode_record, records))
        os.write(log, data)
        os.fsync(log)

    async def main():
        metadata = StreamMetadataStateMachine(sink=sink)
        engine = make_engine(small_config(Path({tmp!r})), metadata)
        await engine.start()
        streams = [await engine.open_stream(await engine.create_stream(), epoch=1) for _ in range(4)]

        async def writer(stream):
            n = 0
            while True:
                await stream.append(payload(stream.stream_id, n, 700), 1)
                print(json.dumps([stream.stream_id, n]), flush=True)
                n += 1

        await asyncio.gather(*(writer(s) for s in streams))

    asyncio.run(main())
    """
)


def replay(log: Path) -> StreamMetadataStateMachine:
    metadata = StreamMetadataStateMachine()
    data = log.read_bytes()
    pos = 0
    while pos + 4 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        if pos + 4 + length > len(data):
            break  # torn tail of the metadata log: that change never took effect
        metadata.apply(decode_record(data[pos + 4 : pos + 4 + length]))
        pos += 4 + length
    return metadata


async def test_sigkill_while_appending_loses_no_acknowledged_append(tmp_path: Path) -> None:
    log = tmp_path / "metadata.log"
    script = CHILD.format(log=str(log), tmp=str(tmp_path))
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    acked: dict[int, int] = {}
    try:
        assert child.stdout is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        # Enough appends that several uploads happened and a WAL-only tail exists.
        while sum(acked.values()) < 200 and loop.time() < deadline:
            line = await asyncio.wait_for(child.stdout.readline(), 30)
            if not line:
                break
            stream_id, n = json.loads(line)
            acked[stream_id] = max(acked.get(stream_id, 0), n + 1)
    finally:
        child.send_signal(signal.SIGKILL)
        await asyncio.wait_for(child.wait(), 10)
    assert sum(acked.values()) >= 200, "the child did not append"

    metadata = replay(log)
    restarted = make_engine(small_config(tmp_path), metadata)
    await restarted.start()
    try:
        assert restarted.stats().recovered_batches > 0  # the tail that was only in the WAL came back
        for stream_id, count in acked.items():
            stream = await restarted.open_stream(stream_id, epoch=2)
            assert stream.confirm_offset >= count
            got = await read_all(stream)
            assert got[:count] == [payload(stream_id, n, 700) for n in range(count)]
            assert got == [payload(stream_id, n, 700) for n in range(len(got))]  # in order, nothing torn
    finally:
        await restarted.shutdown()
    os.unlink(log)


class SlowAckWAL:
    """Fault injection over the real file WAL: the acknowledgement of one chosen record reaches its appender
    late (its task is slow to resume), while other appends and uploads carry on."""

    def __init__(self, inner: FileWAL, slow_stream: int, slow_offset: int, delay: float) -> None:
        self.inner = inner
        self.slow = (slow_stream, slow_offset)
        self.delay = delay

    async def append(self, batch: StreamRecordBatch) -> WALRecord:
        record = await self.inner.append(batch)
        if (batch.stream_id, batch.base_offset) == self.slow:
            await asyncio.sleep(self.delay)
        return record

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_the_wal_is_not_trimmed_past_an_acknowledged_record_not_yet_cached(tmp_path: Path) -> None:
    metadata = StreamMetadataStateMachine()
    config = small_config(tmp_path)
    file_wal = FileWAL(config.wal_url.path, segment_size=config.wal_segment_size, preallocate=False)
    engine = make_engine(config, metadata, wal=SlowAckWAL(file_wal, slow_stream=0, slow_offset=1, delay=0.5))
    await engine.start()
    slow = await engine.open_stream(await engine.create_stream(), epoch=0)
    busy = await engine.open_stream(await engine.create_stream(), epoch=0)
    await slow.append(b"a0", 1)
    late = slow.append(b"a1", 1)  # durable in the WAL at once, but its appender resumes 0.5 s later
    for n in range(40):  # meanwhile blocks fill, upload, commit, and the WAL is trimmed
        await busy.append(payload(busy.stream_id, n), 1)
    assert engine.stats().blocks_uploaded >= 1
    await late  # acknowledged now: it went into the cache after those uploads
    await engine.halt()  # crash before it is uploaded

    restarted = make_engine(small_config(tmp_path, node_epoch=engine.node.node_epoch + 1), metadata)
    await restarted.start()
    try:
        reopened = await restarted.open_stream(slow.stream_id, epoch=1)
        assert [b.payload for b in (await reopened.fetch(0, 2, 100)).batches] == [b"a0", b"a1"]
    finally:
        await restarted.shutdown()


async def test_shutdown_with_object_storage_down_gives_up_in_time_and_recovery_uploads_later(
    tmp_path: Path,
) -> None:
    metadata = StreamMetadataStateMachine()
    config = small_config(tmp_path)
    store = FaultyObjectStore(LocalObjectStore(config.data_buckets[0].path))
    engine = make_engine(config, metadata, store=store)
    await engine.start()
    stream_id = await engine.create_stream()
    stream = await engine.open_stream(stream_id, epoch=0)
    for n in range(5):
        await stream.append(payload(stream_id, n), 1)
    store.fail("put", ObjectStoreError("injected: bucket unreachable"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    await engine.shutdown(timeout=0.5)
    assert loop.time() - started < 5  # gave up instead of retrying forever
    assert (await metadata.get_streams([stream_id]))[0].end_offset == 0

    restarted = make_engine(small_config(tmp_path, node_epoch=engine.node.node_epoch + 1), metadata)
    await restarted.start()  # the bucket is reachable again: the WAL tail is uploaded now
    try:
        reopened = await restarted.open_stream(stream_id, epoch=1)
        assert await read_all(reopened) == [payload(stream_id, n) for n in range(5)]
    finally:
        await restarted.shutdown()
