"""The engine against a real S3-compatible server (moto on 127.0.0.1): uploads land as objects under the
namespace, and cache-cold reads from S3 return exactly the bytes appended, also after a restart."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from storage.config import BucketURL
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.objects.format import object_id_from_key
from storage.objectstore.factory import open_object_store
from tests.storage.engine_support import make_engine, payload, small_config


async def test_appends_upload_to_s3_and_cold_reads_return_identical_bytes(
    tmp_path: Path, s3_bucket_url: BucketURL
) -> None:
    config = dataclasses.replace(small_config(tmp_path), data_buckets=(s3_bucket_url,))
    metadata = StreamMetadataStateMachine()
    engine = make_engine(config, metadata, store=open_object_store(s3_bucket_url, config))
    await engine.start()
    ids = [await engine.create_stream() for _ in range(3)]
    streams = [await engine.open_stream(i, epoch=0) for i in ids]
    sizes = [300, 5_000, 1_200]  # the middle stream crosses the split size: it gets stream objects
    for n in range(20):
        for stream, size in zip(streams, sizes, strict=True):
            await stream.append(payload(stream.stream_id, n, size), 1)
    await engine.force_upload()
    stats = engine.stats()
    assert stats.stream_objects >= 1 and stats.stream_set_objects >= 1
    assert stats.puts == stats.objects_uploaded

    listed = await engine.store.list("")
    ids_in_bucket = {object_id_from_key(o.key) for o in listed}
    committed = {o.object_id for s in ids for o in await metadata.get_objects(s, 0, -1, 1000)}
    assert committed <= ids_in_bucket and all(k.key.split("/")[1] == config.namespace for k in listed)

    for stream in streams:
        engine.log_cache.forget(stream.stream_id)  # cold: every byte below comes from S3
    for stream, size in zip(streams, sizes, strict=True):
        result = await stream.fetch(0, 20, 10**9)
        assert not result.cache_hit
        assert [b.payload for b in result.batches] == [payload(stream.stream_id, n, size) for n in range(20)]
    await engine.shutdown()

    # A new engine with empty caches reads the same bytes from S3.
    restarted = make_engine(
        dataclasses.replace(config, node_epoch=engine.node.node_epoch + 1),
        metadata,
        store=open_object_store(s3_bucket_url, config),
    )
    await restarted.start()
    try:
        gets = restarted.store.stats.gets
        for stream_id, size in zip(ids, sizes, strict=True):
            stream = await restarted.open_stream(stream_id, epoch=1)
            result = await stream.fetch(0, 20, 10**9)
            assert [b.payload for b in result.batches] == [payload(stream_id, n, size) for n in range(20)]
        assert restarted.store.stats.gets > gets
    finally:
        await restarted.shutdown()


async def test_crash_with_the_s3_wal_loses_no_acknowledged_append(tmp_path: Path, s3_bucket_url: BucketURL) -> None:
    wal_url = dataclasses.replace(s3_bucket_url, params={**s3_bucket_url.params, "batchInterval": "10"})
    config = dataclasses.replace(small_config(tmp_path), data_buckets=(s3_bucket_url,), wal_url=wal_url)
    metadata = StreamMetadataStateMachine()
    engine = StorageEngine(config, metadata)  # S3 WAL and S3 objects, from the URLs
    await engine.start()
    ids = [await engine.create_stream() for _ in range(2)]
    streams = [await engine.open_stream(i, epoch=0) for i in ids]
    await asyncio.gather(*(s.append(payload(s.stream_id, n), 1) for n in range(10) for s in streams))
    await engine.force_upload()
    await asyncio.gather(*(s.append(payload(s.stream_id, n), 1) for n in range(10, 14) for s in streams))
    assert [s.end_offset for s in await metadata.get_streams(ids)] == [10, 10]
    await engine.halt()

    restarted = StorageEngine(config, metadata)  # a later start: a higher node epoch fences the old WAL writer
    await restarted.start()
    try:
        assert restarted.node.node_epoch > engine.node.node_epoch
        assert restarted.stats().recovered_batches == 8
        for stream_id in ids:
            stream = await restarted.open_stream(stream_id, epoch=1)
            result = await stream.fetch(0, 14, 10**9)
            assert [b.payload for b in result.batches] == [payload(stream_id, n) for n in range(14)]
    finally:
        await restarted.shutdown()
