"""A storm of new SCRAM connections, for the security scenario of ``bench/broker.py`` (issue 13, "Performance").

Each connection does what a Kafka client does before its first real request: ApiVersions, SaslHandshake, the two
SaslAuthenticate round trips of SCRAM (RFC 5802), then closes. The client side is written here on asyncio rather
than with librdkafka so that 1,000 connections cost the 2-core machine little besides the broker's own work (a
librdkafka client per connection would spend more CPU starting its threads than the broker spends authenticating).
The client's PBKDF2 is computed once per (salt, iterations), as a client reconnecting with one password could; the
broker does its full per-exchange work every time (it keeps only StoredKey/ServerKey, never the password).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import ssl
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from wire import codec
from wire.sasl.scram import MECHANISMS, ScramMechanism

_LENGTH = struct.Struct(">i")
_API_VERSIONS, _SASL_HANDSHAKE, _SASL_AUTHENTICATE = 18, 17, 36


class AuthenticationFailed(Exception):
    """The broker refused an exchange or answered something a SCRAM client cannot accept."""


@dataclass
class StormResult:
    connections: int
    seconds: float
    #: Per-connection time from connect to the verified server-final message, in milliseconds.
    latencies_ms: list[float] = field(default_factory=list)
    failures: int = 0
    last_failure: str = ""


@dataclass
class _Keys:
    """What the client derives from the password for one salt and iteration count."""

    client_key: bytes
    stored_key: bytes
    server_key: bytes


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0

    async def request(self, request: Any) -> Any:
        self.correlation += 1
        self.writer.write(codec.encode_request(request, self.correlation, "fjord-bench-storm"))
        await self.writer.drain()
        (size,) = _LENGTH.unpack(await self.reader.readexactly(_LENGTH.size))
        frame = await self.reader.readexactly(size)
        cls = type(request)
        _, body = codec.decode_response(cls.__api_key__, cls.__version__, frame)
        return body


class ScramStorm:
    """Opens ``connections`` authenticated connections, ``concurrency`` at a time, to one SASL listener."""

    def __init__(self, host: str, port: int, mechanism: str, *, user: str, password: str,
                 tls: ssl.SSLContext | None) -> None:
        self.host, self.port, self.tls = host, port, tls
        self.mechanism: ScramMechanism = MECHANISMS[mechanism]
        self.user, self.password = user, password
        self._keys: dict[tuple[bytes, int], _Keys] = {}

    def _derive(self, salt: bytes, iterations: int) -> _Keys:
        keys = self._keys.get((salt, iterations))
        if keys is None:
            m = self.mechanism
            salted = m.salted_password(self.password, salt, iterations)
            client_key = m.hmac(salted, b"Client Key")
            keys = _Keys(client_key, m.hash(client_key), m.hmac(salted, b"Server Key"))
            self._keys[(salt, iterations)] = keys
        return keys

    async def _authenticate(self) -> None:
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=self.tls, server_hostname="localhost" if self.tls else None
        )
        try:
            conn = _Connection(reader, writer)
            await conn.request(codec.build(codec.request_class(_API_VERSIONS, 3), client_software_name="bench",
                                           client_software_version="1"))
            shake = await conn.request(codec.build(codec.request_class(_SASL_HANDSHAKE, 1),
                                                   mechanism=self.mechanism.name))
            if shake.error_code:
                raise AuthenticationFailed(f"SaslHandshake answered error {shake.error_code}")
            client_nonce = base64.b64encode(secrets.token_bytes(18)).decode()
            first_bare = f"n={self.user},r={client_nonce}"
            server_first = await self._step(conn, b"n,," + first_bare.encode())
            fields = dict(part.split("=", 1) for part in server_first.split(","))
            nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
            if not nonce.startswith(client_nonce):
                raise AuthenticationFailed("server nonce does not extend the client's")
            keys = self._derive(salt, iterations)
            without_proof = f"c=biws,r={nonce}"
            auth_message = f"{first_bare},{server_first},{without_proof}".encode()
            signature = self.mechanism.hmac(keys.stored_key, auth_message)
            proof = bytes(a ^ b for a, b in zip(keys.client_key, signature, strict=True))
            final = f"{without_proof},p={base64.b64encode(proof).decode()}"
            server_final = await self._step(conn, final.encode())
            expected = base64.b64encode(self.mechanism.hmac(keys.server_key, auth_message)).decode()
            if server_final != f"v={expected}":
                raise AuthenticationFailed(f"server signature did not verify: {server_final[:40]!r}")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _step(conn: _Connection, token: bytes) -> str:
        answer = await conn.request(codec.build(codec.request_class(_SASL_AUTHENTICATE, 2), auth_bytes=token))
        if answer.error_code:
            raise AuthenticationFailed(f"SaslAuthenticate answered error {answer.error_code}: {answer.error_message}")
        return bytes(answer.auth_bytes).decode()

    async def run(self, connections: int, concurrency: int, timeout_s: float) -> StormResult:
        result = StormResult(connections, 0.0)
        queue = iter(range(connections))

        async def worker() -> None:
            for _ in queue:
                began = time.perf_counter()
                try:
                    await asyncio.wait_for(self._authenticate(), timeout_s)
                except (OSError, TimeoutError, asyncio.IncompleteReadError, AuthenticationFailed, KeyError,
                        ValueError) as exc:
                    result.failures += 1
                    result.last_failure = f"{type(exc).__name__}: {exc}"
                    continue
                result.latencies_ms.append((time.perf_counter() - began) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.seconds = time.perf_counter() - started
        return result
