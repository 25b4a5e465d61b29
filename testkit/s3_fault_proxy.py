"""An HTTP proxy in front of the test suite's S3 server that misbehaves as real S3 does, on demand.

Real S3 answers ``503 SlowDown`` and ``500 InternalError``, answers late, cuts a body off mid-way, and now and then
is away for tens of seconds. The brokers under test are separate processes, so the faults are injected on the wire
between them and the S3 server (moto): point a bucket URL's ``endpoint`` at :attr:`S3FaultProxy.endpoint` and switch
the faults from the test while the brokers run::

    with S3FaultProxy(s3_server.endpoint) as proxy:
        proxy.faults.slow_down = 0.5          # half the requests answered 503 SlowDown
        proxy.outage(15.0, mode="refuse")      # connections refused for 15 s
        proxy.faults.reset_mid_body = 1.0      # every response body cut off half-way
        proxy.outage_at(r"^GET /[^/]+/wal/", 6.0)  # the outage begins with the first request matching this
        proxy.refuse_writes()                  # reads answered, every write 500 InternalError

An outage armed with :meth:`S3FaultProxy.outage_at` lands at a chosen step of what the brokers do (a WAL failover's
first read, say) however long they take to get there, which a test cannot time from outside.

The proxy runs its own event loop on a thread, so synchronous and asyncio tests use it alike; the fault settings
are plain attributes read at each request. Every request is forwarded on a fresh upstream connection with
``Connection: close`` and the response is read whole, then sent back to the client with its length, so the
client's keep-alive connection and the upstream server's framing never depend on each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal
from urllib.parse import urlsplit

OutageMode = Literal["refuse", "blackhole"]

#: The methods that write to S3 (PutObject and the multipart calls, DeleteObject, DeleteObjects' POST).
WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})

_ERRORS = {
    "SlowDown": (503, "Service Unavailable", "Please reduce your request rate."),
    "InternalError": (500, "Internal Server Error", "We encountered an internal error. Please try again."),
}


@dataclass
class Faults:
    """What the proxy does to each request; probabilities are in 0..1 and are drawn per request."""

    slow_down: float = 0.0  # answered 503 SlowDown without reaching S3
    internal_error: float = 0.0  # answered 500 InternalError without reaching S3
    delay: float = 0.0  # probability of holding the request before forwarding it ...
    delay_max_s: float = 0.4  # ... for a uniform time up to this
    reset_mid_body: float = 0.0  # response headers and half the body sent, then the connection reset
    only_methods: frozenset[str] = field(default_factory=frozenset)  # empty: every method


@dataclass
class ProxyStats:
    requests: int = 0
    #: GET requests answered (forwarded or refused with a fault): reads that reached "S3".
    gets: int = 0
    forwarded: int = 0
    slow_downs: int = 0
    internal_errors: int = 0
    delays: int = 0
    resets: int = 0
    refused: int = 0
    black_holed: int = 0


class S3FaultProxy:
    """A fault-injecting HTTP proxy bound to 127.0.0.1 on an ephemeral port (see the module docstring)."""

    def __init__(self, upstream: str, *, seed: int | None = None) -> None:
        parts = urlsplit(upstream)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"upstream {upstream!r} must be http://host:port")
        self._upstream = (parts.hostname, parts.port)
        self.faults = Faults()
        self.stats = ProxyStats()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._outage_until = 0.0
        self._outage_mode: OutageMode = "refuse"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="s3-fault-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._port = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._reopen: asyncio.TimerHandle | None = None
        self._armed: tuple[re.Pattern[bytes], float, OutageMode] | None = None
        self.outage_started = threading.Event()
        """Set when an outage armed by :meth:`outage_at` began."""

    # ---------------------------------------------------------------- control (any thread)

    def start(self) -> S3FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> S3FaultProxy:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def clear(self) -> None:
        """No faults from now on (an outage under way ends too)."""
        self.faults = Faults()
        self.end_outage()

    def refuse_writes(self) -> None:
        """S3 answers reads but refuses every write with ``500 InternalError`` (a bucket whose writes fail while
        its reads still work: a write quota, a policy or a replica that only serves reads), until :meth:`clear`."""
        self.faults = Faults(internal_error=1.0, only_methods=WRITE_METHODS)

    def outage(self, seconds: float, mode: OutageMode = "refuse") -> None:
        """S3 goes away for ``seconds`` from now: ``refuse`` closes the listening socket (new connections are
        refused) and resets open ones; ``blackhole`` accepts connections and requests but never answers until the
        outage ends, when they are closed unanswered."""
        self._outage_mode = mode
        self._outage_until = time.monotonic() + seconds
        asyncio.run_coroutine_threadsafe(self._begin_outage(seconds, mode), self._loop).result(10)

    def outage_at(self, request_line: str, seconds: float, mode: OutageMode = "refuse") -> None:
        """Arms an outage of ``seconds`` that begins with the first request whose request line (``GET /bucket/key``,
        query included) matches the regular expression ``request_line``; that request meets the outage too.
        :attr:`outage_started` is set when it begins."""
        self.outage_started.clear()
        self._armed = (re.compile(request_line.encode()), seconds, mode)

    def end_outage(self) -> None:
        self._armed = None
        self._outage_until = 0.0
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    @property
    def in_outage(self) -> bool:
        return time.monotonic() < self._outage_until

    # ---------------------------------------------------------------- the event loop's side

    async def _listen(self) -> None:
        if self._reopen is not None:
            self._reopen.cancel()
            self._reopen = None
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self._port, reuse_address=True)
        self._port = self._server.sockets[0].getsockname()[1]

    async def _begin_outage(self, seconds: float, mode: OutageMode) -> None:
        if mode == "refuse":
            if self._server is not None:
                self._server.close()
                self._server = None
            for writer in list(self._writers):
                _reset(writer)
            if self._reopen is not None:
                self._reopen.cancel()
            self._reopen = self._loop.call_later(seconds, lambda: self._loop.create_task(self._listen()))

    async def _shutdown(self) -> None:
        if self._reopen is not None:
            self._reopen.cancel()
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            _reset(writer)

    def _draw(self, probability: float) -> bool:
        with self._lock:
            return probability > 0 and self._random.random() < probability

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                request = await _read_request(reader, writer)
                if request is None:
                    return
                if not await self._answer(request, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _answer(self, request: _Request, writer: asyncio.StreamWriter) -> bool:
        """Answers one request; False when the connection is done with."""
        self.stats.requests += 1
        armed = self._armed
        if armed is not None and armed[0].search(request.line):
            self._armed = None
            _, seconds, mode = armed
            self._outage_mode = mode
            self._outage_until = time.monotonic() + seconds
            await self._begin_outage(seconds, mode)
            self.outage_started.set()
        if self.in_outage:
            if self._outage_mode == "blackhole":
                self.stats.black_holed += 1
                await asyncio.sleep(max(0.0, self._outage_until - time.monotonic()))
            else:
                self.stats.refused += 1
                _reset(writer)
            return False
        if request.method == "GET":
            self.stats.gets += 1
        faults = self.faults
        applies = not faults.only_methods or request.method in faults.only_methods
        if applies and self._draw(faults.slow_down):
            self.stats.slow_downs += 1
            await _send_error(writer, "SlowDown", request)
            return True
        if applies and self._draw(faults.internal_error):
            self.stats.internal_errors += 1
            await _send_error(writer, "InternalError", request)
            return True
        if applies and self._draw(faults.delay):
            self.stats.delays += 1
            with self._lock:
                pause = self._random.uniform(0, faults.delay_max_s)
            await asyncio.sleep(pause)
        status_line, headers, body = await self._forward(request)
        self.stats.forwarded += 1
        head = _encode_head(status_line, headers, None if request.method == "HEAD" else len(body))
        if applies and body and request.method != "HEAD" and self._draw(faults.reset_mid_body):
            self.stats.resets += 1
            writer.write(head + body[: len(body) // 2])
            await writer.drain()
            _reset(writer)
            return False
        writer.write(head if request.method == "HEAD" else head + body)
        await writer.drain()
        return True

    async def _forward(self, request: _Request) -> tuple[bytes, list[tuple[str, str]], bytes]:
        reader, writer = await asyncio.open_connection(*self._upstream)
        try:
            headers = [(k, v) for k, v in request.headers if k.lower() not in _HOP_BY_HOP]
            headers.append(("Content-Length", str(len(request.body))))
            headers.append(("Connection", "close"))
            lines = [request.line] + [f"{k}: {v}".encode("latin-1") for k, v in headers]
            writer.write(b"\r\n".join(lines) + b"\r\n\r\n" + request.body)
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        head, _, rest = raw.partition(b"\r\n\r\n")
        status_line, *header_lines = head.split(b"\r\n")
        parsed = [_split_header(line) for line in header_lines if line]
        names = {k.lower(): v for k, v in parsed}
        if request.method == "HEAD":
            return status_line, [(k, v) for k, v in parsed if k.lower() not in ("connection", "keep-alive")], b""
        if names.get("transfer-encoding", "").lower() == "chunked":
            rest = _dechunk(rest)
        elif "content-length" in names:
            rest = rest[: int(names["content-length"])]
        kept = [(k, v) for k, v in parsed if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length"]
        return status_line, kept, rest


_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "expect", "proxy-connection", "te", "upgrade"}
)


@dataclass
class _Request:
    method: str
    line: bytes
    headers: list[tuple[str, str]]
    body: bytes


async def _read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> _Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    line, *header_lines = head[:-4].split(b"\r\n")
    # As a forward proxy (a broker given HTTP_PROXY, its endpoint unchanged) the target is absolute: S3 gets its path.
    line = re.sub(rb"^(\S+) https?://[^/\s]+", rb"\1 ", line)
    headers = [_split_header(h) for h in header_lines if h]
    names = {k.lower(): v for k, v in headers}
    method = line.split(b" ", 1)[0].decode("ascii")
    if names.get("expect", "").lower() == "100-continue":
        # botocore waits for this before sending a PUT's body (the proxy decides about faults afterwards).
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    if names.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    else:
        body = await reader.readexactly(int(names.get("content-length", "0")))
    return _Request(method, line, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailers
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readexactly(2)


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    pos = 0
    while True:
        end = data.index(b"\r\n", pos)
        size = int(data[pos:end].split(b";", 1)[0].strip(), 16)
        if size == 0:
            return bytes(out)
        out += data[end + 2 : end + 2 + size]
        pos = end + 2 + size + 2


def _split_header(line: bytes) -> tuple[str, str]:
    name, _, value = line.decode("latin-1").partition(":")
    return name.strip(), value.strip()


def _encode_head(status_line: bytes, headers: list[tuple[str, str]], length: int | None) -> bytes:
    lines = [status_line] + [f"{k}: {v}".encode("latin-1") for k, v in headers]
    if length is not None:
        lines.append(f"Content-Length: {length}".encode("ascii"))
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _send_error(writer: asyncio.StreamWriter, code: str, request: _Request) -> None:
    """S3's error answer: the status, the XML body S3 sends, and a request id."""
    status, reason, message = _ERRORS[code]
    request_id = uuid.uuid4().hex[:16].upper()
    resource = request.line.split(b" ")[1].decode("latin-1").split("?", 1)[0]
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message><Resource>{resource}</Resource>"
        f"<RequestId>{request_id}</RequestId></Error>"
    ).encode()
    headers = [("Content-Type", "application/xml"), ("x-amz-request-id", request_id), ("Server", "AmazonS3")]
    if code == "SlowDown":
        headers.append(("Retry-After", "1"))
    writer.write(
        _encode_head(
            f"HTTP/1.1 {status} {reason}".encode("ascii"), headers, None if request.method == "HEAD" else len(body)
        )
        + (b"" if request.method == "HEAD" else body)
    )
    await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Closes with an RST rather than a FIN: the peer sees 'connection reset', as with a dropped S3 front end."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
