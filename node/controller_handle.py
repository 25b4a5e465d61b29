"""How a node gets its controller: the in-process one, a voter of the Raft quorum, or a client of the quorum.

A node's broker codes only against ``metadata.controller_api.ControllerClient``; which implementation it gets depends on
the node's roles (``default_controller_factory``). This is the one place that chooses, so the controller package
never needs to know about nodes, and tests can hand a node any controller they build.

The Raft side (the quorum controller, the Raft core, the quorum client and the broker's metadata replica) is
imported by the functions that open one, as the object store factory imports the S3 client only for an ``s3://``
bucket: the embedded default (a combined node that is the only voter, ``controller.node_roles.uses_quorum``) keeps a
local metadata log and never runs Raft, and importing that stack cost every such node's start (issue 25).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from controller.controller import Controller
from controller.embedded_listener import EmbeddedControllerListener, embedded_controller_listener
from controller.node_roles import uses_quorum
from metadata.controller_api import ControllerClient
from settings.server import ServerConfig
from wire.metrics import ServerMetrics

if TYPE_CHECKING:
    from controller.quorum import QuorumController
    from metadata.remote.client import RemoteControllerClient

ControllerFactory = Callable[[ServerConfig], Awaitable["ControllerHandle"]]


class ControllerHandle:
    """A started controller: the client the broker uses and how to stop it. ``controller_address``: where an
    embedded controller serves its CONTROLLER listener (what the broker's DescribeQuorum names), else None.
    ``failed``: returns, with its error, once the node's Raft replica of the metadata failed for good (None: the
    node has none)."""

    def __init__(
        self,
        client: ControllerClient,
        close: Callable[[], Awaitable[None]] | None = None,
        stopping: Callable[[], None] | None = None,
        controller_address: tuple[str, int] | None = None,
        failed: Callable[[], Awaitable[Exception]] | None = None,
    ) -> None:
        self.client = client
        self._close = close
        self._stopping = stopping
        self.controller_address = controller_address
        self.failed = failed

    def stopping(self) -> None:
        """The node begins to shut down (before the broker closes its partitions through the controller)."""
        if self._stopping is not None:
            self._stopping()

    async def close(self) -> None:
        if self._close is not None:
            await self._close()


async def open_local_controller(config: ServerConfig) -> ControllerHandle:
    """The combined node's controller: in process over its local metadata log when it is the only voter (the
    embedded default), else a voter of the Raft quorum (:func:`open_combined_voter`). An embedded controller serves
    its CONTROLLER listener, when the node lists one, for the clients that read the metadata (Spark's direct reads;
    ``controller.embedded_listener``)."""
    if uses_quorum(config):
        return await open_combined_voter(config)
    controller = await Controller.start(config)
    listener = embedded_controller_listener(config)
    if listener is None:
        return ControllerHandle(controller, controller.close)
    try:
        served = await EmbeddedControllerListener.start(config, controller, listener)
    except BaseException:
        await controller.close()
        raise

    async def close() -> None:
        try:
            await served.close()
        finally:
            await controller.close()

    return ControllerHandle(controller, close, controller_address=served.address)


async def open_combined_voter(config: ServerConfig) -> ControllerHandle:
    """A combined node among several voters, as KRaft's combined mode: this process runs a voter of the quorum
    (serving the CONTROLLER listener) and its broker follows the active controller wherever it is, exactly like a
    broker-only node, except that it reads the metadata its own voter applied instead of running an observer.
    Closing the handle stops the broker's client (a controlled shutdown) and then the voter, which hands its
    leadership over if it has it."""
    from controller.metadata_replica import VoterFollower  # noqa: PLC0415 - Raft only: see the module docstring
    from metadata.remote.client import RemoteControllerClient  # noqa: PLC0415 - the same

    quorum = await start_quorum_voter(config)
    try:
        client = await RemoteControllerClient.start(config, lambda _cluster_id: VoterFollower(quorum))
    except BaseException:
        await quorum.stop()
        raise

    async def close() -> None:
        try:
            await client.close()
        finally:
            await quorum.stop()

    def stopping() -> None:
        # The voters of a combined quorum stop one after another: the last ones have no majority left, so the
        # broker's closing writes get a bounded budget instead of the full retry budget each.
        request_s = int(config.value("controller.quorum.request.timeout.ms")) / 1000
        election_s = int(config.value("controller.quorum.election.timeout.ms")) / 1000
        client.channel.stopping(2 * request_s + election_s)

    return ControllerHandle(client, close, stopping, failed=quorum.driver.failed)


async def start_quorum_client(config: ServerConfig, catch_up_timeout_s: float = 60.0) -> RemoteControllerClient:
    """A broker-only node's client of the controller quorum (``metadata.remote``), following the metadata log as a
    Raft observer of its own (``controller.metadata_replica``), caught up."""
    from controller.metadata_replica import MetadataReplica  # noqa: PLC0415 - Raft only: see the module docstring
    from metadata.remote.client import RemoteControllerClient  # noqa: PLC0415 - the same
    from metadata.remote.discovery import with_bootstrap_voters  # noqa: PLC0415 - the same

    # Kafka 4's shipped broker.properties names the controllers only as bootstrap servers: ask them for the voters.
    config = await with_bootstrap_voters(config, catch_up_timeout_s)
    return await RemoteControllerClient.start(
        config, lambda cluster_id: MetadataReplica(config, cluster_id), catch_up_timeout_s=catch_up_timeout_s
    )


async def start_quorum_voter(config: ServerConfig, metrics: ServerMetrics | None = None) -> QuorumController:
    """This node's voter of the controller quorum, started (a controller-only node's whole role, or a combined
    node's among several voters)."""
    from controller.quorum import QuorumController  # noqa: PLC0415 - Raft only: see the module docstring

    return await QuorumController.start(config, metrics=metrics)


async def open_quorum_client(config: ServerConfig) -> ControllerHandle:
    """A broker-only node's client of the controller quorum, closed with the node."""
    client = await start_quorum_client(config)
    return ControllerHandle(client, client.close, failed=client.failed)


def default_controller_factory(config: ServerConfig) -> ControllerFactory:
    """``process.roles=broker`` follows the quorum over the network; a combined node runs its own controller."""
    return open_local_controller if "controller" in config.process_roles else open_quorum_client
