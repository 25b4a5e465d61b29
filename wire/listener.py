"""The asyncio Kafka-protocol listener: one socket, its connections, per-connection pipelining.

Brokers (client listeners) and controllers (the CONTROLLER listener) serve the Kafka protocol through this one
implementation; only the :class:`Dispatcher` differs. Requests on one connection are dispatched concurrently (so a
long-polling Fetch does not hold up the Metadata request behind it in a handler) but answered strictly in request
order, as the protocol requires. At most ``max_in_flight`` requests per connection are outstanding; beyond that the
connection is not read, which pushes back on the client through TCP. A frame that is too large, malformed, or for
an API/version the dispatcher does not serve closes only its own connection, after the responses to the requests
before it have been written. A dispatcher may *mute* a connection (:attr:`Peer.mute`, KIP-219: a client over its
quota): for that long no more of its requests are read or dispatched, while the responses already due are written.
From its first mute on, a connection's requests are dispatched one at a time, each once the one before it is
answered, as Kafka serves every connection: each request of a client over its quota is then measured and throttled
on its own, instead of a pipelined burst going through on one measurement.
Cutting frames out of the byte stream is ``wire.frames``'s (no I/O there).

A listener given an :class:`ssl.SSLContext` (``wire.tls``) serves TLS; the context of each new handshake is read
from ``ssl_context`` then, so replacing it (``wire.tls_reload``) serves new certificates to new connections while
the open ones continue. A client certificate is handed to the dispatcher in :attr:`Peer.certificate`. It accepts
on its own socket and hands each connection to ``loop.connect_accepted_socket``, which returns once the handshake
is done or raises: a failed handshake (or bytes that are not TLS at all) is logged with its peer and closes that
connection only.
``create_server(ssl=...)`` drops a failed handshake without a word (asyncio logs it only in debug mode), and
``start_tls`` on an accepted transport loses the ClientHello under uvloop, which starts reading right after
``connection_made`` even if the protocol paused the transport.

A listener given a :class:`~wire.connection_gate.ConnectionGate` (a broker's listeners share one) applies Kafka's
connection quotas in the same accept loop: the gate may hold the loop or close the socket at once. A failure of the
gate costs that one connection, never the accept loop. Such a listener binds one socket per address its
host resolves to (``localhost``: 127.0.0.1 and ::1), each with its own accept loop, as asyncio's server does, and
like it skips an address whose kind of socket this host cannot make (::1 where IPv6 is off) while another binds.

A listener given ``idle_timeout_s`` (Kafka's ``connections.max.idle.ms``) closes connections that neither read nor
wrote for that long, so abandoned ones cannot keep ``max.connections`` spent: a periodic sweep, so that a read costs
only setting a flag. A connection the broker muted (a throttled client) is waiting on the broker, not idle. The same
sweep's record of activity orders the connections evicted for the inter-broker listener (least recently active
first).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import ssl
import typing
from collections.abc import Callable, Set
from dataclasses import replace

from wire import codec
from wire.codec import ProtocolError
from wire.connection_gate import ConnectionGate
from wire.dispatch import Dispatcher, Peer, Response
from wire.frames import FrameBuffer
from wire.metrics import ServerMetrics

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default
DEFAULT_MAX_IN_FLIGHT = 64
DEFAULT_BACKLOG = 100  # asyncio's create_server default; a broker passes socket.listen.backlog.size
_ACCEPT_RETRY_S = 0.1
_BIND_ATTEMPTS = 5  # port 0 on several addresses: the first one's port may be taken on another
#: How often idle connections are looked for: a quarter of connections.max.idle.ms, within these bounds.
_IDLE_SWEEP_MIN_S = 0.01
_IDLE_SWEEP_MAX_S = 10.0


class KafkaListener:
    """One listening socket (one Kafka listener) feeding a :class:`Dispatcher`."""

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
    ) -> None:
        """``unauthenticated_max_request_bytes``: a SASL listener's limit on requests until the connection has
        authenticated (Kafka's ``sasl.server.max.receive.size``), so a peer without credentials cannot make the
        broker buffer a ``max_request_bytes`` frame; :attr:`Peer.lift_request_limit` raises it. ``gate``: the
        connection quotas this listener shares with the node's other listeners (None: no limits).
        ``idle_timeout_s``: Kafka's ``connections.max.idle.ms``, a connection that neither read nor wrote a byte
        for that long (and has no request outstanding) is closed (None: never), so abandoned connections do not
        keep ``max.connections`` spent for ever. ``backlog``: how many connections the kernel queues before they
        are accepted (Kafka's ``socket.listen.backlog.size``), which is also where connections wait while the gate
        holds the acceptor."""
        #: What the listener serves, from :meth:`start_serving` on: a listener binds before its server exists
        #: (a broker registers the port it bound, and only its registration makes the rest of it).
        self._dispatcher: Dispatcher | None = None
        #: Makes the dispatcher's per-connection :attr:`Peer.state` when a connection opens (None: no state).
        self.connection_state: Callable[[], object] | None = None
        self.host = host
        self.port = port
        self.listener_name = listener_name
        self.max_request_bytes = max_request_bytes
        self.max_in_flight = max_in_flight
        self.ssl_context = ssl_context
        self.unauthenticated_max_request_bytes = unauthenticated_max_request_bytes
        self.gate = gate
        if gate is not None:
            gate.add_listener(self)
        self.idle_timeout_s = idle_timeout_s
        self.backlog = backlog
        self._server: asyncio.Server | None = None
        #: The own listening sockets of a TLS or gated listener: one per address the host resolves to.
        self._own_sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task[None]] = []
        self._sweeper: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()
        self._connections: set[_Connection] = set()
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
        if self.ssl_context is not None or self.gate is not None:
            self._own_sockets = await self._bind_own()
        else:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: _Connection(self), self.host, self.port, start_serving=False, reuse_address=True,
                backlog=self.backlog,
            )
        logger.info("listener %s bound to %s:%d", self.listener_name, self.host, self.bound_port)
        return self.bound_port

    async def _bind_own(self) -> list[socket.socket]:
        """One listening socket per address ``host`` resolves to (``localhost``: 127.0.0.1 and ::1), as asyncio's
        own server binds; an empty host or 0.0.0.0 is every IPv4 address. With port 0 the first socket's port is
        used for the others (tried again, a few times, when another process has it on one of the addresses)."""
        if self.host in ("", "0.0.0.0"):
            addresses: list[tuple[socket.AddressFamily, tuple[typing.Any, ...]]] = [
                (socket.AF_INET, (self.host, self.port))
            ]
        else:
            infos = await asyncio.get_running_loop().getaddrinfo(
                self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            addresses = list(dict.fromkeys((family, tuple(sockaddr)) for family, _t, _p, _c, sockaddr in infos))
        attempts = _BIND_ATTEMPTS if self.port == 0 and len(addresses) > 1 else 1
        attempt = 1
        while True:
            try:
                return self._bind_each(addresses)
            except OSError:
                if attempt >= attempts:
                    raise
                attempt += 1

    def _bind_each(self, addresses: list[tuple[socket.AddressFamily, tuple[typing.Any, ...]]]) -> list[socket.socket]:
        """Listening sockets for ``addresses``, all on one port (with port 0, the first one's). An address whose
        socket cannot even be made (its address family unsupported on this host: ::1 without IPv6) is skipped, as
        asyncio's server skips it, as long as another binds; every error names its address."""
        bound: list[socket.socket] = []
        skipped: OSError | None = None
        try:
            for family, sockaddr in addresses:
                port = int(bound[0].getsockname()[1]) if bound else self.port
                try:
                    sock = socket.socket(family, socket.SOCK_STREAM)
                except OSError as exc:
                    skipped = OSError(exc.errno, f"{sockaddr[0]}:{port}: {exc.strerror}")
                    logger.warning("listener %s does not listen on %s: %s", self.listener_name, sockaddr[0],
                                   exc.strerror)
                    continue
                bound.append(sock)
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:  # the IPv4 addresses have their own sockets
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    sock.bind((sockaddr[0], port, *sockaddr[2:]))
                    sock.listen(self.backlog)
                except OSError as exc:
                    raise OSError(exc.errno, f"{sockaddr[0]}:{port}: {exc.strerror}") from None
                sock.setblocking(False)
        except OSError:
            for sock in bound:
                sock.close()
            raise
        if not bound:
            raise skipped if skipped is not None else OSError(f"{self.host}: no address to listen on")
        return bound

    async def start_serving(
        self, dispatcher: Dispatcher, *, connection_state: Callable[[], object] | None = None
    ) -> None:
        """Accepts connections and hands their requests to ``dispatcher``; ``connection_state`` makes the state it
        keeps per connection (:attr:`Peer.state`). Binds first if :meth:`bind` was not called."""
        self._dispatcher = dispatcher
        self.connection_state = connection_state
        if self._server is None and not self._own_sockets:
            await self.bind()
        loop = asyncio.get_running_loop()
        if self._own_sockets:
            self._acceptors = [loop.create_task(self._accept_own(sock)) for sock in self._own_sockets]
        else:
            assert self._server is not None
            await self._server.start_serving()
        if self.idle_timeout_s is not None and self._sweeper is None:
            self._sweeper = loop.create_task(self._expire_idle(self.idle_timeout_s))
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
                try:
                    slot = await self.gate.admit(self.listener_name, str(address[0]))
                except asyncio.CancelledError:
                    sock.close()
                    raise
                except Exception:  # a bug in the quotas must cost one connection, never the listener
                    logger.exception("listener %s: closing the connection from %s:%s, the connection quotas "
                                     "failed on it", self.listener_name, address[0], address[1])
                    sock.close()
                    continue
                if slot is None:
                    sock.close()
                    continue
            task = loop.create_task(self._handshake(sock, address, slot))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, sock: socket.socket, address: tuple[str, int], slot: str | None) -> None:
        """One connection accepted on the own socket up to its first request: on a TLS listener the handshake, or
        one line saying why it failed. ``slot``: the key the gate counts it under (None: not counted)."""
        connection = _Connection(self, slot=slot)
        try:
            await asyncio.get_running_loop().connect_accepted_socket(lambda: connection, sock, ssl=self.ssl_context)
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

    async def _expire_idle(self, idle_s: float) -> None:
        """Kafka's ``connections.max.idle.ms``: every so often, closes the connections idle for longer. A sweep
        rather than a timer per connection keeps a read's cost to setting one flag; a connection is closed between
        ``idle_s`` and ``idle_s`` plus one sweep period after its last byte."""
        period = min(max(idle_s / 4, _IDLE_SWEEP_MIN_S), _IDLE_SWEEP_MAX_S)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for connection in list(self._connections):
                connection.expire_if_idle(now, idle_s)

    @property
    def connections(self) -> Set[_Connection]:
        """The open connections (counted from ``connection_made`` until they closed); the gate chooses among them
        whom to evict."""
        return self._connections

    def _opened(self, connection: _Connection) -> None:
        self._connections.add(connection)
        self._gauge.inc()
        self._accepted.inc()

    def _closed(self, connection: _Connection) -> None:
        connection.release_slot()
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

    def __init__(self, server: KafkaListener, slot: str | None = None) -> None:
        self._server = server
        #: The key (``ip_key``) this connection is counted under in its listener's gate until it closes (None: not
        #: counted).
        self._slot = slot
        #: Read or wrote since the idle sweep last looked; ``_seen``: loop time the sweep last saw it active. Both
        #: also order eviction (:meth:`recency`), so a read costs no clock read.
        self._active = False
        self._seen = 0.0
        self._dispatcher = server.dispatcher
        limited = server.unauthenticated_max_request_bytes
        self._frames = (
            FrameBuffer(max_frame_bytes=server.max_request_bytes, min_frame_bytes=codec.HEADER_PREFIX_SIZE)
            if limited is None
            else FrameBuffer(max_frame_bytes=min(limited, server.max_request_bytes),
                             min_frame_bytes=codec.HEADER_PREFIX_SIZE, limit_key="sasl.server.max.receive.size")
        )
        self._pending: collections.deque[asyncio.Task[Response | None]] = collections.deque()
        self._wakeup: asyncio.Event = asyncio.Event()
        self._reading_paused = False
        self._muted_until = 0.0  # loop time until which the connection is muted (a throttled client)
        self._unmute: asyncio.TimerHandle | None = None
        self._held: collections.deque[bytes] = collections.deque()  # frames waiting for their turn (serial)
        self._serial = False  # muted once: one request at a time from now on
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
        lift = self._lift_request_limit if self._server.unauthenticated_max_request_bytes is not None else None
        ssl_object = transport.get_extra_info("ssl_object")
        certificate = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        self.peer = Peer(str(peername[0]), int(peername[1]), self._server.listener_name, state, lift,
                         certificate=certificate or None, mute=self._mute)
        self._seen = asyncio.get_running_loop().time()
        self._server._opened(self)
        logger.debug("connection from %s", self.peer)
        self.responder = asyncio.get_running_loop().create_task(self._respond())

    def _lift_request_limit(self) -> None:
        self._frames.max_frame_bytes = self._server.max_request_bytes
        self._frames.limit_key = "socket.request.max.bytes"

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._active = True
        if self._stop_reading:
            return
        for frame in self._frames.buffer_updated(nbytes):
            if self._serial:
                self._held.append(frame)
            else:
                self._dispatch(frame)
        self._release()
        if self._frames.error is not None:
            logger.warning("closing connection from %s: %s", self.peer, self._frames.error)
            self._stop()

    def eof_received(self) -> bool:
        self._stop()
        # Keep the transport open: the responder still writes what it owes, then closes it. A TLS transport closes
        # itself at the peer's EOF whatever this returns (and asyncio warns when it is True).
        return self._server.ssl_context is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self.release_slot()  # at once: the responder may still be awaiting a handler before its finally runs
        if self._unmute is not None:
            self._unmute.cancel()
            self._unmute = None
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
        self._pace()

    def _pace(self) -> None:
        """Reads while neither muted nor ``max_in_flight`` requests are outstanding."""
        if self._transport is None or self._lost:
            return
        limit = self._server.max_in_flight
        wanted = self._unmute is None and len(self._pending) < limit and len(self._held) < limit
        if not wanted and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()
        elif wanted and self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()

    def _mute(self, seconds: float) -> None:
        if seconds <= 0 or self._stop_reading:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        if until <= self._muted_until:
            return
        self._muted_until = until
        self._serial = True
        if self._unmute is not None:
            self._unmute.cancel()
        self._unmute = loop.call_at(until, self._unmuted)
        self._pace()

    def _unmuted(self) -> None:
        self._unmute = None
        self._release()
        self._pace()

    def _release(self) -> None:
        """Serial mode: the next waiting request, once the one before it has been answered and no mute holds.

        Held requests are still released after reading stopped (EOF, a bad frame): they came before it and are owed
        an answer; only a lost connection, which no answer can reach, drops them."""
        if self._held and self._unmute is None and not self._pending and not self._lost:
            self._dispatch(self._held.popleft())

    def _stop(self) -> None:
        """No more requests are read; the responder answers those already dispatched, then closes."""
        self._stop_reading = True
        self._wakeup.set()

    def expire_if_idle(self, now: float, idle_s: float) -> None:
        """Closes the connection when it has neither read nor written since ``idle_s`` before ``now`` (loop time)
        and owes no answer (Kafka's idle expiry; a request still being handled or held, or a mute the broker put on
        it, is activity: the client is waiting on the broker)."""
        if self._active or self._pending or self._held or self._unmute is not None:
            self._active = False
            self._seen = now
            return
        if now - self._seen < idle_s or self._stop_reading:
            return
        logger.debug("closing connection from %s: idle for longer than connections.max.idle.ms (%.0f ms)",
                     self.peer, idle_s * 1000)
        self._stop()
        if self._transport is not None:
            self._transport.close()

    def recency(self) -> tuple[bool, float]:
        """Orders connections from the least recently active: those the idle sweep has not seen active since it
        last looked come first, by when it last saw them active (the sweep's granularity is enough to choose whom
        to evict; on a listener without idle expiry, by when they opened)."""
        return self._active, self._seen

    @property
    def holds_slot(self) -> bool:
        return self._slot is not None

    def release_slot(self) -> None:
        """Gives the connection's place in the gate back (once, however the connection ends)."""
        slot, self._slot = self._slot, None
        if slot is not None and self._server.gate is not None:
            self._server.gate.release(self._server.listener_name, slot)

    def evict(self) -> None:
        """Closed to make room for the inter-broker listener (KIP-402): its place is free at once."""
        self.release_slot()
        self.abort()

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
                    if self._stop_reading and (not self._held or self._lost):
                        return  # held requests still owed an answer wait for their unmute (``_release``)
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
                self._release()
                self._pace()
                if self._lost:
                    return
                self._active = True
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
