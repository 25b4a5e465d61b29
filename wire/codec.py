"""Kafka frames <-> kio entities: request decoding (with a length check before kio's native reader sees the
bytes), response encoding, and the request side for tests and tools. Building the entities is ``wire.schema``'s.

Everything here is pure (no I/O) so the server, the handlers and the tests share one codec. kio's schema lookup
goes through ``pkgutil.resolve_name`` and is slow, so every class and reader is cached per (api key, version).
kio's native readers only accept read-only buffers and raise ``KeyError`` on an unknown tagged field, which Kafka's
generated readers skip (KIP-482: a newer client may send tags this version does not define); so a request's header
and body are first walked here, and a frame holding unknown tags is handed to kio without them. What still fails to
decode becomes ``MalformedRequestError``, so the server closes just the offending connection.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.static.constants import EntityType

from wire.schema import entity_fields

_PREFIX = struct.Struct(">hhi")
_LENGTH = struct.Struct(">i")
#: api_key, api_version, correlation_id: the part of the request header shared by every header version.
HEADER_PREFIX_SIZE: Final = _PREFIX.size


class ProtocolError(Exception):
    """A frame cannot be served; the connection it came on must be closed (Kafka does the same)."""


class MalformedRequestError(ProtocolError):
    """The frame does not decode as the request its header announces (truncated, bad varint, unknown tag...)."""


class UnsupportedRequestError(ProtocolError):
    """The (api key, version) pair is not one this broker knows how to decode."""

    def __init__(self, api_key: int, api_version: int) -> None:
        super().__init__(f"unsupported request api_key={api_key} version={api_version}")
        self.api_key = api_key
        self.api_version = api_version


@dataclass(frozen=True, slots=True)
class RequestPrefix:
    """The first eight bytes of every request header."""

    api_key: int
    api_version: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    #: Bytes of the frame the header and body used; clients may send trailing bytes, which are ignored.
    consumed: int


def read_prefix(frame: bytes) -> RequestPrefix:
    if len(frame) < HEADER_PREFIX_SIZE:
        raise MalformedRequestError(f"request frame of {len(frame)} bytes is shorter than a request header")
    key, version, correlation_id = _PREFIX.unpack_from(frame, 0)
    return RequestPrefix(key, version, correlation_id)


@functools.cache
def request_class(api_key: int, api_version: int) -> type[Any]:
    try:
        return load_request_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        raise UnsupportedRequestError(api_key, api_version) from None


@functools.cache
def response_class(api_key: int, api_version: int) -> type[Any]:
    try:
        return load_response_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        raise UnsupportedRequestError(api_key, api_version) from None


def preload(api_key: int, versions: range) -> None:
    """Loads the request and response classes of ``api_key`` at each of ``versions``, with the request's reader and
    the response's writer, so that a client's first request of that key does not pay for them. Loading one version
    imports its kio module (tens of dataclasses): 10-20 ms on a quiet machine and past 100 ms on a loaded one, which
    a broker paid on its event loop when it first led a partition, in the middle of opening the next ones. A version
    kio does not know is skipped (its request is refused when it comes)."""
    for version in versions:
        try:
            request_cls, response_cls = request_class(api_key, version), response_class(api_key, version)
        except UnsupportedRequestError:
            continue
        _reader(request_cls)
        _skip_plan(request_cls)
        entity_writer(response_cls)


_readers: dict[type[Any], Callable[[Any, int], tuple[Any, int]]] = {}


def _reader(entity_cls: type[Any]) -> Callable[[Any, int], tuple[Any, int]]:
    reader = _readers.get(entity_cls)
    if reader is None:
        reader = _readers[entity_cls] = entity_reader(entity_cls)
    return reader


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A request's header alone: what a server reads before it knows whether the caller may send the request."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    #: Bytes of the frame the header used; the body starts there.
    size: int


def decode_header(frame: bytes) -> RequestHeader:
    """The header (api key, version, correlation id, client id), its body left unread: a server that checks the
    caller first decodes nothing a caller it refuses sent after it. Raises UnsupportedRequestError or
    MalformedRequestError, nothing else."""
    prefix = read_prefix(frame)
    cls = request_class(prefix.api_key, prefix.api_version)
    try:
        header, size = _read_known(cls.__header_schema__, frame if isinstance(frame, bytes) else bytes(frame), 0)
    except Exception as exc:  # kio raises KeyError, ValueError, BufferUnderflow, ... for bad input
        raise MalformedRequestError(
            f"cannot decode the header of {cls.__name__} v{prefix.api_version} (correlation id "
            f"{prefix.correlation_id}, {len(frame)} bytes): {type(exc).__name__}: {exc}"
        ) from exc
    return RequestHeader(prefix.api_key, prefix.api_version, prefix.correlation_id, header.client_id, size)


def decode_request(frame: bytes, header: RequestHeader | None = None) -> DecodedRequest:
    """Decodes header and body (the body alone when ``header`` was read already, by :func:`decode_header`); raises
    UnsupportedRequestError or MalformedRequestError, nothing else."""
    prefix = read_prefix(frame)
    cls = request_class(prefix.api_key, prefix.api_version)
    data = frame if isinstance(frame, bytes) else bytes(frame)
    try:
        if header is None:
            read, header_size = _read_known(cls.__header_schema__, data, 0)
            client_id = read.client_id
        else:
            header_size, client_id = header.size, header.client_id
        body, body_size = _read_known(cls, data, header_size)
    except Exception as exc:  # kio raises KeyError, ValueError, BufferUnderflow, ... for bad input
        raise MalformedRequestError(
            f"cannot decode {cls.__name__} v{prefix.api_version} (correlation id {prefix.correlation_id}, "
            f"{len(frame)} bytes): {type(exc).__name__}: {exc}"
        ) from exc
    return DecodedRequest(
        api_key=prefix.api_key,
        api_version=prefix.api_version,
        correlation_id=prefix.correlation_id,
        client_id=client_id,
        body=body,
        consumed=header_size + body_size,
    )


class _Truncated(Exception):
    """The frame ends inside a field; the kio reader reports that itself, so the length check just stops."""


_FIXED_SIZES: Final[dict[str, int]] = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}


def _read_uvarint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end and shift <= 28:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise _Truncated


def _read_length(data: bytes, pos: int, end: int, flexible: bool, legacy: struct.Struct) -> tuple[int, int]:
    """A length or count as the field encodes it; -1 for null."""
    if flexible:
        value, pos = _read_uvarint(data, pos, end)
        return value - 1, pos
    if pos + legacy.size > end:
        raise _Truncated
    return int(legacy.unpack_from(data, pos)[0]), pos + legacy.size


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


_FIXED, _VARIABLE, _ENTITY, _ENTITY_ARRAY, _PRIMITIVE_ARRAY = range(5)


@dataclass(frozen=True, slots=True)
class _Skip:
    """How the length check steps over one field, worked out once per entity class (it runs on every request)."""

    name: str
    shape: int
    #: Byte size of a fixed-size primitive (or of an array's elements), 0 when variable.
    size: int
    #: 2 for strings (int16 legacy length), 4 for bytes and records (int32).
    legacy_length: struct.Struct
    #: Whether its length is the legacy one even in a flexible entity (the request header's client id: Kafka's
    #: RequestHeader.json gives it no flexible versions).
    always_legacy: bool
    nullable: bool
    nested: type[Any] | None


@dataclass(frozen=True, slots=True)
class _EntitySkips:
    flexible: bool
    fields: tuple[_Skip, ...]
    tagged: dict[int, _Skip]


_skips: dict[type[Any], _EntitySkips] = {}


def _skip_plan(entity_cls: type[Any]) -> _EntitySkips:
    found = _skips.get(entity_cls)
    if found is not None:
        return found
    fields: list[_Skip] = []
    tagged: dict[int, _Skip] = {}
    for field in entity_fields(entity_cls):
        kind = classify_field(field)
        kafka_type = str(field.metadata.get("kafka_type"))
        size = _FIXED_SIZES.get(kafka_type, 0)
        nested: type[Any] | None = None
        if isinstance(kind, EntityTupleField):
            shape, nested = _ENTITY_ARRAY, kind.type_
        elif isinstance(kind, PrimitiveTupleField):
            shape = _PRIMITIVE_ARRAY
        elif isinstance(kind, EntityField):
            shape, nested = _ENTITY, kind.type_
        else:
            shape = _FIXED if size else _VARIABLE
        always_legacy = field.name == "client_id" and entity_cls.__type__ is EntityType.header
        skip = _Skip(field.name, shape, size, _I16 if kafka_type == "string" else _I32, always_legacy,
                     is_optional(field), nested)
        tag = field.metadata.get("tag")
        if tag is not None:
            tagged[int(tag)] = skip
        else:
            fields.append(skip)
    found = _skips[entity_cls] = _EntitySkips(bool(entity_cls.__flexible__), tuple(fields), tagged)
    return found


def _skip_variable(skip: _Skip, data: bytes, pos: int, end: int, flexible: bool) -> int:
    size, pos = _read_length(data, pos, end, flexible and not skip.always_legacy, skip.legacy_length)
    if size < 0 and not skip.nullable:
        # kio decodes it as None, which a handler using the field would trip over.
        raise MalformedRequestError(f"non-nullable field {skip.name!r} is null")
    pos += max(size, 0)
    if pos > end:
        raise _Truncated
    return pos


#: A replacement of ``data[start:end]`` by ``bytes``: an entity's tagged fields without the unknown ones.
_Edit = tuple[int, int, bytes]


def _skip_field(skip: _Skip, data: bytes, pos: int, end: int, flexible: bool, *, edits: list[_Edit]) -> int:
    shape = skip.shape
    if shape == _FIXED:
        return pos + skip.size
    if shape == _VARIABLE:
        return _skip_variable(skip, data, pos, end, flexible)
    if shape == _ENTITY:
        assert skip.nested is not None
        if skip.nullable:  # nullable struct: a presence byte
            if pos >= end:
                raise _Truncated
            pos += 1
            if data[pos - 1] in (0, 0xFF):
                return pos
        return _skip_entity(skip.nested, data, pos, end, edits)
    count, pos = _read_length(data, pos, end, flexible, _I32)
    if count < 0 and not skip.nullable:
        raise MalformedRequestError(f"non-nullable array {skip.name!r} is null")
    if count > end - pos:
        # kio's native reader reserves memory for the claimed count before reading an element: a 20-byte frame
        # claiming 2**31 elements would abort the whole broker process, not just fail this request.
        raise MalformedRequestError(f"array {skip.name!r} claims {count} elements in {end - pos} bytes")
    if shape == _ENTITY_ARRAY:
        assert skip.nested is not None
        for _ in range(count):
            pos = _skip_entity(skip.nested, data, pos, end, edits)
    elif skip.size:
        pos += max(count, 0) * skip.size
    else:
        element = dataclasses.replace(skip, nullable=True)
        for _ in range(count):
            pos = _skip_variable(element, data, pos, end, flexible)
    return pos


def _skip_entity(entity_cls: type[Any], data: bytes, pos: int, end: int, edits: list[_Edit]) -> int:
    """Steps over one ``entity_cls`` at ``pos``; appends to ``edits`` what takes its unknown tagged fields (and those
    of the entities in it) out, in frame order."""
    plan = _skip_plan(entity_cls)
    flexible = plan.flexible
    for skip in plan.fields:
        pos = _skip_field(skip, data, pos, end, flexible, edits=edits)
    if pos > end:
        raise _Truncated
    if flexible:
        section = pos
        count, pos = _read_uvarint(data, pos, end)
        kept: list[tuple[int, bytes]] = []
        changed = False
        for _ in range(count):
            tag, pos = _read_uvarint(data, pos, end)
            size, pos = _read_uvarint(data, pos, end)
            if pos + size > end:
                raise _Truncated
            tagged = plan.tagged.get(tag)
            if tagged is None:
                changed = True  # Kafka's readers keep it as an unknown tagged field, which nothing reads
            else:
                inner: list[_Edit] = []
                _skip_field(tagged, data, pos, pos + size, flexible, edits=inner)
                changed = changed or bool(inner)
                kept.append((tag, _edited(data, pos, pos + size, inner)))
            pos += size
        if changed:
            section_bytes = bytearray(_uvarint(len(kept)))
            for tag, value in kept:
                section_bytes += _uvarint(tag) + _uvarint(len(value)) + value
            edits.append((section, pos, bytes(section_bytes)))
    return pos


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _edited(data: bytes, start: int, end: int, edits: list[_Edit]) -> bytes:
    """``data[start:end]`` with ``edits`` (in order, within the range) made."""
    out = bytearray()
    at = start
    for edit_start, edit_end, replacement in edits:
        out += data[at:edit_start]
        out += replacement
        at = edit_end
    out += data[at:end]
    return bytes(out)


def _read_known(entity_cls: type[Any], data: bytes, pos: int) -> tuple[Any, int]:
    """kio's reader of ``entity_cls`` at ``pos``: (the entity, bytes of ``data`` it used).

    The entity is walked first, to refuse array counts exceeding the bytes left before kio's native reader sees
    them, and to find unknown tagged fields: kio fails on those, where Kafka skips them, so the reader is then given
    the entity's bytes without them. A frame that ends inside a field is left to the reader, which reports that
    itself."""
    edits: list[_Edit] = []
    try:
        end = _skip_entity(entity_cls, data, pos, len(data), edits)
    except _Truncated:
        edits.clear()
    if not edits:
        result: tuple[Any, int] = _reader(entity_cls)(data, pos)
        return result
    entity, _ = _reader(entity_cls)(_edited(data, pos, end, edits), 0)
    return entity, end - pos


def encode_entity(entity: Any) -> bytes:
    """The body alone, without header or length prefix (used by tests and nested encodings)."""
    out = _Parts()
    entity_writer(type(entity))(typing.cast(IO[bytes], out), entity)
    return b"".join(out.finish())


def encode_response(correlation_id: int, response: Any) -> bytes:
    """One bytes object: 4-byte length, the response header of the response's version, then the body."""
    return b"".join(encode_response_parts(correlation_id, response))


