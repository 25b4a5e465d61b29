"""DescribeShareGroupOffsets (key 90) v0-1, AlterShareGroupOffsets (91) v0 and DeleteShareGroupOffsets (92) v0:
an operator's view of a share group's start offsets (``kafka-share-groups.sh``), served by the group coordinator
through ``broker.share.offsets_admin``, which asks each partition's leader.

v1 of DescribeShareGroupOffsets (Kafka 4.2, KIP-1226) adds each partition's lag: the records between the start
offset and the high watermark (-1 where the group has no state). Authorization as Kafka's KafkaApis: describe needs
GROUP DESCRIBE (per group) and TOPIC DESCRIBE (per topic), alter GROUP READ and TOPIC READ, delete GROUP DELETE and
TOPIC READ; a refused topic is answered TOPIC_AUTHORIZATION_FAILED and the others are served (a describe of every
topic leaves out those the principal may not describe).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import (
    GROUP_DENIED,
    TOPIC_DENIED,
    partitions_entry,
    refused_whole,
    split,
    topics_denied,
)
from metadata.acl.binding import AclOperation, ResourceType
from wire import schema


def _message(code: ErrorCode) -> str | None:
    return None if code is ErrorCode.none else code.name


def _topic_id(ctx: RequestContext, name: str) -> Any:
    topic = ctx.broker.controller.image.topics_by_name.get(name)
    return None if topic is None else topic.topic_id


async def handle_describe_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    group_cls = schema.field_entity(ctx.response_class, "groups")
    topic_cls = schema.field_entity(group_cls, "topics")
    groups = []
    for group in request.groups:
        topics = None if group.topics is None else [(t.topic_name, tuple(t.partitions)) for t in group.topics]
        error, described = await ctx.broker.share_offsets.describe(group.group_id, topics)
        groups.append(
            schema.build(
                group_cls,
                group_id=group.group_id,
                error_code=error,
                error_message=_message(error),
                topics=tuple(
                    schema.build(
                        topic_cls,
                        topic_name=topic.name,
                        topic_id=_topic_id(ctx, topic.name),
                        partitions=tuple(
                            schema.build_nested(
                                topic_cls,
                                "partitions",
                                partition_index=index,
                                start_offset=summary.start_offset,
                                leader_epoch=summary.leader_epoch,
                                lag=summary.lag,
                                error_code=summary.error,
                                error_message=_message(summary.error),
                            )
                            for index, summary in topic.partitions.items()
                        ),
                    )
                    for topic in described
                ),
            )
        )
    return ctx.build(throttle_time=0, groups=tuple(groups))


async def handle_alter_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    wanted = [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions]) for t in request.topics]
    error, results = await ctx.broker.share_offsets.alter(request.group_id, wanted)
    if error is not ErrorCode.none:
        return ctx.build(throttle_time=0, error_code=error, error_message=_message(error))
    topic_cls = schema.field_entity(ctx.response_class, "responses")
    responses = tuple(
        schema.build(
            topic_cls,
            topic_name=t.topic_name,
            topic_id=_topic_id(ctx, t.topic_name),
            partitions=tuple(
                schema.build_nested(
                    topic_cls,
                    "partitions",
                    partition_index=p.partition_index,
                    error_code=(code := results.get((t.topic_name, p.partition_index), ErrorCode.none)),
                    error_message=_message(code),
                )
                for p in t.partitions
            ),
        )
        for t in request.topics
    )
    return ctx.build(throttle_time=0, error_code=ErrorCode.none, responses=responses)


async def handle_delete_share_group_offsets(ctx: RequestContext, request: Any) -> Any:
    names = [t.topic_name for t in request.topics]
    error, results = await ctx.broker.share_offsets.delete(request.group_id, names)
    if error is not ErrorCode.none:
        return ctx.build(throttle_time=0, error_code=error, error_message=_message(error))
    topic_cls = schema.field_entity(ctx.response_class, "responses")
    responses = tuple(
        schema.build(
            topic_cls,
            topic_name=name,
            topic_id=_topic_id(ctx, name),
            error_code=results.get(name, ErrorCode.none),
            error_message=_message(results.get(name, ErrorCode.none)),
        )
        for name in names
    )
    return ctx.build(throttle_time=0, error_code=ErrorCode.none, responses=responses)


# -- authorization -------------------------------------------------------------------------------------------------


async def authorize_describe_share_group_offsets(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """GROUP DESCRIBE per group (a refused group answers GROUP_AUTHORIZATION_FAILED), TOPIC DESCRIBE per named
    topic (its partitions answer TOPIC_AUTHORIZATION_FAILED); the handler serves what is allowed."""
    group_cls = schema.field_entity(ctx.response_class, "groups")
    topic_cls = schema.field_entity(group_cls, "topics")
    refused_groups: list[Any] = []
    refused_topics: dict[str, list[Any]] = {}
    allowed: list[Any] = []
    for group in request.groups:
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, group.group_id):
            refused_groups.append(
                schema.build(group_cls, group_id=group.group_id, error_code=GROUP_DENIED,
                             error_message=_message(GROUP_DENIED))
            )
            continue
        if group.topics is None:
            allowed.append(group)
            continue
        kept = []
        for topic in group.topics:
            if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic.topic_name):
                kept.append(topic)
            else:
                refused_topics.setdefault(group.group_id, []).append(
                    schema.build(
                        topic_cls,
                        topic_name=topic.topic_name,
                        partitions=tuple(
                            schema.build_nested(topic_cls, "partitions", partition_index=p, start_offset=-1,
                                                leader_epoch=-1, lag=-1, error_code=TOPIC_DENIED,
                                                error_message=_message(TOPIC_DENIED))
                            for p in topic.partitions
                        ),
                    )
                )
        allowed.append(dataclasses.replace(group, topics=tuple(kept)))
    served: tuple[Any, ...] = ()
    if allowed:
        response = await handler(ctx, dataclasses.replace(request, groups=tuple(allowed)))
        everything = {g.group_id for g in allowed if g.topics is None}
        served = tuple(_merge_refused(ctx, g, g.group_id in everything, refused_topics.get(g.group_id, ()))
                       for g in response.groups)
    return ctx.build(throttle_time=0, groups=served + tuple(refused_groups))


def _merge_refused(ctx: RequestContext, group: Any, everything: bool, refused: Sequence[Any]) -> Any:
    """A served group's answer with its refused topics added; when it asked for every topic, the topics the
    principal may not describe are left out instead (as Kafka filters them, like OffsetFetch)."""
    if group.error_code != ErrorCode.none:
        return group
    topics = tuple(group.topics)
    if everything:
        topics = tuple(
            t for t in topics if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic_name, log_denial=False)
        )
    return dataclasses.replace(group, topics=topics + tuple(refused))


async def authorize_alter_share_group_offsets(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """GROUP READ (refusing the whole request), then TOPIC READ on each topic, as Kafka checks."""
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return refused_whole(ctx, GROUP_DENIED)
    refused = partitions_entry("responses", "partitions", "partition_index", topic_field="topic_name",
                               error_message=_message(TOPIC_DENIED))
    return await split(ctx, request, handler, ("topics", "responses"),
                       denial=topics_denied(ctx, AclOperation.READ, "topic_name"), refused=refused)


async def authorize_delete_share_group_offsets(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """GROUP DELETE (refusing the whole request), then TOPIC READ on each topic, as Kafka checks."""
    if not ctx.allowed(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return refused_whole(ctx, GROUP_DENIED)

    def refused(response_cls: type[Any], item: Any, code: ErrorCode) -> Any:
        return schema.build_nested(response_cls, "responses", topic_name=item.topic_name, error_code=code,
                                   error_message=_message(code))

    return await split(ctx, request, handler, ("topics", "responses"),
                       denial=topics_denied(ctx, AclOperation.READ, "topic_name"), refused=refused)
