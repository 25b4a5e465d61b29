"""The pushed client metrics a broker exports on its Prometheus ``/metrics``: the latest value of each, bounded.

Kafka hands pushed metrics to a plugin; Fjord keeps them and shows them beside its own, so an operator sees a
producer's queue time or a consumer's lag from the broker. Each OTLP metric becomes a gauge
``fjord_client_<name>`` (the name with every character outside ``[a-zA-Z0-9_]`` made ``_``, cut at
:data:`MAX_NAME`) labelled ``client_id``, ``client_instance_id`` and ``attributes`` (the data point's OTLP
attributes as ``key=value,...``). A Sum of delta temporality (what clients push: the broker asks for deltas) is
added up into a running total; a gauge or cumulative sum replaces the value.

A client cannot shape the endpoint: label values lose every control character (newlines, ANSI escapes) and are cut
at :data:`MAX_LABEL` characters; at most ``fjord.client.telemetry.max.clients`` clients are kept (the one that
pushed least recently dropped first) with at most ``fjord.client.telemetry.max.series.per.client`` series each
(series beyond that are not added). A client's series go when it sends its terminating push, or when it has not
pushed for three of its intervals (at least a minute), as Kafka forgets a client instance.
"""

from __future__ import annotations

import re
import threading
import unicodedata
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.telemetry.otlp import MetricPoint

PREFIX: Final = "fjord_client_"
#: The longest metric name exported (after the prefix), and the longest label value.
MAX_NAME: Final = 150
MAX_LABEL: Final = 128
#: A client is forgotten after this many of its push intervals without a push (and never before a minute).
STALE_INTERVALS: Final = 3
MIN_STALE_MS: Final = 60_000

_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]")
LABELS: Final = ["client_id", "client_instance_id", "attributes"]


def metric_family(name: str) -> str:
    return PREFIX + _NOT_NAME.sub("_", name)[:MAX_NAME]


def label_value(text: str, limit: int = MAX_LABEL) -> str:
    """``text`` without control or format characters (each becomes ``?``), cut at ``limit`` characters."""
    cut = text[:limit]
    return "".join("?" if unicodedata.category(ch)[0] == "C" else ch for ch in cut)


def attributes_label(attributes: Iterable[tuple[str, str]]) -> str:
    return label_value(",".join(f"{key}={value}" for key, value in attributes), 2 * MAX_LABEL)


@dataclass(slots=True)
class _Client:
    client_id: str
    instance_id: str
    stale_ms: float
    series: dict[tuple[str, str], float] = field(default_factory=dict)


class PushedMetrics:
    """The exported values, shared between the event loop (pushes) and the scrape thread (collect)."""

    def __init__(self, max_clients: int, max_series_per_client: int) -> None:
        self.max_clients = max_clients
        self.max_series = max_series_per_client
        self._clients: OrderedDict[uuid.UUID, _Client] = OrderedDict()
        self._lock = threading.Lock()
        #: Series a client pushed beyond its bound (not exported).
        self.dropped_series = 0

    def record(
        self, instance_id: uuid.UUID, client_id: str, points: Iterable[MetricPoint], interval_ms: int, now_ms: float
    ) -> None:
        stale = now_ms + max(MIN_STALE_MS, STALE_INTERVALS * interval_ms)
        with self._lock:
            self._expire(now_ms)
            if self.max_clients <= 0:
                return
            client = self._clients.get(instance_id)
            if client is None:
                client = self._clients[instance_id] = _Client(label_value(client_id), str(instance_id), stale)
                while len(self._clients) > self.max_clients:
                    self._clients.popitem(last=False)
            self._clients.move_to_end(instance_id)
            client.stale_ms = stale
            for point in points:
                key = (metric_family(point.name), attributes_label(point.attributes))
                previous = client.series.get(key)
                if previous is None and len(client.series) >= self.max_series:
                    self.dropped_series += 1
                    continue
                client.series[key] = (previous or 0.0) + point.value if point.delta else point.value

    def forget(self, instance_id: uuid.UUID) -> None:
        with self._lock:
            self._clients.pop(instance_id, None)

    def _expire(self, now_ms: float) -> None:
        for instance_id in [i for i, c in self._clients.items() if c.stale_ms <= now_ms]:
            del self._clients[instance_id]

    def __len__(self) -> int:
        with self._lock:
            return len(self._clients)

    def families(self, now_ms: float) -> list[Metric]:
        with self._lock:
            self._expire(now_ms)
            by_name: dict[str, GaugeMetricFamily] = {}
            for client in self._clients.values():
                for (name, attributes), value in client.series.items():
                    family = by_name.get(name)
                    if family is None:
                        family = by_name[name] = GaugeMetricFamily(
                            name, "A metric pushed by clients (KIP-714)", labels=LABELS
                        )
                    family.add_metric([client.client_id, client.instance_id, attributes], value)
        return list(by_name.values())


class ClientTelemetryCollector(Collector):
    """The pushed metrics of the node's broker, read at scrape time (none before the broker exists)."""

    def __init__(self, pushed: Callable[[], PushedMetrics | None], now_ms: Callable[[], float]) -> None:
        self._pushed = pushed
        self._now_ms = now_ms

    def describe(self) -> list[Metric]:
        return []  # the families come and go with the clients that push them

    def collect(self) -> Iterator[Metric]:
        pushed = self._pushed()
        if pushed is not None:
            yield from pushed.families(self._now_ms())
