"""What the broker's request handlers see of the broker they run in: a narrow, typed view.

Handlers read the controller, the partitions and the coordinators through this Protocol, never the ``Broker``
class itself (``broker.broker.Broker`` satisfies it): the broker imports its dispatcher and handlers, so they cannot
import it back, and a test can give handlers just the services it needs.
"""

from __future__ import annotations

from typing import Protocol

from broker.fetch_session import FetchSessionCache
from broker.groups.coordinator import GroupCoordinator
from broker.partition.manager import PartitionManager
from broker.partition.producer_ids import ProducerIdAllocator
from broker.share.offsets_admin import ShareOffsetsAdmin
from broker.share.registry import SharePartitions
from broker.share_sessions import ShareSessions
from broker.telemetry.service import ClientTelemetry
from broker.transactions.coordinator import TransactionCoordinator
from metadata.controller_api import ControllerClient
from settings.server import ServerConfig


class BrokerServices(Protocol):
    """Exactly what the handlers read of the broker; read-only properties, so the broker may hold narrower types."""

    @property
    def node_id(self) -> int: ...

    @property
    def fetch_sessions(self) -> FetchSessionCache:
        """The node's incremental fetch sessions (KIP-227), shared by every connection."""
        ...

    @property
    def share_sessions(self) -> ShareSessions:
        """The node's share sessions (KIP-932) and, through them, its share partitions, for ShareFetch and
        ShareAcknowledge."""
        ...

    @property
    def producer_ids(self) -> ProducerIdAllocator:
        """The node's producer ids: blocks from the controller, held across requests and connections."""
        ...

    @property
    def config(self) -> ServerConfig: ...

    @property
    def controller(self) -> ControllerClient: ...

    @property
    def partitions(self) -> PartitionManager: ...

    @property
    def groups(self) -> GroupCoordinator: ...

    @property
    def share_partitions(self) -> SharePartitions:
        """The share partitions (KIP-932) of the partitions this broker leads, with their durable state."""
        ...

    @property
    def transactions(self) -> TransactionCoordinator: ...

    @property
    def share_offsets(self) -> ShareOffsetsAdmin:
        """Share groups' start offsets: the offset admin APIs, and the share-state APIs between brokers."""
        ...

    @property
    def telemetry(self) -> ClientTelemetry:
        """KIP-714 client instances, subscriptions and the pushed metrics exported on /metrics."""
        ...

    @property
    def auto_create_topics_enable(self) -> bool: ...

    @property
    def controller_address(self) -> tuple[str, int] | None:
        """Where the node's embedded controller serves its CONTROLLER listener (None: it serves none, or the
        controller is a quorum DescribeQuorum is forwarded to)."""
        ...
