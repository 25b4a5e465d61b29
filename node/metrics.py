"""Registers every layer's scrape-time collectors on a node's one ``CollectorRegistry``.

Each layer keeps its own metrics (``storage.metrics``, ``broker.metrics``, ``controller.metrics``); only the node
knows which roles it runs, and its broker exists only once it has joined its cluster, so each collector gets a
callable that looks the role up at scrape time and reports nothing before.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from broker.broker import Broker
from broker.metrics import BrokerStateCollector, WALHandoverCollector
from broker.share.metrics import ShareMetricsCollector
from broker.telemetry.exported import ClientTelemetryCollector
from controller.controller import Controller
from controller.metrics import ControllerCollector, ControllerView, image_view
from storage.metrics import StorageCollector
from wire.metrics import ServerMetrics

if TYPE_CHECKING:  # only a node on Raft has one (node.controller_handle imports the quorum for those alone)
    from controller.quorum import QuorumController


class MeteredNode(Protocol):
    """What the collectors read of ``node.process.Node``."""

    metrics: ServerMetrics
    node_id: int
    broker: Broker | None
    quorum: QuorumController | None


def register_node_metrics(node: MeteredNode) -> None:
    registry = node.metrics.registry
    registry.register(StorageCollector(lambda: node.broker.storage if node.broker is not None else None))
    registry.register(BrokerStateCollector(
        node.node_id,
        lambda: node.broker.partitions if node.broker is not None else None,
        lambda: node.broker.groups if node.broker is not None else None,
    ))
    registry.register(WALHandoverCollector(
        lambda: node.broker is not None, lambda: node.broker.wal_handover if node.broker is not None else None,
    ))
    registry.register(ShareMetricsCollector(lambda: node.broker.share_metrics if node.broker is not None else None))
    registry.register(ControllerCollector(lambda: _controller_view(node)))
    registry.register(ClientTelemetryCollector(
        lambda: node.broker.telemetry.pushed if node.broker is not None else None,
        lambda: node.broker.telemetry.now_ms() if node.broker is not None else 0.0,
    ))


def _controller_view(node: MeteredNode) -> ControllerView | None:
    """A controller-only node reports its Raft voter; a combined embedded node its in-process controller (the only
    voter: always active, epoch 0, everything it applied committed); a broker its view of the quorum, without the
    epoch and high watermark only a voter knows."""
    quorum = node.quorum
    if quorum is not None:
        return _quorum_view(quorum)
    if node.broker is None:
        return None
    client = node.broker.controller
    if isinstance(client, Controller):
        image = client.image
        return image_view(
            image, active=True, epoch=0, high_watermark=image.offset + 1, commit_seconds=client.commit_seconds
        )
    image = client.image
    return image_view(image, active=False, epoch=None, high_watermark=None, commit_seconds=None)


def _quorum_view(quorum: QuorumController) -> ControllerView:
    driver = quorum.driver
    leader = driver.leader_id
    view = image_view(
        quorum.image,
        active=quorum.is_active,
        epoch=driver.epoch,
        high_watermark=driver.high_watermark,
        commit_seconds=quorum.controller.commit_seconds,
    )
    # The Raft leader is newer news than the image's controller id (recorded when the active one took over).
    return view if leader is None else replace(view, leader_id=leader)
