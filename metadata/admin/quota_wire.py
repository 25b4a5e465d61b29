"""AlterClientQuotas (49) and DescribeClientQuotas (48) on the wire, to and from ``metadata.client_quotas``.

As ``metadata.admin.acl_wire`` does for ACLs: the broker's handlers (any version a client sends), the CONTROLLER
listener (AlterClientQuotas forwarded by brokers) and the broker's remote client (which forwards in one fixed
version and reads the answer back) all speak them, so both directions live here once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from metadata.client_quotas import QuotaAlteration, QuotaAlterResult, QuotaEntity
from wire import codec, schema

_ALTER_CLIENT_QUOTAS: Final = 49
#: The version the remote client forwards in.
_ALTER_CLIENT_QUOTAS_VERSION: Final = 1


def _entity_fields(cls: type[Any], field: str, entity: Iterable[tuple[str, str | None]]) -> tuple[Any, ...]:
    return tuple(schema.build_nested(cls, field, entity_type=t, entity_name=n) for t, n in entity)


# --------------------------------------------------------------------------- AlterClientQuotas (49)


def read_alter_client_quotas(request: Any) -> tuple[list[QuotaAlteration], bool]:
    """The entries of a request, and its ``validate_only``."""
    alterations = [
        QuotaAlteration(
            tuple((e.entity_type, e.entity_name) for e in entry.entity),
            tuple((op.key, None if op.remove else float(op.value)) for op in entry.ops),
        )
        for entry in request.entries
    ]
    return alterations, bool(request.validate_only)


def alter_client_quotas_request(alterations: Sequence[QuotaAlteration], validate_only: bool) -> Any:
    cls = codec.request_class(_ALTER_CLIENT_QUOTAS, _ALTER_CLIENT_QUOTAS_VERSION)
    entry_cls = schema.field_entity(cls, "entries")
    entries = tuple(
        schema.build(
            entry_cls,
            entity=_entity_fields(entry_cls, "entity", a.entity),
            ops=tuple(
                schema.build_nested(
                    entry_cls, "ops", key=key, value=0.0 if value is None else value, remove=value is None
                )
                for key, value in a.ops
            ),
        )
        for a in alterations
    )
    return schema.build(cls, entries=entries, validate_only=validate_only)


def alter_client_quotas_response(response_cls: type[Any], results: Sequence[QuotaAlterResult]) -> Any:
    entry_cls = schema.field_entity(response_cls, "entries")
    return schema.build(
        response_cls,
        throttle_time=0,
        entries=tuple(
            schema.build(
                entry_cls,
                error_code=r.error,
                error_message=r.message,
                entity=_entity_fields(entry_cls, "entity", r.entity),
            )
            for r in results
        ),
    )


def alter_client_quotas_refused(
    alterations: Sequence[QuotaAlteration], code: ErrorCode, message: str
) -> list[QuotaAlterResult]:
    return [QuotaAlterResult(a.entity, code, message) for a in alterations]


def read_alter_client_quotas_response(response: Any, alterations: Sequence[QuotaAlteration]) -> list[QuotaAlterResult]:
    results = [
        QuotaAlterResult(
            tuple((e.entity_type, e.entity_name) for e in r.entity), ErrorCode(int(r.error_code)), r.error_message
        )
        for r in response.entries
    ]
    if len(results) != len(alterations):
        return alter_client_quotas_refused(
            alterations,
            ErrorCode.unknown_server_error,
            f"the controller answered {len(results)} of {len(alterations)} quota alterations",
        )
    return results


# --------------------------------------------------------------------------- DescribeClientQuotas (48)


def read_describe_client_quotas(request: Any) -> tuple[list[tuple[str, int, str | None]], bool]:
    """The filter components (entity type, match type, match) of a request, and its ``strict``."""
    return [(c.entity_type, int(c.match_type), c.match) for c in request.components], bool(request.strict)


def describe_client_quotas_response(
    response_cls: type[Any],
    matched: Mapping[QuotaEntity, Mapping[str, float]],
    error: ErrorCode = ErrorCode.none,
    message: str | None = None,
) -> Any:
    """Kafka answers a refused request with null entries."""
    if error is not ErrorCode.none:
        return schema.build(response_cls, throttle_time=0, error_code=error, error_message=message, entries=None)
    entry_cls = schema.field_entity(response_cls, "entries")
    entries = tuple(
        schema.build(
            entry_cls,
            entity=_entity_fields(entry_cls, "entity", entity),
            values=tuple(schema.build_nested(entry_cls, "values", key=k, value=v) for k, v in sorted(values.items())),
        )
        for entity, values in sorted(matched.items(), key=lambda item: repr(item[0]))
    )
    return schema.build(response_cls, throttle_time=0, error_code=ErrorCode.none, error_message=None, entries=entries)
