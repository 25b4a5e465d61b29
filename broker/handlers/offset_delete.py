"""OffsetDelete (key 47) v0: drops a group's committed offsets for partitions it no longer consumes."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.group_common import partition_errors
from broker.handlers.guards import GROUP_DENIED, partitions_entry, refused_whole, split, topics_denied
from metadata.acl.binding import AclOperation, ResourceType


async def handle_offset_delete(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.broker.groups
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, results = await groups.delete_offsets(request.group_id, wanted)
    if error is not ErrorCode.none:
        return ctx.build(error_code=error, throttle_time=0)
    topics = partition_errors(ctx.response_class, request.topics, results)
    return ctx.build(error_code=ErrorCode.none, throttle_time=0, topics=topics)


async def authorize_offset_delete(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """GROUP DELETE (refusing the whole request when denied), then TOPIC READ on each topic, as Kafka checks."""
    if not ctx.allowed(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return refused_whole(ctx, GROUP_DENIED)
    refused = partitions_entry("topics", "partitions", "partition_index")
    return await split(
        ctx, request, handler, ("topics", "topics"), denial=topics_denied(ctx, AclOperation.READ), refused=refused
    )
