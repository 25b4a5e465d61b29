"""The embedded single node's CONTROLLER listener: its in-process metadata readable over the network, no Raft.

A combined node that is the only voter (the embedded default, ``make run``) keeps its metadata in process
(``controller.controller.Controller`` over the local metadata log) and needs no listener for itself. But clients
that read Fjord's storage directly find the data through the controller, as in a cluster: Spark's ``fjord`` source
asks the broker's DescribeQuorum where the controllers are and then asks them GetKV, GetStreams and GetObjects
(``spark_connector.storage_lookup``). So when the node lists a CONTROLLER listener (``controller.listener.names``),
it is served here with the dispatcher a voter's listener uses (``controller.rpc.server.ControllerServer``), over
the in-process controller, read-only (see ``controller.rpc.dispatcher``): the node's own writes go through its
broker, which authorizes them, a broker of another process cannot join an embedded controller, and the dump of the
whole metadata (DescribeMetadata, with SCRAM credentials and ACLs) is not served. Its security protocol and its
rules are a voter's CONTROLLER listener's (``listener.security.protocol.map``, ``settings.security``).

:class:`SoleVoter` is what the dispatcher asks of a quorum, answered for a node that is its whole quorum: it always
leads, DescribeQuorum names it alone (``metadata.rpc.raft_codec.sole_voter_description``, which the broker's
DescribeQuorum answers with too), Raft requests get NOT_LEADER_OR_FOLLOWER (no peer sends any), and it keeps
no broker sessions or loads.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence

from kio.schema.errors import ErrorCode

from controller.controller import Controller
from controller.node_roles import controller_listener
from controller.rpc.server import ControllerServer
from metadata.broker_load import BrokerLoad, PartitionLoad
from metadata.errors import ControllerError, NotControllerError
from metadata.image import MetadataImage
from metadata.rpc.raft_codec import sole_voter_description
from metadata.rpc.stream_rpcs import MetadataDump
from raft.messages import DescribeQuorumResponse, RaftRequest, RaftResponse
from raft.voter_set import Voter
from settings.endpoint import Endpoint
from settings.listeners import Listener
from settings.server import ServerConfig
from storage.metadata.api import NodeIdentity

__all__ = ["EmbeddedControllerListener", "SoleVoter", "embedded_controller_listener"]

logger = logging.getLogger(__name__)

_NO_VOTER_CHANGE = ("this node keeps its metadata in a local log, not a Raft quorum: its voters cannot change "
                    "(a controller-only node, or a quorum of several voters, runs Raft)")


def embedded_controller_listener(config: ServerConfig) -> Listener | None:
    """The CONTROLLER listener an embedded node serves (the first of ``controller.listener.names``, which a node with
    the controller role must list among its ``listeners``), or None when ``controller.listener.names`` is empty."""
    return controller_listener(config) if config.controller_listener_names else None


class SoleVoter:
    """``controller.rpc.served_quorum.ServedQuorum`` over an in-process `Controller` that is its own quorum."""

    def __init__(self, config: ServerConfig, controller: Controller) -> None:
        self._config = config
        self._controller = controller
        self._voters: dict[int, tuple[str, int]] = {}

    def announce(self, host: str, port: int) -> None:
        """Where DescribeQuorum says this voter is (the listener's port is known once it is bound)."""
        self._voters = {self.node_id: (host, port)}

    @property
    def config(self) -> ServerConfig:
        return self._config

    @property
    def node_id(self) -> int:
        return self._config.node_id

    @property
    def cluster_id(self) -> str:
        return self._controller.image.cluster_id

    @property
    def voters(self) -> Mapping[int, tuple[str, int]]:
        return self._voters

    @property
    def kraft_version(self) -> int:
        """0: a local metadata log's voters cannot change (``controller.rpc.voter_changes`` refuses)."""
        return 0

    @property
    def transport(self) -> SoleVoter:
        return self

    @property
    def driver(self) -> SoleVoter:
        return self

    async def deliver_request(self, sender: int, request: RaftRequest, timeout_s: float) -> RaftResponse | None:
        """No Raft here: a peer's request is unanswered (the dispatcher replies NOT_LEADER_OR_FOLLOWER)."""
        logger.warning(
            "controller %d is embedded and runs no Raft: a Raft request from node %d is refused", self.node_id, sender
        )
        return None

    def describe(self) -> DescribeQuorumResponse:
        return sole_voter_description(self.node_id, self._controller.image)

    @property
    def leader_id(self) -> int | None:
        return self.node_id

    @property
    def image(self) -> MetadataImage:
        return self._controller.image

    async def add_voter(self, voter: Voter, timeout_s: float) -> None:
        raise ControllerError(ErrorCode.unsupported_version, _NO_VOTER_CHANGE)

    async def remove_voter(self, node_id: int, directory_id: uuid.UUID | None, timeout_s: float) -> None:
        raise ControllerError(ErrorCode.unsupported_version, _NO_VOTER_CHANGE)

    async def update_voter(self, voter: Voter, leader_epoch: int, timeout_s: float) -> None:
        raise ControllerError(ErrorCode.unsupported_version, _NO_VOTER_CHANGE)

    def current_leader(self) -> tuple[int, int, str, int]:
        """Itself, the only voter (its bound CONTROLLER listener once announced)."""
        host, port = self._voters.get(self.node_id, ("", 0))
        return self.node_id, 0, host, port

    def metadata_loaded(self) -> bool:
        """Always: the node replayed its local metadata log before it serves, and it is the only writer."""
        return True

    def active_controller(self, what: str) -> Controller:
        return self._controller

    def check_node(self, node: NodeIdentity, what: str) -> None:
        """Never asked: the read-only dispatcher refuses every mutation before."""

    def dump(self) -> MetadataDump:
        """Never served: the read-only dispatcher refuses DescribeMetadata, the whole metadata with its SCRAM
        credentials and ACLs; refusing here too keeps a later change to that filter from handing it out."""
        raise self._no_other_broker("dump the whole metadata")

    async def register_broker(
        self, node_id: int, listeners: Sequence[Endpoint], rack: str | None, directories: Sequence[uuid.UUID] = ()
    ) -> int:
        raise self._no_other_broker(f"register broker {node_id}")

    async def heartbeat(
        self, node_id: int, epoch: int, metadata_offset: int, *, want_fence: bool, want_shutdown: bool
    ) -> tuple[bool, bool, bool]:
        raise self._no_other_broker(f"take a heartbeat of broker {node_id}")

    def record_load(self, node: NodeIdentity, partitions: Sequence[PartitionLoad], interval_ms: int = 0) -> None:
        """Nothing to balance between: the embedded node is the only broker."""

    def broker_loads(self) -> list[BrokerLoad]:
        return []

    def _no_other_broker(self, what: str) -> NotControllerError:
        return NotControllerError(f"controller {self.node_id} is embedded in its broker and cannot {what}", None)


class EmbeddedControllerListener:
    """The served listener; :meth:`start` binds and serves it, :meth:`close` stops it."""

    def __init__(self, server: ControllerServer, address: tuple[str, int]) -> None:
        self._server = server
        self.address = address  # what DescribeQuorum names

    @classmethod
    async def start(
        cls, config: ServerConfig, controller: Controller, listener: Listener
    ) -> EmbeddedControllerListener:
        """Raises ConfigError when the port is in use."""
        voter = SoleVoter(config, controller)
        server = ControllerServer(voter, listener, read_only=True)
        bound = await server.bind()
        # The voter entry names the address clients use (a container's published one, say); its port 0, a test's.
        named = next((v for v in config.voters if v.node_id == config.node_id), None)
        host = named.host if named is not None else listener.host or "127.0.0.1"
        address = (host, named.port if named is not None and named.port else bound)
        voter.announce(*address)
        await server.start_serving()
        logger.info(
            "controller %d serving reads of its metadata on %s://%s:%d", config.node_id, listener.name, *address
        )
        return cls(server, address)

    async def close(self) -> None:
        await self._server.close()
