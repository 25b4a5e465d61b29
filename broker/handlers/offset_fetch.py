"""OffsetFetch (key 9) v1-10: committed positions of a group (v8: of several groups in one request).

v9 adds the asking member's id and epoch per group (a KIP-848 member sends them; an admin client sends null and -1):
they are passed to the coordinator, and a classic group answers as before. v10 names topics by id: each requested id
is resolved through the cluster's metadata image (an unknown one answers UNKNOWN_TOPIC_ID for each of its
partitions), and each answered topic carries its id; in an every-topic answer, a committed topic the cluster no
longer has is left out, since a v10 answer could only name it by an id it no longer has.

A null topic list (v2+) asks for every partition the group has committed. ``require_stable`` (v7+) asks the
broker to answer UNSTABLE_OFFSET_COMMIT for a partition whose offset is pending in an open transaction
(TxnOffsetCommit), so a consumer does not start from a position the transaction may still roll back. A fetch
first waits for the commits its connection sent before it (commit_order.py), so a client reads back what it
committed.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from broker.groups.offset_commits import FetchedOffset
from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import GROUP_DENIED, TOPIC_DENIED, split
from metadata.acl.binding import AclOperation, ResourceType
from wire import schema

#: From this version OffsetFetch names topics by id.
TOPIC_IDS_VERSION = 10


def _requested(topics: Any, name_of: Callable[[Any], str | None]) -> list[tuple[str, int]] | None:
    if topics is None:
        return None
    return [(name, p) for t in topics if (name := name_of(t)) is not None for p in t.partition_indexes]


def _namer(ctx: RequestContext) -> Callable[[Any], str | None]:
    """A request topic's name: its ``name``, or (v10) the name of its id in the metadata image, None if unknown."""
    if ctx.api_version < TOPIC_IDS_VERSION:
        return lambda topic: str(topic.name)
    by_id = ctx.broker.controller.image.topics_by_id

    def name_of(topic: Any) -> str | None:
        found = by_id.get(topic.topic_id)
        return found.name if found is not None else None

    return name_of


def _fetch(ctx: RequestContext, group: Any, topics: Any, require_stable: bool) -> tuple[ErrorCode, list[FetchedOffset]]:
    groups = ctx.broker.groups
    return groups.fetch_offsets(
        group if isinstance(group, str) else group.group_id,
        _requested(topics, _namer(ctx)),
        require_stable=require_stable,
        member_id=getattr(group, "member_id", None),
        member_epoch=getattr(group, "member_epoch", -1),
    )


def _topics(ctx: RequestContext, topic_cls: type[Any], fetched: list[FetchedOffset], topics: Any) -> tuple[Any, ...]:
    """The answered topics: the fetched ones (with their ids at v10), then, at v10, each requested id the cluster
    does not know with UNKNOWN_TOPIC_ID on each partition."""
    by_id = ctx.api_version >= TOPIC_IDS_VERSION
    by_name = ctx.broker.controller.image.topics_by_name
    by_topic: dict[str, list[FetchedOffset]] = {}
    for f in fetched:
        by_topic.setdefault(f.topic, []).append(f)
    out = []
    for name, items in by_topic.items():
        known = by_name.get(name)
        if by_id and known is None:
            continue  # deleted since it was committed: a v10 answer has no id to name it by
        out.append(
            schema.build(
                topic_cls,
                name=name,
                topic_id=known.topic_id if known is not None else None,
                partitions=tuple(
                    schema.build_nested(
                        topic_cls,
                        "partitions",
                        partition_index=f.partition,
                        committed_offset=f.offset,
                        committed_leader_epoch=f.leader_epoch,
                        metadata=f.metadata,
                        error_code=f.error,
                    )
                    for f in items
                ),
            )
        )
    if by_id:
        name_of = _namer(ctx)
        for topic in topics or ():
            if name_of(topic) is None:
                out.append(
                    schema.build(
                        topic_cls,
                        topic_id=topic.topic_id,
                        partitions=tuple(
                            schema.build_nested(
                                topic_cls,
                                "partitions",
                                partition_index=p,
                                committed_offset=-1,
                                committed_leader_epoch=-1,
                                metadata="",
                                error_code=ErrorCode.unknown_topic_id,
                            )
                            for p in topic.partition_indexes
                        ),
                    )
                )
    return tuple(out)


