"""CreateAcls (30), DescribeAcls (29) and DeleteAcls (31) on the wire, both ways, to and from
``metadata.acl.binding``'s bindings and filters and ``metadata.controller_api``'s results.

As with ``metadata.admin.topic_wire`` (whose role this module plays for ACLs), three places speak them: the broker's
handlers (any version a client sends), the CONTROLLER listener (CreateAcls and DeleteAcls forwarded by brokers) and
the broker's remote client (which forwards in one fixed version and reads the answer back), so both directions live
here once. Versions 1-3 are served (v0, without pattern types, was removed in Kafka 4 and by the schemas).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from metadata.acl.binding import AclBinding, AclBindingFilter, operation, pattern_type, permission, resource_type
from metadata.controller_api import AclCreateResult, AclDeleteResult
from wire import codec, schema

_CREATE_ACLS: Final = 30
_DELETE_ACLS: Final = 31
#: The versions the remote client forwards in.
_CREATE_ACLS_VERSION: Final = 3
_DELETE_ACLS_VERSION: Final = 3


def _binding_fields(binding: AclBinding) -> dict[str, object]:
    return {
        "resource_type": int(binding.resource_type),
        "resource_name": binding.resource_name,
        "pattern_type": int(binding.pattern_type),
        "principal": binding.principal,
        "host": binding.host,
        "operation": int(binding.operation),
        "permission_type": int(binding.permission),
    }


def _filter_of(item: Any) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter entry (the same fields) as a filter."""
    return AclBindingFilter(
        resource_type(int(item.resource_type_filter)),
        item.resource_name_filter,
        pattern_type(int(item.pattern_type_filter)),
        item.principal_filter,
        item.host_filter,
        operation(int(item.operation)),
        permission(int(item.permission_type)),
    )


# --------------------------------------------------------------------------- CreateAcls (30)


def read_create_acls(request: Any) -> list[AclBinding]:
    return [
        AclBinding(
            resource_type(int(c.resource_type)),
            c.resource_name,
            pattern_type(int(c.resource_pattern_type)),
            c.principal,
            c.host,
            operation(int(c.operation)),
            permission(int(c.permission_type)),
        )
        for c in request.creations
    ]


def create_acls_refused(bindings: Sequence[AclBinding], code: ErrorCode, message: str) -> list[AclCreateResult]:
    return [AclCreateResult(code, message) for _ in bindings]


def create_acls_response(response_cls: type[Any], results: Sequence[AclCreateResult]) -> Any:
    return schema.build(
        response_cls,
        throttle_time=0,
        results=tuple(
            schema.build_nested(response_cls, "results", error_code=r.error, error_message=r.message) for r in results
        ),
    )


def create_acls_request(bindings: Sequence[AclBinding]) -> Any:
    cls = codec.request_class(_CREATE_ACLS, _CREATE_ACLS_VERSION)
    return schema.build(
        cls,
        creations=tuple(
            schema.build_nested(
                cls, "creations", **{**_binding_fields(b), "resource_pattern_type": int(b.pattern_type)}
            )
            for b in bindings
        ),
    )


def read_create_acls_response(response: Any, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
    results = [AclCreateResult(ErrorCode(int(r.error_code)), r.error_message) for r in response.results]
    if len(results) != len(bindings):
        return create_acls_refused(
            bindings,
            ErrorCode.unknown_server_error,
            f"the controller answered {len(results)} of {len(bindings)} creations",
        )
    return results


# --------------------------------------------------------------------------- DescribeAcls (29)


def read_describe_acls(request: Any) -> AclBindingFilter:
    return _filter_of(request)


def describe_acls_response(
    response_cls: type[Any],
    matched: Sequence[AclBinding],
    error: ErrorCode = ErrorCode.none,
    message: str | None = None,
) -> Any:
    """Kafka groups the matching bindings by resource pattern."""
    by_pattern: dict[tuple[int, str, int], list[AclBinding]] = {}
    for binding in matched:
        key = (int(binding.resource_type), binding.resource_name, int(binding.pattern_type))
        by_pattern.setdefault(key, []).append(binding)
    resource_cls = schema.field_entity(response_cls, "resources")
    resources = tuple(
        schema.build(
            resource_cls,
            resource_type=kind,
            resource_name=name,
            pattern_type=pattern,
            acls=tuple(
                schema.build_nested(
                    resource_cls,
                    "acls",
                    principal=b.principal,
                    host=b.host,
                    operation=int(b.operation),
                    permission_type=int(b.permission),
                )
                for b in bindings
            ),
        )
        for (kind, name, pattern), bindings in sorted(by_pattern.items())
    )
    return schema.build(response_cls, throttle_time=0, error_code=error, error_message=message, resources=resources)


# --------------------------------------------------------------------------- DeleteAcls (31)


def read_delete_acls(request: Any) -> list[AclBindingFilter]:
    return [_filter_of(f) for f in request.filters]


def delete_acls_refused(filters: Sequence[AclBindingFilter], code: ErrorCode, message: str) -> list[AclDeleteResult]:
    return [AclDeleteResult(code, message) for _ in filters]


def delete_acls_response(response_cls: type[Any], results: Sequence[AclDeleteResult]) -> Any:
    result_cls = schema.field_entity(response_cls, "filter_results")
    return schema.build(
        response_cls,
        throttle_time=0,
        filter_results=tuple(
            schema.build(
                result_cls,
                error_code=r.error,
                error_message=r.message,
                matching_acls=tuple(
                    schema.build_nested(
                        result_cls, "matching_acls", error_code=ErrorCode.none, error_message=None, **_binding_fields(b)
                    )
                    for b in r.deleted
                ),
            )
            for r in results
        ),
    )


def delete_acls_request(filters: Sequence[AclBindingFilter]) -> Any:
    cls = codec.request_class(_DELETE_ACLS, _DELETE_ACLS_VERSION)
    return schema.build(
        cls,
        filters=tuple(
            schema.build_nested(
                cls,
                "filters",
                resource_type_filter=int(f.resource_type),
                resource_name_filter=f.resource_name,
                pattern_type_filter=int(f.pattern_type),
                principal_filter=f.principal,
                host_filter=f.host,
                operation=int(f.operation),
                permission_type=int(f.permission),
            )
            for f in filters
        ),
    )


def read_delete_acls_response(response: Any, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
    results = [
        AclDeleteResult(
            ErrorCode(int(r.error_code)),
            r.error_message,
            tuple(
                AclBinding(
                    resource_type(int(m.resource_type)),
                    m.resource_name,
                    pattern_type(int(m.pattern_type)),
                    m.principal,
                    m.host,
                    operation(int(m.operation)),
                    permission(int(m.permission_type)),
                )
                for m in r.matching_acls
            ),
        )
        for r in response.filter_results
    ]
    if len(results) != len(filters):
        return delete_acls_refused(
            filters, ErrorCode.unknown_server_error, f"the controller answered {len(results)} of {len(filters)} filters"
        )
    return results
