"""The controller as the broker sees it: the :class:`ControllerClient` Protocol and the types of its answers.

The broker codes only against :class:`ControllerClient`: it reads the current :class:`MetadataImage`, subscribes to
image changes, and sends write requests whose answers come back as Kafka error codes. Two classes implement it:
:class:`~controller.controller.Controller` itself (the embedded default's broker calls its own controller
directly) and :class:`~metadata.remote.client.RemoteControllerClient` (a broker of a cluster, over the network).
This module is a leaf of the package: it imports none of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from kio.schema.errors import ErrorCode

from metadata.acl.binding import AclBinding, AclBindingFilter
from metadata.client_quotas import QuotaAlteration, QuotaAlterResult
from metadata.delegation_tokens import TokenRequest, TokenResult
from metadata.image import MetadataImage
from settings.config_resources import RESOURCE_BROKER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP, RESOURCE_TOPIC
from settings.describe import ConfigEntry
from settings.endpoint import Endpoint
from storage.metadata.api import NodeIdentity, StreamMetadata

if TYPE_CHECKING:
    from metadata.producer_ids import ProducerIdBlock

__all__ = [
    "AclCreateResult",
    "AclDeleteResult",
    "ConfigResource",
    "ControlledShutdown",
    "ControllerClient",
    "CreateTopicResult",
    "DeleteTopicResult",
    "ElectLeaderResult",
    "ElectionType",
    "Endpoint",
    "FeatureUpdate",
    "FeatureUpdateResult",
    "ImageListener",
    "IncrementalOp",
    "NewTopic",
    "PartitionReassignment",
    "QuorumForwarder",
    "ReassignmentResult",
    "ScramAlterResult",
    "ScramDeletion",
    "ScramUpsertion",
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
    type: int  # 2 topic, 4 broker, 8 broker logger, 16 client metrics, 32 group (Kafka's ConfigResource.Type)
    name: str  # topic name; for brokers a node id, or "" for the cluster-wide default

    TOPIC = RESOURCE_TOPIC
    BROKER = RESOURCE_BROKER
    #: A broker's loggers: answered by the broker named, never by the controller (nor persisted, as in Kafka).
    BROKER_LOGGER = 8
    #: A KIP-714 client-metrics subscription, by its name.
    CLIENT_METRICS = RESOURCE_CLIENT_METRICS
    #: A group's dynamic configs (``consumer.*``, ``share.*``), by group id.
    GROUP = RESOURCE_GROUP


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


class ElectionType:
    """ElectLeaders election types (Kafka's ElectionType)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class ElectLeaderResult:
    topic: str
    partition: int
    error: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    """AlterUserScramCredentials: delete ``name``'s credential for ``mechanism`` (1 SCRAM-SHA-256, 2 -512)."""

    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """AlterUserScramCredentials: set ``name``'s credential for ``mechanism`` from the salted password the client
    computed (Hi(password, salt, iterations)); the password never reaches the broker."""

    name: str
    mechanism: int
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class ScramAlterResult:
    """One user's answer to AlterUserScramCredentials (Kafka answers per user, not per alteration)."""

    user: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class AclCreateResult:
    """One creation's answer to CreateAcls (one per binding, in order)."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    """One filter's answer to DeleteAcls: the bindings it deleted, or why it deleted none."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    deleted: tuple[AclBinding, ...] = ()


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    """One item of UpdateFeatures: finalize ``feature`` at ``level`` (0 removes it). ``upgrade_type`` is Kafka's
    FeatureUpdate.UpgradeType: 1 upgrade (the default), 2 safe downgrade, 3 unsafe downgrade."""

    feature: str
    level: int
    upgrade_type: int = 1

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True, slots=True)
class FeatureUpdateResult:
    """One feature's answer to UpdateFeatures (INVALID_UPDATE_VERSION with Kafka's message when refused)."""

    feature: str
    error: ErrorCode = ErrorCode.none
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

    async def elect_leaders(
        self, partitions: Sequence[tuple[str, int]] | None, election_type: int = ElectionType.PREFERRED
    ) -> list[ElectLeaderResult]:
        """ElectLeaders (``controller.decisions.leadership.elect``): one result per partition asked; when ``partitions``
        is None, one per partition of the cluster that needed an election."""
        ...

    async def alter_partition_reassignments(
        self, reassignments: Sequence[PartitionReassignment]
    ) -> list[ReassignmentResult]:
        """AlterPartitionReassignments: moves each partition to its one new replica (DESIGN §9), or cancels the
        pending move of those whose ``replicas`` is None; one result per item, in order."""
        ...

    async def alter_user_scram_credentials(
        self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]
    ) -> list[ScramAlterResult]:
        """AlterUserScramCredentials: one result per user named, in first-mention order; a user whose alterations
        are not all valid gets none of them (Kafka's rule)."""
        ...

    async def change_delegation_token(self, request: TokenRequest) -> TokenResult:
        """Create, Renew or ExpireDelegationToken (``metadata.delegation_tokens``), once the broker checked that
        the connection may ask: the new token and its HMAC, or the token's new expiry, or the refusal's code."""
        ...

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        """CreateAcls: one result per binding, in order; a binding that exists already is a success that writes
        nothing (Kafka's rule)."""
        ...

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        """DeleteAcls: one result per filter, in order, with the bindings it matched and deleted."""
        ...

    async def alter_client_quotas(
        self, alterations: Sequence[QuotaAlteration], validate_only: bool
    ) -> list[QuotaAlterResult]:
        """AlterClientQuotas (``metadata.client_quotas``): one result per entry, in order; each entry is applied
        or refused on its own."""
        ...

    async def update_features(self, updates: Sequence[FeatureUpdate], validate_only: bool) -> list[FeatureUpdateResult]:
        """UpdateFeatures (``controller.decisions.features``): one result per update, in order; nothing is
        finalized unless every update is valid."""
        ...

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        """AllocateProducerIds: a block of producer ids that no other broker of the cluster is ever given, durable
        before it returns. Raises an error carrying the Kafka error code (``error``) when refused (an unknown
        broker or a stale ``broker_epoch``)."""
        ...

    async def complete_wal_failover(self, node: NodeIdentity, failed_node_id: int, failed_node_epoch: int) -> None:
        """``node`` finished replaying the WAL of a dead broker the controller assigned to it
        (``controller.decisions.wal_failover``)."""
        ...

    async def unregister_broker(self, node_id: int) -> None:
        """UnregisterBroker: removes a stopped broker from the cluster. Raises an error carrying the Kafka error
        code (``error``) when refused: an unknown id, a live broker (``controller.decisions.controlled_shutdown``)."""
        ...


