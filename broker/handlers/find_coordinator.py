"""FindCoordinator (key 10) v0-6: which broker coordinates a consumer group (key type 0) or a transactional id
(key type 1); v4 asks for many keys per request.

Key type 2 (v6: a share group's state partition, ``groupId:topicId:partition``, the topic id in Kafka's base64
form) is what brokers ask to find where a share partition's state is kept. In Fjord that state lives with the
partition itself (in the partition's share stream), so the answer is the broker leading that topic partition
(COORDINATOR_NOT_AVAILABLE while it has none, UNKNOWN_TOPIC_OR_PARTITION for a topic id or partition that does
not exist). A malformed key, or key type 2 below v6, is INVALID_REQUEST, as Kafka answers. With an authorizer,
the question needs CLUSTER_ACTION first, as in Kafka (brokers ask it, not clients), and is refused
CLUSTER_AUTHORIZATION_FAILED without it."""

from __future__ import annotations

import base64
import binascii
import uuid
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


def _share_key(key: str) -> tuple[uuid.UUID, int] | None:
    """(topic id, partition) of a share coordinator key ``groupId:topicId:partition``; None when malformed."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        return None
    try:
        raw = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        partition = int(parts[2])
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 16 or partition < 0:
        return None
    return uuid.UUID(bytes=raw), partition


def _share_partition_leader(ctx: RequestContext, key: str) -> tuple[ErrorCode, int, str | None]:
    """(error, node id, message): the broker leading the share key's topic partition."""
    if ctx.api_version < 6:
        return ErrorCode.invalid_request, -1, "share coordinator keys need FindCoordinator version 6 or later"
    parsed = _share_key(key)
    if parsed is None:
        return ErrorCode.invalid_request, -1, f"share coordinator key {key!r} is not groupId:topicId:partition"
    topic_id, index = parsed
    topic = ctx.broker.controller.image.topics_by_id.get(topic_id)
    partition = topic.partitions.get(index) if topic is not None else None
    if topic is None or partition is None:
        return ErrorCode.unknown_topic_or_partition, -1, f"share coordinator key {key!r}: no such topic partition"
    if partition.leader < 0:
        return ErrorCode.coordinator_not_available, -1, f"{topic.name}-{index} has no leader"
    return ErrorCode.none, partition.leader, None


async def _lookup(ctx: RequestContext, key: str, key_type: int) -> tuple[ErrorCode, str | None, int, str, int]:
    """(error, message, node id, host, port) for one coordinator key."""
    if key_type == KEY_TYPE_TRANSACTION:
        transactions = ctx.broker.transactions
        if not key:
            return ErrorCode.invalid_request, "empty transactional id", -1, "", -1
        error, node_id, message = await transactions.find_coordinator(key)
    elif key_type == KEY_TYPE_SHARE:
        error, node_id, message = _share_partition_leader(ctx, key)
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

    key_type = int(getattr(request, "key_type", KEY_TYPE_GROUP))  # v0 has none: a group
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
