"""The asyncio Kafka-protocol listener: binds one listening address, accepts its connections and serves them.

Brokers (client listeners) and controllers (the CONTROLLER listener) serve the Kafka protocol through this one
implementation; only the :class:`~wire.dispatch.Dispatcher` differs. Each accepted socket becomes a
:class:`~wire.connection.Connection`, which reads its requests, dispatches them and answers them in order; the
listener binds, accepts, keeps the set of open connections (for metrics, the idle sweep, eviction and shutdown) and
closes them all when it closes.

A listener given an :class:`ssl.SSLContext` (``wire.tls``) serves TLS; the context of each new handshake is read
from ``ssl_context`` then, so replacing it (``wire.tls_reload``) serves new certificates to new connections while
the open ones continue. A client certificate is handed to the dispatcher in :attr:`~wire.dispatch.Peer.certificate`.
It accepts on its own socket and hands each connection to ``loop.connect_accepted_socket``, which returns once the
handshake is done or raises: a failed handshake (or bytes that are not TLS at all) is logged with its peer and
closes that connection only.
``create_server(ssl=...)`` drops a failed handshake without a word (asyncio logs it only in debug mode), and
``start_tls`` on an accepted transport loses the ClientHello under uvloop, which starts reading right after
``connection_made`` even if the protocol paused the transport.

A listener given a :class:`~wire.connection_gate.ConnectionGate` (a broker's listeners share one) applies Kafka's
connection quotas in the same accept loop: the gate may hold the loop or close the socket at once. A failure of the
gate costs that one connection, never the accept loop. Such a listener binds one socket per address its host
resolves to (``localhost``: 127.0.0.1 and ::1), each with its own accept loop, as asyncio's server does, and like it
skips an address whose kind of socket this host cannot make (::1 where IPv6 is off) while another binds.

A listener given ``idle_timeout_s`` (Kafka's ``connections.max.idle.ms``) closes connections that neither read nor
wrote for that long, so abandoned ones cannot keep ``max.connections`` spent: a periodic sweep over its connections
(:meth:`~wire.connection.Connection.expire_if_idle`), so that a read costs only setting a flag.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable, Sequence, Set

from wire.connection import Connection
from wire.connection_gate import ConnectionGate
from wire.dispatch import Dispatcher
from wire.early_answers import EarlyConnection
from wire.listening_sockets import bind_listening
from wire.memory_pool import MemoryPool
from wire.metrics import ServerMetrics

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
DEFAULT_MAX_IN_FLIGHT = 64
DEFAULT_BACKLOG = 100  # asyncio's create_server default; a broker passes socket.listen.backlog.size
_ACCEPT_RETRY_S = 0.1
#: How often idle connections are looked for: a quarter of connections.max.idle.ms, within these bounds.
_IDLE_SWEEP_MIN_S = 0.01
_IDLE_SWEEP_MAX_S = 10.0


class KafkaListener:
    """One listening socket (one Kafka listener) feeding a :class:`~wire.dispatch.Dispatcher`."""

    def __init__(
        self,
        metrics: ServerMetrics,
        *,
        host: str,
        port: int,
        listener_name: str = "PLAINTEXT",
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        ssl_context: ssl.SSLContext | None = None,
        unauthenticated_max_request_bytes: int | None = None,
        gate: ConnectionGate | None = None,
        idle_timeout_s: float | None = None,
        backlog: int = DEFAULT_BACKLOG,
        memory_pool: MemoryPool | None = None,
        setup_timeout_s: float | None = None,
        frame_timeout_s: float | None = None,
        max_request_bytes_key: str = "socket.request.max.bytes",
        sockets: Sequence[socket.socket] = (),
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
    ) -> None:
        """``unauthenticated_max_request_bytes``: a SASL listener's limit on requests until the connection has
        authenticated (Kafka's ``sasl.server.max.receive.size``), so a peer without credentials cannot make the
        broker buffer a ``max_request_bytes`` frame; :attr:`~wire.dispatch.Peer.lift_request_limit` raises it.
        ``gate``: the connection quotas this listener shares with the node's other listeners (None: no limits).
        ``idle_timeout_s``: Kafka's ``connections.max.idle.ms``, a connection that neither read nor wrote a byte
        for that long (and has no request outstanding) is closed (None: never), so abandoned connections do not
        keep ``max.connections`` spent for ever. ``backlog``: how many connections the kernel queues before they
        are accepted (Kafka's ``socket.listen.backlog.size``), which is also where connections wait while the gate
        holds the acceptor. ``memory_pool``: the node's bound on the bytes of requests read and queued
        (``queued.max.request.bytes``, ``wire.memory_pool``; None: unbounded). ``setup_timeout_s``
        (``fjord.connections.setup.max.ms``): a connection that has not finished its TLS handshake, authenticated
        (SASL) or sent a whole request (other listeners) that long after it was accepted is closed (None: never).
        ``frame_timeout_s`` (``connections.max.idle.ms``): a connection that has been sending one request frame for
        that long, however it trickles its bytes, is closed (None: never). ``max_request_bytes_key``: the key
        that set ``max_request_bytes``, named when a frame over it closes a connection. ``sockets``: this listener's
        sockets, already listening (:func:`~wire.listening_sockets.bind_listening`, called by a node as soon as it
        has read its config); the listener adopts them instead of binding, and closes them when it closes.
        ``send_buffer_bytes`` / ``receive_buffer_bytes``: the SO_SNDBUF / SO_RCVBUF of each connection accepted
        (Kafka's ``socket.send.buffer.bytes`` / ``socket.receive.buffer.bytes``; -1 leaves the OS default)."""
        #: What the listener serves, from :meth:`start_serving` on: a listener binds before its server exists
        #: (a broker registers the port it bound, and only its registration makes the rest of it).
        self._dispatcher: Dispatcher | None = None
        #: Makes the dispatcher's per-connection :attr:`~wire.dispatch.Peer.state` when a connection opens (None: no
        #: state).
        self.connection_state: Callable[[], object] | None = None
        self.host = host
        self.port = port
        self.listener_name = listener_name
        self.max_request_bytes = max_request_bytes
        self.max_request_bytes_key = max_request_bytes_key
        self.max_in_flight = max_in_flight
        self.ssl_context = ssl_context
        self.unauthenticated_max_request_bytes = unauthenticated_max_request_bytes
        self.gate = gate
        if gate is not None:
            gate.add_listener(self)
        self.idle_timeout_s = idle_timeout_s
        self.backlog = backlog
        self.memory_pool = memory_pool
        if memory_pool is not None:
            metrics.watch_pool(memory_pool)
        self.setup_timeout_s = setup_timeout_s
        self.frame_timeout_s = frame_timeout_s
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self._server: asyncio.Server | None = None
        #: The own listening sockets of a TLS or gated listener: one per address the host resolves to.
        self._own_sockets: list[socket.socket] = list(sockets)
        self._acceptors: list[asyncio.Task[None]] = []
        self._sweeper: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()
        self._connections: set[Connection] = set()
        self._gauge = metrics.connections.labels(listener=listener_name)
        self._accepted = metrics.connections_total.labels(listener=listener_name)

    @property
    def dispatcher(self) -> Dispatcher:
        if self._dispatcher is None:
            raise RuntimeError(f"listener {self.listener_name} is not serving")
        return self._dispatcher

    @property
    def bound_port(self) -> int:
        """The actual port (differs from ``port`` when that was 0)."""
        if self._own_sockets and self._own_sockets[0].fileno() != -1:
            return int(self._own_sockets[0].getsockname()[1])
        if self._server is None or not self._server.sockets:
            raise RuntimeError(f"listener {self.listener_name} is not bound")
        return int(self._server.sockets[0].getsockname()[1])

    async def bind(self) -> int:
        """Binds the socket without accepting yet, so the node can register its real port before serving."""
        if self._own_sockets:  # bound before the listener was made
            pass
        elif self.ssl_context is not None or self.gate is not None:
            self._own_sockets = await bind_listening(
                self.host, self.port, backlog=self.backlog, listener_name=self.listener_name
            )
        else:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: Connection(self), self.host, self.port, start_serving=False, reuse_address=True,
                backlog=self.backlog,
            )
        logger.info("listener %s bound to %s:%d", self.listener_name, self.host, self.bound_port)
        return self.bound_port

    async def start_serving(
        self, dispatcher: Dispatcher, *, connection_state: Callable[[], object] | None = None,
        accepted: Sequence[EarlyConnection] = (),
    ) -> None:
        """Accepts connections and hands their requests to ``dispatcher``; ``connection_state`` makes the state it
        keeps per connection (:attr:`~wire.dispatch.Peer.state`). Binds first if :meth:`bind` was not called.
        ``accepted``: connections accepted on this listener's sockets before it served (``wire.early_answers``),
        served from now on as if accepted here."""
        self._dispatcher = dispatcher
        self.connection_state = connection_state
        if self._server is None and not self._own_sockets:
            await self.bind()
        loop = asyncio.get_running_loop()
        for early in accepted:
            self._admit(early.sock, early.address, early.answered)
        if self._own_sockets:
            self._acceptors = [loop.create_task(self._accept_own(sock)) for sock in self._own_sockets]
        else:
            assert self._server is not None
            await self._server.start_serving()
        bounds = (self.idle_timeout_s, self.setup_timeout_s, self.frame_timeout_s)
        if any(bound is not None for bound in bounds) and self._sweeper is None:
            self._sweeper = loop.create_task(self._expire_idle(*bounds))
        logger.info("listener %s accepting connections on %s:%d", self.listener_name, self.host, self.bound_port)

    async def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()
        for acceptor in self._acceptors:
            acceptor.cancel()
        await asyncio.gather(*self._acceptors, return_exceptions=True)
        self._acceptors = []
        for sock in self._own_sockets:
            sock.close()

    async def close(self) -> None:
        """Stops accepting, closes every connection and waits for their responders."""
        await self.stop_accepting()
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        for handshake in list(self._handshakes):
            handshake.cancel()
        connections = list(self._connections)
        for connection in connections:
            connection.abort()
        responders = [c.responder for c in connections if c.responder is not None]
        if responders:
            await asyncio.gather(*responders, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self._handshakes:
            await asyncio.gather(*self._handshakes, return_exceptions=True)

    async def _accept_own(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, address = await loop.sock_accept(listening)
            except OSError as exc:  # out of file descriptors, say: the listener stays, as asyncio's server does
                logger.warning("listener %s cannot accept a connection: %s", self.listener_name, exc)
                await asyncio.sleep(_ACCEPT_RETRY_S)
                continue
            slot: str | None = None
            if self.gate is not None:
                slot = await self._gate_slot(sock, address)
                if slot is None:
                    continue
            task = loop.create_task(self._handshake(sock, address, slot))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _gate_slot(self, sock: socket.socket, address: tuple[str, int]) -> str | None:
        """The key the gate counts a new connection under, or None when it refused it (the socket is closed)."""
        assert self.gate is not None
        try:
            slot = await self.gate.admit(self.listener_name, str(address[0]))
        except asyncio.CancelledError:
            sock.close()
            raise
        except Exception:  # a bug in the quotas must cost one connection, never the listener
            logger.exception("listener %s: closing the connection from %s:%s, the connection quotas "
                             "failed on it", self.listener_name, address[0], address[1])
            slot = None
        if slot is None:
            sock.close()
        return slot

    def _admit(self, sock: socket.socket, address: tuple[str, int], answered: Sequence[bytes]) -> None:
        """A connection accepted before this listener served: through the gate, then served."""

        async def admit() -> None:
            slot = await self._gate_slot(sock, address) if self.gate is not None else None
            if self.gate is None or slot is not None:
                await self._handshake(sock, address, slot, answered)

        task = asyncio.get_running_loop().create_task(admit())
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _handshake(
        self, sock: socket.socket, address: tuple[str, int], slot: str | None, answered: Sequence[bytes] = ()
    ) -> None:
        """One connection accepted on the own socket up to its first request: on a TLS listener the handshake, or
        one line saying why it failed. ``slot``: the key the gate counts it under (None: not counted);
        ``answered``: requests answered before the listener served (``wire.early_answers``)."""
        connection = Connection(self, slot=slot, answered=answered)
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: connection, sock, ssl=self.ssl_context,
                ssl_handshake_timeout=self.setup_timeout_s if self.ssl_context is not None else None,
            )
        except OSError as exc:  # an SSLError, a reset, or the handshake timing out
            connection.release_slot()
            reason = exc.reason if isinstance(exc, ssl.SSLError) and exc.reason else type(exc).__name__
            logger.warning("%s with %s:%s on listener %s: %s",
                           "TLS handshake failed" if self.ssl_context is not None else "cannot serve a connection",
                           address[0], address[1], self.listener_name, reason)
            sock.close()
        except BaseException:
            connection.release_slot()
            sock.close()
            raise

    async def _expire_idle(self, idle_s: float | None, setup_s: float | None, frame_s: float | None) -> None:
        """Kafka's ``connections.max.idle.ms`` and Fjord's ``fjord.connections.setup.max.ms``: every so often,
        closes the connections idle (or not set up, or half way through a request) for longer. A sweep rather than
        a timer per connection keeps a read's cost to setting one flag; a connection is closed between the bound
        and the bound plus one sweep period (two for a half-received request)."""
        bound = min(b for b in (idle_s, setup_s, frame_s) if b is not None)
        period = min(max(bound / 4, _IDLE_SWEEP_MIN_S), _IDLE_SWEEP_MAX_S)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for connection in list(self._connections):
                connection.expire_if_idle(now, idle_s, setup_s, frame_s)

    # -- what its connections (wire.connection.ConnectionHost) and its gate (GatedListener) use -------------------

    @property
    def connections(self) -> Set[Connection]:
        """The open connections (counted from ``connection_made`` until they closed); the gate chooses among them
        whom to evict."""
        return self._connections

    def connection_opened(self, connection: Connection) -> None:
        self._connections.add(connection)
        self._gauge.inc()
        self._accepted.inc()

    def connection_closed(self, connection: Connection) -> None:
        connection.release_slot()
        if connection in self._connections:
            self._connections.discard(connection)
            self._gauge.dec()

    def return_slot(self, slot: str) -> None:
        if self.gate is not None:
            self.gate.release(self.listener_name, slot)
