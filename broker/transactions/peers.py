"""Connections from this broker to the other brokers of the cluster, for the transaction coordinator's requests.

A peer is reached at the endpoint it registered with the controller (the metadata image), on the inter-broker
listener (``inter.broker.listener.name``, else the first PLAINTEXT broker listener), as FindCoordinator finds
endpoints for clients. One :class:`wire.client.ClientConnection` per peer is kept and replaced when the peer
registers a new endpoint (it restarted elsewhere).
"""

from __future__ import annotations

from typing import Any, Protocol

from controller.api import ControllerClient
from controller.config.server import ServerConfig
from wire.client import ClientConnection

#: How long one inter-broker exchange may take before it is abandoned and retried.
PEER_REQUEST_TIMEOUT_S = 10.0


class PeerHost(Protocol):
    @property
    def node_id(self) -> int: ...

    @property
    def config(self) -> ServerConfig: ...

    @property
    def controller(self) -> ControllerClient: ...


class PeerUnavailable(ConnectionError):
    """The peer is not registered, fenced, or has no endpoint on the inter-broker listener."""


class Peers:
    def __init__(self, node: PeerHost) -> None:
        self._node = node
        self._connections: dict[int, ClientConnection] = {}

    def _listener_name(self) -> str:
        cfg = self._node.config
        named = cfg.value("inter.broker.listener.name")
        if named:
            return str(named).upper()
        for listener in cfg.broker_listeners:
            if cfg.security_protocols.get(listener.name, "PLAINTEXT") == "PLAINTEXT":
                return listener.name
        return cfg.broker_listeners[0].name if cfg.broker_listeners else "PLAINTEXT"

    def endpoint(self, node_id: int) -> tuple[str, int]:
        broker = self._node.controller.image.brokers.get(node_id)
        if broker is None or broker.fenced:
            raise PeerUnavailable(f"broker {node_id} is not registered or is fenced")
        listener = self._listener_name()
        for endpoint in broker.listeners:
            if endpoint.name == listener:
                return endpoint.host, endpoint.port
        raise PeerUnavailable(f"broker {node_id} has no {listener} listener")

    async def request(self, node_id: int, request: Any) -> Any:
        """Sends ``request`` to broker ``node_id``; raises ConnectionError/TimeoutError (the caller retries)."""
        host, port = self.endpoint(node_id)
        connection = self._connections.get(node_id)
        if connection is None or (connection.host, connection.port) != (host, port):
            if connection is not None:
                await connection.close()
            connection = ClientConnection(
                host, port, client_id=f"fjord-broker-{self._node.node_id}", timeout=PEER_REQUEST_TIMEOUT_S
            )
            self._connections[node_id] = connection
        return await connection.request(request)

    async def close(self) -> None:
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await connection.close()
