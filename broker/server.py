"""The asyncio Kafka-protocol server: framing, per-connection pipelining, dispatch to handlers.

Requests on one connection are dispatched concurrently (so a long-polling Fetch does not hold up the Metadata
request behind it in a handler) but answered strictly in request order, as the protocol requires. At most
``max_in_flight`` requests per connection are outstanding; beyond that the connection is not read, which pushes
back on the client through TCP. A frame that is too large, malformed, or for an API/version we do not serve
closes only its own connection, after the responses to the requests before it have been written.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import struct
import time
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.errors import error_code_for, error_message_for
from broker.handlers import api_versions as api_versions_handler
from broker.handlers.registry import Handler, RequestContext, load_handlers
from broker.metrics import BrokerMetrics
from broker.protocol import codec
from broker.protocol.api_versions import API_VERSIONS_KEY, VersionRange, advertised, api_name
from broker.protocol.codec import ProtocolError
from storage.objectstore.base import StoreStats
from storage.objectstore.metrics import StoreStatsCollector

if TYPE_CHECKING:
    from broker.node import BrokerNode

logger = logging.getLogger(__name__)

_LENGTH = struct.Struct(">i")
DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
DEFAULT_MAX_IN_FLIGHT = 64
#: Socket reads land here; frames up to about this size are cut out of it, larger ones get their own buffer.
_STAGING_BYTES = 256 * 1024


#: An encoded response frame: one buffer, or several written back to back (large record sets are not joined).
Response = bytes | list[bytes]


class ConnectionClosing(ProtocolError):
    """Raised by dispatch when the request must not be answered and the connection must close."""


@dataclass(frozen=True, slots=True)
class Peer:
    host: str
    port: int
    listener: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port} on listener {self.listener}"


class RequestDispatcher:
    """Turns one request frame into one encoded response frame (or None), calling the registered handler.

    Kept free of sockets so tests can drive it directly and the server stays about framing only."""

    def __init__(self, node: BrokerNode, metrics: BrokerMetrics, handlers: Mapping[int, Handler] | None = None):
        self.node = node
        self.metrics = metrics
        self.handlers = dict(handlers if handlers is not None else load_handlers())
        self.versions: Mapping[int, VersionRange] = advertised(self.handlers)
        # Object-store request counts sit next to the request metrics on the same endpoint. The node's storage
        # engine starts after its dispatcher exists, so the collector looks the store up at scrape time.
        metrics.registry.register(StoreStatsCollector(self._store_stats))

    def _store_stats(self) -> StoreStats | None:
        storage = getattr(self.node, "storage", None)
        return storage.store.stats if storage is not None else None

    async def dispatch(self, frame: bytes, peer: Peer) -> Response | None:
        prefix = codec.read_prefix(frame)
        key, version = prefix.api_key, prefix.api_version
        entry = self.versions.get(key)
        if entry is None or version not in entry:
            if key == API_VERSIONS_KEY:
                # KIP-511: a client newer than us learns our range from a v0 response and retries.
                response = api_versions_handler.unsupported_version_response(self.versions)
                return codec.encode_response(prefix.correlation_id, response)
            self.metrics.observe_failure(key)
            supported = f"{entry.min_version}-{entry.max_version}" if entry else "none"
            raise ConnectionClosing(
                f"{api_name(key)} v{version} (correlation id {prefix.correlation_id}) from {peer} is not served "
                f"(supported versions: {supported})"
            )
        try:
            request = codec.decode_request(frame)
        except ProtocolError:
            self.metrics.observe_failure(key)
            raise
        ctx = RequestContext(
            api_key=key,
            api_version=version,
            correlation_id=prefix.correlation_id,
            client_id=request.client_id,
            client_host=peer.host,
            client_port=peer.port,
            node=self.node,
            listener_name=peer.listener,
        )
        started = time.perf_counter()
        try:
            response = await self.handlers[key](ctx, request.body)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.metrics.observe_failure(key)
            response = self._error_response(ctx, exc)
        self.metrics.observe_request(key, time.perf_counter() - started)
        if response is None:
            return None
        return codec.encode_response_parts(prefix.correlation_id, response)

    def _error_response(self, ctx: RequestContext, exc: Exception) -> Any:
        """A response carrying the error when the API has a top-level error code; otherwise the connection is
        closed, which is what a Kafka client sees when a broker cannot answer a request at all."""
        code = error_code_for(exc)
        cls = ctx.response_class
        # One line an operator can grep, naming the API; the traceback is for whoever debugs the handler.
        failure = f"{api_name(ctx.api_key)} handler failed for {ctx.describe()}: {type(exc).__name__}: {exc}"
        logger.debug("%s", failure, exc_info=exc)
        if not codec.has_field(cls, "error_code"):
            logger.error("%s; closing the connection", failure)
            raise ConnectionClosing(f"handler for {api_name(ctx.api_key)} failed: {exc}") from exc
        logger.error("%s; answering %s", failure, code.name)
        fields: dict[str, object] = {"error_code": code}
        if codec.has_field(cls, "error_message"):
            fields["error_message"] = error_message_for(exc)
        return codec.build(cls, **fields)


class BrokerServer:
    """One listening socket (one Kafka listener) feeding a RequestDispatcher."""

    def __init__(
        self,
        dispatcher: RequestDispatcher,
        *,
        host: str,
        port: int,
        listener_name: str = "PLAINTEXT",
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        self.dispatcher = dispatcher
        self.host = host
        self.port = port
        self.listener_name = listener_name
        self.max_request_bytes = max_request_bytes
        self.max_in_flight = max_in_flight
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._gauge = dispatcher.metrics.connections.labels(listener=listener_name)
        self._accepted = dispatcher.metrics.connections_total.labels(listener=listener_name)

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
    front-deletes cost a third of the broker's CPU under 1 MiB produce requests. Here the socket is read straight
    into a staging buffer; a frame larger than what is left of it gets a buffer of its own, which the socket then
    fills directly, so every byte of a request is copied once on its way to the handler. Frames are dispatched as
    soon as they are complete (handlers run concurrently); a responder task writes the responses in request order.
    Reading pauses while ``max_in_flight`` requests are outstanding, which pushes back on the client through TCP.
    """

    def __init__(self, server: BrokerServer) -> None:
        self._server = server
        self._dispatcher = server.dispatcher
        self._staging = bytearray(_STAGING_BYTES)
        self._start = 0  # unparsed bytes are _staging[_start:_end]
        self._end = 0
        self._large: bytearray | None = None  # a frame too big for the staging buffer, being filled in place
        self._large_filled = 0
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
        self.peer = Peer(str(peername[0]), int(peername[1]), self._server.listener_name)
        self._server._opened(self)
        logger.debug("connection from %s", self.peer)
        self.responder = asyncio.get_running_loop().create_task(self._respond())

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._large is not None:
            return memoryview(self._large)[self._large_filled :]
        if self._end == len(self._staging):
            # Move the partial frame at the end to the front; the room after it is what the socket reads into.
            unparsed = self._end - self._start
            self._staging[:unparsed] = self._staging[self._start : self._end]
            self._start, self._end = 0, unparsed
        return memoryview(self._staging)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._stop_reading:
            return
        if self._large is not None:
            self._large_filled += nbytes
            if self._large_filled == len(self._large):
                frame, self._large = bytes(self._large), None
                self._dispatch(frame)
            return
        self._end += nbytes
        self._cut_frames()

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

    # -- framing -----------------------------------------------------------------------------------------------

    def _cut_frames(self) -> None:
        staging = self._staging
        while not self._stop_reading and self._end - self._start >= 4:
            (size,) = _LENGTH.unpack_from(staging, self._start)
            if size > self._server.max_request_bytes or size < codec.HEADER_PREFIX_SIZE:
                logger.warning(
                    "closing connection from %s: request of %d bytes is outside [%d, %d] (socket.request.max.bytes)",
                    self.peer,
                    size,
                    codec.HEADER_PREFIX_SIZE,
                    self._server.max_request_bytes,
                )
                self._stop()
                return
            body = self._start + 4
            available = self._end - body
            if available >= size:
                self._start = body + size
                # Through a view: slicing the bytearray itself would copy the frame twice (slice, then bytes).
                with memoryview(staging) as view:
                    frame = bytes(view[body : self._start])
                self._dispatch(frame)
                continue
            if size > len(staging) - body:
                # Does not fit behind its header: give it a buffer of its own and let the socket fill that.
                self._large = bytearray(size)
                self._large[:available] = staging[body : self._end]
                self._large_filled = available
                self._start = self._end = 0
            return
        if self._start == self._end:
            self._start = self._end = 0

    def _dispatch(self, frame: bytes) -> None:
        self._pending.append(asyncio.ensure_future(self._dispatcher.dispatch(frame, self.peer)))
        self._wakeup.set()
        if len(self._pending) >= self._server.max_in_flight and not self._reading_paused and self._transport:
            self._reading_paused = True
            self._transport.pause_reading()

    def _stop(self) -> None:
        """No more requests are read; the responder answers those already dispatched, then closes."""
        self._stop_reading = True
        self._large = None
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
            logger.debug("connection from %s closed", self.peer)
