"""The frame buffer alone: request frames cut from a byte stream however the socket splits it."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from wire.frames import FrameBuffer


def _framed(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def _feed(buffer: FrameBuffer, data: bytes, cuts: list[int]) -> list[bytes]:
    """Writes ``data`` into the buffer's own memory in reads of the given sizes, as the socket would."""
    frames: list[bytes] = []
    pos, i = 0, 0
    while pos < len(data):
        room = buffer.get_buffer()
        want = cuts[i % len(cuts)] if cuts else len(data)
        i += 1
        n = max(1, min(want, len(room), len(data) - pos))
        room[:n] = data[pos : pos + n]
        pos += n
        frames.extend(buffer.buffer_updated(n))
    return frames


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=8, max_size=3000), max_size=12),
    cuts=st.lists(st.integers(min_value=1, max_value=5000), max_size=8),
)
def test_frames_come_out_whole_and_in_order_whatever_the_reads(payloads: list[bytes], cuts: list[int]) -> None:
    buffer = FrameBuffer(max_frame_bytes=10_000, min_frame_bytes=8, staging_bytes=1024)
    assert _feed(buffer, _framed(payloads), cuts) == payloads
    assert buffer.error is None


def test_a_frame_larger_than_the_staging_buffer_gets_its_own_buffer() -> None:
    big = bytes(range(256)) * 40  # 10 KiB, staging is 1 KiB
    buffer = FrameBuffer(max_frame_bytes=1 << 20, min_frame_bytes=8, staging_bytes=1024)
    assert _feed(buffer, _framed([b"small-01", big, b"small-02"]), [700]) == [b"small-01", big, b"small-02"]


def test_an_oversized_length_ends_the_stream_after_the_frames_before_it() -> None:
    buffer = FrameBuffer(max_frame_bytes=100, min_frame_bytes=8, staging_bytes=1024)
    data = _framed([b"first-ok"]) + struct.pack(">i", 101) + b"x" * 101 + _framed([b"never-cut"])
    assert _feed(buffer, data, [len(data)]) == [b"first-ok"]
    assert buffer.error is not None and "101 bytes" in buffer.error
    assert buffer.buffer_updated(0) == []


def test_a_length_below_the_request_header_is_refused() -> None:
    buffer = FrameBuffer(max_frame_bytes=100, min_frame_bytes=8, staging_bytes=64)
    assert _feed(buffer, struct.pack(">i", 3) + b"abc", [7]) == []
    assert buffer.error is not None and "3 bytes" in buffer.error
