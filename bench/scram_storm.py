"""A storm of new SCRAM connections, for the security scenario of ``bench/broker.py`` (issue 13, "Performance").

Each connection does what a Kafka client does before its first real request: ApiVersions, SaslHandshake, the two
SaslAuthenticate round trips of SCRAM (RFC 5802), then closes. The client side is written here on asyncio rather
than with librdkafka so that 1,000 connections cost the 2-core machine little besides the broker's own work (a
librdkafka client per connection would spend more CPU starting its threads than the broker spends authenticating).
The SCRAM exchange is the product's own client (``wire.sasl.client.ScramClient``, as brokers authenticate to each
other); its PBKDF2 is computed once per (salt, iterations) through its ``salted_password`` hook, as a client
reconnecting with one password could; the broker does its full per-exchange work every time (it keeps only
StoredKey/ServerKey, never the password), which is what this measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from wire import codec, schema
from wire.api_versions import API_VERSIONS_KEY, SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY
from wire.sasl import SaslAuthenticationError
from wire.sasl.client import ScramClient
from wire.sasl.scram import MECHANISMS, ScramMechanism

_LENGTH = struct.Struct(">i")


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
        self._salted: dict[tuple[bytes, int], bytes] = {}

    def _salted_password(self, salt: bytes, iterations: int) -> bytes:
        salted = self._salted.get((salt, iterations))
        if salted is None:
            salted = self._salted[(salt, iterations)] = self.mechanism.salted_password(self.password, salt, iterations)
        return salted

    async def _authenticate(self) -> None:
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=self.tls, server_hostname="localhost" if self.tls else None
        )
        try:
            conn = _Connection(reader, writer)
            await conn.request(schema.build(codec.request_class(API_VERSIONS_KEY, 3), client_software_name="bench",
                                           client_software_version="1"))
            shake = await conn.request(schema.build(codec.request_class(SASL_HANDSHAKE_KEY, 1),
                                                   mechanism=self.mechanism.name))
            if shake.error_code:
                raise AuthenticationFailed(f"SaslHandshake answered error {shake.error_code}")
            client = ScramClient(self.mechanism, self.user, self.password, salted_password=self._salted_password)
            token: bytes | None = client.first()
            while token is not None:
                token = client.step(await self._step(conn, token))
            if not client.complete:
                raise AuthenticationFailed("the SCRAM exchange ended before the server was verified")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    @staticmethod
    async def _step(conn: _Connection, token: bytes) -> bytes:
        answer = await conn.request(schema.build(codec.request_class(SASL_AUTHENTICATE_KEY, 2), auth_bytes=token))
        if answer.error_code:
            raise AuthenticationFailed(f"SaslAuthenticate answered error {answer.error_code}: {answer.error_message}")
        return bytes(answer.auth_bytes)

    async def run(self, connections: int, concurrency: int, timeout_s: float) -> StormResult:
        result = StormResult(connections, 0.0)
        queue = iter(range(connections))

        async def worker() -> None:
            for _ in queue:
                began = time.perf_counter()
                try:
                    await asyncio.wait_for(self._authenticate(), timeout_s)
                except (OSError, TimeoutError, asyncio.IncompleteReadError, AuthenticationFailed,
                        SaslAuthenticationError, KeyError, ValueError) as exc:
                    result.failures += 1
                    result.last_failure = f"{type(exc).__name__}: {exc}"
                    continue
                result.latencies_ms.append((time.perf_counter() - began) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.seconds = time.perf_counter() - started
        return result
