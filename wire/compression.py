"""Compression codecs of Kafka record batches (attribute bits 0-2).

Codecs come from the standard library (gzip) and cramjam (snappy, lz4, zstd); cramjam is already installed as
aiokafka's codec backend, so no extra dependency is needed. Snappy in Kafka is usually wrapped in the xerial
framing (magic ``\\x82SNAPPY\\x00`` + version + compat, then length-prefixed raw snappy blocks); Java producers use
it, librdkafka sends plain raw snappy, so decoding accepts both. LZ4 is the standard LZ4 frame format (magic v2
batches use the correct header checksum, unlike the legacy v0/v1 bug).
"""

from __future__ import annotations

import enum
import gzip
import mmap
import struct
import zlib

import cramjam

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_LEN = 16  # magic (8) + version i32 + compatible version i32


class Compression(enum.IntEnum):
    """Compression type as stored in the low three bits of the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CompressionError(ValueError):
    """The payload does not decompress with the codec its attributes name (or the codec id is unknown)."""


class DecompressedTooLarge(CompressionError):
    """The payload would decompress into more than :func:`decompress_bounded`'s limit: it may be well formed, only
    too large (KIP-714 answers this TELEMETRY_TOO_LARGE, which a client retries, not INVALID_RECORD)."""


#: What cramjam reports when the output fills the buffer :func:`decompress_bounded` gives it (Rust's
#: ``io::ErrorKind::WriteZero`` message): the payload is larger than the limit, not corrupt.
_BUFFER_FULL = "failed to write whole buffer"


def compression_of(attributes: int) -> Compression:
    code = attributes & 0x07
    try:
        return Compression(code)
    except ValueError:
        raise CompressionError(f"unknown compression codec id {code}") from None


def _xerial_chunks(data: bytes) -> list[bytes]:
    """The raw snappy blocks of a xerial-framed stream (Java's snappy-java framing), each length checked."""
    chunks = []
    pos = _XERIAL_HEADER_LEN
    while pos < len(data):
        if pos + 4 > len(data):
            raise CompressionError("truncated xerial snappy chunk header")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CompressionError("truncated xerial snappy chunk")
        chunks.append(data[pos : pos + size])
        pos += size
    return chunks


def _unxerial(data: bytes) -> bytes:
    return b"".join(bytes(cramjam.snappy.decompress_raw(chunk)) for chunk in _xerial_chunks(data))


def decompress(codec: Compression, data: bytes) -> bytes:
    """Decompresses a batch's records section; raises CompressionError on malformed input."""
    try:
        if codec is Compression.NONE:
            return data
        if codec is Compression.GZIP:
            return gzip.decompress(data)
        if codec is Compression.SNAPPY:
            if data[:8] == _XERIAL_MAGIC:
                return _unxerial(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if codec is Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec is Compression.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CompressionError:
        raise
    except Exception as exc:  # every codec library raises its own error type
        raise CompressionError(f"{codec.name.lower()} payload does not decompress: {exc}") from exc
    raise CompressionError(f"unknown compression codec {codec!r}")


def compress(codec: Compression, data: bytes) -> bytes:
    """Compresses a records section the way Kafka clients do (snappy in xerial framing, lz4 frame format)."""
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        return gzip.compress(data)
    if codec is Compression.SNAPPY:
        block = bytes(cramjam.snappy.compress_raw(data))
        return _XERIAL_MAGIC + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block
    if codec is Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec is Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CompressionError(f"unknown compression codec {codec!r}")


def decompress_bounded(codec: Compression, data: bytes | memoryview, limit: int) -> bytes:
    """Decompresses ``data`` as :func:`decompress` does, but never into more than ``limit`` bytes: CompressionError
    when the output would exceed it. For payloads a client sends (a produced batch's records, KIP-714 telemetry),
    where a small compressed input must not inflate into a large allocation. DecompressedTooLarge when it is the
    limit that was exceeded.

    Memory follows the output, not the limit: snappy's declared lengths are checked before anything is allocated,
    and gzip, lz4 and zstd write into an anonymous map of ``limit`` bytes whose pages the kernel supplies (zeroed)
    only as they are written, so a 100 MB limit costs a 1 MB batch its 1 MB, not a 100 MB buffer to clear, and a
    bomb at most the limit before it is refused."""
    try:
        if codec is Compression.NONE:
            out = bytes(data)
        elif codec is Compression.GZIP:
            out = _gunzip_bounded(data, limit)
        elif codec is Compression.SNAPPY:
            out = _snappy_bounded(bytes(data), limit)
        elif codec in (Compression.LZ4, Compression.ZSTD):
            module = cramjam.lz4 if codec is Compression.LZ4 else cramjam.zstd
            with mmap.mmap(-1, limit + 1) as buffer:
                written = module.decompress_into(data, buffer)
                out = buffer[:written]
        else:
            raise CompressionError(f"unknown compression codec {codec!r}")
    except CompressionError:
        raise
    except Exception as exc:  # every codec library raises its own error type (and cramjam one for a full buffer)
        if _BUFFER_FULL in str(exc):
            raise DecompressedTooLarge(f"{codec.name.lower()} payload decompresses to more than {limit} bytes") from exc
        raise CompressionError(f"{codec.name.lower()} payload does not decompress within {limit} bytes: {exc}") from exc
    if len(out) > limit:
        raise DecompressedTooLarge(f"{codec.name.lower()} payload decompresses to more than {limit} bytes")
    return out


#: How much gzip output one step inflates into the map (see _gunzip_bounded).
_GUNZIP_STEP = 1 << 20


def _gunzip_bounded(data: bytes | memoryview, limit: int) -> bytes:
    """One gzip member, inflated in steps of _GUNZIP_STEP into a map of ``limit`` bytes: zlib's own output buffer,
    given the whole limit, would hold the output twice while it joins its blocks."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    pending: bytes | memoryview = data
    written = 0
    with mmap.mmap(-1, limit + 1) as buffer:
        while not inflater.eof and written <= limit:
            piece = inflater.decompress(pending, min(_GUNZIP_STEP, limit + 1 - written))
            if not piece:
                break  # the input ended before the stream did
            buffer[written : written + len(piece)] = piece
            written += len(piece)
            pending = inflater.unconsumed_tail
        if written > limit:
            raise DecompressedTooLarge(f"gzip payload decompresses to more than {limit} bytes")
        if not inflater.eof:
            raise CompressionError("gzip payload is truncated")
        return buffer[:written]


def _snappy_bounded(data: bytes, limit: int) -> bytes:
    """Raw or xerial-framed snappy, each block's declared length checked against what is left of ``limit``."""
    blocks = _xerial_chunks(data) if data[:8] == _XERIAL_MAGIC else [data]
    out = bytearray()
    for block in blocks:
        if len(out) + int(cramjam.snappy.decompress_raw_len(block)) > limit:
            raise DecompressedTooLarge(f"snappy payload decompresses to more than {limit} bytes")
        out += bytes(cramjam.snappy.decompress_raw(block))
    return bytes(out)
