"""FindCoordinator (key 10) v0-4: which broker coordinates a consumer group (key type 0) or a transactional id
(key type 1); v4 asks for many keys per request."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import GROUP_DENIED, TXN_DENIED, split, whole
from broker.handlers.metadata import live_endpoint
from metadata.acl.binding import AclOperation, ResourceType
from wire import schema

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


async def _lookup(ctx: RequestContext, key: str, key_type: int) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, message, node id, host, port) for one coordinator key."""
    if key_type == KEY_TYPE_TRANSACTION:
        transactions = ctx.broker.transactions
        if not key:
            return ErrorCode.invalid_request, "empty transactional id", -1, "", -1
        error, node_id, message = await transactions.find_coordinator(key)
    elif key_type != KEY_TYPE_GROUP:
        return ErrorCode.invalid_request, f"unknown coordinator key type {key_type}", -1, "", -1
    else:
        groups = ctx.broker.groups
        error, node_id, message = await groups.find_coordinator(key)
    if error is not ErrorCode.none:
        return error, message, -1, "", -1
    broker = ctx.broker.controller.image.brokers.get(node_id)
    endpoint = live_endpoint(broker, ctx.listener_name) if broker is not None and not broker.fenced else None
    if endpoint is None:
        return (
            ErrorCode.coordinator_not_available,
            f"coordinator node {node_id} has no live {ctx.listener_name} listener",
            -1,
            "",
            -1,
        )
    return ErrorCode.none, None, node_id, endpoint[0], endpoint[1]


async def handle_find_coordinator(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, message, node_id, host, port = await _lookup(ctx, key, request.key_type)
            coordinators.append(
                schema.build_nested(
                    ctx.response_class,
                    "coordinators",
                    key=key,
                    node_id=node_id,
                    host=host,
                    port=port,
                    error_code=error,
                    error_message=message,
                )
            )
        return ctx.build(throttle_time=0, coordinators=tuple(coordinators))
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    error, message, node_id, host, port = await _lookup(ctx, request.key, key_type)
    return ctx.build(throttle_time=0, error_code=error, error_message=message, node_id=node_id, host=host, port=port)


async def authorize_find_coordinator(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """DESCRIBE on the group or transactional id (v4+: on each key), as Kafka checks."""
    kind = ResourceType.TRANSACTIONAL_ID if int(request.key_type) == 1 else ResourceType.GROUP
    code = TXN_DENIED if kind is ResourceType.TRANSACTIONAL_ID else GROUP_DENIED
    if ctx.api_version < 4:
        return await whole(kind, AclOperation.DESCRIBE, lambda r: r.key, code)(ctx, request, handler)

    def refused(response_cls: type[Any], key: str, denied: ErrorCode) -> Any:
        return schema.build_nested(
            response_cls, "coordinators", key=key, node_id=-1, host="", port=-1, error_code=denied
        )

    return await split(
        ctx,
        request,
        handler,
        ("coordinator_keys", "coordinators"),
        denial=lambda key: None if ctx.allowed(AclOperation.DESCRIBE, kind, key) else code,
        refused=refused,
    )
