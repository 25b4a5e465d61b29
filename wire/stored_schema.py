"""Kafka's encoding of the records its coordinators keep in internal topics (``__consumer_offsets``,
``__transaction_state``): keys and values that start with an int16 version and are written in the generated-message
format, classic (int16 string lengths, int32 array lengths) or flexible (compact lengths and tagged fields), and
Kafka's hash of a key to the partition that holds it.

Both coordinators store their state byte for byte as Kafka does, so their topics read like a Kafka cluster's; this
module is the one reader and writer of that format, the schemas themselves stay with each coordinator.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping

# Keys and values use int16-length strings: ids longer than this cannot be persisted at all.
MAX_STORED_STRING_BYTES = 0x7FFF

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class SchemaError(ValueError):
    """A stored record does not decode with any known schema version, or a value does not fit the format."""


# ---------------------------------------------------------------------------------------------------------- writing


def uvarint(value: int) -> bytes:
    """Unsigned (not zig-zag) varint, as the flexible encodings use for lengths and tags."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(value: str, *, flexible: bool = False) -> bytes:
    encoded = value.encode("utf-8")
    if len(encoded) > MAX_STORED_STRING_BYTES:
        raise SchemaError(f"string of {len(encoded)} bytes does not fit an int16 length")
    return (uvarint(len(encoded) + 1) if flexible else _I16.pack(len(encoded))) + encoded


def nullable_string(value: str | None, *, flexible: bool = False) -> bytes:
    if value is None:
        return uvarint(0) if flexible else _I16.pack(-1)
    return string(value, flexible=flexible)


def bytes_field(value: bytes, *, flexible: bool = False) -> bytes:
    return (uvarint(len(value) + 1) if flexible else _I32.pack(len(value))) + value


def uuid_field(value: uuid.UUID) -> bytes:
    """16 bytes, the most significant half first: Java's ``Uuid`` and Python's ``UUID.bytes`` agree."""
    return value.bytes


def int32_array(values: Iterable[int], *, flexible: bool = False) -> bytes:
    items = list(values)
    return array_length(len(items), flexible=flexible) + b"".join(_I32.pack(v) for v in items)


def array_length(n: int | None, *, flexible: bool = False) -> bytes:
    if flexible:
        return uvarint(0 if n is None else n + 1)
    return _I32.pack(-1 if n is None else n)


def tagged_fields(fields: Mapping[int, bytes] | None = None) -> bytes:
    """A flexible struct's tagged-field section: the count, then each field as tag, size and payload in ascending
    tag order (as Kafka writes them). ``fields`` maps a tag to its encoded payload; an empty section is one zero
    byte."""
    items = sorted((fields or {}).items())
    return uvarint(len(items)) + b"".join(uvarint(tag) + uvarint(len(payload)) + payload for tag, payload in items)


# ---------------------------------------------------------------------------------------------------------- reading


class SchemaReader:
    """Cursor over one key or value; ``flexible`` switches strings/bytes/arrays to the compact encodings."""

    def __init__(self, data: bytes, what: str, *, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.what = what
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SchemaError(f"{self.what}: truncated at byte {self.pos} (need {n} of {len(self.data) - self.pos})")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i8(self) -> int:
        value: int = _I8.unpack(self._take(1))[0]
        return value

    def i16(self) -> int:
        value: int = _I16.unpack(self._take(2))[0]
        return value

    def i32(self) -> int:
        value: int = _I32.unpack(self._take(4))[0]
        return value

    def i64(self) -> int:
        value: int = _I64.unpack(self._take(8))[0]
        return value

    def uuid_(self) -> uuid.UUID:
        return uuid.UUID(bytes=self._take(16))

    def uvarint(self) -> int:
        """Unsigned (not zig-zag) varint, as the flexible protocol encodings use for lengths and tags."""
        value = shift = 0
        while True:
            (b,) = self._take(1)
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise SchemaError(f"{self.what}: unsigned varint longer than 5 bytes at byte {self.pos}")

    def _length(self) -> int:
        # Compact encodings store length + 1 so that 0 can mean null.
        return self.uvarint() - 1 if self.flexible else self.i16()

    def nullable_string(self) -> str | None:
        n = self._length()
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaError(f"{self.what}: string is not UTF-8 at byte {self.pos}") from exc

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise SchemaError(f"{self.what}: null where a string is required at byte {self.pos}")
        return value

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            raise SchemaError(f"{self.what}: null where bytes are required at byte {self.pos}")
        return self._take(n)

    def array_length(self) -> int:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            raise SchemaError(f"{self.what}: null array at byte {self.pos}")
        return n

    def int32_array(self) -> list[int]:
        n = self.array_length()
        if n * 4 > len(self.data) - self.pos:
            raise SchemaError(f"{self.what}: array of {n} int32 truncated at byte {self.pos}")
        return [self.i32() for _ in range(n)]

    def skip_tagged_fields(self) -> None:
        self.tagged_fields()

    def tagged_fields(self) -> dict[int, bytes]:
        """The tagged-field section as raw payloads by tag, for the caller to decode the tags it knows; the others
        are ignored, which is what lets a newer writer add tagged fields an older reader still reads past."""
        if not self.flexible:
            return {}
        fields: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self._take(self.uvarint())
        return fields


# ---------------------------------------------------------------------------------------------------------- partitions


def java_string_hash(value: str) -> int:
    """Java's ``String.hashCode``: 31-based over UTF-16 code units, wrapped to a signed 32-bit int."""
    h = 0
    encoded = value.encode("utf-16-be")
    for i in range(0, len(encoded), 2):
        h = (31 * h + ((encoded[i] << 8) | encoded[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def partition_for(key: str, num_partitions: int) -> int:
    """The partition of an internal topic that holds ``key`` (a group id, a transactional id), exactly as Kafka
    computes it.

    Kafka's ``Utils.abs`` maps Integer.MIN_VALUE to 0 rather than overflowing, so we do too.
    """
    h = java_string_hash(key)
    return (0 if h == -0x80000000 else abs(h)) % num_partitions
