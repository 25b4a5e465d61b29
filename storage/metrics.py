"""Prometheus metrics of one node's storage engine: WAL appends, LogCache and block cache, uploads, compaction and
object-store requests by operation.

The engine owns a :class:`StorageMetrics` whose histograms and counters belong to no registry: the engine is built
after the node's registry (and a test may build engines without one), so the node registers a
:class:`StorageCollector` that finds the running engine at scrape time and reports both those and the engine's
point-in-time figures (cache sizes, hit counts) read from ``StorageEngine.stats``. Observing a histogram costs about
a microsecond, which is why only per-append (not per-record) events are timed on the produce path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypeVar

from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: Seconds, from a sub-millisecond fsync to a multi-second S3 PUT under retries.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    30.0,
    float("inf"),
)

#: How often a scrape reads the event loop's state again after a collection changed size under it.
SNAPSHOT_ATTEMPTS = 5

T = TypeVar("T")


def loop_state_snapshot(read: Callable[[], T]) -> T:
    """``read()``, retried if a dict or deque it iterates changed size meanwhile.

    Collectors run on the metrics server's thread while the event loop keeps changing what they read; the GIL can
    pass to the loop between two steps of an iteration in Python code, which raises RuntimeError (dictionary or
    deque mutated during iteration). Reading again is cheap and almost always succeeds at once."""
    for attempt in range(SNAPSHOT_ATTEMPTS):
        try:
            return read()
        except RuntimeError:
            if attempt == SNAPSHOT_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


#: The object-store operations timed by ``storage.objectstore.metered.MeteredStore``.
STORE_OPERATIONS = ("put", "get", "get_tail", "size", "delete", "list", "copy")


@dataclass(frozen=True, slots=True)
class EngineStats:
    """A point-in-time view for metrics and benchmarks."""

    appends: int
    bytes_appended: int
    blocks_uploaded: int
    objects_uploaded: int
    stream_set_objects: int
    stream_objects: int
    bytes_uploaded: int
    upload_failures: int
    puts: int
    gets: int
    log_cache_bytes: int
    log_cache_unuploaded_bytes: int
    block_cache_bytes: int
    block_cache_hits: int
    block_cache_misses: int
    wal_bytes: int
    open_streams: int
    recovered_batches: int
    log_cache_hits: int = 0
    log_cache_misses: int = 0
    wal_unwritable_seconds: float = 0.0
    wal_unwritable: bool = False


class MeteredEngine(Protocol):
    """What the collector reads of a running engine (``storage.engine.StorageEngine``)."""

    @property
    def metrics(self) -> StorageMetrics: ...

    def stats(self) -> EngineStats: ...


class StorageMetrics:
    """The engine's event metrics (registered on no registry; :class:`StorageCollector` exposes them)."""

    def __init__(self) -> None:
        self.wal_append_seconds = Histogram(
            "fjord_wal_append_seconds",
            "Time from an append reaching the WAL to its being durable there (fsync of a file WAL, PUT of an S3 WAL)",
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
        self.wal_flush_seconds = Histogram(
            "fjord_wal_flush_seconds",
            "One WAL flush: a file WAL's write + fdatasync of a group of appends, an S3 WAL's PUT of one object",
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
        self.upload_seconds = Histogram(
            "fjord_upload_seconds",
            "Time to upload one LogCache block as objects and commit them to the stream metadata",
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
        self.compaction_seconds = Histogram(
            "fjord_compaction_seconds",
            "Duration of one compaction round, by kind (stream_set, stream_object)",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
        self.compaction_bytes = Counter(
            "fjord_compaction_written_bytes", "Object bytes written by compaction, by kind", ["kind"], registry=None
        )
        self.store_request_seconds = Histogram(
            "fjord_object_store_request_seconds",
            "Object-store request latency by operation (retries included)",
            ["operation"],
            buckets=LATENCY_BUCKETS,
            registry=None,
        )
        self.store_request_errors = Counter(
            "fjord_object_store_request_errors",
            "Object-store requests that failed, by operation",
            ["operation"],
            registry=None,
        )
        # Cached label children: ``labels()`` is the slow part.
        self.store_seconds = {op: self.store_request_seconds.labels(operation=op) for op in STORE_OPERATIONS}
        self.store_errors = {op: self.store_request_errors.labels(operation=op) for op in STORE_OPERATIONS}
        for kind in ("stream_set", "stream_object"):
            self.compaction_seconds.labels(kind=kind)
            self.compaction_bytes.labels(kind=kind)

    def observe_compaction(self, kind: str, seconds: float, bytes_written: int) -> None:
        self.compaction_seconds.labels(kind=kind).observe(seconds)
        self.compaction_bytes.labels(kind=kind).inc(bytes_written)

    def collect(self) -> Iterator[Metric]:
        for metric in (
            self.wal_append_seconds,
            self.wal_flush_seconds,
            self.upload_seconds,
            self.compaction_seconds,
            self.compaction_bytes,
            self.store_request_seconds,
            self.store_request_errors,
        ):
            yield from metric.collect()


class StorageCollector(Collector):
    """The running engine's metrics; nothing while ``engine()`` returns None (not started yet)."""

    def __init__(self, engine: Callable[[], MeteredEngine | None]) -> None:
        self._engine = engine

    def collect(self) -> Iterator[Metric]:
        engine = self._engine()
        if engine is None:
            return
        stats = loop_state_snapshot(engine.stats)
        yield from engine.metrics.collect()
        yield CounterMetricFamily("fjord_wal_appends", "Appends made durable in the WAL", value=stats.appends)
        yield CounterMetricFamily(
            "fjord_wal_appended_bytes", "Payload bytes made durable in the WAL", value=stats.bytes_appended
        )
        yield GaugeMetricFamily("fjord_wal_used_bytes", "WAL bytes not trimmed yet", value=stats.wal_bytes)
        yield CounterMetricFamily(
            "fjord_wal_unwritable_seconds",
            "Seconds the WAL spent unable to write to its storage (S3 away, its disk full), retrying, the episode "
            "under way included",
            value=stats.wal_unwritable_seconds,
        )
        yield GaugeMetricFamily(
            "fjord_wal_unwritable",
            "1 while the WAL cannot write to its storage and is retrying",
            value=int(stats.wal_unwritable),
        )
        yield GaugeMetricFamily(
            "fjord_log_cache_bytes", "Payload bytes held in the LogCache (uploaded or not)", value=stats.log_cache_bytes
        )
        yield GaugeMetricFamily(
            "fjord_log_cache_unuploaded_bytes",
            "LogCache bytes not yet in object storage",
            value=stats.log_cache_unuploaded_bytes,
        )
        yield CounterMetricFamily(
            "fjord_log_cache_hits", "Stream reads answered from the LogCache", value=stats.log_cache_hits
        )
        yield CounterMetricFamily(
            "fjord_log_cache_misses",
            "Stream reads that went to objects (block cache or object store)",
            value=stats.log_cache_misses,
        )
        yield GaugeMetricFamily(
            "fjord_block_cache_bytes", "Bytes held in the block cache", value=stats.block_cache_bytes
        )
        yield CounterMetricFamily(
            "fjord_block_cache_hits", "Block-cache lookups that hit", value=stats.block_cache_hits
        )
        yield CounterMetricFamily(
            "fjord_block_cache_misses",
            "Block-cache lookups that missed (an object-store GET)",
            value=stats.block_cache_misses,
        )
        yield CounterMetricFamily(
            "fjord_upload_bytes", "Object bytes uploaded from the LogCache", value=stats.bytes_uploaded
        )
        yield CounterMetricFamily(
            "fjord_upload_blocks", "LogCache blocks uploaded and committed", value=stats.blocks_uploaded
        )
        yield CounterMetricFamily(
            "fjord_upload_failures", "Upload attempts that failed (each retried)", value=stats.upload_failures
        )
        yield GaugeMetricFamily("fjord_open_streams", "Streams open on this node", value=stats.open_streams)
