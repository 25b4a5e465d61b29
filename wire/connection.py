"""One Kafka-protocol connection served by a listener: reading request frames, dispatching them, writing the
responses in request order, and idle expiry.

Requests on one connection are dispatched concurrently (so a long-polling Fetch does not hold up the Metadata
request behind it in a handler) but answered strictly in request order, as the protocol requires. At most
``max_in_flight`` requests per connection are outstanding; beyond that the connection is not read, which pushes back
on the client through TCP. A frame that is too large, malformed, or for an API/version the dispatcher does not serve
closes only its own connection, after the responses to the requests before it have been written. A muted connection
(a client over its quota) is not read while its mute lasts and is then served one request at a time
(``wire.muting``). Cutting frames out of the byte stream is ``wire.frames``'s (no I/O there).

A connection closes once it has neither read nor written for the listener's ``idle_timeout_s`` (Kafka's
``connections.max.idle.ms``), or has been sending one request for its ``frame_timeout_s`` (the same key; a client
trickling bytes is never idle), when the listener's periodic sweep looks (:meth:`Connection.expire_if_idle`), so that
a read costs only setting a flag. A connection the broker muted is waiting on the broker, not idle. The same record
of activity orders the connections a node's connection gate evicts (``wire.connection_gate``, least recently active
first).

What a connection needs of the listener that accepted it is :class:`ConnectionHost`, so this module does not depend
on ``wire.listener`` (which makes the connections).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import ssl
import typing
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from wire import codec
from wire.codec import ProtocolError
from wire.dispatch import Dispatcher, Peer, Response
from wire.frames import FrameBuffer
from wire.log_text import LOG_TEXT_MAX, untrusted
from wire.memory_pool import MemoryPool
from wire.muting import Muting

#: The listener's logger: operators configure (and tests filter) one logger for all a listener does with its
#: connections, however its code is divided.
logger = logging.getLogger("wire.listener")


class ConnectionHost(Protocol):
    """The listener a connection was accepted on, as far as the connection uses it. Its settings are read when
    they are needed (a listener's ``ssl_context`` is replaced when its certificates are reloaded)."""

    @property
    def listener_name(self) -> str: ...

    @property
    def dispatcher(self) -> Dispatcher: ...

    @property
    def connection_state(self) -> Callable[[], object] | None: ...

    @property
    def max_request_bytes(self) -> int: ...

    @property
    def max_request_bytes_key(self) -> str: ...

    @property
    def unauthenticated_max_request_bytes(self) -> int | None: ...

    @property
    def max_in_flight(self) -> int: ...

    @property
    def memory_pool(self) -> MemoryPool | None: ...

    @property
    def ssl_context(self) -> ssl.SSLContext | None: ...

    @property
    def send_buffer_bytes(self) -> int:
        """SO_SNDBUF of each connection (Kafka's ``socket.send.buffer.bytes``); -1: the OS default."""

    @property
    def receive_buffer_bytes(self) -> int:
        """SO_RCVBUF of each connection (Kafka's ``socket.receive.buffer.bytes``); -1: the OS default."""

    def connection_opened(self, connection: Connection) -> None:
        """The connection is established and serving (counted as open from now on)."""

    def connection_closed(self, connection: Connection) -> None:
        """The connection has closed and answered all it will; it gives back its slot if it still holds one."""

    def return_slot(self, slot: str) -> None:
        """Gives the listener's connection gate back the slot counted under ``slot`` (``ip_key``)."""


class Connection(asyncio.BufferedProtocol):
    """One client connection: cuts the byte stream into request frames and answers them in order.

    A protocol rather than a StreamReader because the stream reader's per-chunk buffer growth, wake-ups and
    front-deletes cost a third of the broker's CPU under 1 MiB produce requests. The socket is read straight into
    the connection's :class:`~wire.frames.FrameBuffer`, so every byte of a request is copied once on its way to
    the handler. Frames are dispatched as soon as they are complete (handlers run concurrently); a responder task
    writes the responses in request order.
    Reading pauses while ``max_in_flight`` requests are outstanding, which pushes back on the client through TCP.
    """

    def __init__(self, host: ConnectionHost, slot: str | None = None, answered: Sequence[bytes] = ()) -> None:
        """``answered``: requests of this connection answered before its listener served (``wire.early_answers``):
        its dispatcher sees them first, their answers dropped."""
        self._host = host
        self._answered = answered
        self._replays: set[asyncio.Task[Response | None]] = set()
        #: The key (``ip_key``) this connection is counted under in its listener's gate until it closes (None: not
        #: counted).
        self._slot = slot
        #: Read or wrote since the idle sweep last looked; ``_seen``: loop time the sweep last saw it active. Both
        #: also order eviction (:meth:`recency`), so a read costs no clock read.
        self._active = False
        self._seen = 0.0
        self._dispatcher = host.dispatcher
        #: Loop time the connection was made; set up once it authenticated (SASL) or sent a whole request (other
        #: listeners): until then it is closed ``setup_timeout_s`` after it was made (:meth:`expire_if_idle`).
        self._opened = 0.0
        self._set_up = False
        #: Loop time the idle sweep first saw the request frame now half received (None: none is); ``_completed``:
        #: a frame was completed since the sweep last looked (so a frame it sees half received is a new one).
        self._partial_since: float | None = None
        self._completed = False
        self._pool = host.memory_pool
        reserve = self._pool.try_reserve if self._pool is not None else None
        limited = host.unauthenticated_max_request_bytes
        self._frames = (
            FrameBuffer(max_frame_bytes=host.max_request_bytes, min_frame_bytes=codec.HEADER_PREFIX_SIZE,
                        limit_key=host.max_request_bytes_key, reserve=reserve)
            if limited is None
            else FrameBuffer(max_frame_bytes=min(limited, host.max_request_bytes),
                             min_frame_bytes=codec.HEADER_PREFIX_SIZE, limit_key="sasl.server.max.receive.size",
                             reserve=reserve)
        )
        self._pool_wait = False  # a frame waits for room in the memory pool: not read meanwhile
        self._pending: collections.deque[asyncio.Task[Response | None]] = collections.deque()
        self._wakeup: asyncio.Event = asyncio.Event()
        self._reading_paused = False
        self._muting = Muting(self._unmuted)
        self._stop_reading = False  # EOF, a bad frame, or the connection was lost: dispatch nothing more
        self._lost = False
        self._can_write: asyncio.Event = asyncio.Event()
        self._can_write.set()
        self._transport: asyncio.Transport | None = None
        self.peer = Peer("?", 0, host.listener_name)
        self.responder: asyncio.Task[None] | None = None

    # -- asyncio.BufferedProtocol ------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is not an asyncio.Transport subclass, but it is one in every way used here.
        transport = typing.cast(asyncio.Transport, transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # Kafka's socket.send.buffer.bytes and socket.receive.buffer.bytes, on each connection it accepts.
            if self._host.send_buffer_bytes != -1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._host.send_buffer_bytes)
            if self._host.receive_buffer_bytes != -1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._host.receive_buffer_bytes)
        peername = transport.get_extra_info("peername") or ("?", 0)
        make_state = self._host.connection_state
        state = make_state() if make_state is not None else None
        lift = self._lift_request_limit if self._host.unauthenticated_max_request_bytes is not None else None
        ssl_object = transport.get_extra_info("ssl_object")
        certificate = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        self.peer = Peer(str(peername[0]), int(peername[1]), self._host.listener_name, state, lift,
                         certificate=certificate or None, mute=self._mute)
        self._seen = self._opened = asyncio.get_running_loop().time()
        self._host.connection_opened(self)
        logger.debug("connection from %s", self.peer)
        self._replay_answered()
        self.responder = asyncio.get_running_loop().create_task(self._respond())

    def _replay_answered(self) -> None:
        """The requests answered before the listener served go to the dispatcher as if they arrived now (the
        state they set, such as the client's software name, and their metrics), their answers dropped: the client
        has them."""
        if not self._answered:
            return
        if self._host.unauthenticated_max_request_bytes is None:
            self._set_up = True  # it sent a whole request
        for frame in self._answered:
            task = asyncio.ensure_future(self._dispatcher.dispatch(frame, self.peer))
            self._replays.add(task)
            task.add_done_callback(self._replayed)

    def _replayed(self, task: asyncio.Task[Response | None]) -> None:
        self._replays.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.debug("a request answered before the listener served, seen again, failed on %s: %s", self.peer,
                         task.exception())

    def _lift_request_limit(self) -> None:
        self._set_up = True
        self._frames.max_frame_bytes = self._host.max_request_bytes
        self._frames.limit_key = self._host.max_request_bytes_key

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._active = True
        if self._stop_reading:
            return
        frames = self._frames.buffer_updated(nbytes)
        if frames:
            self._completed = True
            reserved = self._frames.take_reserved()
            if self._host.unauthenticated_max_request_bytes is None:
                self._set_up = True
            for frame in frames:
                if not self._muting.hold(frame):
                    self._dispatch(frame)
                    if not reserved and self._pool is not None:
                        self._count_in_pool(self._pool, len(frame))
            if reserved and self._pool is not None:
                # Only a large frame reserves, and it comes alone: held until its request is answered (a frame
                # a mute holds gives its bytes back now; held frames are bounded per connection).
                task = self._pending[-1] if self._pending and not self._muting.held else None
                if task is None:
                    self._pool.release(reserved)
                else:
                    pool = self._pool
                    task.add_done_callback(lambda _: pool.release(reserved))
        self._release()
        if self._frames.error is not None:
            logger.warning(
                "closing connection from %s: %s", self.peer, untrusted(str(self._frames.error), 4 * LOG_TEXT_MAX)
            )
            self._stop()
        elif (self._pool is not None and not self._pool_wait
              and (self._frames.waiting is not None or self._pool.exhausted)):
            self._pool_wait = True
            self._pool.wait(self._pool_granted)
            self._pace()

    def _count_in_pool(self, pool: MemoryPool, size: int) -> None:
        """A small frame just dispatched holds its bytes in the node's pool until its request is answered (a frame
        a mute holds is bounded per connection instead, and counted when dispatched)."""
        pool.take(size)
        self._pending[-1].add_done_callback(lambda _: pool.release(size))

    def _pool_granted(self) -> bool:
        """The memory pool released bytes: read on if the waiting frame now fits, or if the pool is no longer
        exhausted (True: no longer waiting)."""
        if self._lost:
            granted = True
        elif self._frames.waiting is not None:
            granted = self._frames.retry()
        else:
            granted = self._pool is None or not self._pool.exhausted
        if granted:
            self._pool_wait = False
            self._pace()
        return granted

    def eof_received(self) -> bool:
        self._stop()
        # Keep the transport open: the responder still writes what it owes, then closes it. A TLS transport closes
        # itself at the peer's EOF whatever this returns (and asyncio warns when it is True).
        return self._host.ssl_context is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self.release_slot()  # at once: the responder may still be awaiting a handler before its finally runs
        self._muting.cancel()
        if self._pool is not None:
            if self._pool_wait:
                self._pool.cancel(self._pool_granted)
            self._pool.release(self._frames.abandon())
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
        limit = self._host.max_in_flight
        wanted = (not self._muting.muted and not self._pool_wait and len(self._pending) < limit
                  and self._muting.held < limit)
        if not wanted and not self._reading_paused:
            self._reading_paused = True
            self._transport.pause_reading()
        elif wanted and self._reading_paused:
            self._reading_paused = False
            self._transport.resume_reading()

    def _mute(self, seconds: float) -> None:
        """:attr:`Peer.mute`: a connection that reads no more has nothing left to mute."""
        if self._stop_reading:
            return
        if self._muting.mute(seconds):
            self._pace()

    def _unmuted(self) -> None:
        self._release()
        self._pace()

    def _release(self) -> None:
        """Once muted: the next waiting request, once the one before it has been answered and no mute holds.

        Held requests are still released after reading stopped (EOF, a bad frame): they came before it and are owed
        an answer; only a lost connection, which no answer can reach, drops them."""
        if self._lost:
            return
        frame = self._muting.next_request(answered=not self._pending)
        if frame is not None:
            self._dispatch(frame)
            if self._pool is not None:
                self._count_in_pool(self._pool, len(frame))

    def _stop(self) -> None:
        """No more requests are read; the responder answers those already dispatched, then closes."""
        self._stop_reading = True
        self._wakeup.set()

    def expire_if_idle(
        self, now: float, idle_s: float | None, setup_s: float | None = None, frame_s: float | None = None
    ) -> None:
        """Closes the connection when it has neither read nor written since ``idle_s`` before ``now`` (loop time)
        and owes no answer (Kafka's idle expiry; a request still being handled or held, a mute the broker put on
        it, or a frame waiting for the memory pool is activity: the client is waiting on the broker), when it
        is not set up ``setup_s`` after it was made (``fjord.connections.setup.max.ms``: however it trickles
        bytes, a client that has not authenticated or sent one whole request does not keep a connection), or when
        one request frame has been half received for ``frame_s`` (``connections.max.idle.ms`` too): a client
        trickling a byte now and then is never idle, yet must not hold its buffers and its memory-pool
        reservation for ever. The time only counts while the connection is read (not muted, paused or waiting
        for the pool, which the broker chose); the sweep sees it, so the bound is met within two sweeps."""
        if self._stop_reading:
            return
        if setup_s is not None and not self._set_up and now - self._opened >= setup_s:
            logger.warning("closing connection from %s: not set up within fjord.connections.setup.max.ms (%.0f ms)",
                           self.peer, setup_s * 1000)
        elif frame_s is not None and self._frame_overdue(now, frame_s):
            logger.warning("closing connection from %s: a request half received for longer than "
                           "connections.max.idle.ms (%.0f ms)", self.peer, frame_s * 1000)
        elif self._active or self._pending or self._muting.waiting_on_broker or self._pool_wait:
            self._active = False
            self._seen = now
            return
        elif idle_s is None or now - self._seen < idle_s:
            self._frames.trim()  # quiet since the last sweep: give back a buffer grown for a burst
            return
        else:
            logger.debug("closing connection from %s: idle for longer than connections.max.idle.ms (%.0f ms)",
                         self.peer, idle_s * 1000)
        self._stop()
        if self._transport is not None:
            self._transport.close()

    def _frame_overdue(self, now: float, frame_s: float) -> bool:
        """Whether the frame half received now is the one the sweep first saw ``frame_s`` or more ago."""
        if not self._frames.partial or self._reading_paused or self._pool_wait:
            self._partial_since = None
        elif self._completed or self._partial_since is None:
            self._partial_since = now  # a frame begun since the last sweep
        elif now - self._partial_since >= frame_s:
            return True
        self._completed = False
        return False

    # -- the connection gate -----------------------------------------------------------------------------------

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
        if slot is not None:
            self._host.return_slot(slot)

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
                    if self._stop_reading and (not self._muting.held or self._lost):
                        return  # held requests still owed an answer wait for their unmute (``_release``)
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                task = self._pending[0]
                try:
                    data = await task
                except ProtocolError as exc:
                    logger.warning("closing connection from %s: %s", self.peer, untrusted(str(exc), 4 * LOG_TEXT_MAX))
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
            self._host.connection_closed(self)
            # The dispatcher's state for this connection goes with it (requests still running keep their own
            # reference until they finish); the transport may hold this protocol object for a while longer.
            self.peer = replace(self.peer, state=None)
            logger.debug("connection from %s closed", self.peer)