@runtime_checkable
class ControlledShutdown(Protocol):
    """A controller client through which a stopping broker hands its partitions to other brokers first (a broker
    of a multi-broker cluster; an embedded single node has nobody to hand them to). Runtime-checkable and apart
    from :class:`ControllerClient`, as :class:`QuorumForwarder` is."""

    async def request_controlled_shutdown(self, timeout_s: float) -> bool:
        """Waits (at most ``timeout_s``) until the controller moved every partition this broker leads elsewhere;
        False if it had not by then."""
        ...


@runtime_checkable
class WriteFencing(Protocol):
    """A controller client through which a broker whose WAL cannot write asks to be fenced, so that its partitions
    move to brokers that can (``broker.wal_handover``); an embedded single node has nobody to hand them to.
    Runtime-checkable and apart from :class:`ControllerClient`, as :class:`ControlledShutdown` is."""

    def want_fence(self, wanted: bool) -> None:
        """Every heartbeat from now on asks to be fenced (True) or no longer does (False)."""
        ...


@runtime_checkable
class LoadReporting(Protocol):
    """A controller client through which a broker of a cluster reports its per-partition traffic to the active
    controller for the auto-balancer's load goal (``metadata.broker_load``); an embedded single node has nobody
    to balance with. Runtime-checkable and apart from :class:`ControllerClient`, as :class:`ControlledShutdown` is."""

    def report_load_from(self, counters: Callable[[], Mapping[tuple[str, int], tuple[int, int]]]) -> None:
        """Reports every ``autobalancer.reporter.metrics.reporting.interval.ms`` the growth of ``counters`` (the
        cumulative bytes in and out per (topic, partition)) as rates, until the client closes."""
        ...


@runtime_checkable
class QuorumForwarder(Protocol):
    """A controller client that is not the quorum itself (a broker following the Raft leader over the network).

    Requests that only the Raft leader can answer (DescribeQuorum) are forwarded unchanged through it, as KRaft
    brokers do; a controller running in the broker's own process does not have this, and the broker then answers
    for its local metadata log. A separate, runtime-checkable Protocol rather than a :class:`ControllerClient`
    method, so in-process controllers and test doubles need not say that they have nothing to forward to."""

    @property
    def kraft_version(self) -> int:
        """The quorum's KIP-853 level, as a Kafka broker reports its Raft client's (ApiVersions)."""
        ...

    async def forward_to_quorum_leader(self, api_key: int, version: int, request: object) -> object:
        """Sends a client's request entity unchanged to the Raft leader and returns the leader's response entity."""
        ...
