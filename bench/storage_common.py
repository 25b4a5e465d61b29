"""What every section of ``bench/storage.py`` shares: the sizes of a run, a row of the table, an engine set up for
measuring (no background compaction), distinct payloads, closed-loop writers, and the CPU and RSS
measurements the rows are made of (their percentiles: bench/stats.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import resource
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from storage.config import BucketURL, StorageConfig
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.objectstore.base import ObjectStore
from storage.objectstore.local import LocalObjectStore
from storage.opened_stream import StorageStream
from storage.wal.file import FileWAL

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
