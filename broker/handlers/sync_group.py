"""SyncGroup (key 14) v0-5: the leader hands in the assignment; every member gets its own share back."""

from __future__ import annotations

from typing import Any

from broker.handlers.context import RequestContext


async def handle_sync_group(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.broker.groups
    assignments: dict[str, bytes] = {}
    for item in request.assignments:
        assignments[item.member_id] = bytes(item.assignment)
    result = await groups.sync_group(
        request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        generation_id=request.generation_id,
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments=assignments,
    )
    return ctx.build(
        throttle_time=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )
