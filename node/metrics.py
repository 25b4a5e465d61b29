"""Registers every layer's scrape-time collectors on a node's one ``CollectorRegistry``.

Each layer keeps its own metrics (``storage.metrics``, ``broker.metrics``, ``controller.metrics``); only the node
knows which storage engine, partitions, group coordinator and controller it runs, and those exist only once the
node has started, so each collector gets a callable that looks them up at scrape time and reports nothing before.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from broker.groups.coordinator import GroupCoordinator
from broker.metrics import BrokerStateCollector
from broker.partition.manager import PartitionManager
from controller.controller import Controller
from controller.metrics import ControllerCollector, ControllerView, image_view
from controller.quorum import QuorumController
from storage.engine import StorageEngine
from storage.metrics import StorageCollector
from wire.metrics import ServerMetrics


class MeteredNode(Protocol):
    """What the collectors read of ``node.process.Node``; its storage, partitions and controller are looked up with
    ``getattr`` because they are set only as the node starts."""

    metrics: ServerMetrics
    node_id: int
    groups: GroupCoordinator | None
    quorum: QuorumController | None


def register_node_metrics(node: MeteredNode) -> None:
    registry = node.metrics.registry
    registry.register(StorageCollector(lambda: _storage(node)))
    registry.register(BrokerStateCollector(node.node_id, lambda: _partitions(node), lambda: node.groups))
    registry.register(ControllerCollector(lambda: _controller_view(node)))


def _storage(node: MeteredNode) -> StorageEngine | None:
    storage: StorageEngine | None = getattr(node, "storage", None)
    return storage


def _partitions(node: MeteredNode) -> PartitionManager | None:
    partitions: PartitionManager | None = getattr(node, "partitions", None)
    return partitions


def _controller_view(node: MeteredNode) -> ControllerView | None:
    """A controller-only node reports its Raft voter; a combined embedded node its in-process controller (the only
    voter: always active, epoch 0, everything it applied committed); a broker its view of the quorum, without the
    epoch and high watermark only a voter knows."""
    quorum = node.quorum
    if quorum is not None:
        return _quorum_view(quorum)
    client = getattr(node, "controller", None)
    if isinstance(client, Controller):
        image = client.image
        return image_view(
            image, active=True, epoch=0, high_watermark=image.offset + 1, commit_seconds=client.commit_seconds
        )
    if client is None:
        return None
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
