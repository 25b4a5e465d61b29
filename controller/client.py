"""The interface the broker uses to reach the controller, and its in-process implementation.

The broker codes only against :class:`ControllerClient`: it reads the current :class:`MetadataImage`, subscribes to
image changes, and sends write requests whose answers come back as Kafka error codes. Today
:class:`LocalControllerClient` calls the node's own :class:`~controller.controller.Controller` directly; a Raft
quorum will serve the same protocol over the network without changing the broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from controller.config import ConfigEntry
from controller.image import MetadataImage
from controller.records import RESOURCE_BROKER, RESOURCE_TOPIC, Endpoint
from storage.metadata.api import NodeIdentity, StreamMetadata

if TYPE_CHECKING:
    from controller.controller import Controller
    from controller.producer_ids import ProducerIdBlock

__all__ = [
    "ConfigResource",
    "ControllerClient",
    "CreateTopicResult",
    "DeleteTopicResult",
    "ElectLeaderResult",
    "Endpoint",
    "ImageListener",
    "IncrementalOp",
    "LocalControllerClient",
    "NewTopic",
    "PartitionReassignment",
    "ReassignmentResult",
]

ImageListener = Callable[[MetadataImage, MetadataImage], None]


class IncrementalOp:
    """IncrementalAlterConfigs operation codes (Kafka's AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: num.partitions
    replication_factor: int = -1  # -1: default.replication.factor
    assignments: Mapping[int, Sequence[int]] | None = None  # partition -> replicas; excludes the two counts
    configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    topic_id: uuid.UUID | None
    error: ErrorCode
    message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: list[ConfigEntry] = field(default_factory=list)  # every topic config, as CreateTopics v5+ reports


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    name: str | None
    topic_id: uuid.UUID | None
    error: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ConfigResource:
    type: int  # 2 topic, 4 broker (Kafka's ConfigResource.Type)
    name: str  # topic name; for brokers a node id, or "" for the cluster-wide default

    TOPIC = RESOURCE_TOPIC
    BROKER = RESOURCE_BROKER


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """One partition of an AlterPartitionReassignments request: ``replicas`` None cancels a pending move."""

    topic: str
    partition: int
    replicas: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    topic: str
    partition: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ElectLeaderResult:
    topic: str
    partition: int
    error: ErrorCode
    message: str | None = None


class ControllerClient(Protocol):
    @property
    def image(self) -> MetadataImage:
        """The latest applied image; each write's effects are visible here when it returns."""
        ...

    def subscribe(self, listener: ImageListener) -> None:
        """Calls ``listener(old, new)`` after every change to the image, in order, on the event loop."""
        ...

    @property
    def stream_metadata(self) -> StreamMetadata:
        """Streams, objects and KV, served by the same controller (and written to the same log)."""
        ...

    async def register_broker(self, node_id: int, listeners: Sequence[Endpoint], rack: str | None) -> int:
        """Registers (or re-registers after a restart) and returns the new node epoch; the broker is unfenced and
        every partition it leads gets a higher leader epoch."""
        ...

    async def create_topics(self, topics: Sequence[NewTopic], validate_only: bool) -> list[CreateTopicResult]: ...

    async def delete_topics(
        self, names: Sequence[str] = (), ids: Sequence[uuid.UUID] = ()
    ) -> list[DeleteTopicResult]: ...

    async def create_partitions(
        self, topic: str, count: int, assignments: Sequence[Sequence[int]] | None, validate_only: bool
    ) -> tuple[ErrorCode, str | None]: ...

    async def alter_configs(
        self,
        resource: ConfigResource,
        changes: Mapping[str, str | None],
        *,
        incremental_ops: Mapping[str, int] | None,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None]:
        """``incremental_ops`` None: AlterConfigs (the full set replaces all dynamic keys); otherwise
        IncrementalAlterConfigs with one :class:`IncrementalOp` per key of ``changes``."""
        ...

    async def elect_leaders(self, partitions: Sequence[tuple[str, int]] | None) -> list[ElectLeaderResult]:
        """Gives each leaderless partition (all when ``partitions`` is None) a live leader."""
        ...

    async def alter_partition_reassignments(
        self, reassignments: Sequence[PartitionReassignment]
    ) -> list[ReassignmentResult]:
        """AlterPartitionReassignments: moves each partition to its one new replica (DESIGN §9), or cancels the
        pending move of those whose ``replicas`` is None; one result per item, in order."""
        ...

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        """AllocateProducerIds: a block of producer ids that no other broker of the cluster is ever given, durable
        before it returns. Raises an error carrying the Kafka error code (``error``) when refused (an unknown
        broker or a stale ``broker_epoch``)."""
        ...

    async def complete_wal_failover(self, node: NodeIdentity, failed_node_id: int, failed_node_epoch: int) -> None:
        """``node`` finished replaying the WAL of a dead broker the controller assigned to it
        (``controller.wal_failover``)."""
        ...


class LocalControllerClient:
    """In-process :class:`ControllerClient`: the combined node's broker calls its own controller directly."""

    def __init__(self, controller: Controller) -> None:
        self._controller = controller

    @property
    def controller(self) -> Controller:
        return self._controller

    @property
    def image(self) -> MetadataImage:
        return self._controller.image

    def subscribe(self, listener: ImageListener) -> None:
        self._controller.subscribe(listener)

    @property
    def stream_metadata(self) -> StreamMetadata:
        return self._controller.stream_metadata

    async def register_broker(self, node_id: int, listeners: Sequence[Endpoint], rack: str | None) -> int:
        return await self._controller.register_broker(node_id, listeners, rack)

    async def create_topics(self, topics: Sequence[NewTopic], validate_only: bool) -> list[CreateTopicResult]:
        return await self._controller.create_topics(topics, validate_only)

    async def delete_topics(self, names: Sequence[str] = (), ids: Sequence[uuid.UUID] = ()) -> list[DeleteTopicResult]:
        return await self._controller.delete_topics(names, ids)

    async def create_partitions(
        self, topic: str, count: int, assignments: Sequence[Sequence[int]] | None, validate_only: bool
    ) -> tuple[ErrorCode, str | None]:
        return await self._controller.create_partitions(topic, count, assignments, validate_only)

    async def alter_configs(
        self,
        resource: ConfigResource,
        changes: Mapping[str, str | None],
        *,
        incremental_ops: Mapping[str, int] | None,
        validate_only: bool,
    ) -> tuple[ErrorCode, str | None]:
        return await self._controller.alter_configs(
            resource, changes, incremental_ops=incremental_ops, validate_only=validate_only
        )

    async def elect_leaders(self, partitions: Sequence[tuple[str, int]] | None) -> list[ElectLeaderResult]:
        return await self._controller.elect_leaders(partitions)

    async def alter_partition_reassignments(
        self, reassignments: Sequence[PartitionReassignment]
    ) -> list[ReassignmentResult]:
        return await self._controller.alter_partition_reassignments(reassignments)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        return await self._controller.allocate_producer_ids(broker_id, broker_epoch)

    async def complete_wal_failover(self, node: NodeIdentity, failed_node_id: int, failed_node_epoch: int) -> None:
        await self._controller.complete_wal_failover(node, failed_node_id, failed_node_epoch)
