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
from collections.abc import Callable
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
        # Text, not bytes: json.loads would otherwise sniff each body's encoding first (UTF-8 is the only one).
        body = json.loads(str(data[_HEADER.size :], "utf-8"))
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


_Decoder = Callable[[Any], Any]

_DECODERS: dict[Any, _Decoder] = {}
"""Type hint -> the function decoding a JSON value of that type, built once per hint (:func:`_decoder`)."""


def from_json(hint: Any, value: Any) -> Any:
    """The inverse of :func:`to_json` for a value of type ``hint``; trailing fields with defaults may be absent so
    older encodings still decode. Raises TypeError/ValueError on a shape that does not match.

    Each hint's decoder is worked out once and kept: a restart replays every record of the metadata log, and
    interpreting the hints again for every value (``typing.get_origin``, ``dataclasses.is_dataclass`` and their
    like, per field of every record) took four fifths of its decoding time."""
    decode = _DECODERS.get(hint)
    if decode is None:
        decode = _decoder(hint)
    return decode(value)


def _decoder(hint: Any) -> _Decoder:
    """Builds and keeps the decoder of ``hint``; an unsupported hint raises TypeError, as decoding it would."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        decode = _dataclass_decoder(hint)
    else:
        decode = _value_decoder(hint)
    _DECODERS[hint] = decode
    return decode


def _dataclass_decoder(cls: type) -> _Decoder:
    hints = typing.get_type_hints(cls)
    names: list[str] = []
    required: list[bool] = []
    for f in dataclasses.fields(cls):
        names.append(f.name)
        required.append(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    count = len(names)
    positional = all(f.init and not f.kw_only for f in dataclasses.fields(cls))  # __init__ takes them in order
    # The fields' decoders are built on the first value, not here, so that a dataclass may hold its own type.
    fields: list[tuple[str, _Decoder]] = []

    def decode(value: Any) -> Any:
        if not isinstance(value, list):
            raise TypeError(f"{cls.__name__}: expected an array, got {type(value).__name__}")
        if len(value) > count:
            raise ValueError(f"{cls.__name__}: {len(value)} values for {count} fields")
        if not fields:
            fields.extend((name, _DECODERS.get(hints[name]) or _decoder(hints[name])) for name in names)
        if positional and len(value) == count:  # every field present (all but older encodings): in field order
            return cls(*[decode_field(item) for (_, decode_field), item in zip(fields, value, strict=True)])
        kwargs = {name: decode_field(item) for (name, decode_field), item in zip(fields, value, strict=False)}
        for index in range(len(value), count):
            if required[index]:
                raise ValueError(f"{cls.__name__}: missing field {names[index]!r}")
        return cls(**kwargs)

    return decode


def _value_decoder(hint: Any) -> _Decoder:
    origin = typing.get_origin(hint)
    if origin is tuple:
        return _tuple_decoder(hint)
    if origin in (typing.Union, types.UnionType):
        option = next(a for a in typing.get_args(hint) if a is not type(None))
        return lambda value: None if value is None else from_json(option, value)
    if hint is bytes:
        return _decode_bytes
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint
    if hint is bool:
        return _decode_bool
    if hint is int:
        return _decode_int
    if hint is str:
        return _decode_str
    if hint is float:
        return float
    raise TypeError(f"unsupported field type {hint!r} in a metadata record")


def _tuple_decoder(hint: Any) -> _Decoder:
    args = typing.get_args(hint)
    # As for a dataclass's fields, the items' decoders are looked up on the first value and kept.
    decoders: list[_Decoder] = []
    if len(args) == 2 and args[1] is Ellipsis:
        item_hint = args[0]

        def decode_all(value: Any) -> Any:
            if not isinstance(value, list):
                raise TypeError(f"expected an array for {hint}, got {type(value).__name__}")
            if not decoders:
                decoders.append(_DECODERS.get(item_hint) or _decoder(item_hint))
            decode_item = decoders[0]
            return tuple([decode_item(item) for item in value])

        return decode_all

    def decode_each(value: Any) -> Any:
        if not isinstance(value, list):
            raise TypeError(f"expected an array for {hint}, got {type(value).__name__}")
        if len(args) != len(value):
            raise ValueError(f"expected {len(args)} values for {hint}, got {len(value)}")
        if not decoders:
            decoders.extend(_DECODERS.get(a) or _decoder(a) for a in args)
        return tuple([decode_item(item) for decode_item, item in zip(decoders, value, strict=True)])

    return decode_each


def _decode_bytes(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"expected base64 text, got {type(value).__name__}")
    return base64.b64decode(value, validate=True)


def _decode_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a boolean, got {type(value).__name__}")
    return value


def _decode_int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _decode_str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value
