"""DescribeAcls (key 29), CreateAcls (30) and DeleteAcls (31) v1-3: ACL bindings, as ``kafka-acls.sh`` and the
admin clients manage them.

Creations and deletions go to the controller (``metadata.admin.requests``, forwarded to the active controller in
a quorum), which keeps the bindings as metadata records; descriptions are read from this broker's metadata image,
as a KRaft broker answers from its metadata cache. The CLUSTER checks (ALTER to change, DESCRIBE to list) are
the ``authorize_*`` guards below. Without an authorizer Kafka answers these APIs with SECURITY_DISABLED; so does
Fjord, so a tool never creates bindings that would silently do nothing.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import CLUSTER_DENIED, Guard, cluster
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from metadata.admin import acl_wire
from metadata.admin import requests as admin_requests
from metadata.admin.requests import always
from wire import schema

_SECURITY_DISABLED = "No Authorizer is configured (authorizer.class.name)"


async def handle_create_acls(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorizer.enabled:
        return ctx.build(
            throttle_time=0,
            results=tuple(
                schema.build_nested(
                    ctx.response_class,
                    "results",
                    error_code=ErrorCode.security_disabled,
                    error_message=_SECURITY_DISABLED,
                )
                for _ in request.creations
            ),
        )
    return await admin_requests.create_acls(ctx.response_class, request, always(ctx.broker.controller))


async def handle_delete_acls(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorizer.enabled:
        return ctx.build(
            throttle_time=0,
            filter_results=tuple(
                schema.build_nested(
                    ctx.response_class,
                    "filter_results",
                    error_code=ErrorCode.security_disabled,
                    error_message=_SECURITY_DISABLED,
                    matching_acls=(),
                )
                for _ in request.filters
            ),
        )
    return await admin_requests.delete_acls(ctx.response_class, request, always(ctx.broker.controller))


async def handle_describe_acls(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorizer.enabled:
        return acl_wire.describe_acls_response(ctx.response_class, (), ErrorCode.security_disabled, _SECURITY_DISABLED)
    acl_filter = acl_wire.read_describe_acls(request)
    reason = acl_filter.unknown()
    if reason is not None:
        return acl_wire.describe_acls_response(ctx.response_class, (), ErrorCode.invalid_request, reason)
    bindings = ctx.broker.controller.image.acls.values()
    return acl_wire.describe_acls_response(ctx.response_class, [b for b in bindings if acl_filter.matches(b)])


#: CLUSTER DESCRIBE, as Kafka checks.
authorize_describe_acls: Final[Guard] = cluster(AclOperation.DESCRIBE)


async def authorize_create_acls(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """CLUSTER ALTER, as Kafka checks; a refusal answers every creation."""
    if ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    return ctx.build(
        results=tuple(
            schema.build_nested(ctx.response_class, "results", error_code=CLUSTER_DENIED) for _ in request.creations
        )
    )


async def authorize_delete_acls(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """CLUSTER ALTER, as Kafka checks; a refusal answers every filter."""
    if ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    return ctx.build(
        filter_results=tuple(
            schema.build_nested(ctx.response_class, "filter_results", error_code=CLUSTER_DENIED, matching_acls=())
            for _ in request.filters
        )
    )
