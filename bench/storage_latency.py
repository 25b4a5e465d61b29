"""The sections of ``bench/storage.py`` that measure how long one append waits for its acknowledgement:
``latency`` (open loop through the engine), ``wal-latency`` (the bare file WAL rolling segments, per
preallocation mode) and ``small-latency`` (lone 100-byte appends, a share consumer's acknowledgements).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.stats import percentile
from bench.storage_common import (
    BATCH,
    MB,
    WRITERS,
    GiB,
    KiB,
    MiB,
    Payloads,
    Row,
    Sizes,
    closed_loop,
    engine_config,
    load_average,
    make_engine,
    mb_per_s,
    open_streams,
)
from storage.objectstore.memory import MemoryObjectStore
from storage.stream_record_batch import StreamRecordBatch
from storage.wal.file import FileWAL
from storage.wal.segments import Preallocation


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
