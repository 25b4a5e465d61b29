"""OffsetFetch (key 9) v1-8: committed positions of a group (v8: of several groups in one request).

A null topic list (v2+) asks for every partition the group has committed. ``require_stable`` (v7+) asks the
broker to answer UNSTABLE_OFFSET_COMMIT for a partition whose offset is pending in an open transaction
(TxnOffsetCommit), so a consumer does not start from a position the transaction may still roll back. A fetch
first waits for the commits its connection sent before it (commit_order.py), so a client reads back what it
committed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from broker.groups.coordinator import FetchedOffset
from broker.handlers.context import RequestContext
from broker.handlers.group_common import coordinator
from wire import schema


def _requested(topics: Any) -> list[tuple[str, int]] | None:
    if topics is None:
        return None
    return [(t.name, p) for t in topics for p in t.partition_indexes]


def _fetch(
    ctx: RequestContext, group_id: str, topics: Any, require_stable: bool
) -> tuple[ErrorCode, list[FetchedOffset]]:
    groups = coordinator(ctx)
    if groups is None:
        return ErrorCode.coordinator_not_available, []
    return groups.fetch_offsets(group_id, _requested(topics), require_stable=require_stable)


def _topics(topic_cls: type[Any], fetched: list[FetchedOffset]) -> tuple[Any, ...]:
    by_topic: dict[str, list[FetchedOffset]] = {}
    for f in fetched:
        by_topic.setdefault(f.topic, []).append(f)
    return tuple(
        schema.build(
            topic_cls,
            name=name,
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
        for name, items in by_topic.items()
    )


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
            error, fetched = _fetch(ctx, group.group_id, group.topics, require_stable)
            results.append(
                schema.build(group_cls, group_id=group.group_id, topics=_topics(topic_cls, fetched), error_code=error)
            )
        return ctx.build(throttle_time=0, groups=tuple(results))
    topic_cls = schema.field_entity(cls, "topics")
    error, fetched = _fetch(ctx, request.group_id, request.topics, require_stable)
    if error is not ErrorCode.none and ctx.api_version < 2 and request.topics is not None:
        # v1 has no top-level error: every requested partition carries it.
        fetched = [FetchedOffset(t, p, -1, -1, "", error) for t, p in _requested(request.topics) or []]
    return ctx.build(throttle_time=0, error_code=error, topics=_topics(topic_cls, fetched))
