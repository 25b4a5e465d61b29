"""Per-partition load that brokers report to the active controller, for the auto-balancer's load goal, sans-I/O.

A broker counts the record bytes appended by Produce and returned by Fetch per partition (cumulative counters on the
hot path: a dict lookup and an addition, ``broker.metrics.TopicTraffic``). Every
``autobalancer.reporter.metrics.reporting.interval.ms`` it turns the counters' growth since its last report into
rates (:func:`rates`) and sends them in a ReportBrokerLoad RPC. The active controller keeps the latest report of
each broker in memory (:class:`LoadReports`): load is not metadata, it changes every second and is worthless once
old, so it is not replicated; a controller that becomes active starts with no report and moves nothing for load
until every broker reported to it.

The balancer weighs a partition by its bytes in plus its bytes out (:attr:`PartitionLoad.load`), equally: with the
data in object storage, a broker's scarce resources are its network and the CPU that moves bytes through it, and a
fetched byte costs about what a produced one does (both are copied through the broker once; neither touches a local
disk beyond the WAL).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: The broker key (AutoMQ's name) for how often a broker reports. Each report carries the sender's value and is
#: judged against it: a controller need not set a broker key, and brokers may differ.
REPORT_INTERVAL = "autobalancer.reporter.metrics.reporting.interval.ms"
#: A report older than this many intervals is ignored (a broker that stopped reporting: its numbers are stale).
STALE_INTERVALS = 3

PartitionKey = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True, slots=True)
class PartitionLoad:
    """One partition's traffic on the reporting broker over the last interval, in bytes per second."""

    topic: str = ""
    partition: int = -1
    bytes_in: float = 0.0
    bytes_out: float = 0.0

    @property
    def load(self) -> float:
        return self.bytes_in + self.bytes_out


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """A broker's last report as the controller holds it: its partitions' rates, how old the report is, and the
    broker's reporting interval (the report covers the ``interval_s`` before it arrived)."""

    node_id: int
    age_s: float
    partitions: Mapping[PartitionKey, PartitionLoad] = field(default_factory=dict)
    interval_s: float = 10.0

    @property
    def stale(self) -> bool:
        """Older than ``STALE_INTERVALS`` of the broker's own intervals: it stopped reporting."""
        return self.age_s > self.interval_s * STALE_INTERVALS


def rates(
    previous: Mapping[PartitionKey, tuple[int, int]], current: Mapping[PartitionKey, tuple[int, int]], elapsed_s: float
) -> list[PartitionLoad]:
    """The rates between two snapshots of the cumulative (bytes in, bytes out) counters, for the partitions that had
    traffic. A counter that went down (never expected) counts from zero rather than negative."""
    if elapsed_s <= 0:
        return []
    loads = []
    for key, (now_in, now_out) in sorted(current.items()):
        then_in, then_out = previous.get(key, (0, 0))
        grown_in = now_in - then_in if now_in >= then_in else now_in
        grown_out = now_out - then_out if now_out >= then_out else now_out
        if grown_in or grown_out:
            loads.append(PartitionLoad(key[0], key[1], grown_in / elapsed_s, grown_out / elapsed_s))
    return loads


class LoadReports:
    """The latest report of each broker, kept by the active controller (times from its monotonic clock)."""

    def __init__(self) -> None:
        # node id -> (registration epoch, when received, the broker's interval in seconds, rates)
        self._reports: dict[int, tuple[int, float, float, dict[PartitionKey, PartitionLoad]]] = {}

    def record(
        self, node_id: int, node_epoch: int, partitions: Sequence[PartitionLoad], now: float, interval_s: float = 10.0
    ) -> None:
        """Replaces the broker's report (covering the ``interval_s`` before ``now``); a rate that is negative or
        not finite (a bad report) is dropped."""
        self._reports[node_id] = (
            node_epoch,
            now,
            interval_s,
            {
                (p.topic, p.partition): p
                for p in partitions
                if math.isfinite(p.bytes_in) and math.isfinite(p.bytes_out) and min(p.bytes_in, p.bytes_out) >= 0
            },
        )

    def clear(self) -> None:
        """This controller stopped being active: a later term starts afresh (reports from then on only)."""
        self._reports.clear()

    def snapshot(self, now: float, epochs: Mapping[int, int], since: float = -math.inf) -> dict[int, BrokerLoad]:
        """The reports of the brokers registered with ``epochs`` (node id -> epoch); one from an earlier
        registration of the broker is dropped (the restarted broker's traffic starts anew), and so is one whose
        window started before ``since`` (it measured traffic that partition moves have since redistributed)."""
        return {
            node_id: BrokerLoad(node_id, now - at, dict(partitions), interval_s)
            for node_id, (epoch, at, interval_s, partitions) in self._reports.items()
            if epochs.get(node_id) == epoch and at - interval_s >= since
        }


def format_rate(bytes_per_s: float) -> str:
    """A rate for log lines and the shell: ``12.3 MB/s``, ``456.0 KB/s``, ``12 B/s`` (decimal units)."""
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3)):
        if bytes_per_s >= size:
            return f"{bytes_per_s / size:.1f} {unit}"
    return f"{bytes_per_s:.0f} B/s"
