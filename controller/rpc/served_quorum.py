"""What the CONTROLLER listener's request handling asks of the voter it serves: :class:`ServedQuorum`.

The quorum module builds the server and hands itself in, so the dependency runs one way (quorum → rpc); the
embedded node's read-only listener (``controller.embedded_listener``) hands in an in-process controller instead.
Every module of ``controller.rpc`` that answers a request reads the voter through this one protocol, and none of
them knows which of the two it is.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Protocol

from controller.controller import Controller
from metadata.broker_load import BrokerLoad, PartitionLoad
from metadata.image import MetadataImage
from metadata.rpc import stream_rpcs
from raft.messages import DescribeQuorumResponse, RaftRequest, RaftResponse
from raft.voter_set import Voter
from settings.endpoint import Endpoint
from settings.server import ServerConfig
from storage.metadata.api import NodeIdentity


class RaftMember(Protocol):
    """What DescribeQuorum reads of the Raft member (``raft.driver.RaftDriver``)."""

    def describe(self) -> DescribeQuorumResponse: ...


class RaftInbox(Protocol):
    """Where Raft requests from peers go (``controller.rpc.transport.NetworkTransport``)."""

    async def deliver_request(self, sender: int, request: RaftRequest, timeout_s: float) -> RaftResponse | None: ...


class ServedQuorum(Protocol):
    """What the CONTROLLER listener asks of its voter (``controller.quorum.QuorumController``)."""

    @property
    def config(self) -> ServerConfig: ...

    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def voters(self) -> Mapping[int, tuple[str, int]]: ...

    @property
    def transport(self) -> RaftInbox:
        """Where Raft requests from peers are delivered to the local Raft core."""
        ...

    @property
    def driver(self) -> RaftMember:
        """The Raft member, for DescribeQuorum."""
        ...

    @property
    def leader_id(self) -> int | None: ...

    @property
    def image(self) -> MetadataImage: ...

    @property
    def kraft_version(self) -> int:
        """The quorum's KIP-853 level (1: its voters are the log's and may change), for ApiVersions."""
        ...

    def metadata_loaded(self) -> bool:
        """Whether the voter has applied the metadata up to the commit offset it learned from the quorum (until
        then, with an authorizer, only super users are served: ``controller.rpc.authorization``)."""
        ...

    def active_controller(self, what: str) -> Controller:
        """The `Controller` to write with; NotControllerError (naming ``what``) unless this voter is active."""
        ...

    def check_node(self, node: NodeIdentity, what: str) -> None: ...

    def dump(self) -> stream_rpcs.MetadataDump: ...

    async def register_broker(
        self, node_id: int, listeners: Sequence[Endpoint], rack: str | None, directories: Sequence[uuid.UUID] = ()
    ) -> int: ...

    async def heartbeat(
        self, node_id: int, epoch: int, metadata_offset: int, *, want_fence: bool, want_shutdown: bool
    ) -> tuple[bool, bool, bool]: ...

    def record_load(self, node: NodeIdentity, partitions: Sequence[PartitionLoad], interval_ms: int = 0) -> None:
        """Keeps a broker's load report (ReportBrokerLoad) for the auto-balancer; in memory, active voter only."""
        ...

    def broker_loads(self) -> list[BrokerLoad]:
        """The reports kept, of the brokers' current registrations (DescribeBrokerLoad)."""
        ...

    async def add_voter(self, voter: Voter, timeout_s: float) -> None:
        """AddRaftVoter: returns once committed; ControllerError with Kafka's code for the reason otherwise."""
        ...

    async def remove_voter(self, node_id: int, directory_id: uuid.UUID | None, timeout_s: float) -> None:
        """RemoveRaftVoter, as :meth:`add_voter`."""
        ...

    async def update_voter(self, voter: Voter, leader_epoch: int, timeout_s: float) -> None:
        """UpdateRaftVoter (a voter's new endpoints), as :meth:`add_voter`."""
        ...

    def current_leader(self) -> tuple[int, int, str, int]:
        """The quorum's leader as this node knows it: id (-1: none), epoch, and its CONTROLLER host and port."""
        ...
