"""Prometheus metrics of the controller: who leads, in which epoch, how far the metadata log is applied, and how
long a metadata write takes to commit (KRaft's ``ActiveControllerCount``, ``current-leader``, ``current-epoch``,
``LastAppliedRecordOffset`` and ``commit-latency``).

The state lives in different objects depending on a node's roles (the embedded single controller, a Raft voter, a
broker's view of the quorum), so the node hands :class:`ControllerCollector` a callable that describes whatever it
runs as a :class:`ControllerView`; the collector reads it at scrape time. The commit histogram belongs to the
``Controller`` that times its log appends, and is reported through the view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from metadata.image import MetadataImage
from storage.metrics import LATENCY_BUCKETS


def commit_histogram() -> Histogram:
    """One controller's metadata-commit latency (on no registry: the collector reports it)."""
    return Histogram(
        "fjord_controller_commit_seconds",
        "Time to append a metadata write durably (fsync of the embedded log, Raft commit on a quorum)",
        buckets=LATENCY_BUCKETS,  # a local fsync at the low end, a Raft round trip under load at the high end
        registry=None,
    )


@dataclass(frozen=True, slots=True)
class ControllerView:
    """What this node knows of the controller. ``epoch`` and ``high_watermark`` None: not known here (a broker
    following the quorum is no voter; what it applied says nothing of what the quorum committed)."""

    active: bool
    leader_id: int
    epoch: int | None
    metadata_offset: int
    high_watermark: int | None
    reassignments_in_flight: int
    commit_seconds: Histogram | None = None


def image_view(
    image: MetadataImage,
    *,
    active: bool,
    epoch: int | None,
    high_watermark: int | None,
    commit_seconds: Histogram | None,
) -> ControllerView:
    """The view with what the metadata image says (leader, applied offset, reassignments in flight)."""
    reassigning = sum(
        1 for topic in image.topics_by_name.values() for part in topic.partitions.values() if part.reassigning
    )
    return ControllerView(active, image.controller_id, epoch, image.offset, high_watermark, reassigning, commit_seconds)


class ControllerCollector(Collector):
    """Reports ``view()``; nothing while it returns None (no controller started yet)."""

    def __init__(self, view: Callable[[], ControllerView | None]) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        view = self._view()
        if view is None:
            return
        yield GaugeMetricFamily(
            "fjord_controller_active",
            "1 on the active controller (sum over nodes: 1 in a healthy cluster)",
            value=int(view.active),
        )
        yield GaugeMetricFamily(
            "fjord_controller_leader_id",
            "Node id of the active controller as this node knows it (-1: none)",
            value=view.leader_id,
        )
        if view.epoch is not None:
            yield GaugeMetricFamily(
                "fjord_controller_epoch",
                "Leader epoch of the controller quorum (0: the embedded single controller)",
                value=view.epoch,
            )
        yield GaugeMetricFamily(
            "fjord_controller_metadata_offset",
            "Offset of the last metadata record this node applied",
            value=view.metadata_offset,
        )
        if view.high_watermark is not None:
            yield GaugeMetricFamily(
                "fjord_controller_high_watermark",
                "Metadata log offset up to which records are committed",
                value=view.high_watermark,
            )
        yield GaugeMetricFamily(
            "fjord_controller_reassignments_in_flight",
            "Partitions being moved between brokers (the auto-balancer's moves and operators' reassignments)",
            value=view.reassignments_in_flight,
        )
        if view.commit_seconds is not None:
            yield from view.commit_seconds.collect()
