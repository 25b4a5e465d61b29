"""The sections of ``bench/storage.py`` that measure what appends cost in bulk: ``append`` (closed-loop throughput
and CPU per GB through the engine and the bare file WAL, next to the disk's own fsync rate) and ``puts`` (object
store PUT requests per GiB).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import time
from pathlib import Path

from bench.storage_common import (
    BATCH,
    WRITERS,
    CpuMeter,
    CpuUse,
    GiB,
    MiB,
    Payloads,
    Row,
    Sizes,
    closed_loop,
    engine_config,
    make_engine,
    mb_per_s,
    open_streams,
)
from storage.objectstore.memory import MemoryObjectStore
from storage.stream_record_batch import StreamRecordBatch
from storage.wal.file import FileWAL


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
