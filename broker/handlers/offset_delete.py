"""OffsetDelete (key 47) v0: drops a group's committed offsets for partitions it no longer consumes."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.group_common import coordinator, partition_errors


async def handle_offset_delete(ctx: RequestContext, request: Any) -> Any:
    groups = coordinator(ctx)
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    if groups is None:
        return ctx.build(error_code=ErrorCode.coordinator_not_available, throttle_time=0)
    error, results = await groups.delete_offsets(request.group_id, wanted)
    if error is not ErrorCode.none:
        return ctx.build(error_code=error, throttle_time=0)
    topics = partition_errors(ctx.response_class, request.topics, results)
    return ctx.build(error_code=ErrorCode.none, throttle_time=0, topics=topics)
