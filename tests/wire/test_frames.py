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


def test_a_claimed_length_costs_only_the_bytes_sent() -> None:
    buffer = FrameBuffer(max_frame_bytes=200 << 20, min_frame_bytes=8)
    assert _feed(buffer, struct.pack(">i", 100 << 20) + b"x" * 10, [14]) == []
    assert buffer.held_bytes == 4096  # the small staging buffer a new connection starts with


def test_a_large_frame_holds_at_most_twice_what_has_arrived() -> None:
    buffer = FrameBuffer(max_frame_bytes=200 << 20, min_frame_bytes=8, staging_bytes=64 * 1024)
    sent = 0
    data = struct.pack(">i", 100 << 20) + b"y" * (3 << 20)
    while sent < len(data):
        room = buffer.get_buffer()
        n = min(len(room), len(data) - sent, 50_000)
        room[:n] = data[sent : sent + n]
        sent += n
        assert buffer.buffer_updated(n) == []
        assert buffer.held_bytes <= 2 * sent + 64 * 1024, (buffer.held_bytes, sent)


def test_a_large_frame_waits_for_the_pool_and_then_completes() -> None:
    granted: list[int] = []
    allow = False

    def reserve(size: int) -> bool:
        if allow:
            granted.append(size)
        return allow

    big = b"z" * 10_000
    buffer = FrameBuffer(max_frame_bytes=1 << 20, min_frame_bytes=8, staging_bytes=1024, reserve=reserve)
    data = _framed([big])
    room = buffer.get_buffer()  # the whole 1 KiB staging buffer: filling it asks for the frame's claim
    room[:] = data[: len(room)]
    assert buffer.buffer_updated(len(room)) == []
    data = data[len(room) :]
    assert buffer.waiting == len(big) and not buffer.retry()
    allow = True
    assert buffer.retry() and buffer.waiting is None
    assert _feed(buffer, data, [3000]) == [big]
    assert buffer.take_reserved() == len(big) == granted[0]


def test_a_staging_buffer_grown_for_a_burst_is_trimmed_once_empty() -> None:
    buffer = FrameBuffer(max_frame_bytes=1 << 20, min_frame_bytes=8)
    payloads = [bytes(1000)] * 100  # ~100 KB in one burst: the staging buffer grows to hold it
    assert _feed(buffer, _framed(payloads), [200_000]) == payloads
    assert buffer.held_bytes >= 64 * 1024
    buffer.trim()
    assert buffer.held_bytes == 4096
    assert _feed(buffer, _framed([b"after-trim"]), [5]) == [b"after-trim"]
