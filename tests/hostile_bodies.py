"""Request frames whose body lies about its size, for any Kafka API and version (the hostile-client tests).

A client may declare an array of 2**31-1 elements and send a few bytes, or declare a frame larger than
``socket.request.max.bytes``. :func:`claiming_body` writes a body for any request schema: the fields before its
first array as their smallest valid encoding, then that array's count claiming :data:`CLAIMED_ELEMENTS` elements,
then a few bytes; ``nested``: one element at each level down to the deepest array, which makes the claim (the
decoder must check counts inside elements as well as at the top). A schema with no array claims a string or bytes
field of that length instead (a schema with neither, ApiVersions v0 say, has nothing to lie about). :func:`frame`
puts a valid request header of the API and version in front.
"""

from __future__ import annotations

import struct
from typing import Any

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

from wire import codec, schema
from wire.codec import _FIXED_SIZES
from wire.schema import entity_fields

CLAIMED_ELEMENTS = (1 << 31) - 1
_TAIL = b"\x00" * 8


def frame(api_key: int, version: int, body: bytes, client_id: str | None = "hostile") -> bytes:
    """A length-prefixed request frame: a valid header for (api_key, version), then ``body``."""
    default = schema.build(codec.request_class(api_key, version))
    encoded = codec.encode_request(default, 7, client_id)
    header = encoded[4 : len(encoded) - len(codec.encode_entity(default))]
    return struct.pack(">i", len(header) + len(body)) + header + body


def claiming_body(request_cls: type[Any], *, nested: bool = False) -> bytes:
    """A body for ``request_cls`` that claims :data:`CLAIMED_ELEMENTS` elements (or string bytes) and ends soon
    after."""
    placed = _claim(request_cls, nested=nested)
    if placed is None:
        placed = _claim_string(request_cls)
    return placed if placed is not None else _TAIL


def uvarint(value: int) -> bytes:
    """An unsigned varint, as compact lengths and counts are written."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _count(flexible: bool, count: int) -> bytes:
    return uvarint(count + 1) if flexible else struct.pack(">i", count)


def _has_array(entity_cls: type[Any]) -> bool:
    for field in entity_fields(entity_cls):
        if field.metadata.get("tag") is not None:
            continue
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField | PrimitiveTupleField):
            return True
        if isinstance(kind, EntityField) and _has_array(kind.type_):
            return True
    return False


def _presence(field: Any) -> bytes:
    return b"\x01" if is_optional(field) else b""


def _smallest(field: Any, flexible: bool) -> bytes:
    """The shortest valid encoding of one non-array field."""
    kind = classify_field(field)
    if isinstance(kind, EntityField):  # a nullable struct starts with a presence byte
        return _presence(field) + codec.encode_entity(schema.build(kind.type_))
    kafka_type = str(field.metadata.get("kafka_type"))
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return b"\x00" * size
    if flexible:
        return b"\x01"  # an empty compact string or bytes
    return b"\x00\x00" if kafka_type == "string" else b"\x00\x00\x00\x00"


def _claim(entity_cls: type[Any], *, nested: bool) -> bytes | None:
    flexible = bool(entity_cls.__flexible__)
    out = bytearray()
    for field in entity_fields(entity_cls):
        if field.metadata.get("tag") is not None:
            continue
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField | PrimitiveTupleField):
            if nested and isinstance(kind, EntityTupleField) and _has_array(kind.type_):
                inner = _claim(kind.type_, nested=True)
                assert inner is not None
                return bytes(out + _count(flexible, 1) + inner)
            return bytes(out + _count(flexible, CLAIMED_ELEMENTS) + _TAIL)
        if isinstance(kind, EntityField) and _has_array(kind.type_):
            inner = _claim(kind.type_, nested=nested)
            assert inner is not None
            return bytes(out + _presence(field) + inner)
        out += _smallest(field, flexible)
    return None


def _claim_string(entity_cls: type[Any]) -> bytes | None:
    """No array anywhere: the first string or bytes field claims the most bytes its encoding can say."""
    flexible = bool(entity_cls.__flexible__)
    out = bytearray()
    for field in entity_fields(entity_cls):
        if field.metadata.get("tag") is not None:
            continue
        kafka_type = str(field.metadata.get("kafka_type"))
        if kafka_type in ("string", "bytes", "records"):
            legacy = struct.pack(">h", 0x7FFF) if kafka_type == "string" else struct.pack(">i", CLAIMED_ELEMENTS)
            return bytes(out + (uvarint(CLAIMED_ELEMENTS + 1) if flexible else legacy) + _TAIL)
        out += _smallest(field, flexible)
    return None
