"""The Raft transport over TCP: `raft.transport.Transport` on the CONTROLLER listener.

Requests the core sends to a voter go out on one connection per peer (opened on demand, reopened with exponential
backoff after a failure) and their responses come back to ``inbound`` tagged with that peer. Requests that peers
send us arrive through `ControllerServer`, which calls :meth:`NetworkTransport.deliver_request` and awaits the
core's reply; the core answers with ``send(sender, response)`` echoing the request's correlation id, which is how
the reply finds its connection.

Everything is bounded: at most ``max_queued`` requests wait per peer (the oldest is dropped: Raft retries on its
own timers and a stale request is worthless; one that waited longer than the request timeout is dropped too), and
``inbound`` drops new messages when full. Sending never blocks
the driver, as the transport contract requires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from metadata.rpc.connection import ConnectionClosedError, ControllerConnection
from metadata.rpc.raft_codec import request_to_kio, request_version, response_from_kio
from raft.messages import (
    BeginQuorumEpochRequest,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    RaftMessage,
    RaftRequest,
    RaftResponse,
    VoteRequest,
)
from wire import codec
from wire.sasl.client import SaslCredentials
from wire.tls import ClientTls

logger = logging.getLogger(__name__)

_REQUESTS = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest, FetchSnapshotRequest,
             DescribeQuorumRequest)


class _Peer:
    """One remote voter: a queue of requests to send and the task that sends them."""

    def __init__(self, node_id: int, host: str, port: int, max_queued: int) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.queue: deque[tuple[float, RaftRequest]] = deque(maxlen=max_queued)  # (queued at, request)
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.connection: ControllerConnection | None = None
        self.failures = 0


class NetworkTransport:
    def __init__(
        self,
        node_id: int,
        peers: Mapping[int, tuple[str, int]],
        *,
        request_timeout_s: float = 5.0,
        max_queued: int = 64,
        max_inbound: int = 4096,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 1.0,
        ssl_context: ClientTls | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        """``ssl_context``: the CONTROLLER listener is SSL (``ServerConfig.controller_client_tls``); ``sasl``: it
        is SASL and this voter logs in with these credentials (``ServerConfig.controller_client_sasl``)."""
        self.node_id = node_id
        self._ssl_context = ssl_context
        self._sasl = sasl
        self.inbound: asyncio.Queue[tuple[int, RaftMessage]] = asyncio.Queue(maxsize=max_inbound)
        self._peers = {
            peer_id: _Peer(peer_id, host, port, max_queued)
            for peer_id, (host, port) in peers.items()
            if peer_id != node_id
        }
        self._max_queued = max_queued
        self._request_timeout_s = request_timeout_s
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._replies: dict[tuple[int, int], asyncio.Future[RaftResponse]] = {}
        self._exchanges: set[asyncio.Task[None]] = set()
        self._closed = False

    def update_peers(self, peers: Mapping[int, tuple[str, int]]) -> None:
        """The voters changed (KIP-853): reach an added voter, and a voter at its new address. A removed voter's
        peer stays: nothing is sent to it once the core no longer counts it, and a leader the log has not yet caught
        up with may still be it."""
        for peer_id, (host, port) in peers.items():
            if peer_id == self.node_id:
                continue
            peer = self._peers.get(peer_id)
            if peer is None:
                self._peers[peer_id] = _Peer(peer_id, host, port, self._max_queued)
                logger.info("node %d: voter %d is at %s:%d", self.node_id, peer_id, host, port)
            elif (peer.host, peer.port) != (host, port):
                logger.info("node %d: voter %d moved from %s:%d to %s:%d", self.node_id, peer_id, peer.host,
                            peer.port, host, port)
                peer.host, peer.port = host, port
                if peer.connection is not None:
                    connection, peer.connection = peer.connection, None
                    closing = asyncio.get_running_loop().create_task(connection.close())
                    self._exchanges.add(closing)
                    closing.add_done_callback(self._exchanges.discard)

    # ---- Transport ----------------------------------------------------------------------------------------
    def send(self, destination: int, message: RaftMessage) -> None:
        if self._closed:
            return
        if isinstance(message, _REQUESTS):
            peer = self._peers.get(destination)
            if peer is None:
                logger.debug("node %d: no address for node %d; dropping %s", self.node_id, destination,
                             type(message).__name__)
                return
            peer.queue.append((time.monotonic(), message))
            peer.wake.set()
            if peer.task is None or peer.task.done():
                peer.task = asyncio.get_running_loop().create_task(
                    self._run_peer(peer), name=f"raft-{self.node_id}-to-{destination}"
                )
            return
        future = self._replies.pop((destination, message.correlation_id), None)
        if future is None:
            logger.debug("node %d: reply %s to node %d (correlation id %d) has no waiting connection",
                         self.node_id, type(message).__name__, destination, message.correlation_id)
            return
        if not future.done():
            future.set_result(message)

    # ---- inbound requests from the server -----------------------------------------------------------------
    async def deliver_request(self, sender: int, request: RaftRequest, timeout_s: float) -> RaftResponse | None:
        """Hands a peer's request to the core and waits for its reply (None: no reply within ``timeout_s``)."""
        key = (sender, request.correlation_id)
        future: asyncio.Future[RaftResponse] = asyncio.get_running_loop().create_future()
        self._replies[key] = future
        if not self._offer(sender, request):
            self._replies.pop(key, None)
            return None
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            return None
        finally:
            if self._replies.get(key) is future:
                del self._replies[key]

    def _offer(self, sender: int, message: RaftMessage) -> bool:
        try:
            self.inbound.put_nowait((sender, message))
            return True
        except asyncio.QueueFull:
            logger.warning("node %d: inbound Raft queue full; dropping %s from node %d", self.node_id,
                           type(message).__name__, sender)
            return False

    # ---- outbound -----------------------------------------------------------------------------------------
    async def _run_peer(self, peer: _Peer) -> None:
        while not self._closed:
            if not peer.queue:
                peer.wake.clear()
                await peer.wake.wait()
                continue
            connection = await self._connected(peer)
            if connection is None:
                continue
            queued_at, request = peer.queue.popleft()
            if time.monotonic() - queued_at > self._request_timeout_s:
                # Waited out a reconnect: the core has given up on it and retried with a fresh request.
                continue
            task = asyncio.get_running_loop().create_task(self._exchange(peer, connection, request))
            self._exchanges.add(task)
            task.add_done_callback(self._exchanges.discard)

    async def _connected(self, peer: _Peer) -> ControllerConnection | None:
        if peer.connection is not None and peer.connection.connected:
            return peer.connection
        if peer.failures:
            delay = min(self._backoff_max_s, self._backoff_initial_s * 2 ** (peer.failures - 1))
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
        connection = ControllerConnection(peer.host, peer.port, client_id=f"raft-{self.node_id}",
                                          ssl_context=self._ssl_context, sasl=self._sasl, node_id=peer.node_id)
        try:
            await connection.connect(timeout=self._request_timeout_s)
        except (OSError, TimeoutError) as exc:
            peer.failures += 1
            if peer.failures in (1, 10) or peer.failures % 100 == 0:
                logger.info("node %d: cannot reach voter %d at %s:%d (%s); retrying with backoff", self.node_id,
                            peer.node_id, peer.host, peer.port, exc)
            await connection.close()
            return None
        if peer.failures:
            logger.info("node %d: connected to voter %d at %s:%d", self.node_id, peer.node_id, peer.host, peer.port)
        peer.failures = 0
        peer.connection = connection
        return connection

    async def _exchange(self, peer: _Peer, connection: ControllerConnection, request: RaftRequest) -> None:
        api_key, entity = request_to_kio(request)
        try:
            body: Any = await connection.request(
                entity, timeout=self._request_timeout_s, correlation_id=request.correlation_id
            )
        except (ConnectionClosedError, TimeoutError, OSError) as exc:
            logger.debug("node %d: %s to node %d failed: %s", self.node_id, type(request).__name__, peer.node_id, exc)
            if not isinstance(exc, TimeoutError):
                peer.failures = max(peer.failures, 1)
            return
        except Exception:
            logger.exception("node %d: %s to node %d failed", self.node_id, type(request).__name__, peer.node_id)
            return
        try:
            response = response_from_kio(api_key, body, request.correlation_id)
        except (ValueError, TypeError) as exc:
            logger.warning("node %d: unusable %s response from node %d: %s", self.node_id,
                           codec.response_class(api_key, request_version(api_key)).__name__, peer.node_id, exc)
            return
        self._offer(peer.node_id, response)

    async def close(self) -> None:
        self._closed = True
        for peer in self._peers.values():
            if peer.task is not None:
                peer.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await peer.task
            if peer.connection is not None:
                await peer.connection.close()
        for task in list(self._exchanges):
            task.cancel()
        for future in self._replies.values():
            if not future.done():
                future.cancel()
        self._replies.clear()
