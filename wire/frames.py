"""Cutting a Kafka connection's byte stream into request frames, without any I/O (sans-I/O, as h11 does for HTTP).

A Kafka request is ``length i32 | length bytes``. The socket is read straight into a staging buffer; frames that
fit are cut out of it with one copy each, and a frame larger than what is left of the staging buffer gets a buffer
of its own that the socket then fills directly, so every byte of a request is copied once on its way to the handler.
The connection (``wire.connection``) owns the socket; this module owns only the bytes, so framing is tested by
feeding it bytes in any split.
"""

from __future__ import annotations

import struct

_LENGTH = struct.Struct(">i")
#: Socket reads land here; frames up to about this size are cut out of it, larger ones get their own buffer.
STAGING_BYTES = 256 * 1024


class FrameBuffer:
    """Reads land in :meth:`get_buffer`; :meth:`buffer_updated` returns the frames they completed, in order.

    A length outside ``[min_frame_bytes, max_frame_bytes]`` ends the stream: :attr:`error` says why, the frames
    before it are still returned, and nothing after it ever is (the connection must close, after answering them).
    """

    def __init__(self, *, max_frame_bytes: int, min_frame_bytes: int, staging_bytes: int = STAGING_BYTES,
                 limit_key: str = "socket.request.max.bytes") -> None:
        #: The limit may change between reads (a SASL connection's is raised once it has authenticated);
        #: ``limit_key`` is the setting an error names.
        self.max_frame_bytes = max_frame_bytes
        self.limit_key = limit_key
        self.min_frame_bytes = min_frame_bytes
        self.error: str | None = None
        self._staging = bytearray(staging_bytes)
        self._start = 0  # unparsed bytes are _staging[_start:_end]
        self._end = 0
        self._large: bytearray | None = None  # a frame too big for the staging buffer, being filled in place
        self._large_filled = 0

    def get_buffer(self) -> memoryview:
        """Where the next read must go (``asyncio.BufferedProtocol.get_buffer``)."""
        if self._large is not None:
            return memoryview(self._large)[self._large_filled :]
        if self._end == len(self._staging):
            # Move the partial frame at the end to the front; the room after it is what the socket reads into.
            unparsed = self._end - self._start
            self._staging[:unparsed] = self._staging[self._start : self._end]
            self._start, self._end = 0, unparsed
        return memoryview(self._staging)[self._end :]

    def buffer_updated(self, nbytes: int) -> list[bytes]:
        """``nbytes`` were written into the last :meth:`get_buffer`; returns the request frames now complete."""
        if self.error is not None:
            return []
        if self._large is not None:
            self._large_filled += nbytes
            if self._large_filled < len(self._large):
                return []
            frame, self._large = bytes(self._large), None
            return [frame]
        self._end += nbytes
        return self._cut()

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
            available = self._end - body
            if available >= size:
                self._start = body + size
                # Through a view: slicing the bytearray itself would copy the frame twice (slice, then bytes).
                with memoryview(staging) as view:
                    frames.append(bytes(view[body : self._start]))
                continue
            if size > len(staging) - body:
                # Does not fit behind its header: give it a buffer of its own and let the socket fill that.
                self._large = bytearray(size)
                self._large[:available] = staging[body : self._end]
                self._large_filled = available
                self._start = self._end = 0
            return frames
        if self._start == self._end:
            self._start = self._end = 0
        return frames
