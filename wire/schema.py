"""Building kio entities and asking what a version's schema holds, so a handler fills every version of a response
from one set of keyword arguments.

Kafka's schemas give every field a default; kio's dataclasses leave most of them required, so :func:`build` fills
the fields not given with the schema default (or the type's zero, recursively for nested entities) and turns the
plain ints handlers compute with (error codes, millisecond durations) into the types kio encodes. Everything is
worked out once per entity class: handlers build several entities per request.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.static.constants import uuid_zero
from kio.static.primitive import i32Timedelta, i64Timedelta

_ONE_MS: Final = datetime.timedelta(milliseconds=1)

_fields: dict[type[Any], tuple[dataclasses.Field[Any], ...]] = {}

_ZERO_PRIMITIVES: Final[dict[str, object]] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint8": 0,
    "uint16": 0,
    "uint32": 0,
    "uint64": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": b"",
    "uuid": uuid_zero,
    "error_code": ErrorCode.none,
    "timedelta_i32": i32Timedelta.parse(datetime.timedelta(0)),
    "timedelta_i64": i64Timedelta.parse(datetime.timedelta(0)),
}


def entity_fields(entity_cls: type[Any]) -> tuple[dataclasses.Field[Any], ...]:
    """The dataclass fields of a kio entity, cached (``dataclasses.fields`` rebuilds the tuple on every call)."""
    found = _fields.get(entity_cls)
    if found is None:
        found = _fields[entity_cls] = tuple(dataclasses.fields(entity_cls))
    return found


def _default_for(field: dataclasses.Field[Any]) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    kind = classify_field(field)
    if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
        return ()
    if is_optional(field):
        return None
    if isinstance(kind, EntityField):
        return build(kind.type_)
    kafka_type = field.metadata.get("kafka_type")
    if kafka_type == "datetime_i64":
        return datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
    try:
        return _ZERO_PRIMITIVES[str(kafka_type)]
    except KeyError:
        raise TypeError(f"no default for field {field.name!r} of kafka type {kafka_type!r}") from None


def _coerce_error_code(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, ErrorCode):
        return ErrorCode(value)
    return value


# kio's phantom-type parse is slow next to everything else in building a response, and almost every duration a
# handler fills is one of a few values (throttle_time=0 in every response): parsed values are immutable, so the
# common ones are parsed once.
@functools.lru_cache(maxsize=256)
def _i32_ms(value: int) -> object:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


@functools.lru_cache(maxsize=256)
def _i64_ms(value: int) -> object:
    return i64Timedelta.parse(datetime.timedelta(milliseconds=value))


def _coerce_i32_ms(value: object) -> object:
    if isinstance(value, int):
        return _i32_ms(value)
    return value


def _coerce_i64_ms(value: object) -> object:
    if isinstance(value, int):
        return _i64_ms(value)
    return value


def _coerce_uuid(value: object) -> object:
    return uuid_zero if value is None else value


def _coercer(field: dataclasses.Field[Any]) -> Callable[[object], object] | None:
    """Lets handlers pass plain ints for error codes and millisecond durations, which kio rejects at encode time
    (and None for a non-nullable topic id)."""
    kafka_type = field.metadata.get("kafka_type")
    if kafka_type == "error_code":
        return _coerce_error_code
    if kafka_type == "timedelta_i32":
        return _coerce_i32_ms
    if kafka_type == "timedelta_i64":
        return _coerce_i64_ms
    if kafka_type == "uuid" and not is_optional(field):
        return _coerce_uuid
    return None


def _coerce(field: dataclasses.Field[Any], value: object) -> object:
    coerce = _coercer(field)
    return value if coerce is None else coerce(value)


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    """How ``build`` fills one field, worked out once per entity class: handlers build several entities per
    request, and classifying kio fields on every call was a visible share of a small request's cost."""

    name: str
    coerce: Callable[[object], object] | None
    #: The default when the field is not given; entities are frozen, so one default instance can be shared.
    default: object
    #: Called instead when the default must be fresh (a dataclass default_factory) or cannot exist (raises).
    factory: Callable[[], object] | None


_plans: dict[type[Any], tuple[_FieldPlan, ...]] = {}


def _plan_field(field: dataclasses.Field[Any]) -> _FieldPlan:
    coerce = _coercer(field)
    if field.default is dataclasses.MISSING and field.default_factory is not dataclasses.MISSING:
        return _FieldPlan(field.name, coerce, None, field.default_factory)
    try:
        default = _default_for(field)
    except TypeError as exc:
        failure = exc

        def fail() -> object:
            raise failure

        return _FieldPlan(field.name, coerce, None, fail)
    return _FieldPlan(field.name, coerce, default, None)


def _plan(entity_cls: type[Any]) -> tuple[_FieldPlan, ...]:
    found = _plans.get(entity_cls)
    if found is None:
        found = _plans[entity_cls] = tuple(_plan_field(f) for f in entity_fields(entity_cls))
    return found


def millis(value: datetime.timedelta | int) -> int:
    """The reverse of ``_coerce`` for durations: kio decodes Kafka's millisecond fields as timedeltas, while the
    broker and controller compute with integer milliseconds (exact integer arithmetic, no float round trip)."""
    if isinstance(value, int):
        return value
    return value // _ONE_MS


def build(entity_cls: type[Any], /, **values: object) -> Any:
    """An instance of a kio entity with every field not given set to its schema default (or the type's zero,
    recursively for nested entities).

    Values for fields this version of the entity does not have are dropped, so one handler can fill every
    version from the same keyword arguments (``topic_id`` only lands in versions that carry it)."""
    kwargs: dict[str, object] = {}
    for field in _plan(entity_cls):
        name = field.name
        if name in values:
            value = values[name]
            kwargs[name] = value if field.coerce is None else field.coerce(value)
        elif field.factory is not None:
            kwargs[name] = field.factory()
        else:
            kwargs[name] = field.default
    return entity_cls(**kwargs)


_has_field: dict[tuple[type[Any], str], bool] = {}


def has_field(entity_cls: type[Any], name: str) -> bool:
    """Whether this version of an entity carries ``name``; handlers use it to fill version-specific fields."""
    found = _has_field.get((entity_cls, name))
    if found is None:
        found = _has_field[(entity_cls, name)] = any(f.name == name for f in _plan(entity_cls))
    return found


_nested: dict[tuple[type[Any], str], type[Any]] = {}


def field_entity(entity_cls: type[Any], name: str) -> type[Any]:
    """The nested entity class of field ``name`` (element class for arrays), to build nested values."""
    found = _nested.get((entity_cls, name))
    if found is None:
        found = _nested[(entity_cls, name)] = _find_field_entity(entity_cls, name)
    return found


def _find_field_entity(entity_cls: type[Any], name: str) -> type[Any]:
    for field in entity_fields(entity_cls):
        if field.name == name:
            kind = classify_field(field)
            if isinstance(kind, (EntityField, EntityTupleField)):
                return kind.type_
            raise TypeError(f"{entity_cls.__qualname__}.{name} is not an entity field")
    raise TypeError(f"{entity_cls.__qualname__} v{entity_cls.__version__} has no field {name!r}")


def build_nested(entity_cls: type[Any], field_name: str, /, **values: object) -> Any:
    """``build`` for the nested entity that field ``name`` of ``entity_cls`` holds."""
    return build(field_entity(entity_cls, field_name), **values)


def is_nullable(entity_cls: type[Any], name: str) -> bool:
    """Whether field ``name`` of this version accepts None (nullable strings and arrays)."""
    for field in entity_fields(entity_cls):
        if field.name == name:
            return is_optional(field)
    return False
