"""Storage engine benchmark (issue 2, "Performance"): prints a Markdown table of what the engine achieves here.

    .venv/bin/python bench/storage.py [--quick] [--only NAME ...] [--dir DIR]

Sections (each runs in a child process of its own, so one section's memory, threads or moto server cannot skew
another's figures):

- ``append``:   appends of 64 KiB from 16 concurrent writers through the engine with the file WAL (fsync'd group
  commits), closed loop; plus the bare file WAL under the same load and the disk's own 1 MiB write+fsync rate
  for reference. Uploads go to an in-memory store: in production they go to S3 over the network, not to the
  WAL's disk (the same holds for ``latency``). The machine is shared, so wall-clock MB/s is noisy: the last column
  gives CPU seconds per GB appended (the process's user + sys, and the event-loop thread's share), engine and bare
  WAL runs alternate (three of each; one with ``--quick``) and the median run by CPU is shown.
- ``latency``:  open-loop appends of 64 KiB at a fixed 50 MB/s; latency is measured from each append's *scheduled*
  time, so a stall delays every append behind it (no coordinated omission).
- ``wal-latency``: the bare file WAL's ack latency for fdatasync'd 100 KiB appends at 20 MB/s (open loop) while
  it rolls 16 MiB segments with nothing to recycle, for each ``Preallocation`` mode: the earlier eager zero-fill
  next to group commits, the paced zero-fill between them, and none.
- ``small-latency``: the ack latency of lone 100-byte appends, each 2 ms after the previous one's acknowledgement
  (a share consumer's acknowledgements: one small durable write per ShareFetch round trip), on fresh WALs (the
  paced zero-fill at work), through the bare file WAL and through the engine's stream, rounds alternating.
- ``puts``:     1 GiB spread over 1000 streams with ``s3.wal.upload.threshold`` 500 MiB; object-store PUT requests
  per GiB (``store.stats.puts``).
- ``catchup``:  one stream written to a moto S3 server (``ThreadedMotoServer`` on 127.0.0.1 in the child), then
  read from offset 0 by a fresh engine (cold caches) in 1 MiB fetches, read-ahead on; read-ahead off for contrast;
  whole-object GETs as the server's own ceiling; and the same from the local store, which separates the
  engine's read path from the server.
- ``memory``:   peak resident set size (psutil RSS, sampled every 20 ms) while writing through and reading back
  far more data than the configured caches, against the caches' configured sizes plus the fixed overhead (the
  RSS of the child with everything imported and the engine started, before any data) and the buffers of object
  builds (twice the upload threshold). Run twice: with glibc's default malloc, and with its mmap threshold fixed
  (``MALLOC_MMAP_THRESHOLD_``) so freed large buffers go back to the system; the gap is allocator retention.

``--quick`` shrinks every size (a run of about a minute); the default sizes are the issue's.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import boto3
import psutil
import uvloop
from moto.server import ThreadedMotoServer

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (bench/storage.py shadows ``storage``)

from storage.config import BucketURL, StorageConfig  # noqa: E402
from storage.engine import StorageEngine  # noqa: E402
from storage.metadata.state_machine import StreamMetadataStateMachine  # noqa: E402
from storage.namespace import namespace_for  # noqa: E402
from storage.objects.format import object_key  # noqa: E402
from storage.objectstore.base import ObjectStore  # noqa: E402
from storage.objectstore.local import LocalObjectStore  # noqa: E402
from storage.objectstore.memory import MemoryObjectStore  # noqa: E402
from storage.objectstore.s3 import S3ObjectStore  # noqa: E402
from storage.stream_client import StorageStream  # noqa: E402
from storage.stream_record_batch import StreamRecordBatch  # noqa: E402
from storage.wal.file import FileWAL  # noqa: E402
from storage.wal.segments import Preallocation  # noqa: E402

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
MB = 1_000_000
BATCH = 64 * KiB
WRITERS = 16


@dataclasses.dataclass(frozen=True)
class Sizes:
    append_bytes: int
    latency_seconds: float
    puts_bytes: int
    puts_streams: int
    puts_threshold: int
    catchup_bytes: int
    memory_bytes: int
    memory_wal_cache: int
    memory_block_cache: int
    append_rounds: int = 3
    wal_latency_seconds: float = 8.0
    wal_latency_rounds: int = 3


FULL = Sizes(
    append_bytes=1 * GiB,
    latency_seconds=10.0,
    puts_bytes=1 * GiB,
    puts_streams=1000,
    puts_threshold=500 * MiB,
    catchup_bytes=512 * MiB,
    memory_bytes=1 * GiB,
    memory_wal_cache=256 * MiB,
    memory_block_cache=128 * MiB,
)
QUICK = Sizes(
    append_bytes=192 * MiB,
    latency_seconds=3.0,
    puts_bytes=256 * MiB,
    puts_streams=1000,
    puts_threshold=125 * MiB,
    catchup_bytes=64 * MiB,
    memory_bytes=256 * MiB,
    memory_wal_cache=64 * MiB,
    memory_block_cache=32 * MiB,
    append_rounds=1,
    wal_latency_seconds=4.0,
    wal_latency_rounds=2,
)


@dataclasses.dataclass
class Row:
    """One line of the table."""

    metric: str
    result: str
    target: str = ""
    ok: bool | None = None
    note: str = ""
    cpu: str = ""  # CPU seconds per GB appended (process, and the event-loop thread's share), where measured


# ------------------------------------------------------------------------------------------------ helpers


def engine_config(root: Path, **overrides: Any) -> StorageConfig:
    base = StorageConfig(
        data_buckets=(BucketURL(0, "file", str(root / "objects")),),
        wal_url=BucketURL(0, "file", str(root / "wal")),
        cluster_id="bench",
        node_id=1,
        # Background compaction and sweeps would only add noise to these figures.
        stream_set_object_compaction_interval_ms=0,
        stream_object_compaction_interval_ms=0,
    )
    return dataclasses.replace(base, **overrides)


def make_engine(
    config: StorageConfig, *, metadata: StreamMetadataStateMachine | None = None, store: ObjectStore | None = None
) -> StorageEngine:
    wal = FileWAL(config.wal_url.path, segment_size=config.wal_segment_size, capacity=config.wal_capacity)
    return StorageEngine(
        config,
        metadata or StreamMetadataStateMachine(),
        store=store or LocalObjectStore(config.data_buckets[0].path),
        wal=wal,
    )


async def open_streams(engine: StorageEngine, count: int) -> list[StorageStream]:
    return [await engine.open_stream(await engine.create_stream(), epoch=0) for _ in range(count)]


class Payloads:
    """Distinct 64 KiB payloads, as a broker receives them (one shared bytes object would let every cache
    hold references to the same memory and hide what the caches really cost)."""

    def __init__(self) -> None:
        self._pool = memoryview(os.urandom(4 * MiB))
        self._next = 0
        self.cpu = 0.0  # event-loop CPU seconds spent making payloads: the benchmark's cost, not the engine's

    def __call__(self) -> bytes:
        started = time.thread_time()
        start = self._next
        self._next = (self._next + 4099) % (len(self._pool) - BATCH)
        payload = bytes(self._pool[start : start + BATCH])
        self.cpu += time.thread_time() - started
        return payload


async def closed_loop(streams: list[StorageStream], total: int, payloads: Payloads) -> float:
    """``WRITERS`` tasks append 64 KiB round-robin over ``streams`` until ``total`` bytes; returns seconds."""
    per_writer = total // BATCH // WRITERS

    async def writer(index: int) -> None:
        mine = streams[index::WRITERS] or streams
        for i in range(per_writer):
            await mine[i % len(mine)].append(payloads(), 1)

    started = time.perf_counter()
    await asyncio.gather(*(writer(i) for i in range(WRITERS)))
    return time.perf_counter() - started


@dataclasses.dataclass(frozen=True)
class CpuUse:
    """CPU seconds spent between two samples: the whole process (every thread, user + sys) and the event-loop
    thread alone. Wall-clock MB/s swings with whatever else the shared machine runs; CPU per byte swings less
    (page faults still cost more on a machine short of free memory)."""

    process: float
    loop: float

    def per_gb(self, nbytes: int, payloads: float) -> str:
        """``payloads``: seconds of the loop's CPU the benchmark spent making payloads, shown apart."""
        gb = nbytes / 1e9
        return f"{self.process / gb:.2f} (loop {self.loop / gb:.2f}, of which payloads {payloads / gb:.2f})"


