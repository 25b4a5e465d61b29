"""The asyncio Kafka-protocol server: framing, per-connection pipelining, dispatch to handlers.

Requests on one connection are dispatched concurrently (so a long-polling Fetch does not hold up the Metadata
request behind it in a handler) but answered strictly in request order, as the protocol requires. At most
``max_in_flight`` requests per connection are outstanding; beyond that the connection is not read, which pushes
back on the client through TCP. A frame that is too large, malformed, or for an API/version we do not serve
closes only its own connection, after the responses to the requests before it have been written.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
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

if TYPE_CHECKING:
    from broker.node import BrokerNode

logger = logging.getLogger(__name__)

_LENGTH = struct.Struct(">i")
DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
DEFAULT_MAX_IN_FLIGHT = 64


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

    async def dispatch(self, frame: bytes, peer: Peer) -> bytes | None:
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
        return codec.encode_response(prefix.correlation_id, response)

    def _error_response(self, ctx: RequestContext, exc: Exception) -> Any:
        """A response carrying the error when the API has a top-level error code; otherwise the connection is
        closed, which is what a Kafka client sees when a broker cannot answer a request at all."""
        code = error_code_for(exc)
        cls = ctx.response_class
        if not codec.has_field(cls, "error_code"):
            logger.error("handler failed for %s; closing the connection", ctx.describe(), exc_info=exc)
            raise ConnectionClosing(f"handler for {api_name(ctx.api_key)} failed: {exc}") from exc
        logger.error("handler failed for %s; answering %s", ctx.describe(), code.name, exc_info=exc)
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
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
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
        self._server = await asyncio.start_server(
            self._on_connection, self.host, self.port, start_serving=False, reuse_address=True
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
        """Stops accepting, closes every connection and waits for their tasks."""
        await self.stop_accepting()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(writer)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peername = writer.get_extra_info("peername") or ("?", 0)
        peer = Peer(str(peername[0]), int(peername[1]), self.listener_name)
        self._gauge.inc()
        self._accepted.inc()
        logger.debug("connection from %s", peer)
        try:
            await self._serve(reader, writer, peer)
        except asyncio.CancelledError:
            pass
        finally:
            self._gauge.dec()
            self._connections.discard(task)
            self._writers.discard(writer)
            writer.close()
            logger.debug("connection from %s closed", peer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Peer) -> None:
        pending: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(maxsize=self.max_in_flight)
        responder = asyncio.create_task(self._respond(pending, writer, peer))
        try:
            while not responder.done():
                try:
                    size_bytes = await reader.readexactly(4)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                (size,) = _LENGTH.unpack(size_bytes)
                if size > self.max_request_bytes or size < codec.HEADER_PREFIX_SIZE:
                    logger.warning(
                        "closing connection from %s: request of %d bytes is outside [%d, %d] "
                        "(socket.request.max.bytes)",
                        peer, size, codec.HEADER_PREFIX_SIZE, self.max_request_bytes,
                    )
                    return
                try:
                    frame = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    logger.info("connection from %s ended inside a %d-byte request", peer, size)
                    return
                await pending.put(asyncio.create_task(self.dispatcher.dispatch(frame, peer)))
        finally:
            # Let the responder write what was already dispatched, in order, then stop it. If the responder has
            # already stopped (it closed the connection), it has drained and cancelled the queue itself.
            try:
                if not responder.done():
                    await pending.put(None)
                await responder
            except asyncio.CancelledError:
                responder.cancel()
                raise
            finally:
                while not pending.empty():
                    leftover = pending.get_nowait()
                    if leftover is not None:
                        leftover.cancel()

    async def _respond(
        self, pending: asyncio.Queue[asyncio.Task[bytes | None] | None], writer: asyncio.StreamWriter, peer: Peer
    ) -> None:
        """Writes responses in request order; on any failure closes the transport so the reader loop ends."""
        try:
            while True:
                task = await pending.get()
                if task is None:
                    return
                try:
                    data = await task
                except ProtocolError as exc:
                    logger.warning("closing connection from %s: %s", peer, exc)
                    return
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception("closing connection from %s: failed to produce a response", peer)
                    return
                if data is not None:
                    writer.write(data)
                    await writer.drain()
        except ConnectionError as exc:
            logger.debug("connection from %s lost while writing: %s", peer, exc)
        finally:
            writer.close()
            # Unblock a reader waiting for room in the queue; what it still dispatched is cancelled.
            while not pending.empty():
                leftover = pending.get_nowait()
                if leftover is not None:
                    leftover.cancel()
