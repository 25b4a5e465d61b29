"""ApiVersions answered while a broker starts, so that a client reconnecting to it is ready to send its next request
the moment the broker serves.

A client's first request on a connection is ApiVersions; until it is answered the connection is not usable, and
librdkafka (2.16) then sends nothing on it: the metadata its leader query wants waits for the next tick of that query
after the answer (about 0.3, 0.7 and 1.5 s after it lost the broker, then a second apart). A broker killed and
restarted answered the ApiVersions of a reconnecting producer when it served, about 0.8 s after the kill here, and
the producer asked for metadata on its next tick, 0.2-0.7 s later (bench/kill_acks.py). Answered at once, the
connection is up within milliseconds of the client connecting; the tick that comes during the start sends its
Metadata request, which the kernel keeps until the broker serves and reads it, and the answer goes out then.

The answer is the one the broker gives once it serves (``wire.api_versions.api_versions_answer``, from the same
table; tests/wire/test_early_answers.py checks they agree), except that the cluster's finalized features are not
known before the metadata log is replayed: they go out as KIP-584's "unknown" (epoch -1), which clients never
prefer to levels they know. Only ApiVersions is answered, and only on listeners without TLS (a TLS listener would
need its certificates loaded first); any other first request, and whatever follows an answered ApiVersions, stays
in the socket until the broker reads it. Once the broker serves, :meth:`EarlyAnswers.stop` hands it the accepted
connections with the requests answered on each, which its dispatcher then sees as it would have (the client's
software name for telemetry, the request metrics), minus the answer, already sent.

``answer`` is the protocol part, without I/O; :class:`EarlyAnswers` runs it on a thread of its own, as the node's
main thread imports its stacks meanwhile.
"""

from __future__ import annotations

import logging
import selectors
import socket
import struct
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from wire import codec
from wire.api_versions import (
    API_VERSIONS,
    API_VERSIONS_KEY,
    api_versions_answer,
    unsupported_version_answer,
    valid_client_software,
)

logger = logging.getLogger(__name__)

#: An ApiVersions request is about 70 bytes; a first frame larger than this is not read here.
MAX_EARLY_FRAME_BYTES: Final = 4096
#: ApiVersions answered on one connection at most (a client retries once after UNSUPPORTED_VERSION, KIP-511).
MAX_ANSWERS_PER_CONNECTION: Final = 4
#: Connections accepted before the broker serves at most, over all its listeners; beyond, the kernel's backlog
#: keeps them, as it keeps every connection without early answers. Each is a file descriptor the starting node
#: does not have for its own files, hence a few hundred only.
MAX_EARLY_CONNECTIONS: Final = 256
_SIZE = struct.Struct(">i")


def answer(frame: bytes) -> bytes | None:
    """The whole response frame (length first) to a request ``frame`` (without its length) if it is an ApiVersions
    request, as the broker answers it before it knows the cluster's finalized features; None for any other
    request or one that cannot be decoded (the broker reads it, and closes the connection as it does for any
    malformed request)."""
    try:
        prefix = codec.read_prefix(frame)
    except codec.ProtocolError:
        return None
    if prefix.api_key != API_VERSIONS_KEY:
        return None
    if prefix.api_version not in API_VERSIONS[API_VERSIONS_KEY]:
        return codec.encode_response(prefix.correlation_id, unsupported_version_answer(API_VERSIONS))
    try:
        request = codec.decode_request(frame)
    except codec.ProtocolError:
        return None
    body = request.body
    valid = prefix.api_version < 3 or valid_client_software(body.client_software_name, body.client_software_version)
    response = api_versions_answer(prefix.api_version, API_VERSIONS, software_valid=valid, finalized=None, epoch=-1)
    return codec.encode_response(prefix.correlation_id, response)


@dataclass(slots=True)
class EarlyConnection:
    """A connection accepted before the broker served: its socket, the client's address, and the ApiVersions
    request frames answered on it (in order)."""

    sock: socket.socket
    address: tuple[str, int]
    listener: str
    answered: list[bytes] = field(default_factory=list)
    #: Still read here (False: what it sent next is left for the broker).
    watched: bool = True


