"""The metadata log's record codec: the record base class, the one registry of record types, and the wire form.

Every record the metadata log carries (the stream, object and KV records of ``storage.metadata.stream_records``, the
cluster records of ``metadata.cluster_records``) is a frozen dataclass subclassing :class:`MetadataRecord`,
registered here with ``@register_record`` under its type id, and encoded by this one codec: the registry is open so
that the controller's records join it from the layer above, as long as the type ids do not collide. A record type
is decodable once the module defining it has been imported.

Wire form: ``type u16 | version u16`` then a compact JSON body. The body is the record's fields in declaration
order as a JSON array (nested dataclasses become nested arrays, ``bytes`` become base64 strings, enums their
integer value). Decoding accepts bodies of an older version that lack trailing fields: they take their defaults.
Framing, CRCs and offsets belong to the log (``metadata.log``), not to the records.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import struct
import types
import typing
from typing import Any, ClassVar, TypeVar

from storage.errors import CorruptObjectError


class MetadataRecord:
    """Base of every record class: subclasses are frozen dataclasses with a unique ``TYPE`` and a ``VERSION``."""

    TYPE: ClassVar[int]
    VERSION: ClassVar[int] = 0


RecordT = TypeVar("RecordT", bound=type[MetadataRecord])

RECORD_TYPES: dict[int, type[MetadataRecord]] = {}
"""Type id -> record class, for decoding. Extend it with ``register_record``."""

_HEADER = struct.Struct(">HH")


class RecordDecodeError(CorruptObjectError):
    """A metadata record does not decode (unknown type, newer version, or malformed body)."""


def register_record(cls: RecordT) -> RecordT:
    """Class decorator adding a record class to the registry; rejects a type id already taken by another class."""
    type_id = cls.TYPE
    existing = RECORD_TYPES.get(type_id)
    if existing is not None and existing is not cls:
        raise ValueError(f"metadata record type {type_id} is already registered by {existing.__name__}")
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} must be a dataclass to be a metadata record")
    RECORD_TYPES[type_id] = cls
    return cls


# ---------------------------------------------------------------------------------------------------- codec


def encode_record(record: MetadataRecord) -> bytes:
    cls = type(record)
    if RECORD_TYPES.get(cls.TYPE) is not cls:
        raise ValueError(f"{cls.__name__} is not a registered metadata record")
    body = json.dumps(to_json(record), separators=(",", ":")).encode()
    return _HEADER.pack(cls.TYPE, cls.VERSION) + body


def decode_record(data: bytes | memoryview) -> MetadataRecord:
    if len(data) < _HEADER.size:
        raise RecordDecodeError(f"metadata record of {len(data)} bytes is shorter than its 4-byte header")
    type_id, version = _HEADER.unpack_from(data, 0)
    cls = RECORD_TYPES.get(type_id)
    if cls is None:
        raise RecordDecodeError(f"unknown metadata record type {type_id}")
    if version > cls.VERSION:
        raise RecordDecodeError(
            f"metadata record {cls.__name__} (type {type_id}) has version {version}; this node reads up to "
            f"{cls.VERSION}"
        )
    try:
        body = json.loads(bytes(data[_HEADER.size :]))
        return typing.cast(MetadataRecord, from_json(cls, body))
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise RecordDecodeError(f"metadata record {cls.__name__} (type {type_id}) is malformed: {exc}") from None


def to_json(value: Any) -> Any:
    """A record or any value inside one as compact JSON (dataclasses as positional arrays, bytes as base64).

    Public because the controller's stream RPCs (metadata.rpc.stream_rpcs) carry the same dataclasses on the wire
    and must encode them exactly as the metadata log does."""
    if isinstance(value, bool | str | None):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, int | float):
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [to_json(getattr(value, f.name)) for f in dataclasses.fields(value)]
    if isinstance(value, tuple | list):
        return [to_json(item) for item in value]
    raise TypeError(f"cannot encode {type(value).__name__} in a metadata record")


_HINTS: dict[type, list[tuple[str, Any, bool]]] = {}


def _fields_of(cls: type) -> list[tuple[str, Any, bool]]:
    """(name, type hint, has default) per field, resolved once per class."""
    cached = _HINTS.get(cls)
    if cached is None:
        hints = typing.get_type_hints(cls)
        cached = [
            (
                f.name,
                hints[f.name],
                f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING,
            )
            for f in dataclasses.fields(cls)
        ]
        _HINTS[cls] = cached
    return cached


def from_json(hint: Any, value: Any) -> Any:
    """The inverse of :func:`to_json` for a value of type ``hint``; trailing fields with defaults may be absent so
    older encodings still decode. Raises TypeError/ValueError on a shape that does not match."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, list):
            raise TypeError(f"{hint.__name__}: expected an array, got {type(value).__name__}")
        fields = _fields_of(hint)
        if len(value) > len(fields):
            raise ValueError(f"{hint.__name__}: {len(value)} values for {len(fields)} fields")
        kwargs: dict[str, Any] = {}
        for (name, field_hint, _has_default), item in zip(fields, value, strict=False):
            kwargs[name] = from_json(field_hint, item)
        for name, _hint, has_default in fields[len(value) :]:
            if not has_default:
                raise ValueError(f"{hint.__name__}: missing field {name!r}")
        return hint(**kwargs)
    origin = typing.get_origin(hint)
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, list):
            raise TypeError(f"expected an array for {hint}, got {type(value).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json(args[0], item) for item in value)
        if len(args) != len(value):
            raise ValueError(f"expected {len(args)} values for {hint}, got {len(value)}")
        return tuple(from_json(a, item) for a, item in zip(args, value, strict=True))
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        return from_json(options[0], value)
    if hint is bytes:
        if not isinstance(value, str):
            raise TypeError(f"expected base64 text, got {type(value).__name__}")
        return base64.b64decode(value, validate=True)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise TypeError(f"expected a boolean, got {type(value).__name__}")
        return value
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"expected an integer, got {type(value).__name__}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {type(value).__name__}")
        return value
    if hint is float:
        return float(value)
    raise TypeError(f"unsupported field type {hint!r} in a metadata record")