#: Writes at least this long (record sets) are kept by reference in a response's parts rather than copied.
_SPLICE_MIN: Final = 32 * 1024


class SplicedRecords:
    """A record set made of several buffers (a share fetch's acquired batches, views of the stored ones), given as
    a response's ``records`` field: :func:`encode_response_parts` writes its large buffers by reference, so the
    records are not joined into one bytes object on their way to the socket."""

    __slots__ = ("_size", "buffers")

    def __init__(self, buffers: Sequence[bytes | memoryview]) -> None:
        self.buffers = tuple(buffers)
        self._size = sum(len(b) for b in self.buffers)

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0


class _Parts:
    """A write target for kio's entity writers that copies only the small pieces.

    Small writes (headers, lengths, varints) are gathered in a bytearray; a large one - a partition's record
    set - is kept as it is, so a Fetch response is a short list of buffers the transport writes with one
    ``writelines`` and the records are never copied by the broker. (Writing them into a BytesIO copied each record
    set once, and then the whole buffer again every time BytesIO grew.)"""

    __slots__ = ("_small", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self._small = bytearray()

    def write(self, data: bytes | SplicedRecords) -> int:
        if isinstance(data, SplicedRecords):
            for buffer in data.buffers:
                self.write(typing.cast(bytes, buffer))
            return len(data)
        n = len(data)
        if n >= _SPLICE_MIN:
            if self._small:
                self.parts.append(bytes(self._small))
                self._small.clear()
            self.parts.append(data)
        else:
            self._small += data
        self.size += n
        return n

    def finish(self) -> list[bytes]:
        if self._small:
            self.parts.append(bytes(self._small))
            self._small.clear()
        return self.parts


class EncodedResponse:
    """A response body encoded ahead of the answer (:func:`encode_response_parts` adds the header and the length):
    a handler that must wait before it may answer (a ShareFetch, for its acknowledgements' durable write) encodes
    while it waits rather than after. Large record sets stay referenced, as in :class:`_Parts`."""

    __slots__ = ("parts", "response_class", "size")

    def __init__(self, response: Any) -> None:
        self.response_class: type[Any] = type(response)
        out = _Parts()
        entity_writer(self.response_class)(typing.cast(IO[bytes], out), response)
        self.parts = out.finish()
        self.size = out.size


def encode_response_parts(correlation_id: int, response: Any) -> list[bytes]:
    """The same frame as ``encode_response`` as a list of buffers (the length prefix first) that reference the
    response's large record sets instead of copying them; for ``transport.writelines``. ``response`` may be an
    :class:`EncodedResponse`."""
    encoded = response if isinstance(response, EncodedResponse) else None
    cls = type(response) if encoded is None else encoded.response_class
    header_cls = cls.__header_schema__
    out = _Parts()
    target = typing.cast(IO[bytes], out)  # kio's writers only ever call write()
    entity_writer(header_cls)(target, header_cls(correlation_id=correlation_id))
    if encoded is None:
        entity_writer(cls)(target, response)
        parts = out.finish()
        size = out.size
    else:
        parts = [*out.finish(), *encoded.parts]
        size = out.size + encoded.size
    parts.insert(0, _LENGTH.pack(size))
    return parts


def encode_request(request: Any, correlation_id: int, client_id: str | None = "fjord") -> bytes:
    """A length-prefixed request frame; the broker never sends requests, but tests and tools do."""
    cls = type(request)
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=cls.__api_key__,
            request_api_version=cls.__version__,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    entity_writer(cls)(buf, request)
    out = buf.getbuffer()
    _LENGTH.pack_into(out, 0, len(out) - 4)
    del out
    return buf.getvalue()


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, response body) of a response frame without its length prefix."""
    cls = response_class(api_key, api_version)
    header, header_size = _reader(cls.__header_schema__)(frame, 0)
    body, _ = _reader(cls)(frame, header_size)
    return int(header.correlation_id), body
