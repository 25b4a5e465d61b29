"""The sections of ``bench/storage.py`` that read back: ``catchup`` (one stream read from offset 0 by a fresh
engine from moto S3 and from the local store) and ``memory`` (peak RSS writing and reading far more than the
caches hold, against their configured sizes).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path

import boto3
from moto.server import ThreadedMotoServer

from bench.storage_common import (
    BATCH,
    GiB,
    MiB,
    Payloads,
    Row,
    RssSampler,
    Sizes,
    closed_loop,
    engine_config,
    make_engine,
    mb_per_s,
    open_streams,
    rss,
)
from storage.config import BucketURL, StorageConfig
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.namespace import namespace_for
from storage.objects.format import object_key
from storage.objectstore.base import ObjectStore
from storage.objectstore.local import LocalObjectStore
from storage.objectstore.s3 import S3ObjectStore

StoreFactory = Callable[[StorageConfig], ObjectStore]


async def bench_catchup(sizes: Sizes, root: Path) -> list[Row]:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[key] = "bench"  # moto accepts anything; never real credentials
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench")
        url = BucketURL(0, "s3", "bench", endpoint=endpoint, path_style=True, access_key="bench", secret_key="bench")
        rows = await catchup_rows(
            sizes, root / "s3", "moto S3", lambda config: S3ObjectStore.from_url(url, config), target_mb_s=150
        )
    finally:
        server.stop()
    local = root / "local-objects"
    rows += await catchup_rows(sizes, root / "local", "local store", lambda _config: LocalObjectStore(local))
    return rows


async def catchup_rows(
    sizes: Sizes, root: Path, where: str, open_store: StoreFactory, *, target_mb_s: float | None = None
) -> list[Row]:
    """Writes one stream, then reads it back from offset 0 with a fresh engine, read-ahead on and off;
    ``target_mb_s`` is the issue's goal for the read-ahead run."""
    metadata = StreamMetadataStateMachine()
    payloads = Payloads()
    # 8 MiB objects: moto serves a ranged GET by reading the whole object, so bigger objects only measure moto.
    config = engine_config(root / "writer", wal_upload_threshold=8 * MiB)
    writer = make_engine(config, metadata=metadata, store=open_store(config))
    await writer.start()
    try:
        [stream] = await open_streams(writer, 1)
        stream_id = stream.stream_id
        for _ in range(sizes.catchup_bytes // BATCH // 64):
            await asyncio.gather(*(stream.append(payloads(), 1) for _ in range(64)))
        end = stream.confirm_offset
    finally:
        await writer.shutdown()  # uploads the tail and closes the stream

    rows = [await raw_get_row(open_store(config), metadata, stream_id, where)]
    for epoch, readahead in enumerate((True, False), start=1):
        reader_config = engine_config(root / f"reader-{epoch}", node_id=2, readahead_max=32 * MiB if readahead else 0)
        reader = make_engine(reader_config, metadata=metadata, store=open_store(reader_config))
        await reader.start()
        try:
            consumer = await reader.open_stream(stream_id, epoch)
            offset, total = 0, 0
            started = time.perf_counter()
            while offset < end:
                result = await consumer.fetch(offset, end, 1 * MiB)
                total += sum(b.size for b in result.batches)
                offset = result.batches[-1].last_offset
            seconds = time.perf_counter() - started
            gets = reader.store.stats.gets
            await consumer.close()
        finally:
            await reader.shutdown()
        rate = mb_per_s(total, seconds)
        judged = readahead and target_mb_s is not None
        rows.append(
            Row(
                f"catch-up read, one stream from {where}, read-ahead {'on' if readahead else 'off'}",
                f"{rate:.0f} MB/s",
                f">= {target_mb_s:.0f} MB/s" if judged else "",
                rate >= (target_mb_s or 0) if judged else None,
                f"{total // MiB} MiB in 1 MiB fetches, {gets} GETs",
            )
        )
    return rows


async def raw_get_row(store: ObjectStore, metadata: StreamMetadataStateMachine, stream_id: int, where: str) -> Row:
    """What the store delivers without the engine: each object of the stream in one GET, in turn."""
    try:
        objects = await metadata.get_objects(stream_id, 0, -1, 1_000_000)
        started = time.perf_counter()
        total = 0
        for obj in objects:
            total += len(await store.get(object_key(obj.object_id, namespace_for("bench"))))
        seconds = time.perf_counter() - started
    finally:
        await store.close()
    return Row(
        f"raw GETs from {where}, whole objects one at a time (reference)",
        f"{mb_per_s(total, seconds):.0f} MB/s",
        note=f"{len(objects)} objects, {total // MiB} MiB",
    )


async def bench_memory(sizes: Sizes, root: Path) -> list[Row]:
    payloads = Payloads()
    threshold = sizes.memory_wal_cache // 3
    config = engine_config(
        root / "engine",
        wal_cache_size=sizes.memory_wal_cache,
        wal_upload_threshold=threshold,
        block_cache_size=sizes.memory_block_cache,
        readahead_max=min(32 * MiB, sizes.memory_block_cache // 4),
        wal_capacity=4 * GiB,
    )
    engine = make_engine(config)
    await engine.start()
    streams = await open_streams(engine, 64)
    baseline = rss()
    try:
        with RssSampler() as sampler:
            await closed_loop(streams, sizes.memory_bytes, payloads)
            await engine.force_upload()
            write_peak = sampler.peak
            for stream in streams:  # every stream from its start: mostly evicted from the LogCache by now
                offset = 0
                while offset < stream.confirm_offset:
                    result = await stream.fetch(offset, stream.confirm_offset, 1 * MiB)
                    offset = result.batches[-1].last_offset
        stats = engine.stats()
    finally:
        await engine.shutdown()
    caches = sizes.memory_wal_cache + sizes.memory_block_cache
    # Building an object holds its bytes twice (builder buffer + finished object) next to the cached block.
    build_buffers = 2 * threshold
    allowed = baseline + caches + build_buffers
    tuned = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    allocator = f"glibc mmap threshold fixed at {tuned} bytes" if tuned else "default glibc malloc"
    return [
        Row(
            f"peak RSS vs configured caches ({allocator})",
            f"{sampler.peak / MiB:.0f} MiB",
            f"<= {allowed // MiB} MiB",
            sampler.peak <= allowed,
            f"limit = fixed overhead {baseline / MiB:.0f} MiB (interpreter, imports, engine started, no data) + "
            f"LogCache {sizes.memory_wal_cache // MiB} MiB + block cache {sizes.memory_block_cache // MiB} MiB + "
            f"object build buffers {build_buffers // MiB} MiB (2 x upload threshold); peak while writing "
            f"{write_peak / MiB:.0f} MiB; {sizes.memory_bytes // MiB} MiB written over 64 streams and read back, "
            f"{stats.block_cache_misses} block-cache misses",
        )
    ]
