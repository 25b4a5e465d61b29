"""How a Raft driver talks to its peers: the transport interface, and an in-process network for tests and benches.

A transport is fire-and-forget, like the network it models: `send` never blocks and may lose a message (the core
retries on its own timers); whatever reaches this node lands on ``inbound`` as ``(sender, message)``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from raft.messages import RaftMessage

logger = logging.getLogger(__name__)


class Transport(Protocol):
    inbound: asyncio.Queue[tuple[int, RaftMessage]]

    def send(self, destination: int, message: RaftMessage) -> None: ...


class InProcessNetwork:
    """Delivers between transports of one event loop; nodes can be cut off (both directions) and reconnected."""

    def __init__(self) -> None:
        self._transports: dict[int, InProcessTransport] = {}
        self._cut: set[int] = set()

    def transport(self, node_id: int) -> InProcessTransport:
        """A fresh transport for ``node_id`` (replacing the one of a previous incarnation)."""
        transport = InProcessTransport(self, node_id)
        self._transports[node_id] = transport
        return transport

    def isolate(self, node_id: int) -> None:
        self._cut.add(node_id)

    def reconnect(self, node_id: int) -> None:
        self._cut.discard(node_id)

    def deliver(self, sender: int, destination: int, message: RaftMessage) -> None:
        if sender in self._cut or destination in self._cut:
            return
        target = self._transports.get(destination)
        if target is None:
            logger.debug("in-process network: no node %d; dropping %s from %d", destination, type(message).__name__,
                         sender)
            return
        target.inbound.put_nowait((sender, message))


class InProcessTransport:
    def __init__(self, network: InProcessNetwork, node_id: int) -> None:
        self.network = network
        self.node_id = node_id
        self.inbound: asyncio.Queue[tuple[int, RaftMessage]] = asyncio.Queue()

    def send(self, destination: int, message: RaftMessage) -> None:
        self.network.deliver(self.node_id, destination, message)
