"""A client connection to a controller's CONTROLLER listener: pipelined requests, responses matched in order.

Used by the Raft transport (voter to voter), by brokers talking to the quorum, and by tests and tools. One
connection carries any mix of Kafka-protocol (kio) requests and Fjord's own stream RPCs; the server answers them in
request order, so the oldest outstanding request owns the next response frame (its correlation id is checked).

On a SASL_PLAINTEXT or SASL_SSL CONTROLLER listener (``sasl``: ``ServerConfig.controller_client_sasl``) the
connection authenticates in :meth:`ControllerConnection.connect`, with the exchange the inter-broker client uses
(``wire.client.sasl_exchange``); a refusal raises ``SaslAuthenticationFailed`` (a ConnectionError, so callers back
off and retry as for an unreachable voter). When the server sets a session lifetime (``connections.max.reauth.ms``)
the next request after a random 85-95% of it re-authenticates in-band first, as Kafka's clients do; a connection
idle past the end is closed instead (the server would refuse it), and the caller reconnects. A re-authentication
that fails in any way (refused, unanswered within the request's timeout, cut off) closes the connection with a
warning naming the controller node, the mechanism and the user: a half-done exchange leaves the server mid-SASL,
so nothing else may use the connection, and ``connected`` turning false is what makes the callers reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from metadata.rpc.stream_codec import decode_stream_response, encode_stream_request
from metadata.rpc.stream_rpcs import StreamRequest, StreamResponse
from wire import codec
from wire.client import SaslAuthenticationFailed, sasl_exchange, session_deadlines
from wire.sasl.client import SaslCredentials
from wire.tls import ClientTls, current_context

logger = logging.getLogger(__name__)

_LENGTH = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class ConnectionClosedError(ConnectionError):
    """The connection failed or was closed before the response arrived; the request may or may not have run."""


class ControllerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "fjord",
        ssl_context: ClientTls | None = None,
        sasl: SaslCredentials | None = None,
        clock: Callable[[], float] = time.monotonic,
        node_id: int | None = None,
    ) -> None:
        """``ssl_context``: the CONTROLLER listener is SSL (``ServerConfig.controller_client_tls``); a callable
        is read at :meth:`connect`, so reloaded certificates reach new connections. ``sasl``: it is SASL
        (``ServerConfig.controller_client_sasl``): authenticate on connect. ``node_id``: the controller node at
        ``host``:``port``, when the caller knows it, for messages."""
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.ssl_context = ssl_context
        self.sasl = sasl
        self._clock = clock
        self._reauth_at: float | None = None  # when the next request re-authenticates first (None: never)
        self._expires_at: float | None = None  # when the server's session ends
        #: How many SASL exchanges succeeded on this connection (the first one and re-authentications).
        self.authentications = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: deque[tuple[int, asyncio.Future[bytes]]] = deque()
        self._reader_task: asyncio.Task[None] | None = None
        self._correlation = itertools.count(1)
        self._closed = False

    def __str__(self) -> str:
        node = f"node {self.node_id} at " if self.node_id is not None else ""
        return f"controller connection to {node}{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._closed

    async def connect(self, timeout: float = 5.0) -> None:
        context = current_context(self.ssl_context)
        async with asyncio.timeout(timeout):
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, ssl=context, server_hostname=self.host if context else None
            )
        self._reader_task = asyncio.create_task(self._read_loop(), name=f"controller-conn-{self.host}:{self.port}")
        if self.sasl is not None:
            try:
                async with asyncio.timeout(timeout):
                    await self._authenticate(self.sasl)
            except SaslAuthenticationFailed as exc:
                self._fail(str(exc))
                raise

    async def _authenticate(self, credentials: SaslCredentials) -> None:
        lifetime_ms = await sasl_exchange(self._request, credentials, str(self))
        self.authentications += 1
        self._expires_at, self._reauth_at = session_deadlines(self._clock(), lifetime_ms)

    async def _session_check(self, timeout: float) -> float:
        """Before a request: re-authenticate when due (within ``timeout``, the request's), or close a connection
        whose SASL session has ended. Returns what is left of ``timeout`` for the request itself, so the two never
        take longer than the caller allowed; ConnectionClosedError when the connection is closed for either
        reason."""
        credentials = self.sasl
        if credentials is None or self._closed:
            return timeout
        now = self._clock()
        if self._expires_at is not None and now >= self._expires_at:
            reason = f"{self}: the SASL session ended while the connection was idle"
            self._fail(reason)
            raise ConnectionClosedError(reason)
        if self._reauth_at is not None and now >= self._reauth_at:
            self._reauth_at = None  # one re-authentication at a time; concurrent requests go on meanwhile
            started = time.monotonic()
            try:
                async with asyncio.timeout(timeout):
                    await self._authenticate(credentials)
            except asyncio.CancelledError:
                # The request was cancelled (a shutdown, a caller's own timeout): not a failure worth a warning, but
                # the exchange is as half-done as a failed one, so the connection cannot be used again.
                reason = f"{self}: re-authentication ({credentials.mechanism}, user {credentials.user}) cancelled"
                logger.debug("%s; closing the connection", reason)
                self._fail(reason)
                raise
            except Exception as exc:
                if isinstance(exc, SaslAuthenticationFailed):
                    reason = str(exc)  # names this connection, the mechanism and the user
                else:
                    problem = "the voter did not answer in time" if isinstance(exc, TimeoutError) else repr(exc)
                    reason = f"{self} ({credentials.mechanism}, user {credentials.user}): {problem}"
                logger.warning("SASL re-authentication failed, closing the connection: %s", reason)
                self._fail(reason)
                raise ConnectionClosedError(reason) from None
            return max(0.0, timeout - (time.monotonic() - started))
        return timeout

    def next_correlation_id(self) -> int:
        return next(self._correlation) & 0x7FFFFFFF

    async def send_frame(self, frame: bytes, correlation_id: int) -> bytes:
        """Writes a length-prefixed request frame and returns its response frame (without the length)."""
        if self._writer is None or self._closed:
            raise ConnectionClosedError(f"{self} is not open")
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending.append((correlation_id, future))
        try:
            self._writer.write(frame)
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self._fail(f"{self}: write failed: {exc}")
        return await future

    async def request(self, entity: Any, *, timeout: float = 10.0, correlation_id: int | None = None) -> Any:
        """Sends a kio request entity; returns the decoded kio response entity."""
        timeout = await self._session_check(timeout)
        return await self._request(entity, timeout=timeout, correlation_id=correlation_id)

    async def _request(self, entity: Any, *, timeout: float = 10.0, correlation_id: int | None = None) -> Any:
        cid = self.next_correlation_id() if correlation_id is None else correlation_id
        frame = codec.encode_request(entity, cid, client_id=self.client_id)
        async with asyncio.timeout(timeout):
            response = await self.send_frame(frame, cid)
        _, body = codec.decode_response(type(entity).__api_key__, type(entity).__version__, response)
        return body

    async def stream_request(self, request: StreamRequest, *, timeout: float = 10.0) -> StreamResponse:
        """Sends one of Fjord's own RPCs; returns its response (errors are not raised here)."""
        timeout = await self._session_check(timeout)
        cid = self.next_correlation_id()
        frame = encode_stream_request(request, cid, client_id=self.client_id)
        async with asyncio.timeout(timeout):
            raw = await self.send_frame(frame, cid)
        _, response = decode_stream_response(type(request), raw)
        return response

    async def close(self) -> None:
        self._fail(f"{self} closed")
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader_task
            self._reader_task = None

    def _fail(self, reason: str) -> None:
        self._closed = True
        while self._pending:
            _, future = self._pending.popleft()
            if not future.done():
                future.set_exception(ConnectionClosedError(reason))
        if self._writer is not None:
            self._writer.close()

    async def _read_loop(self) -> None:
        assert self._reader is not None
        reason = f"{self}: closed by the server"
        try:
            while True:
                head = await self._reader.readexactly(_LENGTH.size)
                (length,) = _LENGTH.unpack(head)
                if not 4 <= length <= MAX_RESPONSE_BYTES:
                    reason = f"{self}: response frame of {length} bytes"
                    break
                frame = await self._reader.readexactly(length)
                (correlation_id,) = _LENGTH.unpack_from(frame, 0)
                if not self._pending:
                    reason = f"{self}: response (correlation id {correlation_id}) to no request"
                    break
                expected, future = self._pending.popleft()
                if expected != correlation_id:
                    reason = f"{self}: response correlation id {correlation_id}, expected {expected}"
                    if not future.done():
                        future.set_exception(ConnectionClosedError(reason))
                    break
                if not future.done():
                    future.set_result(frame)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            reason = f"{self}: {type(exc).__name__}: {exc}"
        logger.debug("%s", reason)
        self._fail(reason)