async def handle_offset_fetch(ctx: RequestContext, request: Any) -> Any:
    group_ids = [g.group_id for g in request.groups] if ctx.api_version >= 8 else [request.group_id]
    # Taken before the first suspension: exactly the commits this connection sent before this request.
    pending = ctx.connection.commits
    earlier = [done for group_id in group_ids for done in pending.earlier(group_id)]
    if earlier:
        await asyncio.wait(earlier)
    cls = ctx.response_class
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.api_version >= 8:
        group_cls = schema.field_entity(cls, "groups")
        topic_cls = schema.field_entity(group_cls, "topics")
        results = []
        for group in request.groups:
            error, fetched = _fetch(ctx, group, group.topics, require_stable)
            answered = _topics(ctx, topic_cls, fetched, group.topics) if error is ErrorCode.none else ()
            results.append(schema.build(group_cls, group_id=group.group_id, topics=answered, error_code=error))
        return ctx.build(throttle_time=0, groups=tuple(results))
    topic_cls = schema.field_entity(cls, "topics")
    error, fetched = _fetch(ctx, request.group_id, request.topics, require_stable)
    if error is not ErrorCode.none and ctx.api_version < 2 and request.topics is not None:
        # v1 has no top-level error: every requested partition carries it.
        fetched = [FetchedOffset(t, p, -1, -1, "", error) for t, p in _requested(request.topics, _namer(ctx)) or []]
    return ctx.build(throttle_time=0, error_code=error, topics=_topics(ctx, topic_cls, fetched, request.topics))


def _describable(ctx: RequestContext, topics: Sequence[Any], named: bool) -> tuple[Any, ...]:
    """OffsetFetch's answered topics as Kafka shows them: a topic the principal may not DESCRIBE is left out of an
    every-topic answer, and answered TOPIC_AUTHORIZATION_FAILED when the request named it."""
    by_id = ctx.broker.controller.image.topics_by_id
    out = []
    for topic in topics:
        name = getattr(topic, "name", None)
        if name is None:  # v10: by id; an unknown id already answers UNKNOWN_TOPIC_ID, before any ACL check
            known = by_id.get(topic.topic_id)
            if known is None:
                out.append(topic)
                continue
            name = known.name
        if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denial=named):
            out.append(topic)
        elif named:
            topic_cls = type(topic)
            out.append(
                dataclasses.replace(
                    topic,
                    partitions=tuple(
                        schema.build_nested(
                            topic_cls,
                            "partitions",
                            partition_index=p.partition_index,
                            committed_offset=-1,
                            metadata="",
                            error_code=TOPIC_DENIED,
                        )
                        for p in topic.partitions
                    ),
                )
            )
    return tuple(out)


async def authorize_offset_fetch(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """GROUP DESCRIBE on each group (v8: per group; before: the whole request), then TOPIC DESCRIBE on the
    answered topics (:func:`_describable`), as Kafka checks."""
    if ctx.api_version >= 8:

        def refused_group(response_cls: type[Any], group: Any, code: ErrorCode) -> Any:
            return schema.build_nested(response_cls, "groups", group_id=group.group_id, error_code=code)

        response = await split(
            ctx,
            request,
            handler,
            ("groups", "groups"),
            denial=lambda g: (
                None if ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id) else GROUP_DENIED
            ),
            refused=refused_group,
        )
        named = {g.group_id: g.topics is not None for g in request.groups}
        return dataclasses.replace(
            response,
            groups=tuple(
                dataclasses.replace(g, topics=_describable(ctx, g.topics, named.get(g.group_id, False)))
                for g in response.groups
            ),
        )
    if ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, request.group_id):
        response = await handler(ctx, request)
        return dataclasses.replace(response, topics=_describable(ctx, response.topics, request.topics is not None))
    if ctx.api_version >= 2:
        return ctx.build(error_code=GROUP_DENIED)
    topic_cls = schema.field_entity(ctx.response_class, "topics")
    return ctx.build(
        topics=tuple(
            schema.build(
                topic_cls,
                name=t.name,
                partitions=tuple(
                    schema.build_nested(
                        topic_cls,
                        "partitions",
                        partition_index=p,
                        committed_offset=-1,
                        metadata="",
                        error_code=GROUP_DENIED,
                    )
                    for p in t.partition_indexes
                ),
            )
            for t in request.topics or ()
        )
    )
