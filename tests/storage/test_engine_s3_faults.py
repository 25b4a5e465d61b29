"""The storage engine with its S3 traffic through testkit's fault-injecting proxy (issue 24): reads from objects
ride out SlowDown and bodies cut off mid-way and return exactly the bytes appended; an S3 WAL that S3 refuses keeps
the appends it took until S3 answers, and past ``s3.wal.unwritable.max.ms`` refuses new ones before they take an
offset, so the stream stays writable. Compaction through a SlowDown storm merges and sweeps without changing a
byte."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.config import BucketURL
from storage.engine import StorageEngine
from storage.errors import WALUnavailableError
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.objectstore.factory import open_object_store
from testkit.s3_fault_proxy import S3FaultProxy
from tests.conftest import S3Server
from tests.storage.engine_support import make_engine, payload, small_config
from tests.storage.test_compaction import RETENTION_MS, make_rig, write_small_uploads


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[S3FaultProxy]:
    with S3FaultProxy(s3_server.endpoint, seed=3) as running:
        yield running


@pytest.fixture
def proxied_bucket(proxy: S3FaultProxy, s3_server: S3Server) -> BucketURL:
    return S3Server(proxy.endpoint).bucket_url(s3_server.create_bucket("faults"))


async def test_reads_through_resets_and_slow_downs_return_the_right_bytes(
    tmp_path: Path, proxy: S3FaultProxy, proxied_bucket: BucketURL, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("storage.objects.reader.WHOLE_OBJECT_BYTES", 0)  # blocks by ranged GETs, through the faults
    config = dataclasses.replace(small_config(tmp_path), data_buckets=(proxied_bucket,))
    engine = make_engine(config, StreamMetadataStateMachine(), store=open_object_store(proxied_bucket, config))
    await engine.start()
    try:
        ids = [await engine.create_stream() for _ in range(2)]
        streams = [await engine.open_stream(i, epoch=0) for i in ids]
        sizes = [700, 6_000]
        for n in range(25):
            for stream, size in zip(streams, sizes, strict=True):
                await stream.append(payload(stream.stream_id, n, size), 1)
        await engine.force_upload()
        proxy.faults.reset_mid_body, proxy.faults.slow_down = 0.4, 0.3
        proxy.faults.only_methods = frozenset({"GET"})
        for stream in streams:
            engine.log_cache.forget(stream.stream_id)  # cold: every byte below comes from S3, through the faults
        for stream, size in zip(streams, sizes, strict=True):
            result = await stream.fetch(0, 25, 10**9)
            assert not result.cache_hit
            assert [b.payload for b in result.batches] == [payload(stream.stream_id, n, size) for n in range(25)]
        assert proxy.stats.resets > 0 and proxy.stats.slow_downs > 0
        errors = engine.store.stats.errors
        assert errors.get(("get", "reset"), 0) > 0 and errors.get(("get", "SlowDown"), 0) > 0
    finally:
        proxy.clear()
        await engine.shutdown()


async def test_an_s3_wal_that_cannot_write_refuses_new_appends_retriably_and_recovers(
    tmp_path: Path, proxy: S3FaultProxy, proxied_bucket: BucketURL
) -> None:
    wal_url = dataclasses.replace(proxied_bucket, params={**proxied_bucket.params, "batchInterval": "10"})
    config = dataclasses.replace(
        small_config(tmp_path),
        data_buckets=(proxied_bucket,),
        wal_url=wal_url,
        wal_unwritable_max_ms=500,
        s3_max_retries=1,
    )
    engine = StorageEngine(config, StreamMetadataStateMachine())  # S3 WAL and S3 objects, through the proxy
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), epoch=0)
        assert await stream.append(payload(stream.stream_id, 0), 1) == 0
        proxy.outage(60, mode="refuse")
        taken = stream.append(payload(stream.stream_id, 1), 1)
        await asyncio.sleep(1.5)  # S3 stays away longer than the WAL's bound
        assert not asyncio.ensure_future(taken).done()
        assert engine.stats().wal_unwritable
        with pytest.raises(WALUnavailableError):
            stream.append(payload(stream.stream_id, 2), 1)
        assert stream.next_offset == 2  # the refused append took no offset
        proxy.end_outage()
        assert await asyncio.wait_for(taken, 15) == 1
        assert await asyncio.wait_for(stream.append(payload(stream.stream_id, 2), 1), 15) == 2
        result = await stream.fetch(0, 3, 10**9)
        assert [b.payload for b in result.batches] == [payload(stream.stream_id, n) for n in range(3)]
        stats = engine.stats()
        assert not stats.wal_unwritable and stats.wal_unwritable_seconds >= 1.0
    finally:
        proxy.clear()
        await engine.shutdown()


async def test_a_file_wal_broker_waits_out_an_outage_at_capacity_and_loses_nothing(
    tmp_path: Path, proxy: S3FaultProxy, proxied_bucket: BucketURL
) -> None:
    config = dataclasses.replace(small_config(tmp_path), data_buckets=(proxied_bucket,), s3_max_retries=1)
    engine = make_engine(config, StreamMetadataStateMachine(), store=open_object_store(proxied_bucket, config))
    await engine.start()
    try:
        stream = await engine.open_stream(await engine.create_stream(), epoch=0)
        proxy.outage(60, mode="refuse")
        # Far more than the 64 KiB LogCache can hold unuploaded: the later appends wait for room, none fails.
        appends = [asyncio.ensure_future(stream.append(payload(stream.stream_id, n), 1)) for n in range(200)]
        await asyncio.sleep(2)
        done = [a for a in appends if a.done()]
        assert all(a.exception() is None for a in done)
        assert len(done) < len(appends), "every append was acknowledged although nothing could be uploaded"
        assert engine.stats().upload_failures > 0
        proxy.end_outage()
        assert await asyncio.wait_for(asyncio.gather(*appends), 60) == list(range(200))
        result = await stream.fetch(0, 200, 10**9)
        assert [b.payload for b in result.batches] == [payload(stream.stream_id, n) for n in range(200)]
    finally:
        proxy.clear()
        await engine.shutdown()


async def test_compaction_through_a_slow_down_storm_changes_no_byte(
    tmp_path: Path, proxy: S3FaultProxy, proxied_bucket: BucketURL, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half of all S3 requests answered 503 SlowDown while small stream-set objects are merged (their blocks read,
    the merged object uploaded in parts, the replaced ones swept) and every stream is read back cold from objects:
    each request is retried in place, and readers see the same bytes as before. (12 retries: at 50% the default
    8 leave one request in 512 failing, which compaction would retry in its next round; here one round must do.)"""
    monkeypatch.setattr("storage.objects.reader.WHOLE_OBJECT_BYTES", 0)  # blocks by ranged GETs, through the faults
    config = small_config(tmp_path, data_buckets=(proxied_bucket,), s3_max_retries=12)
    rig = await make_rig(tmp_path, store=open_object_store(proxied_bucket, config), data_buckets=(proxied_bucket,))
    try:
        await write_small_uploads(rig, rounds=12)
        before = await rig.read_all()
        old_keys = await rig.bucket_keys()
        proxy.faults.slow_down = 0.5
        merged = await rig.stream_set().run_once()
        assert merged.failures == [] and merged.merged_objects == 6
        assert await rig.read_all() == before
        rig.clock.now += RETENTION_MS
        assert len((await rig.sweeper().run_once()).deleted) == 6
        proxy.faults.slow_down = 0.0
        live = await rig.bucket_keys()
        assert live == await rig.live_keys() and not live & old_keys
        assert proxy.stats.slow_downs > 20
        errors = rig.store.stats.errors
        assert errors.get(("get", "SlowDown"), 0) > 0 and errors.get(("put", "SlowDown"), 0) > 0
    finally:
        proxy.clear()
        await rig.engine.shutdown()
