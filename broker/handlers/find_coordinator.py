"""FindCoordinator (key 10) v0-6: which broker coordinates a consumer group (key type 0) or a transactional id
(key type 1); v4 asks for many keys per request.

Key type 2 (v6: a share group's state partition, ``groupId:topicId:partition``) is what brokers ask to find a share
coordinator. Fjord runs none yet, so such a key is answered INVALID_REQUEST, as Kafka's KafkaApis answers it below
v6 and on a broker without a share coordinator; with an authorizer, the question needs CLUSTER_ACTION first, as in
Kafka (brokers ask it, not clients), and is refused CLUSTER_AUTHORIZATION_FAILED without it."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import CLUSTER_DENIED, GROUP_DENIED, TXN_DENIED, split, whole
from broker.handlers.metadata import live_endpoint
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from wire import schema

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2


async def _lookup(ctx: RequestContext, key: str, key_type: int) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, message, node id, host, port) for one coordinator key."""
    if key_type == KEY_TYPE_TRANSACTION:
        transactions = ctx.broker.transactions
        if not key:
            return ErrorCode.invalid_request, "empty transactional id", -1, "", -1
        error, node_id, message = await transactions.find_coordinator(key)
    elif key_type == KEY_TYPE_SHARE:
        return ErrorCode.invalid_request, "this broker runs no share coordinator", -1, "", -1
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
    """DESCRIBE on the group or transactional id (v4+: on each key), as Kafka checks; CLUSTER_ACTION for share
    coordinator keys (v6), refusing every key without it."""

    def refused(response_cls: type[Any], key: str, denied: ErrorCode) -> Any:
        return schema.build_nested(
            response_cls, "coordinators", key=key, node_id=-1, host="", port=-1, error_code=denied
        )

    key_type = int(request.key_type)
    if key_type == KEY_TYPE_SHARE:
        # Below v6 the key type is invalid whoever asks (the handler says so); from v6, only brokers may ask.
        if ctx.api_version < 6 or ctx.allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return await handler(ctx, request)
        return ctx.build(
            coordinators=tuple(refused(ctx.response_class, key, CLUSTER_DENIED) for key in request.coordinator_keys)
        )
    kind = ResourceType.TRANSACTIONAL_ID if key_type == KEY_TYPE_TRANSACTION else ResourceType.GROUP
    code = TXN_DENIED if kind is ResourceType.TRANSACTIONAL_ID else GROUP_DENIED
    if ctx.api_version < 4:
        return await whole(kind, AclOperation.DESCRIBE, lambda r: r.key, code)(ctx, request, handler)

    return await split(
        ctx,
        request,
        handler,
        ("coordinator_keys", "coordinators"),
        denial=lambda key: None if ctx.allowed(AclOperation.DESCRIBE, kind, key) else code,
        refused=refused,
    )
