"""What every API's ACL check (its guard, written beside its handler) is made of, kept in one place so that every
API refuses the same way, as Kafka's KafkaApis does.

A guard is ``async def guard(ctx, request, handler) -> response | None``; ``broker.handlers.table`` lists each
API's guard and runs it (``serve_authorized``) only when ``authorizer.class.name`` is set
(``broker.authorization``):

- a request about one resource (a group's JoinGroup, a transactional id's EndTxn, the cluster's
  AlterPartitionReassignments) is refused whole with Kafka's code, the handler never runs, nothing changes
  (:func:`whole`, :func:`cluster`, :func:`refused_whole`);
- a request about many (Produce's topics, DeleteGroups' groups) is split: the refused items are answered with
  TOPIC/GROUP/..._AUTHORIZATION_FAILED, the handler serves a copy of the request holding only the allowed ones,
  and the two answers are merged, as Kafka answers per item (:func:`split`). When nothing is allowed the handler is
  not called (an empty list means "all" to some APIs).

This module imports no handler, so handler modules can import it and the table can import them both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from broker.handlers.context import Handler, RequestContext
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from wire import schema
from wire.dispatch import ConnectionClosing

Guard = Callable[[RequestContext, Any, Handler], Awaitable[Any]]

TOPIC_DENIED: Final = ErrorCode.topic_authorization_failed
GROUP_DENIED: Final = ErrorCode.group_authorization_failed
CLUSTER_DENIED: Final = ErrorCode.cluster_authorization_failed
TXN_DENIED: Final = ErrorCode.transactional_id_authorization_failed

#: ``refused(response class, request item, code)``: the response entry answering a refused request item.
Refused = Callable[[type[Any], Any, ErrorCode], Any]


def refused_whole(ctx: RequestContext, code: ErrorCode) -> Any:
    """The response refusing the whole request: its top-level code (and a message where the response has one)."""
    fields: dict[str, object] = {"error_code": code}
    if schema.has_field(ctx.response_class, "error_message"):
        fields["error_message"] = f"{ctx.principal} is not authorized: {code.name}"
    return ctx.build(**fields)


def whole(resource: ResourceType, op: AclOperation, name: Callable[[Any], str], code: ErrorCode) -> Guard:
    """A request about one resource: refused whole (top-level error code) unless ``op`` is allowed on it."""

    async def guard(ctx: RequestContext, request: Any, handler: Handler) -> Any:
        if not ctx.allowed(op, resource, name(request)):
            return refused_whole(ctx, code)
        return await handler(ctx, request)

    return guard


def cluster(op: AclOperation) -> Guard:
    """A request about the cluster: refused whole with CLUSTER_AUTHORIZATION_FAILED unless ``op`` is allowed."""
    return whole(ResourceType.CLUSTER, op, lambda _r: CLUSTER_NAME, CLUSTER_DENIED)


async def split(
    ctx: RequestContext,
    request: Any,
    handler: Handler,
    fields: tuple[str, str],
    *,
    denial: Callable[[Any], ErrorCode | None],
    refused: Refused,
) -> Any:
    """``fields``: (request list, response list). ``denial(item)``: the code refusing a request item, or None;
    ``refused(response class, item, code)``: the response entry answering a refused item."""
    request_field, response_field = fields
    items: Sequence[Any] = getattr(request, request_field) or ()
    allowed: list[Any] = []
    denied: list[tuple[Any, ErrorCode]] = []
    for item in items:
        code = denial(item)
        if code is None:
            allowed.append(item)
        else:
            denied.append((item, code))
    if not denied:
        return await handler(ctx, request)
    if getattr(request, "acks", None) == 0:
        # Produce acks=0 has no response: as Kafka, the allowed part is appended and the connection closed, so the
        # producer notices the refusal.
        if allowed:
            await handler(ctx, dataclasses.replace(request, **{request_field: tuple(allowed)}))
        raise ConnectionClosing(
            f"acks=0 produce from {ctx.describe()} refused ({denied[0][1].name.upper()}); "
            "closing the connection, as Kafka does"
        )
    answered = tuple(refused(ctx.response_class, item, code) for item, code in denied)
    if not allowed:
        return ctx.build(**{response_field: answered})
    response = await handler(ctx, dataclasses.replace(request, **{request_field: tuple(allowed)}))
    if response is None:
        return None
    return dataclasses.replace(response, **{response_field: tuple(getattr(response, response_field)) + answered})


def topic_name(ctx: RequestContext, item: Any, field: str = "name") -> str | None:
    """A request topic's name, from its name or (newer versions) its id; None for an unknown id (the handler
    answers UNKNOWN_TOPIC_ID)."""
    name = getattr(item, field, None)
    if name:
        return str(name)
    topic_id = getattr(item, "topic_id", None)
    if topic_id is None or topic_id == uuid_zero:
        return None
    topic = ctx.broker.controller.image.topics_by_id.get(topic_id)
    return None if topic is None else topic.name


def topics_denied(ctx: RequestContext, op: AclOperation, field: str = "name") -> Callable[[Any], ErrorCode | None]:
    """The :func:`split` denial of a request's topics: TOPIC_AUTHORIZATION_FAILED unless ``op`` is allowed on the
    topic (an unknown topic id is left to the handler)."""

    def denial(item: Any) -> ErrorCode | None:
        name = topic_name(ctx, item, field)
        return None if name is None or ctx.allowed(op, ResourceType.TOPIC, name) else TOPIC_DENIED

    return denial


def partitions_entry(
    topic_list: str,
    partition_list: str,
    index_field: str,
    *,
    code_field: str = "error_code",
    topic_field: str = "name",
    item_partitions: str = "partitions",
    item_index: str | None = "partition_index",
    **extra: object,
) -> Refused:
    """The response entry of a refused topic: every partition the request named, with the code."""

    def refused(response_cls: type[Any], item: Any, code: ErrorCode) -> Any:
        topic_cls = schema.field_entity(response_cls, topic_list)
        partitions = tuple(
            schema.build_nested(
                topic_cls,
                partition_list,
                **{index_field: p if item_index is None else getattr(p, item_index), code_field: code},
                **extra,
            )
            for p in getattr(item, item_partitions)
        )
        return schema.build(
            topic_cls,
            **{
                topic_field: getattr(item, topic_field, None) or getattr(item, "name", ""),
                "topic_id": getattr(item, "topic_id", uuid_zero),
                partition_list: partitions,
            },
        )

    return refused


def per_group(op: AclOperation, request_field: str, response_field: str) -> Guard:
    """A request about many groups (by id in ``request_field``): each refused with GROUP_AUTHORIZATION_FAILED in
    ``response_field`` unless ``op`` is allowed on it (DescribeGroups, DeleteGroups)."""

    async def guard(ctx: RequestContext, request: Any, handler: Handler) -> Any:
        def refused(response_cls: type[Any], group: str, code: ErrorCode) -> Any:
            return schema.build_nested(response_cls, response_field, group_id=group, error_code=code)

        return await split(
            ctx,
            request,
            handler,
            (request_field, response_field),
            denial=lambda g: None if ctx.allowed(op, ResourceType.GROUP, g) else GROUP_DENIED,
            refused=refused,
        )

    return guard


#: Kafka's message for a described group whose assignments name a topic the caller may not DESCRIBE.
_UNDESCRIBABLE_TOPICS: Final = "The group has described topic(s) that the client is not authorized to describe."


def per_group_with_topics(op: AclOperation, request_field: str, response_field: str) -> Guard:
    """:func:`per_group`, then each described group one of whose members is assigned (or targeted with) a topic
    the caller may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED without its members, as Kafka's
    ConsumerGroupDescribe and ShareGroupDescribe answer: rights on a group are no way to learn topic names."""
    groups_checked = per_group(op, request_field, response_field)

    async def guard(ctx: RequestContext, request: Any, handler: Handler) -> Any:
        response = await groups_checked(ctx, request, handler)
        if response is None:
            return None
        groups = tuple(_hiding_topics(ctx, group) for group in getattr(response, response_field))
        return dataclasses.replace(response, **{response_field: groups})

    return guard


def _hiding_topics(ctx: RequestContext, group: Any) -> Any:
    names = {
        tp.topic_name
        for member in group.members
        for assignment in (member.assignment, getattr(member, "target_assignment", None))
        if assignment is not None
        for tp in assignment.topic_partitions
    }
    if all(ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, n, log_denial=False) for n in names):
        return group
    return schema.build(type(group), group_id=group.group_id, error_code=TOPIC_DENIED,
                        error_message=_UNDESCRIBABLE_TOPICS, members=())
