"""The asyncio Kafka-protocol listener: one socket, its connections, per-connection pipelining.

Brokers (client listeners) and controllers (the CONTROLLER listener) serve the Kafka protocol through this one
implementation; only the :class:`Dispatcher` differs. Requests on one connection are dispatched concurrently (so a
long-polling Fetch does not hold up the Metadata request behind it in a handler) but answered strictly in request
order, as the protocol requires. At most ``max_in_flight`` requests per connection are outstanding; beyond that the
connection is not read, which pushes back on the client through TCP. A frame that is too large, malformed, or for
an API/version the dispatcher does not serve closes only its own connection, after the responses to the requests
before it have been written. Cutting frames out of the byte stream is ``wire.frames``'s (no I/O there).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from wire import codec
from wire.codec import ProtocolError
from wire.frames import FrameBuffer
from wire.metrics import ServerMetrics

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
DEFAULT_MAX_IN_FLIGHT = 64


#: An encoded response frame: one buffer, or several written back to back (large record sets are not joined).
Response = bytes | list[bytes]


class ConnectionClosing(ProtocolError):
    """Raised by dispatch when the request must not be answered and the connection must close."""


@dataclass(frozen=True, slots=True)
class Peer:
    """The far end of one connection, handed to the dispatcher with each of its requests.

    ``state`` is what the dispatcher keeps for this one connection (``KafkaListener``'s ``connection_state`` makes
    it when the connection opens, and the connection lets go of it when it closes). The listener never looks
    inside, so wire stays free of what a broker or a controller remembers per connection; a peer built outside a
    listener (a test driving a dispatcher directly) has none."""

    host: str
    port: int
    listener: str
    state: object = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.host}:{self.port} on listener {self.listener}"


class Dispatcher(Protocol):
    """Turns one request frame into one encoded response frame, or None to send nothing (Produce with acks=0).
    Raising :class:`~wire.codec.ProtocolError` closes the connection after the responses before it."""

    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None: ...


class KafkaListener:
    """One listening socket (one Kafka listener) feeding a :class:`Dispatcher`."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        metrics: ServerMetrics,
        *,
        host: str,
        port: int,
        listener_name: str = "PLAINTEXT",
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        connection_state: Callable[[], object] | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        #: Makes the dispatcher's per-connection :attr:`Peer.state` when a connection opens (None: no state).
        self.connection_state = connection_state
        self.host = host
        self.port = port
        self.listener_name = listener_name
        self.max_request_bytes = max_request_bytes
        self.max_in_flight = max_in_flight
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._gauge = metrics.connections.labels(listener=listener_name)
        self._accepted = metrics.connections_total.labels(listener=listener_name)

    @property
    def bound_port(self) -> int:
        """The actual port (differs from ``port`` when that was 0)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError(f"listener {self.listener_name} is not bound")
        return int(self._server.sockets[0].getsockname()[1])

    async def bind(self) -> int:
        """Binds the socket without accepting yet, so the node can register its real port before serving."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), self.host, self.port, start_serving=False, reuse_address=True
        )
        logger.info("listener %s bound to %s:%d", self.listener_name, self.host, self.bound_port)
        return self.bound_port

    async def start_serving(self) -> None:
        if self._server is None:
            await self.bind()
        assert self._server is not None
        await self._server.start_serving()
        logger.info("listener %s accepting connections on %s:%d", self.listener_name, self.host, self.bound_port)

    async def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Stops accepting, closes every connection and waits for their responders."""
        await self.stop_accepting()
        connections = list(self._connections)
        for connection in connections:
            connection.abort()
        responders = [c.responder for c in connections if c.responder is not None]
        if responders:
            await asyncio.gather(*responders, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def _opened(self, connection: _Connection) -> None:
        self._connections.add(connection)
        self._gauge.inc()
        self._accepted.inc()

    def _closed(self, connection: _Connection) -> None:
        if connection in self._connections:
            self._connections.discard(connection)
            self._gauge.dec()


class _Connection(asyncio.BufferedProtocol):
    """One client connection: cuts the byte stream into request frames and answers them in order.

    A protocol rather than a StreamReader because the stream reader's per-chunk buffer growth, wake-ups and
    front-deletes cost a third of the broker's CPU under 1 MiB produce requests. The socket is read straight into
    the connection's :class:`~wire.frames.FrameBuffer`, so every byte of a request is copied once on its way to
    the handler. Frames are dispatched as soon as they are complete (handlers run concurrently); a responder task
    writes the responses in request order.
    Reading pauses while ``max_in_flight`` requests are outstanding, which pushes back on the client through TCP.
    """

    def __init__(self, server: KafkaListener) -> None:
        self._server = server
        self._dispatcher = server.dispatcher
        self._frames = FrameBuffer(max_frame_bytes=server.max_request_bytes, min_frame_bytes=codec.HEADER_PREFIX_SIZE)
        self._pending: collections.deque[asyncio.Task[Response | None]] = collections.deque()
        self._wakeup: asyncio.Event = asyncio.Event()
        self._reading_paused = False
        self._stop_reading = False  # EOF, a bad frame, or the connection was lost: dispatch nothing more
        self._lost = False
        self._can_write: asyncio.Event = asyncio.Event()
        self._can_write.set()
        self._transport: asyncio.Transport | None = None
        self.peer = Peer("?", 0, server.listener_name)
        self.responder: asyncio.Task[None] | None = None

    # -- asyncio.BufferedProtocol ------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is not an asyncio.Transport subclass, but it is one in every way used here.
        transport = typing.cast(asyncio.Transport, transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peername = transport.get_extra_info("peername") or ("?", 0)
        make_state = self._server.connection_state
        state = make_state() if make_state is not None else None
        self.peer = Peer(str(peername[0]), int(peername[1]), self._server.listener_name, state)
        self._server._opened(self)
        logger.debug("connection from %s", self.peer)
        self.responder = asyncio.get_running_loop().create_task(self._respond())

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._stop_reading:
            return
        for frame in self._frames.buffer_updated(nbytes):
            self._dispatch(frame)
        if self._frames.error is not None:
            logger.warning("closing connection from %s: %s", self.peer, self._frames.error)
            self._stop()

    def eof_received(self) -> bool:
        self._stop()
        return True  # keep the transport open: the responder still writes what it owes, then closes it

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._stop()
        self._can_write.set()
        if exc is not None:
            logger.debug("connection from %s lost: %s", self.peer, exc)

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # -- dispatch ----------------------------------------------------------------------------------------------

    def _dispatch(self, frame: bytes) -> None:
        self._pending.append(asyncio.ensure_future(self._dispatcher.dispatch(frame, self.peer)))
        self._wakeup.set()
        if len(self._pending) >= self._server.max_in_flight and not self._reading_paused and self._transport:
            self._reading_paused = True
            self._transport.pause_reading()

    def _stop(self) -> None:
        """No more requests are read; the responder answers those already dispatched, then closes."""
        self._stop_reading = True
        self._wakeup.set()

    def abort(self) -> None:
        """Server shutdown: drop the connection and every request still in flight on it."""
        self._stop()
        for task in self._pending:
            task.cancel()
        if self._transport is not None:
            self._transport.abort()

    # -- responses ---------------------------------------------------------------------------------------------

    async def _respond(self) -> None:
        """Writes responses in request order; on any failure closes the transport so reading ends."""
        transport = self._transport
        assert transport is not None
        try:
            while True:
                if not self._pending:
                    if self._stop_reading:
                        return
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                task = self._pending[0]
                try:
                    data = await task
                except ProtocolError as exc:
                    logger.warning("closing connection from %s: %s", self.peer, exc)
                    return
                except asyncio.CancelledError:
                    if self._lost or task.cancelled():
                        return
                    raise
                except Exception:
                    logger.exception("closing connection from %s: failed to produce a response", self.peer)
                    return
                self._pending.popleft()
                if self._reading_paused and len(self._pending) < self._server.max_in_flight and not self._lost:
                    self._reading_paused = False
                    transport.resume_reading()
                if self._lost:
                    return
                if isinstance(data, bytes):
                    transport.write(data)
                elif data is not None:
                    transport.writelines(data)
                    if not self._can_write.is_set():
                        await self._can_write.wait()
        finally:
            self._stop()
            for leftover in self._pending:
                leftover.cancel()
            self._pending.clear()
            transport.close()
            self._server._closed(self)
            # The dispatcher's state for this connection goes with it (requests still running keep their own
            # reference until they finish); the transport may hold this protocol object for a while longer.
            self.peer = replace(self.peer, state=None)
            logger.debug("connection from %s closed", self.peer)
