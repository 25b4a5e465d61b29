"""The upload pipeline: how blocks split into objects, parallel uploads with strictly ordered commits, retries
that never skip a block, WAL trimming after commit, and the PUT budget."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from storage.cache.log_cache import CacheBlock
from storage.config import StorageConfig
from storage.errors import NodeEpochExpiredError, ObjectStoreError
from storage.metadata.api import NodeIdentity, ObjectState, ObjectType
from storage.metadata.record_codec import MetadataRecord
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.metadata.stream_records import ObjectRecord
from storage.objects.reader import ObjectReader
from storage.objectstore.base import ObjectData
from storage.objectstore.faulty import FaultyObjectStore
from storage.objectstore.memory import MemoryObjectStore
from storage.stream_record_batch import StreamRecordBatch
from storage.upload import UploadPipeline
from storage.upload_plan import plan_block
from testkit.waiting import eventually_async

NODE = NodeIdentity(1, 1)
CONFIG = StorageConfig(
    cluster_id="t",
    wal_cache_size=1 << 20,
    wal_upload_threshold=1 << 20,
    stream_object_split_size=4_000,
    object_block_size=1_000,
)


def make_block(
    block_id: int, sizes: dict[int, int], start: dict[int, int] | None = None, batch: int = 500
) -> CacheBlock:
    """A block holding ``sizes[stream]`` payload bytes per stream, in ``batch``-byte batches."""
    block = CacheBlock(block_id)
    position = block_id * 1_000_000
    for stream_id, size in sizes.items():
        offset = (start or {}).get(stream_id, 0)
        while size > 0:
            n = min(batch, size)
            block.add(StreamRecordBatch(stream_id, 0, offset, 1, bytes([stream_id % 256]) * n), position, position + n)
            position += n
            offset += 1
            size -= n
    block.sealed = True
    return block


def test_big_streams_become_stream_objects_the_rest_share_one_object() -> None:
    plan = plan_block(make_block(0, {5: 4_000, 1: 100, 3: 3_999, 9: 10_000}), split_size=4_000)
    assert [(p.is_stream_object, [s for s, _ in p.streams]) for p in plan.parts] == [
        (True, [5]),
        (True, [9]),
        (False, [1, 3]),
    ]
    single = plan_block(make_block(0, {7: 10}), split_size=4_000)
    assert [(p.is_stream_object, [s for s, _ in p.streams]) for p in single.parts] == [(True, [7])]


class Recorder:
    def __init__(self) -> None:
        self.committed: list[int] = []

    async def __call__(self, records: Sequence[MetadataRecord]) -> None:
        self.committed += [
            r.object_id for r in records if isinstance(r, ObjectRecord) and r.state == ObjectState.COMMITTED
        ]


async def open_streams(meta: StreamMetadataStateMachine, n: int) -> list[int]:
    ids = []
    for _ in range(n):
        stream_id = await meta.create_stream(NODE)
        await meta.open_stream(NODE, stream_id, 0)
        ids.append(stream_id)
    return ids


class SlowObject(MemoryObjectStore):
    """Fault injection: the PUT of keys ending in ``/<slow_id>`` takes ``delay`` seconds."""

    def __init__(self, slow_id: int, delay: float) -> None:
        super().__init__()
        self.slow_id = slow_id
        self.delay = delay

    async def put(self, key: str, data: ObjectData, *, if_none_match: bool = False) -> None:
        if key.endswith(f"/{self.slow_id}"):
            await asyncio.sleep(self.delay)
        await super().put(key, data, if_none_match=if_none_match)


async def test_commits_follow_submission_order_even_when_an_earlier_upload_is_slow() -> None:
    recorder = Recorder()
    meta = StreamMetadataStateMachine(sink=recorder)
    a, b = await open_streams(meta, 2)
    store = SlowObject(slow_id=0, delay=0.2)
    done: list[int] = []

    async def on_committed(block: CacheBlock) -> None:
        done.append(block.block_id)

    pipeline = UploadPipeline(config=CONFIG, metadata=meta, store=store, node=NODE, on_committed=on_committed)
    futures = [pipeline.submit(make_block(i, {a: 1_000, b: 1_000}, start={a: i * 2, b: i * 2})) for i in range(4)]
    await asyncio.wait_for(asyncio.gather(*futures), 5)
    assert done == [0, 1, 2, 3]
    assert recorder.committed == [0, 1, 2, 3]
    assert [s.end_offset for s in await meta.get_streams([a, b])] == [8, 8]
    assert pipeline.stats.failures == 0 and pipeline.stats.stream_set_objects == 4
    # What was uploaded reads back through the object reader.
    reader = ObjectReader(store, CONFIG.namespace)
    [obj] = await meta.get_objects(a, 2, 4, 10)
    batches = await reader.read_range(obj.object_id, a, 2, 4, 1 << 20, obj.object_size)
    assert [x.base_offset for x in batches] == [2, 3] and batches[0].payload == bytes([a]) * 500


async def test_failed_uploads_are_retried_and_never_skipped(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder()
    meta = StreamMetadataStateMachine(sink=recorder)
    [a] = await open_streams(meta, 1)
    store = FaultyObjectStore(MemoryObjectStore())
    store.fail("put", ObjectStoreError("injected 503"), times=3)
    pipeline = UploadPipeline(config=CONFIG, metadata=meta, store=store, node=NODE, on_committed=_noop)
    caplog.set_level(logging.WARNING, logger="storage.upload")
    first = pipeline.submit(make_block(0, {a: 1_000}))
    second = pipeline.submit(make_block(1, {a: 1_000}, start={a: 2}))
    await asyncio.wait_for(asyncio.gather(first, second), 10)
    assert recorder.committed == [0, 1]
    assert pipeline.stats.failures == 3
    assert (await meta.get_streams([a]))[0].end_offset == 4
    assert any("object 0" in r.getMessage() and f"streams {a}" in r.getMessage() for r in caplog.records)


async def test_failed_commits_are_retried() -> None:
    meta = StreamMetadataStateMachine()
    [a] = await open_streams(meta, 1)
    calls = 0
    real_commit = meta.commit_stream_set_object

    async def flaky_commit(request):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        if calls <= 2:
            raise ConnectionError("controller unreachable")
        await real_commit(request)

    meta.commit_stream_set_object = flaky_commit  # type: ignore[method-assign]
    pipeline = UploadPipeline(config=CONFIG, metadata=meta, store=MemoryObjectStore(), node=NODE, on_committed=_noop)
    await asyncio.wait_for(pipeline.submit(make_block(0, {a: 1_000})), 10)
    assert calls == 3 and (await meta.get_streams([a]))[0].end_offset == 2


async def test_close_abandons_pending_work_with_an_error() -> None:
    meta = StreamMetadataStateMachine()
    [a] = await open_streams(meta, 1)
    store = FaultyObjectStore(MemoryObjectStore())
    store.fail("put", ObjectStoreError("down"))
    pipeline = UploadPipeline(config=CONFIG, metadata=meta, store=store, node=NODE, on_committed=_noop)
    future = pipeline.submit(make_block(0, {a: 1_000}))
    await eventually_async(lambda: store.injected["put"], timeout=5, interval=0.01,
                           what="the pipeline to try (and fail) its first put")
    await pipeline.close()
    with pytest.raises(Exception, match="abandoned"):
        await future
    assert (await meta.get_streams([a]))[0].end_offset == 0


async def test_many_small_streams_cost_one_put_per_block() -> None:
    # The benchmark's shape, scaled down: 1000 streams, blocks at the upload threshold, far below the split size.
    config = StorageConfig(cluster_id="t", wal_upload_threshold=2 << 20, wal_cache_size=4 << 20)
    meta = StreamMetadataStateMachine()
    streams = await open_streams(meta, 1000)
    store = MemoryObjectStore()
    pipeline = UploadPipeline(config=config, metadata=meta, store=store, node=NODE, on_committed=_noop)
    per_stream = 2 * 1024
    blocks = [
        make_block(i, dict.fromkeys(streams, per_stream), start=dict.fromkeys(streams, i * 2), batch=1024)
        for i in range(2)
    ]
    await asyncio.wait_for(asyncio.gather(*(pipeline.submit(b) for b in blocks)), 30)
    assert store.stats.puts == 2
    assert pipeline.stats.stream_set_objects == 2 and pipeline.stats.stream_objects == 0
    [sso, _] = await meta.get_stream_set_objects(NODE.node_id)
    assert len(sso.ranges) == 1000 and sso.object_type == ObjectType.STREAM_SET


async def _noop(_block: CacheBlock) -> None:
    return None


async def test_a_fenced_stream_is_left_out_and_does_not_block_the_others(caplog: pytest.LogCaptureFixture) -> None:
    meta = StreamMetadataStateMachine()
    a, b = await open_streams(meta, 2)
    # Before the upload commits, stream b is closed and taken over by node 2 (a newer owner).
    await meta.close_stream(NODE, b, 0)
    await meta.open_stream(NodeIdentity(2, 1), b, 1)
    pipeline = UploadPipeline(config=CONFIG, metadata=meta, store=MemoryObjectStore(), node=NODE, on_committed=_noop)
    caplog.set_level(logging.ERROR, logger="storage.upload")
    await asyncio.wait_for(pipeline.submit(make_block(0, {a: 1_000, b: 1_000})), 10)
    second = pipeline.submit(make_block(1, {a: 1_000}, start={a: 2}))
    await asyncio.wait_for(second, 10)
    [sa, sb] = await meta.get_streams([a, b])
    assert (sa.end_offset, sb.end_offset) == (4, 0)  # b's stale data never became visible
    assert await meta.get_objects(b, 0, -1, 10) == []
    assert any(f"leaving out streams {b}" in r.getMessage() for r in caplog.records)


async def test_a_failover_commit_leaves_out_a_deleted_stream_and_commits_the_dead_nodes_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Node 2 replays dead node 1's WAL (the controller delegated it): its commits carry node 2's identity and the
    # streams' epochs under node 1. A topic deleted meanwhile must not take node 1's other streams' records with it.
    replayer = NodeIdentity(2, 1)
    meta = StreamMetadataStateMachine(delegations=lambda node: (1,) if node.node_id == 2 else ())
    await meta.register_node(2, 1)
    a, b, c = await open_streams(meta, 3)
    await meta.close_stream(NODE, b, 0)
    await meta.delete_stream(NODE, b, 0)
    pipeline = UploadPipeline(config=CONFIG, metadata=meta, store=MemoryObjectStore(), node=replayer,
                              on_committed=_noop)
    caplog.set_level(logging.ERROR, logger="storage.upload")
    epochs = {a: 0, b: 0, c: 0}
    await asyncio.wait_for(pipeline.submit(make_block(0, {a: 1_000, b: 1_000, c: 1_000}), epochs), 10)
    [sa, sc] = await meta.get_streams([a, c])
    assert (sa.end_offset, sc.end_offset) == (2, 2)  # the dead node's acknowledged records are visible
    assert any(f"leaving out streams {b}" in r.getMessage() for r in caplog.records)


async def test_a_fenced_node_fails_its_uploads_instead_of_retrying_forever() -> None:
    meta = StreamMetadataStateMachine()
    [a] = await open_streams(meta, 1)
    await meta.register_node(NODE.node_id, NODE.node_epoch + 1)  # the node restarted elsewhere
    pipeline = UploadPipeline(config=CONFIG, metadata=meta, store=MemoryObjectStore(), node=NODE, on_committed=_noop)
    first = pipeline.submit(make_block(0, {a: 1_000}))
    second = pipeline.submit(make_block(1, {a: 1_000}, start={a: 2}))
    for future in (first, second):
        with pytest.raises(NodeEpochExpiredError):
            await asyncio.wait_for(future, 10)


async def test_a_blocks_objects_are_built_while_their_ids_are_prepared() -> None:
    """A closing partition's producer waits for its block's upload: the objects' bytes (which do not depend on the
    ids) are built while the controller prepares the ids, so the upload pays the longer of the two, not both."""
    meta = StreamMetadataStateMachine()
    [a] = await open_streams(meta, 1)
    release = asyncio.Event()
    real_prepare = meta.prepare_objects

    async def held_prepare(node, count, ttl_ms):  # type: ignore[no-untyped-def]
        await release.wait()  # fault injection: the controller answers only when the test lets it
        return await real_prepare(node, count, ttl_ms)

    meta.prepare_objects = held_prepare  # type: ignore[method-assign]
    store = MemoryObjectStore()
    pipeline = UploadPipeline(config=CONFIG, metadata=meta, store=store, node=NODE, on_committed=_noop)
    future = pipeline.submit(make_block(0, {a: 1_000}))
    await eventually_async(lambda: pipeline.stats.build_seconds > 0, timeout=5, interval=0.01,
                           what="the block's object built while its ids are still being prepared")
    assert not await store.list("") and pipeline.stats.bytes_uploaded == 0
    release.set()
    await asyncio.wait_for(future, 5)
    assert (await meta.get_streams([a]))[0].end_offset == 2 and pipeline.stats.stream_objects == 1
