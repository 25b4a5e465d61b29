"""Connections from this broker to the other brokers of the cluster, for the transaction coordinator's requests.

A peer is reached at the endpoint it registered with the controller (the metadata image), on the inter-broker
listener (``inter.broker.listener.name`` or ``security.inter.broker.protocol``, else the first PLAINTEXT broker
listener: :mod:`settings.inter_broker`), as FindCoordinator finds endpoints for clients, with that
listener's TLS and this node's own SASL user when the listener is secured; the peer then authorizes the requests as
that user (which, as in Kafka, is normally a super user). One :class:`wire.client.ClientConnection` per peer is
kept and replaced when the peer registers a new endpoint (it restarted elsewhere).
"""

from __future__ import annotations

from typing import Any

from broker.broker_context import BrokerContext
from wire.client import ClientConnection

#: How long one inter-broker exchange may take before it is abandoned and retried.
PEER_REQUEST_TIMEOUT_S = 10.0


class PeerUnavailable(ConnectionError):
    """The peer is not registered, fenced, or has no endpoint on the inter-broker listener."""


class Peers:
    def __init__(self, broker: BrokerContext) -> None:
        self._context = broker
        self._connections: dict[int, ClientConnection] = {}
        settings = broker.config.inter_broker
        self._ssl_context = settings.client_tls() if settings is not None else None

    def _listener_name(self) -> str:
        settings = self._context.config.inter_broker
        return settings.listener if settings is not None else "PLAINTEXT"

    def endpoint(self, node_id: int) -> tuple[str, int]:
        broker = self._context.controller.image.brokers.get(node_id)
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
            settings = self._context.config.inter_broker
            connection = ClientConnection(
                host,
                port,
                client_id=f"fjord-broker-{self._context.node_id}",
                timeout=PEER_REQUEST_TIMEOUT_S,
                ssl_context=self._ssl_context,
                sasl=settings.sasl if settings is not None else None,
            )
            self._connections[node_id] = connection
        return await connection.request(request)

    async def close(self) -> None:
        connections, self._connections = self._connections, {}
        for connection in connections.values():
            await connection.close()