class CpuMeter:
    """Measures ``CpuUse`` around a block run on the event-loop thread (``thread_time`` is that thread's)."""

    def __enter__(self) -> CpuMeter:
        self._process = _process_cpu()
        self._loop = time.thread_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.use = CpuUse(_process_cpu() - self._process, time.thread_time() - self._loop)


def _process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_average() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def percentile(sorted_values: list[float], fraction: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(fraction * (len(sorted_values) - 1))))
    return sorted_values[index]


def mb_per_s(nbytes: int, seconds: float) -> float:
    return nbytes / MB / seconds


def rss() -> int:
    return int(psutil.Process().memory_info().rss)


class RssSampler:
    """Peak RSS, sampled from a thread so a busy event loop cannot hide a spike."""

    def __init__(self, interval: float = 0.02) -> None:
        self.peak = rss()
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.peak = max(self.peak, rss())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())


# ----------------------------------------------------------------------------------------------- sections


def disk_fsync_rate(directory: Path, total: int) -> float:
    """MB/s of 1 MiB write + fsync on the WAL's disk: the ceiling a file WAL can reach on this machine."""
    directory.mkdir(parents=True, exist_ok=True)
    chunk = os.urandom(MiB)
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        started = time.perf_counter()
        for _ in range(total // MiB):
            os.write(fd, chunk)
            os.fsync(fd)
        return mb_per_s(total, time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()


@dataclasses.dataclass(frozen=True)
class AppendRun:
    """One closed-loop append run: wall time, CPU, and the event-loop CPU the benchmark spent making payloads."""

    seconds: float
    cpu: CpuUse
    payload_cpu: float
    objects: int = 0


async def engine_append_run(sizes: Sizes, root: Path, payloads: Payloads) -> AppendRun:
    config = engine_config(root)
    # Uploads go to memory, as in production they go to S3 over the network rather than to the WAL's disk.
    engine = make_engine(config, store=MemoryObjectStore())
    await engine.start()
    try:
        streams = await open_streams(engine, WRITERS)
        await closed_loop(streams, 8 * MiB, payloads)  # warm-up: segments created, code paths hot
        payloads.cpu = 0.0
        with CpuMeter() as meter:
            seconds = await closed_loop(streams, sizes.append_bytes, payloads)
            await engine.force_upload()  # the uploads of what was appended belong to its cost
        return AppendRun(seconds, meter.use, payloads.cpu, engine.stats().objects_uploaded)
    finally:
        await engine.shutdown()


async def bare_wal_append_run(sizes: Sizes, root: Path, payloads: Payloads) -> AppendRun:
    wal = FileWAL(root, segment_size=engine_config(root).wal_segment_size, capacity=4 * GiB)
    await wal.start()
    try:
        async for _record in wal.recover():
            pass
        per_writer = sizes.append_bytes // BATCH // WRITERS

        async def writer(index: int) -> None:
            for i in range(per_writer):
                await wal.append(StreamRecordBatch(index, 0, i, 1, payloads()))

        payloads.cpu = 0.0
        with CpuMeter() as meter:
            started = time.perf_counter()
            await asyncio.gather(*(writer(i) for i in range(WRITERS)))
            seconds = time.perf_counter() - started
        return AppendRun(seconds, meter.use, payloads.cpu)
    finally:
        await wal.close()


def median_run(runs: list[AppendRun]) -> AppendRun:
    """The run with the median CPU (each figure of one real run, rather than medians mixed across runs)."""
    return sorted(runs, key=lambda r: r.cpu.process)[len(runs) // 2]


async def bench_append(sizes: Sizes, root: Path) -> list[Row]:
    payloads = Payloads()
    disk = disk_fsync_rate(root / "probe", min(sizes.append_bytes // 4, 256 * MiB))
    engine_runs: list[AppendRun] = []
    wal_runs: list[AppendRun] = []
    loads = []
    for round_ in range(sizes.append_rounds):  # alternated, so a busy neighbour slows both kinds alike
        engine_runs.append(await engine_append_run(sizes, root / f"engine-{round_}", payloads))
        loads.append(os.getloadavg()[0])
        shutil.rmtree(root / f"engine-{round_}")
        wal_runs.append(await bare_wal_append_run(sizes, root / f"bare-wal-{round_}", payloads))
        shutil.rmtree(root / f"bare-wal-{round_}")
    gb = sizes.append_bytes / 1e9
    engine = median_run(engine_runs)
    wal = median_run(wal_runs)
    engine_rate = mb_per_s(sizes.append_bytes, engine.seconds)

    def spread(runs: list[AppendRun]) -> str:
        rates = sorted(mb_per_s(sizes.append_bytes, r.seconds) for r in runs)
        cpus = sorted(r.cpu.process / gb for r in runs)
        return (
            f"{len(runs)} runs of {sizes.append_bytes // MiB} MiB, the median by CPU shown; all runs "
            f"{rates[0]:.0f}-{rates[-1]:.0f} MB/s, {cpus[0]:.2f}-{cpus[-1]:.2f} CPU s/GB"
        )

    return [
        Row(
            "append throughput, engine + file WAL (64 KiB x 16 writers)",
            f"{engine_rate:.0f} MB/s",
            ">= 200 MB/s",
            engine_rate >= 200,
            f"{spread(engine_runs)}; {engine.objects} objects uploaded in the median run; 1-minute load average "
            f"{min(loads):.2f}-{max(loads):.2f}; CPU includes the uploads, and {engine.payload_cpu / gb:.2f} s/GB of "
            "the event loop's is the benchmark making payloads (fresh memory for each, as a broker receives them)",
            engine.cpu.per_gb(sizes.append_bytes, engine.payload_cpu),
        ),
        Row(
            "append throughput, bare file WAL (same load, reference)",
            f"{mb_per_s(sizes.append_bytes, wal.seconds):.0f} MB/s",
            note=f"{spread(wal_runs)}; making payloads: {wal.payload_cpu / gb:.2f} s/GB of the event loop's CPU",
            cpu=wal.cpu.per_gb(sizes.append_bytes, wal.payload_cpu),
        ),
        Row("disk: 1 MiB write + fsync (reference)", f"{disk:.0f} MB/s"),
    ]


async def bench_latency(sizes: Sizes, root: Path) -> list[Row]:
    payloads = Payloads()
    rate = 50 * MB
    engine = make_engine(engine_config(root / "engine"), store=MemoryObjectStore())
    await engine.start()
    try:
        streams = await open_streams(engine, WRITERS)
        await closed_loop(streams, 8 * MiB, payloads)
        loop = asyncio.get_running_loop()
        count = int(sizes.latency_seconds * rate / BATCH)
        interval = BATCH / rate
        latencies: list[float] = []
        pending: list[Awaitable[int]] = []

        def done(scheduled: float) -> Callable[[asyncio.Future[int]], None]:
            return lambda _f: latencies.append(time.perf_counter() - scheduled)

        started = time.perf_counter()
        for i in range(count):
            scheduled = started + i * interval
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            future = asyncio.ensure_future(streams[i % WRITERS].append(payloads(), 1), loop=loop)
            future.add_done_callback(done(scheduled))
            pending.append(future)
        await asyncio.gather(*pending)
        achieved = mb_per_s(count * BATCH, time.perf_counter() - started)
    finally:
        await engine.shutdown()
    ordered = sorted(latencies)
    p50, p99, p999 = (percentile(ordered, q) * 1000 for q in (0.5, 0.99, 0.999))
    return [
        Row(
            "append latency at 50 MB/s offered (p50 / p99 / p999)",
            f"{p50:.2f} / {p99:.2f} / {p999:.2f} ms",
            "p99 <= 5 ms",
            p99 <= 5.0,
            f"{count} appends over {sizes.latency_seconds:.0f} s, {achieved:.0f} MB/s achieved; mean "
            f"{statistics.fmean(ordered) * 1000:.2f} ms, max {ordered[-1] * 1000:.1f} ms",
        )
    ]


async def bench_puts(sizes: Sizes, root: Path) -> list[Row]:
    payloads = Payloads()
    config = engine_config(
        root / "engine",
        wal_upload_threshold=sizes.puts_threshold,
        wal_cache_size=max(2 * sizes.puts_threshold, 64 * MiB),
        wal_capacity=4 * GiB,
    )
    engine = make_engine(config)
    await engine.start()
    try:
        streams = await open_streams(engine, sizes.puts_streams)
        before = engine.store.stats.puts
        seconds = await closed_loop(streams, sizes.puts_bytes, payloads)
        await engine.force_upload()
        stats = engine.stats()
        puts = engine.store.stats.puts - before
    finally:
        await engine.shutdown()
    per_gib = puts / (sizes.puts_bytes / GiB)
    return [
        Row(
            f"PUTs per GiB ({sizes.puts_streams} streams, threshold {sizes.puts_threshold // MiB} MiB)",
            f"{per_gib:.1f}",
            "<= 4" if sizes.puts_threshold == 500 * MiB else "(<= 4 at 500 MiB)",
            per_gib <= 4 if sizes.puts_threshold == 500 * MiB else None,
            f"{puts} PUTs for {sizes.puts_bytes // MiB} MiB: {stats.stream_set_objects} stream-set + "
            f"{stats.stream_objects} stream objects; written at {mb_per_s(sizes.puts_bytes, seconds):.0f} MB/s",
        )
    ]


WAL_LATENCY_RATE = 20 * MB
WAL_LATENCY_BATCH = 100 * KiB
WAL_LATENCY_SEGMENT = 16 * MiB  # rolls every ~0.8 s at 20 MB/s


async def bench_wal_latency(sizes: Sizes, root: Path) -> list[Row]:
    """The file WAL's ack latency while it rolls segments with nothing to recycle (no trims), under each way of
    preparing the next segment's file. Rounds alternate the modes so a noisy neighbour hurts them alike."""
    modes = (Preallocation.EAGER, Preallocation.PACED, Preallocation.OFF)
    latencies: dict[Preallocation, list[float]] = {mode: [] for mode in modes}
    rolls: dict[Preallocation, list[int]] = {mode: [0, 0] for mode in modes}
    for round_ in range(sizes.wal_latency_rounds):
        for mode in modes:
            wal = FileWAL(
                root / f"{mode.value}-{round_}", segment_size=WAL_LATENCY_SEGMENT, capacity=4 * GiB, preallocate=mode
            )
            await wal.start()
            try:
                async for _record in wal.recover():
                    pass
                latencies[mode] += await wal_open_loop(wal, sizes.wal_latency_seconds)
                rolls[mode][0] += wal.stats.segments_created
                rolls[mode][1] += wal.stats.segments_preallocated
            finally:
                await wal.close()
    rows = []
    for mode in modes:
        ordered = sorted(latencies[mode])
        p50, p99, p999 = (percentile(ordered, q) * 1000 for q in (0.5, 0.99, 0.999))
        created, preallocated = rolls[mode]
        rows.append(
            Row(
                f"file WAL ack latency, 100 KiB at 20 MB/s while rolling, preallocation {mode.value} "
                "(p50 / p99 / p999)",
                f"{p50:.2f} / {p99:.2f} / {p999:.2f} ms",
                note=f"{len(ordered)} appends in {sizes.wal_latency_rounds} rounds of "
                f"{sizes.wal_latency_seconds:.0f} s; {created} segments, {preallocated} of them onto a preallocated "
                f"file; max {ordered[-1] * 1000:.1f} ms; {load_average()}",
            )
        )
    return rows


async def wal_open_loop(wal: FileWAL, seconds: float) -> list[float]:
    """Appends 100 KiB at 20 MB/s for ``seconds``; latency counts from each append's scheduled time."""
    payload = os.urandom(WAL_LATENCY_BATCH)
    interval = WAL_LATENCY_BATCH / WAL_LATENCY_RATE
    latencies: list[float] = []
    pending: list[asyncio.Future[Any]] = []

    def done(scheduled: float) -> Callable[[asyncio.Future[Any]], None]:
        return lambda _f: latencies.append(time.perf_counter() - scheduled)

    started = time.perf_counter()
    for i in range(int(seconds / interval)):
        scheduled = started + i * interval
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        future = asyncio.ensure_future(wal.append(StreamRecordBatch(1, 0, i, 1, payload)))
        future.add_done_callback(done(scheduled))
        pending.append(future)
    await asyncio.gather(*pending)
    return latencies


SMALL_APPEND = 100
SMALL_APPEND_GAP_S = 0.002  # about a share consumer's round trip between two acknowledgements
SMALL_APPENDS = 1500


async def bench_small_latency(sizes: Sizes, root: Path) -> list[Row]:
    """Lone 100-byte appends, each made 2 ms after the previous one was acknowledged: a share consumer's
    acknowledgement (a share-state record, written durably before its ShareFetch is answered). On fresh WALs, so
    nothing can be recycled and the paced zero-fill is at work between them as it is on a new broker. The bare
    file WAL and the engine's stream on top of it, in alternating rounds."""
    payload = os.urandom(SMALL_APPEND)
    latencies: dict[str, list[float]] = {"file WAL": [], "engine stream": []}
    fill_steps = 0
    for round_ in range(sizes.wal_latency_rounds):
        wal = FileWAL(root / f"wal-{round_}")
        await wal.start()
        try:
            async for _record in wal.recover():
                pass
            latencies["file WAL"] += await lone_appends(
                lambda i, wal=wal: wal.append(StreamRecordBatch(1, 0, i, 1, payload))
            )
            fill_steps += wal.stats.fill_steps
        finally:
            await wal.close()
        engine = make_engine(engine_config(root / f"engine-{round_}"), store=MemoryObjectStore())
        await engine.start()
        try:
            (stream,) = await open_streams(engine, 1)
            latencies["engine stream"] += await lone_appends(lambda _i, stream=stream: stream.append(payload, 1))
        finally:
            await engine.shutdown()
    rows = []
    for name, values in latencies.items():
        ordered = sorted(values)
        p50, p99 = (percentile(ordered, q) * 1000 for q in (0.5, 0.99))
        rows.append(
            Row(
                f"{name} ack latency, lone {SMALL_APPEND}-byte appends {SMALL_APPEND_GAP_S * 1000:.0f} ms apart "
                "(p50 / p99)",
                f"{p50:.2f} / {p99:.2f} ms",
                note=f"{len(ordered)} appends in {sizes.wal_latency_rounds} rounds (the bare WAL's took {fill_steps} "
                f"zero-fill steps); mean "
                f"{statistics.fmean(ordered) * 1000:.2f} ms, max {ordered[-1] * 1000:.1f} ms; {load_average()}",
            )
        )
    return rows


async def lone_appends(append: Callable[[int], Awaitable[Any]]) -> list[float]:
    latencies = []
    for i in range(SMALL_APPENDS):
        await asyncio.sleep(SMALL_APPEND_GAP_S)
        started = time.perf_counter()
        await append(i)
        latencies.append(time.perf_counter() - started)
    return latencies


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


SECTIONS: dict[str, Callable[[Sizes, Path], Coroutine[Any, Any, list[Row]]]] = {
    "append": bench_append,
    "latency": bench_latency,
    "wal-latency": bench_wal_latency,
    "small-latency": bench_small_latency,
    "puts": bench_puts,
    "catchup": bench_catchup,
    "memory": bench_memory,
}


# -------------------------------------------------------------------------------------------------- driver


def run_child(name: str, sizes: Sizes, base: Path | None) -> None:
    """Runs one section and prints its rows as JSON on the last line of stdout."""
    runner: Callable[[Coroutine[Any, Any, list[Row]]], list[Row]] = uvloop.run
    with tempfile.TemporaryDirectory(prefix=f"fjord-bench-{name}-", dir=base) as tmp:
        rows = runner(SECTIONS[name](sizes, Path(tmp)))
    print(json.dumps([dataclasses.asdict(r) for r in rows]))


MMAP_THRESHOLD = "131072"
"""glibc otherwise raises its mmap threshold dynamically (up to 32 MiB) after large buffers are freed, and then
keeps freed object-build and block buffers in a fragmented heap instead of returning them to the system."""


def run_section(name: str, args: argparse.Namespace, env: dict[str, str] | None = None) -> list[Row]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", name]
    if args.quick:
        command.append("--quick")
    if args.dir:
        command += ["--dir", str(args.dir)]
    started = time.perf_counter()
    proc = subprocess.run(
        command, capture_output=True, text=True, timeout=args.timeout, check=False, env={**os.environ, **(env or {})}
    )
    elapsed = time.perf_counter() - started
    if proc.returncode != 0 or not proc.stdout.strip():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [Row(name, "failed", ok=False, note=f"exit {proc.returncode}: {tail}")]
    rows = [Row(**r) for r in json.loads(proc.stdout.strip().splitlines()[-1])]
    print(f"  {name}: done in {elapsed:.0f} s", file=sys.stderr)
    return rows


def render(rows: list[Row], quick: bool) -> str:
    lines = [
        f"Fjord storage benchmark ({'quick sizes' if quick else 'issue sizes'}; {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]})",
        "",
        "| metric | result | target | ok | CPU s/GB |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        verdict = {True: "yes", False: "**no**", None: ""}[row.ok]
        lines.append(f"| {row.metric} | {row.result} | {row.target} | {verdict} | {row.cpu} |")
    lines.append("")
    lines += [f"- {row.metric}: {row.note}" for row in rows if row.note]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes for a fast run")
    parser.add_argument("--only", nargs="+", choices=sorted(SECTIONS), help="run only these sections")
    parser.add_argument("--dir", type=Path, help="where to put WALs and objects (default: the system temp dir)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per section before giving up")
    parser.add_argument("--child", choices=sorted(SECTIONS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.child:
        run_child(args.child, sizes, args.dir)
        return 0
    rows: list[Row] = []
    for name in args.only or list(SECTIONS):
        print(f"running {name}...", file=sys.stderr)
        try:
            rows += run_section(name, args)
            if name == "memory":  # the same workload with the allocator tuned, to separate it from the engine
                rows += run_section(name, args, {"MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD})
        except subprocess.TimeoutExpired:
            rows.append(Row(name, "timed out", ok=False, note=f"no result within {args.timeout:.0f} s"))
    print(render(rows, args.quick))
    return 0 if all(r.ok is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
