"""OffsetCommit (key 8) v2-10: consumers store their positions; answered once the commit is durable.

v9 renamed the generation to ``generation_id_or_member_epoch`` (a KIP-848 member sends its epoch there); it reaches
the coordinator unchanged, with the request's version, and a classic group reads it as its generation as before.
v10 names topics by id: each is resolved through the cluster's metadata image, and a topic id the cluster does not
know answers UNKNOWN_TOPIC_ID for each of its partitions (the answer echoes the ids), as Kafka does.

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
    by_id = ctx.broker.controller.image.topics_by_id

    def name_of(topic: Any) -> str | None:
        if not schema.has_field(type(topic), "topic_id"):
            return str(topic.name)
        found = by_id.get(topic.topic_id)
        return found.name if found is not None else None

    offsets = requested_offsets(request.topics, name_of)
    retention = schema.millis(request.retention_time) if ctx.api_version <= 4 else -1
    results = await groups.commit_offsets(
        request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        generation_id=request.generation_id_or_member_epoch,
        offsets=offsets,
        retention_ms=retention,
        api_version=ctx.api_version,
    )
    return ctx.build(throttle_time=0, topics=partition_errors(cls, request.topics, results, name_of))


async def authorize_offset_commit(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """GROUP READ (refusing every partition when denied), then TOPIC READ on each topic, as Kafka checks."""
    refused = partitions_entry("topics", "partitions", "partition_index")
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.build(topics=tuple(refused(ctx.response_class, t, GROUP_DENIED) for t in request.topics))
    return await split(
        ctx, request, handler, ("topics", "topics"), denial=topics_denied(ctx, AclOperation.READ), refused=refused
    )
