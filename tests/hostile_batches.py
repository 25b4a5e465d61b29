"""Record batches that lie about their compressed records, for the hostile-client tests of the produce path.

:func:`with_records_section` puts another records section under a batch's header, its length and CRC-32C made right,
so only the section lies; :func:`zstd_bomb` and :func:`gzip_bomb` are sections that decompress to far more than they
take (4 bytes of zstd per 128 KiB of zeros, about 1 KB of gzip per MB), built without holding their output.
"""

from __future__ import annotations

import struct
import zlib

from wire.record_batch import CRC_POS, HEADER_SIZE, LENGTH_POS, LOG_OVERHEAD, compute_crc

_ZSTD_BLOCK = 128 * 1024


def with_records_section(batch: bytes, section: bytes) -> bytes:
    """``batch``'s header over ``section``, with the length and CRC-32C that make it a well-framed batch."""
    buf = bytearray(batch[:HEADER_SIZE] + section)
    struct.pack_into(">i", buf, LENGTH_POS, len(buf) - LOG_OVERHEAD)
    struct.pack_into(">I", buf, CRC_POS, compute_crc(buf))
    return bytes(buf)


def zstd_bomb(total: int) -> bytes:
    """A zstd frame of RLE blocks of zeros decompressing to ``total`` bytes (a multiple of 128 KiB), its size not
    declared in the frame header: magic, descriptor 0, a 128 KiB window, then 4 bytes a block."""
    blocks = total // _ZSTD_BLOCK
    body = b"".join(
        (_ZSTD_BLOCK << 3 | 1 << 1 | int(i == blocks - 1)).to_bytes(3, "little") + b"\x00" for i in range(blocks)
    )
    return b"\x28\xb5\x2f\xfd\x00\x38" + body


def gzip_bomb(total: int) -> bytes:
    """A gzip member of ``total`` zeros (whole MiB), deflated a MiB at a time."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    return b"".join(deflater.compress(chunk) for _ in range(total >> 20)) + deflater.flush()
