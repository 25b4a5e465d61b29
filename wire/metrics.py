"""Prometheus metrics of one Kafka-protocol server: its connections, requests by API, and its event loop's lag.

A broker node and a controller's CONTROLLER listener each keep one (the metric names say ``broker`` because that
is what operators scrape them as). Each node gets its own ``CollectorRegistry`` so several nodes can run in one
process (tests, embedded use) without clashing on metric names. Label children are cached because ``labels()``
is the slow part on hot paths.
"""

from __future__ import annotations

import asyncio
import bisect
import gc
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from wire.api_versions import API_VERSIONS, api_name
from wire.memory_pool import MemoryPool

logger = logging.getLogger(__name__)


#: Seconds: fine at the low end, where a latency target of 10 ms lives.
LAG_BUCKETS = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0,
    float("inf"),
)
#: The ``api`` label of every request whose API key Fjord does not know (cached under the key -1, which no API has).
OTHER_API = "other"
OTHER_API_KEY = -1
#: The lag probe's period: often enough for a percentile over a short benchmark, rare enough to cost nothing.
LOOP_LAG_PERIOD_S = 0.01


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.connections = Gauge(
            "fjord_broker_connections", "Open client connections", ["listener"], registry=self.registry
        )
        self.connections_total = Counter(
            "fjord_broker_connections_accepted", "Client connections accepted", ["listener"], registry=self.registry
        )
        self.connections_refused = Counter(
            "fjord_broker_connections_refused",
            "Connections a connection quota acted on (wire.connection_limits), by reason: per_ip (closed at once), "
            "max_connections (the acceptor held until one closed), creation_rate (delayed), evicted (closed to make "
            "room for the inter-broker listener)",
            ["listener", "reason"],
            registry=self.registry,
        )
        self.requests = Counter("fjord_broker_requests", "Requests served", ["api"], registry=self.registry)
        self.request_errors = Counter(
            "fjord_broker_request_failures",
            "Requests whose handler failed or whose frame was rejected",
            ["api"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "fjord_broker_request_seconds", "Time from decoded request to encoded response", ["api"],
            buckets=LAG_BUCKETS, registry=self.registry,
        )
        self.authentication_failures = Counter(
            "fjord_broker_authentication_failures",
            "SASL authentications that failed (wrong credentials, a malformed or out-of-order exchange)",
            ["listener", "mechanism"],
            registry=self.registry,
        )
        self.authentications = Counter(
            "fjord_broker_authentications", "SASL authentications that succeeded (re-authentications included)",
            ["listener", "mechanism"], registry=self.registry,
        )
        self.authorization_denials = Counter(
            "fjord_broker_authorization_denials", "Requests (or parts of them) an ACL refused",
            ["listener", "resource_type", "operation"], registry=self.registry,
        )
        self.throttle_seconds = Counter(
            "fjord_broker_quota_throttle_seconds", "Time clients were throttled (muted) for exceeding a client quota",
            ["quota", "user"], registry=self.registry,
        )
        self.loop_lag_seconds = Histogram(
            "fjord_broker_event_loop_lag_seconds",
            "How late the event loop ran a timer due every LOOP_LAG_PERIOD_S: what any request waiting on the loop "
            "waits extra",
            buckets=LAG_BUCKETS,
            registry=self.registry,
        )
        self._gc = _GcPauses()
        self.registry.register(self._gc)
        self._pools = _PoolCollector()
        self.registry.register(self._pools)
        self._children: dict[tuple[str, int], Any] = {}
        self._http: Any = None
        self._http_thread: threading.Thread | None = None

    def _child(self, kind: str, metric: Any, api_key: int) -> Any:
        """The ``api`` label is a known API's name, else ``other``: a client sending made-up API keys must not
        create a series per key."""
        if api_key not in API_VERSIONS:
            api_key = OTHER_API_KEY
        key = (kind, api_key)
        child = self._children.get(key)
        if child is None:
            child = metric.labels(api=api_name(api_key) if api_key != OTHER_API_KEY else OTHER_API)
            self._children[key] = child
        return child

    def observe_request(self, api_key: int, seconds: float) -> None:
        if ("requests", api_key) not in self._children:  # failures of a served API show as 0, not as absent
            self._child("errors", self.request_errors, api_key)
        self._child("requests", self.requests, api_key).inc()
        self._child("seconds", self.request_seconds, api_key).observe(seconds)

    def watch_pool(self, pool: MemoryPool) -> None:
        """Exports ``pool`` (``queued.max.request.bytes``) under its name; the listeners sharing one may each call."""
        self._pools.pools[pool.name] = pool

    def observe_failure(self, api_key: int) -> None:
        self._child("errors", self.request_errors, api_key).inc()

    async def watch_loop_lag(self, period: float = LOOP_LAG_PERIOD_S) -> None:
        """Runs until cancelled: sleeps ``period`` and records how much later than that the loop woke it.

        The lag is the share of a request's latency that is nobody's handler: other callbacks, GC passes, the GIL
        held by another thread, or the process not being scheduled at all on a busy machine."""
        observe = self.loop_lag_seconds.observe
        clock = time.perf_counter
        while True:
            started = clock()
            await asyncio.sleep(period)
            observe(max(0.0, clock() - started - period))

    def watch_gc(self) -> None:
        """Times every garbage-collection pass (``gc.callbacks``) until ``unwatch_gc``."""
        if self._gc.on_gc not in gc.callbacks:
            gc.callbacks.append(self._gc.on_gc)

    def unwatch_gc(self) -> None:
        if self._gc.on_gc in gc.callbacks:
            gc.callbacks.remove(self._gc.on_gc)

    def start_http(self, port: int, host: str = "127.0.0.1") -> int:
        """Serves ``/metrics`` on ``host:port`` (port 0 picks a free one); returns the bound port."""
        self._http, self._http_thread = start_http_server(port, addr=host, registry=self.registry)
        bound = int(self._http.server_port)
        logger.info("metrics served on http://%s:%d/metrics", host, bound)
        return bound

    def stop_http(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._http_thread is not None:
            self._http_thread.join(timeout=5)
            self._http_thread = None


class _GcPauses(Collector):
    """``fjord_broker_gc_seconds``: garbage-collection passes by generation (a pass holds the GIL, so it stalls the
    event loop), counted into :data:`LAG_BUCKETS` by the ``gc.callbacks`` hook and read at scrape time.

    Why not a prometheus ``Histogram``: a collection starts wherever an allocation crosses a threshold, at whatever
    stack depth that is, and runs its callbacks there. ``Histogram.observe`` nests several Python calls (label
    child, lock, bucket search); run at the bottom of a deep stack, such as a hostile body's JSON nesting close to
    the interpreter's recursion limit, it raised RecursionError, which the interpreter prints with a traceback. The
    hook here calls only C builtins and touches plain lists."""

    def __init__(self) -> None:
        self._bounds = LAG_BUCKETS[:-1]  # the last bucket, +Inf, holds what no bound below does
        self._labels = [repr(bound) for bound in self._bounds] + ["+Inf"]
        self._buckets = [[0] * len(LAG_BUCKETS) for _ in range(3)]
        self._sums = [0.0, 0.0, 0.0]
        self._started = 0.0

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            seconds = time.perf_counter() - self._started
            self._started = 0.0
            generation = info["generation"]
            self._buckets[generation][bisect.bisect_left(self._bounds, seconds)] += 1
            self._sums[generation] += seconds

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "fjord_broker_gc_seconds",
            "Garbage-collection passes by generation (a pass holds the GIL, so it stalls the event loop)",
            labels=["generation"],
        )
        for generation, counts in enumerate(self._buckets):
            cumulative = list(itertools.accumulate(counts))  # a copy: the hook may count on in another thread
            family.add_metric(
                [str(generation)],
                list(zip(self._labels, cumulative, strict=True)),
                self._sums[generation],
            )
        yield family


class _PoolCollector(Collector):
    """The request memory pools (``wire.memory_pool``, ``queued.max.request.bytes``), read at scrape time, labelled
    ``pool``: ``client`` (the client listeners') or ``controller`` (the CONTROLLER listener's)."""

    def __init__(self) -> None:
        self.pools: dict[str, MemoryPool] = {}

    def collect(self) -> Iterator[Metric]:
        used = GaugeMetricFamily(
            "fjord_broker_request_memory_used_bytes",
            "Bytes of requests being read or queued, counted against queued.max.request.bytes",
            labels=["pool"],
        )
        limit = GaugeMetricFamily(
            "fjord_broker_request_memory_limit_bytes", "queued.max.request.bytes (+Inf: unbounded)", labels=["pool"]
        )
        waiting = GaugeMetricFamily(
            "fjord_broker_request_memory_waiting_connections",
            "Connections that stopped reading until the pool has room for their request",
            labels=["pool"],
        )
        waits = CounterMetricFamily(
            "fjord_broker_request_memory_waits", "Requests that had to wait for room in the pool", labels=["pool"]
        )
        wait_seconds = CounterMetricFamily(
            "fjord_broker_request_memory_wait_seconds",
            "Time requests waited for room in the pool (waits that ended)",
            labels=["pool"],
        )
        for name, pool in sorted(self.pools.items()):
            used.add_metric([name], pool.reserved)
            limit.add_metric([name], float("inf") if pool.capacity is None else pool.capacity)
            waiting.add_metric([name], pool.waiting)
            waits.add_metric([name], pool.waits)
            wait_seconds.add_metric([name], pool.wait_seconds)
        yield from (used, limit, waiting, waits, wait_seconds)
