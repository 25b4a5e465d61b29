"""Share-group record counters on ``/metrics``: what happened to the records of each share group, per topic.

An operator of queues asks how many records were handed out, settled (acknowledged, rejected, archived), given back
(released, lock time-outs) and delivered again, per group and topic: the share partitions count these as they
happen (:class:`ShareMetrics`' methods, called on the event loop with plain ints, a dict update each) and the node's
registry reads them at scrape time (``node.metrics``), as ``broker.metrics.BrokerStateCollector`` reads the logs.

Group ids are any string a client chose, so they cannot shape the endpoint: every label value goes through
``broker.telemetry.exported.label_value`` (control characters dropped, cut at 128 characters), and at most
``max_series`` (group, topic) pairs are kept; counts of pairs beyond that are added to one ``group="_other"``
series of their topic, so totals stay right while the series count stays bounded. A deleted group's series go
(:meth:`ShareMetrics.forget_group`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.telemetry.exported import label_value
from storage.metrics import loop_state_snapshot

#: The (group, topic) pairs exported before further pairs are folded into :data:`OTHER_GROUP`.
MAX_SERIES: Final = 2000
OTHER_GROUP: Final = "_other"

#: Each counted event, in the order of a series' counts: (metric name, help).
EVENTS: Final = (
    ("fjord_share_acquired_records", "Records acquired by share consumers (each delivery counted)"),
    ("fjord_share_acknowledged_records", "Records acknowledged (ACCEPT) by share consumers"),
    ("fjord_share_released_records", "Records released (RELEASE) by share consumers, available again"),
    ("fjord_share_rejected_records", "Records rejected (REJECT) by share consumers, archived"),
    ("fjord_share_archived_records", "Records archived: rejected, past the delivery count limit, or below the start"),
    ("fjord_share_lock_timeouts", "Acquired records whose acquisition lock timed out"),
    ("fjord_share_redeliveries", "Records delivered again after an earlier delivery"),
)
_ACQUIRED, _ACKNOWLEDGED, _RELEASED, _REJECTED, _ARCHIVED, _LOCK_TIMED_OUT, _REDELIVERED = range(len(EVENTS))


class ShareMetrics(Collector):
    """The counters of one broker's share partitions (the partitions it leads), labelled node, group and topic."""

    def __init__(self, node_id: int, max_series: int = MAX_SERIES) -> None:
        self._node = str(node_id)
        self._max_series = max_series
        # (group, topic) as exported -> one count per event
        self._counts: dict[tuple[str, str], list[int]] = {}
        #: (group, topic) as given -> as exported: cleaning a label walks its characters, and every share fetch
        #: counts twice. Bounded like the series (cleared when it outgrows them).
        self._labels: dict[tuple[str, str], tuple[str, str]] = {}

    # -- counted by the share partitions (event loop) ------------------------------------------------------------

    def acquired(self, group: str, topic: str, n: int) -> None:
        self._add(group, topic, _ACQUIRED, n)

    def acknowledged(self, group: str, topic: str, n: int) -> None:
        self._add(group, topic, _ACKNOWLEDGED, n)

    def released(self, group: str, topic: str, n: int) -> None:
        self._add(group, topic, _RELEASED, n)

    def rejected(self, group: str, topic: str, n: int) -> None:
        self._add(group, topic, _REJECTED, n)

    def archived(self, group: str, topic: str, n: int) -> None:
        self._add(group, topic, _ARCHIVED, n)

    def lock_timed_out(self, group: str, topic: str, n: int) -> None:
        self._add(group, topic, _LOCK_TIMED_OUT, n)

    def redelivered(self, group: str, topic: str, n: int) -> None:
        self._add(group, topic, _REDELIVERED, n)

    def forget_group(self, group: str) -> None:
        """Drops a deleted group's series (its share state is gone; a group of that id later counts from zero)."""
        name = label_value(group)
        for key in [key for key in self._counts if key[0] == name]:
            del self._counts[key]

    def count(self, group: str, topic: str, event: str) -> int:
        """One exported value (``event`` a metric name of :data:`EVENTS`), for tests and the CLI."""
        index = [name for name, _help in EVENTS].index(event)
        counts = self._counts.get((label_value(group), label_value(topic)))
        return 0 if counts is None else counts[index]

    def _add(self, group: str, topic: str, index: int, n: int) -> None:
        if n <= 0:
            return
        key = self._labels.get((group, topic))
        if key is None:
            if len(self._labels) >= 2 * self._max_series:
                self._labels.clear()
            key = self._labels[(group, topic)] = (label_value(group), label_value(topic))
        counts = self._counts.get(key)
        if counts is None:
            if len(self._counts) >= self._max_series:
                key = (OTHER_GROUP, key[1])
                counts = self._counts.get(key)
            if counts is None:
                counts = self._counts[key] = [0] * len(EVENTS)
        counts[index] += n

    # -- read at scrape time (the metrics server's thread) -------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        rows = loop_state_snapshot(lambda: [(key, tuple(counts)) for key, counts in self._counts.items()])
        for index, (name, help_text) in enumerate(EVENTS):
            family = CounterMetricFamily(name, help_text, labels=["node", "group", "topic"])
            for (group, topic), counts in rows:
                family.add_metric([self._node, group, topic], counts[index])
            yield family


class ShareMetricsCollector(Collector):
    """Registered on the node's registry before its broker exists: reads the broker's :class:`ShareMetrics` at
    scrape time, nothing before the broker joined (or on a controller-only node)."""

    def __init__(self, metrics: Callable[[], ShareMetrics | None]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        metrics = self._metrics()
        if metrics is not None:
            yield from metrics.collect()
