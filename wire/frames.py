"""Cutting a Kafka connection's byte stream into request frames, without any I/O (sans-I/O, as h11 does for HTTP).

A Kafka request is ``length i32 | length bytes``. The length is the client's claim, not a promise: memory must grow
with the bytes a connection has sent, never with the bytes it says it will send, or a few connections sending a
4-byte length of 100 MB and nothing more make the node reserve gigabytes (issue 26). So:

- The socket is read into a staging buffer that starts small (:data:`INITIAL_STAGING_BYTES`) and doubles, up to
  ``staging_bytes``, only when the client fills it; frames that fit are cut out of it with one copy each.
- A frame larger than the staging buffer is assembled in chunks, each at most as large as what has arrived of the
  frame so far, so its buffers never hold more than twice its received bytes; once complete the chunks are joined
  (the one copy on its way to the handler). Before its first chunk such a frame reserves its claimed size from the
  node's memory pool (``reserve``: Kafka's ``queued.max.request.bytes``); when the pool says no,
  :attr:`FrameBuffer.waiting` is set and the connection must stop reading until :meth:`FrameBuffer.retry` succeeds.

The connection (``wire.connection``) owns the socket; this module owns only the bytes, so framing is tested by
feeding it bytes in any split.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

_LENGTH = struct.Struct(">i")
#: The most the staging buffer grows to: frames up to about this size are cut out of it, larger ones assembled.
STAGING_BYTES = 256 * 1024
#: What a new connection's staging buffer holds: all a client that sends only a header makes the node keep.
INITIAL_STAGING_BYTES = 4 * 1024


class FrameBuffer:
    """Reads land in :meth:`get_buffer`; :meth:`buffer_updated` returns the frames they completed, in order.

    A length outside ``[min_frame_bytes, max_frame_bytes]`` ends the stream: :attr:`error` says why, the frames
    before it are still returned, and nothing after it ever is (the connection must close, after answering them).
    """

    def __init__(self, *, max_frame_bytes: int, min_frame_bytes: int, staging_bytes: int = STAGING_BYTES,
                 limit_key: str = "socket.request.max.bytes",
                 reserve: Callable[[int], bool] | None = None) -> None:
        #: The limit may change between reads (a SASL connection's is raised once it has authenticated);
        #: ``limit_key`` is the setting an error names.
        self.max_frame_bytes = max_frame_bytes
        self.limit_key = limit_key
        self.min_frame_bytes = min_frame_bytes
        self.error: str | None = None
        #: The claimed size of a frame that waits for the memory pool (None: not waiting).
        self.waiting: int | None = None
        self._reserve = reserve
        self._staging_cap = staging_bytes
        self._staging = bytearray(min(INITIAL_STAGING_BYTES, staging_bytes))
        self._start = 0  # unparsed bytes are _staging[_start:_end]
        self._end = 0
        # A frame too big for the staging buffer, being assembled: its chunks (the last one being filled), how much
        # of the last is filled, the body bytes received and the body size claimed.
        self._chunks: list[bytearray] | None = None
        self._filled = 0
        self._received = 0
        self._size = 0
        #: Pool bytes held by the frame being assembled, then by the frame just completed until taken.
        self._reserved = 0

    def get_buffer(self) -> memoryview:
        """Where the next read must go (``asyncio.BufferedProtocol.get_buffer``)."""
        if self._chunks is not None:
            return memoryview(self._chunks[-1])[self._filled :]
        return memoryview(self._staging)[self._end :]

    def buffer_updated(self, nbytes: int) -> list[bytes]:
        """``nbytes`` were written into the last :meth:`get_buffer`; returns the request frames now complete."""
        if self.error is not None:
            return []
        if self._chunks is not None:
            return self._assembled(nbytes)
        self._end += nbytes
        frames = self._cut()
        if self.error is None and self._end == len(self._staging):
            self._make_room()
        return frames

    @property
    def held_bytes(self) -> int:
        """The memory this connection's buffers hold: what a client can make the node keep by sending."""
        return len(self._staging) + sum(len(chunk) for chunk in self._chunks or ())

    @property
    def partial(self) -> bool:
        """Part of a frame is held: its length or some of its body (a frame waiting for the pool included)."""
        return self._chunks is not None or self._end > self._start or self.waiting is not None

    def trim(self) -> None:
        """The connection has gone quiet: a staging buffer grown for a burst and holding nothing goes back to its
        first size, so connections that once sent a lot and then idle do not keep 256 KiB each."""
        if self._chunks is None and self._start == self._end and len(self._staging) > INITIAL_STAGING_BYTES:
            self._staging = bytearray(INITIAL_STAGING_BYTES)
            self._start = self._end = 0

    def take_reserved(self) -> int:
        """The pool bytes the last frame returned holds (0: none); the caller releases them once it is done with it."""
        reserved, self._reserved = (self._reserved, 0) if self._chunks is None else (0, self._reserved)
        return reserved

    def retry(self) -> bool:
        """Asks the pool again for the frame that waits; True once it may be read (then read on)."""
        if self.waiting is None:
            return True
        if self._reserve is not None and not self._reserve(self.waiting):
            return False
        self._reserved, self.waiting = self.waiting, None
        self._promote()
        return True

    def abandon(self) -> int:
        """The connection is gone: the pool bytes held by a frame half received (to release)."""
        reserved, self._reserved, self._chunks, self.waiting = self._reserved, 0, None, None
        return reserved

    def _assembled(self, nbytes: int) -> list[bytes]:
        chunks = self._chunks
        assert chunks is not None
        self._filled += nbytes
        self._received += nbytes
        if self._received == self._size:
            self._chunks = None
            return [b"".join(chunks)]
        if self._filled == len(chunks[-1]):
            # The next chunk is at most what has arrived so far: buffers stay within twice the bytes received.
            chunks.append(bytearray(self._next_chunk()))
            self._filled = 0
        return []

    def _next_chunk(self) -> int:
        return min(self._size - self._received, max(self._received, INITIAL_STAGING_BYTES))

    def _make_room(self) -> None:
        """The staging buffer is full: grow it (the client sends that much), move the partial frame at its end to
        the front, or start assembling a frame larger than it."""
        unparsed = self._end - self._start
        if len(self._staging) < self._staging_cap:
            grown = bytearray(min(self._staging_cap, 2 * len(self._staging)))
            grown[:unparsed] = self._staging[self._start : self._end]
            self._staging, self._start, self._end = grown, 0, unparsed
            return
        if unparsed >= 4:
            (size,) = _LENGTH.unpack_from(self._staging, self._start)
            if 4 + size > len(self._staging):
                self._size = size
                if self._reserve is not None and not self._reserve(size):
                    self.waiting = size
                    return
                self._reserved = size if self._reserve is not None else 0
                self._promote()
                return
        self._staging[:unparsed] = self._staging[self._start : self._end]
        self._start, self._end = 0, unparsed

    def _promote(self) -> None:
        """The frame at the staging buffer's front continues in chunks of its own."""
        body = self._start + 4
        with memoryview(self._staging) as view:
            first = bytearray(view[body : self._end])
        self._received = self._filled = len(first)
        self._chunks = [first, bytearray(self._next_chunk())]
        self._filled = 0
        self._start = self._end = 0

    def _cut(self) -> list[bytes]:
        frames: list[bytes] = []
        staging = self._staging
        while self._end - self._start >= 4:
            (size,) = _LENGTH.unpack_from(staging, self._start)
            if size > self.max_frame_bytes or size < self.min_frame_bytes:
                self.error = (
                    f"request of {size} bytes is outside [{self.min_frame_bytes}, {self.max_frame_bytes}] "
                    f"({self.limit_key})"
                )
                self._start = self._end = 0
                return frames
            body = self._start + 4
            if self._end - body < size:
                break
            self._start = body + size
            # Through a view: slicing the bytearray itself would copy the frame twice (slice, then bytes).
            with memoryview(staging) as view:
                frames.append(bytes(view[body : self._start]))
        if self._start == self._end:
            self._start = self._end = 0
        return frames
