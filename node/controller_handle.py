"""How a node gets its controller: the in-process one, a voter of the Raft quorum, or a client of the quorum.

A node's broker codes only against ``metadata.controller_api.ControllerClient``; which implementation it gets depends on
the node's roles (``default_controller_factory``). This is the one place that chooses, so the controller package
never needs to know about nodes, and tests can hand a node any controller they build.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from controller.controller import Controller
from controller.embedded_listener import EmbeddedControllerListener, embedded_controller_listener
from controller.metadata_replica import MetadataReplica, VoterFollower
from controller.quorum import QuorumController, uses_quorum
from metadata.controller_api import ControllerClient
from metadata.remote.client import RemoteControllerClient
from settings.server import ServerConfig

ControllerFactory = Callable[[ServerConfig], Awaitable["ControllerHandle"]]


class ControllerHandle:
    """A started controller: the client the broker uses and how to stop it. ``controller_address``: where an
    embedded controller serves its CONTROLLER listener (what the broker's DescribeQuorum names), else None."""

    def __init__(
        self,
        client: ControllerClient,
        close: Callable[[], Awaitable[None]] | None = None,
        stopping: Callable[[], None] | None = None,
        controller_address: tuple[str, int] | None = None,
    ) -> None:
        self.client = client
        self._close = close
        self._stopping = stopping
        self.controller_address = controller_address

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
    quorum = await QuorumController.start(config)
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

    return ControllerHandle(client, close, stopping)


async def start_quorum_client(config: ServerConfig, catch_up_timeout_s: float = 60.0) -> RemoteControllerClient:
    """A broker-only node's client of the controller quorum (``metadata.remote``), following the metadata log as a
    Raft observer of its own (``controller.metadata_replica``), caught up."""
    return await RemoteControllerClient.start(
        config, lambda cluster_id: MetadataReplica(config, cluster_id), catch_up_timeout_s=catch_up_timeout_s
    )


async def open_quorum_client(config: ServerConfig) -> ControllerHandle:
    """A broker-only node's client of the controller quorum, closed with the node."""
    client = await start_quorum_client(config)
    return ControllerHandle(client, client.close)


def default_controller_factory(config: ServerConfig) -> ControllerFactory:
    """``process.roles=broker`` follows the quorum over the network; a combined node runs its own controller."""
    return open_local_controller if "controller" in config.process_roles else open_quorum_client
