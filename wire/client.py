"""A small asyncio Kafka-protocol client connection, for the few requests one broker sends another.

The transaction coordinator sends WriteTxnMarkers to the leaders of a transaction's partitions and the produce
path asks a transaction coordinator whether a partition is in a transaction (AddPartitionsToTxn ``verify_only``).
Both are plain request/response exchanges with a known peer, so this is deliberately minimal: one connection per
peer, opened on first use and again after any failure, one request in flight at a time, every exchange bounded by
a timeout. Callers retry; a failed exchange closes the connection so that the next one starts clean (a response
that arrives late can never be mistaken for the answer to a later request).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from wire import codec

_LENGTH = struct.Struct(">i")
#: A broker's answer to the requests we send is small; anything bigger is a broken or hostile peer.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class ClientConnection:
    """A connection to one Kafka-protocol endpoint; :meth:`request` connects (again) when needed."""

    def __init__(self, host: str, port: int, *, client_id: str = "fjord-broker", timeout: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()
        self._correlation = 0

    def __repr__(self) -> str:
        return f"ClientConnection({self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def request(self, request: Any, timeout: float | None = None) -> Any:
        """Sends ``request`` (a kio request entity) and returns the decoded response of the same version.

        Raises ``ConnectionError`` (peer unreachable or gone), ``TimeoutError``, or ``codec.ProtocolError`` for an
        undecodable answer; the connection is closed in every such case."""
        limit = self.timeout if timeout is None else timeout
        async with self._lock:
            try:
                return await asyncio.wait_for(self._exchange(request), limit)
            except TimeoutError:
                await self._close_locked()
                raise TimeoutError(f"{self.host}:{self.port} did not answer within {limit:.1f} s") from None
            except (OSError, asyncio.IncompleteReadError) as exc:
                await self._close_locked()
                raise ConnectionError(f"{self.host}:{self.port}: {exc}") from exc
            except BaseException:
                await self._close_locked()
                raise

    async def _exchange(self, request: Any) -> Any:
        if not self.connected:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
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
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
