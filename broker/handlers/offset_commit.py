"""OffsetCommit (key 8) v2-8: consumers store their positions; answered once the commit is durable.

A commit in progress is registered (commit_order.py) so that an OffsetFetch sent after it on the same connection
waits for it, as it would in Kafka.
"""

from __future__ import annotations

from typing import Any

from broker.handlers.context import Handler, RequestContext
from broker.handlers.group_common import partition_errors, requested_offsets
from broker.handlers.guards import GROUP_DENIED, partitions_entry, split, topics_denied
from metadata.acl.binding import AclOperation, ResourceType
from wire import schema


async def handle_offset_commit(ctx: RequestContext, request: Any) -> Any:
    # Registered before the first suspension: handlers start in arrival order.
    pending = ctx.connection.commits
    key = request.group_id
    done = pending.begin(key)
    try:
        return await _commit(ctx, request)
    finally:
        pending.end(key, done)


async def _commit(ctx: RequestContext, request: Any) -> Any:
    cls = ctx.response_class
    groups = ctx.broker.groups
    offsets = requested_offsets(request.topics)
    retention = schema.millis(request.retention_time) if ctx.api_version <= 4 else -1
    results = await groups.commit_offsets(
        request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        generation_id=request.generation_id_or_member_epoch,
        offsets=offsets,
        retention_ms=retention,
    )
    return ctx.build(throttle_time=0, topics=partition_errors(cls, request.topics, results))


async def authorize_offset_commit(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """GROUP READ (refusing every partition when denied), then TOPIC READ on each topic, as Kafka checks."""
    refused = partitions_entry("topics", "partitions", "partition_index")
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.build(topics=tuple(refused(ctx.response_class, t, GROUP_DENIED) for t in request.topics))
    return await split(
        ctx, request, handler, ("topics", "topics"), denial=topics_denied(ctx, AclOperation.READ), refused=refused
    )
