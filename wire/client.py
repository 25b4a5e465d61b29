"""A small asyncio Kafka-protocol client connection, for the few requests one broker sends another.

The transaction coordinator sends WriteTxnMarkers to the leaders of a transaction's partitions and the produce
path asks a transaction coordinator whether a partition is in a transaction (AddPartitionsToTxn ``verify_only``).
Both are plain request/response exchanges with a known peer, so this is deliberately minimal: one connection per
peer, opened on first use and again after any failure, one request in flight at a time, every exchange bounded by
a timeout. Callers retry; a failed exchange closes the connection so that the next one starts clean (a response
that arrives late can never be mistaken for the answer to a later request).

The inter-broker listener may be secured as Kafka's ``security.inter.broker.protocol`` allows: with
``ssl_context`` the connection speaks TLS (checking the peer's host name when the context does, per
``ssl.endpoint.identification.algorithm``), and with ``sasl`` it authenticates right after connecting, as a Kafka
client does: SaslHandshake v1 names the mechanism, SaslAuthenticate v2 carries the tokens of a
:mod:`wire.sasl.client` state machine. When the server sets a session lifetime (``connections.max.reauth.ms``,
KIP-368) the connection re-authenticates in-band before the lifetime ends, at a random 85-95% of it as Kafka's
clients do, or reconnects when it sat idle past the end. A failed authentication raises
:class:`SaslAuthenticationFailed` (no secret in its message) and closes the connection.

A connection kept for ever between rare exchanges would meet the server's idle expiry (``connections.max.idle.ms``,
10 minutes by default): the server closes it and the next exchange fails. So, as Kafka's clients do (their own
``connections.max.idle.ms``, 9 minutes, below the server's), a connection idle past ``idle_timeout`` is dropped
before the next exchange, which connects afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from wire import codec, schema
from wire.api_versions import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY
from wire.sasl import SaslAuthenticationError
from wire.sasl.client import SaslCredentials
from wire.tls import ClientTls, current_context

_LENGTH = struct.Struct(">i")
#: A broker's answer to the requests we send is small; anything bigger is a broken or hostile peer.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 2
#: Kafka's clients re-authenticate at a random point in this share of the session lifetime (KIP-368).
REAUTH_WINDOW = (0.85, 0.95)
#: A SASL exchange that has not finished after this many tokens is a broken peer.
MAX_SASL_STEPS = 8
#: Kafka's client default of ``connections.max.idle.ms`` (9 minutes): under the brokers' 10, so the client lets go
#: of a quiet connection before the server expires it under it.
DEFAULT_IDLE_TIMEOUT_S = 540.0


class SaslAuthenticationFailed(ConnectionError):
    """The peer refused this node's credentials (or could not prove its own, for SCRAM); the message names the
    endpoint, mechanism and user, never a password or token."""


class SaslNotEnabled(SaslAuthenticationFailed):
    """The listener does not speak SASL: its SaslHandshake answer is ILLEGAL_SASL_STATE, as Kafka answers on a
    PLAINTEXT or SSL listener. Apart from the other refusals so that a caller who only guessed the listener's
    protocol (the metadata shell reaching the controllers the brokers name) can go on without SASL."""


async def sasl_exchange(send: Callable[[Any], Awaitable[Any]], credentials: SaslCredentials, where: str) -> int:
    """Authenticates a connection as a Kafka client does: SaslHandshake v1 names the mechanism, SaslAuthenticate v2
    carries its tokens until the exchange is complete. ``send`` sends one request and returns its response (this
    module's connection, or a controller connection). Returns the session lifetime the server set in ms (0: none);
    :class:`SaslAuthenticationFailed` naming ``where``, the mechanism and the user (never a secret)."""
    where = f"{where} ({credentials.mechanism}, user {credentials.user})"
    shake = await send(
        schema.build(codec.request_class(SASL_HANDSHAKE_KEY, SASL_HANDSHAKE_VERSION), mechanism=credentials.mechanism)
    )
    if int(shake.error_code) == ErrorCode.illegal_sasl_state.value:
        raise SaslNotEnabled(f"{where}: the listener does not speak SASL (SaslHandshake answered ILLEGAL_SASL_STATE)")
    if shake.error_code:
        raise SaslAuthenticationFailed(
            f"{where}: SaslHandshake answered error {int(shake.error_code)} "
            f"(enabled mechanisms: {', '.join(shake.mechanisms)})"
        )
    client = credentials.client()
    token: bytes | None = client.first()
    lifetime_ms = 0
    try:
        for _ in range(MAX_SASL_STEPS):
            if token is None:
                break
            answer = await send(
                schema.build(codec.request_class(SASL_AUTHENTICATE_KEY, SASL_AUTHENTICATE_VERSION), auth_bytes=token)
            )
            if answer.error_code:
                raise SaslAuthenticationFailed(
                    f"{where}: SaslAuthenticate answered error {int(answer.error_code)}: {answer.error_message}"
                )
            lifetime_ms = int(answer.session_lifetime.total_seconds() * 1000)
            token = client.step(bytes(answer.auth_bytes))
    except SaslAuthenticationError as exc:
        raise SaslAuthenticationFailed(f"{where}: {exc}") from None
    if not client.complete:
        raise SaslAuthenticationFailed(f"{where}: the exchange did not complete in {MAX_SASL_STEPS} steps")
    return lifetime_ms


def session_deadlines(now: float, lifetime_ms: int) -> tuple[float | None, float | None]:
    """(when the server's session ends, when to re-authenticate: a random 85-95% of the lifetime, KIP-368) for a
    session authenticated at ``now``; (None, None) when it does not expire."""
    if lifetime_ms <= 0:
        return None, None
    return now + lifetime_ms / 1000, now + lifetime_ms / 1000 * random.uniform(*REAUTH_WINDOW)


class ClientConnection:
    """A connection to one Kafka-protocol endpoint; :meth:`request` connects (again) when needed."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "fjord-broker",
        timeout: float = 30.0,
        ssl_context: ClientTls | None = None,
        sasl: SaslCredentials | None = None,
        clock: Callable[[], float] = time.monotonic,
        idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT_S,
    ) -> None:
        """``ssl_context``: speak TLS (SSL, SASL_SSL), with the context it gives at each connect when a callable
        (reloaded certificates reach reconnections); ``sasl``: authenticate (SASL_PLAINTEXT, SASL_SSL);
        ``idle_timeout``: seconds after its last exchange a connection is no longer used (None: kept for ever)."""
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.sasl = sasl
        self._clock = clock
        self.idle_timeout = idle_timeout
        self._last_used = 0.0  # clock time the last exchange ended
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._correlation = 0
        self._reauth_at: float | None = None  # when to re-authenticate in-band (None: the session does not expire)
        self._expires_at: float | None = None  # when the server's session ends
        #: How many SASL exchanges succeeded on this object (first authentications and re-authentications).
        self.authentications = 0

    def __repr__(self) -> str:
        return f"ClientConnection({self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def request(self, request: Any, timeout: float | None = None) -> Any:
        """Sends ``request`` (a kio request entity) and returns the decoded response of the same version.

        Raises ``ConnectionError`` (peer unreachable or gone, TLS failed, or :class:`SaslAuthenticationFailed`),
        ``TimeoutError``, or ``codec.ProtocolError`` for an
        undecodable answer; the connection is closed in every such case."""
        limit = self.timeout if timeout is None else timeout
        async with self._lock:
            try:
                # In this task (not Python 3.11's wait_for task), so that a caller cancelled twice cannot leave an
                # exchange running on the connection after it released the lock to the next request.
                async with asyncio.timeout(limit):
                    return await self._exchange(request)
            except TimeoutError:
                await self._close_locked()
                raise TimeoutError(f"{self.host}:{self.port} did not answer within {limit:.1f} s") from None
            except SaslAuthenticationFailed:
                await self._close_locked()
                raise
            except (OSError, asyncio.IncompleteReadError) as exc:
                await self._close_locked()
                raise ConnectionError(f"{self.host}:{self.port}: {exc}") from exc
            except BaseException:
                await self._close_locked()
                raise

    async def _exchange(self, request: Any) -> Any:
        now = self._clock()
        if self.connected and self._expires_at is not None and now >= self._expires_at:
            await self._close_locked()  # idle past the session's end: the server refuses it; start afresh
        elif self.connected and self.idle_timeout is not None and now - self._last_used >= self.idle_timeout:
            await self._close_locked()  # the server may have expired it meanwhile: start afresh
        if not self.connected:
            context = current_context(self.ssl_context)
            self._reader, self._writer = await asyncio.open_connection(
                self.host,
                self.port,
                ssl=context,
                server_hostname=self.host if context is not None else None,
            )
            if self.sasl is not None:
                await self._authenticate(self.sasl)
        elif self.sasl is not None and self._reauth_at is not None and now >= self._reauth_at:
            await self._authenticate(self.sasl)
        response = await self._send(request)
        self._last_used = self._clock()
        return response

    async def _authenticate(self, credentials: SaslCredentials) -> None:
        """SaslHandshake then SaslAuthenticate until the mechanism is complete; sets the re-authentication time."""
        lifetime_ms = await sasl_exchange(self._send, credentials, f"{self.host}:{self.port}")
        self.authentications += 1
        self._expires_at, self._reauth_at = session_deadlines(self._clock(), lifetime_ms)

    async def _send(self, request: Any) -> Any:
        assert self._reader is not None and self._writer is not None
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation_id = self._correlation
        self._writer.write(codec.encode_request(request, correlation_id, self.client_id))
        await self._writer.drain()
        (size,) = _LENGTH.unpack(await self._reader.readexactly(_LENGTH.size))
        if not 0 < size <= MAX_RESPONSE_BYTES:
            raise codec.ProtocolError(f"{self.host}:{self.port} sent a response frame of {size} bytes")
        frame = await self._reader.readexactly(size)
        cls = type(request)
        try:
            got, body = codec.decode_response(cls.__api_key__, cls.__version__, frame)
        except Exception as exc:
            raise codec.ProtocolError(f"{self.host}:{self.port}: undecodable response: {exc}") from exc
        if got != correlation_id:
            raise codec.ProtocolError(
                f"{self.host}:{self.port} answered correlation id {got} to request {correlation_id}"
            )
        return body

    async def close(self) -> None:
        async with self._lock:
            await self._close_locked()

    async def _close_locked(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        self._reauth_at = self._expires_at = None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