class EarlyAnswers:
    """Accepts connections on the given listeners' listening sockets and answers their ApiVersions on a thread,
    until :meth:`stop` hands the connections over."""

    def __init__(self, listening: Mapping[str, Sequence[socket.socket]]) -> None:
        self._listening = {name: list(socks) for name, socks in listening.items() if socks}
        self._connections: dict[str, list[EarlyConnection]] = {name: [] for name in self._listening}
        self._accepted = 0
        self._wake_read, self._wake_write = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="fjord-early-answers", daemon=True)
        self._stopped = False

    def start(self) -> None:
        """Starts answering (nothing to do for a node without a listener to answer on: a controller)."""
        if self._listening:
            self._thread.start()

    def stop(self) -> dict[str, list[EarlyConnection]]:
        """Stops answering and returns the connections accepted so far, by listener name; the listening sockets are
        the broker's again (non-blocking, as its listener wants them)."""
        if not self._stopped:
            self._stopped = True
            if self._thread.is_alive():
                self._wake_write.send(b"x")
                self._thread.join()
            self._wake_read.close()
            self._wake_write.close()
        handed, self._connections = self._connections, {}
        return handed

    def abandon(self) -> None:
        """The node stops before its broker served: the accepted connections are closed."""
        for connections in self.stop().values():
            for connection in connections:
                connection.sock.close()

    # -- the thread ---------------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._serve()
        except Exception:  # a bug here must cost the early answers, never the node: the broker serves them all later
            logger.exception("answering ApiVersions before the broker serves failed; the broker answers from now on")

    def _serve(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._wake_read, selectors.EVENT_READ, None)
            for name, socks in self._listening.items():
                for sock in socks:
                    sock.setblocking(False)
                    selector.register(sock, selectors.EVENT_READ, name)
            while True:
                for key, _ in selector.select():
                    if key.data is None:
                        return
                    if isinstance(key.data, str):
                        self._accept(selector, key.fileobj, key.data)  # type: ignore[arg-type]
                    else:
                        self._read(selector, key.data)

    def _accept(self, selector: selectors.BaseSelector, listening: socket.socket, name: str) -> None:
        try:
            sock, address = listening.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # out of file descriptors, say: the broker accepts it later
            logger.warning("listener %s cannot accept a connection yet: %s", name, exc)
            selector.unregister(listening)
            return
        sock.setblocking(False)
        connection = EarlyConnection(sock, (str(address[0]), int(address[1])), name)
        self._connections[name].append(connection)
        selector.register(sock, selectors.EVENT_READ, connection)
        self._accepted += 1
        if self._accepted == MAX_EARLY_CONNECTIONS:
            for socks in self._listening.values():
                for each in socks:
                    if each in selector.get_map():  # not when its accept failed (unregistered then)
                        selector.unregister(each)

    def _read(self, selector: selectors.BaseSelector, connection: EarlyConnection) -> None:
        """Answers the ApiVersions request waiting on ``connection`` once it is whole; stops reading the connection
        at anything else, leaving it in the socket."""
        sock = connection.sock
        try:
            head = sock.recv(MAX_EARLY_FRAME_BYTES + _SIZE.size, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            head = b""
        if not head:  # closed by the client (or reset)
            self._drop(selector, connection)
            return
        size = _SIZE.unpack_from(head)[0] if len(head) >= _SIZE.size else -1
        if not 0 < size <= MAX_EARLY_FRAME_BYTES or len(head) < _SIZE.size + size:
            # Not a small whole frame: left to the broker, which waits for the rest of a frame (the selector would
            # report the bytes peeked here as ready again and again).
            self._unwatch(selector, connection)
            return
        frame = head[_SIZE.size:_SIZE.size + size]
        response = answer(frame)
        if response is None:
            self._unwatch(selector, connection)
            return
        sock.recv(_SIZE.size + size)  # peeked whole: taken off the socket now that it is answered
        connection.answered.append(frame)
        try:
            sent = sock.send(response)
        except OSError:
            sent = -1
        if sent != len(response):  # gone, or not reading what it asked for: never waited for here
            self._drop(selector, connection)
            return
        if len(connection.answered) >= MAX_ANSWERS_PER_CONNECTION:
            self._unwatch(selector, connection)

    def _drop(self, selector: selectors.BaseSelector, connection: EarlyConnection) -> None:
        self._unwatch(selector, connection)
        connection.sock.close()
        self._connections[connection.listener].remove(connection)

    @staticmethod
    def _unwatch(selector: selectors.BaseSelector, connection: EarlyConnection) -> None:
        if connection.watched:
            connection.watched = False
            selector.unregister(connection.sock)
