"""Zig-zag varints as used inside v2 records (protobuf encoding, signed values)."""

from __future__ import annotations


class VarintError(ValueError):
    """A varint runs past the end of its buffer or is longer than 10 bytes."""


def write_varint(out: bytearray, value: int) -> None:
    """Appends ``value`` zig-zag encoded (64-bit range, which covers Kafka's varint and varlong)."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Returns ``(value, new_pos)``."""
    shift = 0
    raw = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise VarintError("varint runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise VarintError("varint longer than 10 bytes")
    return (raw >> 1) ^ -(raw & 1), pos


def varint_size(value: int) -> int:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n
