"""Heartbeat (key 12) v0-4: keeps a member's session alive and tells it when a rebalance is under way."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.group_common import coordinator


async def handle_heartbeat(ctx: RequestContext, request: Any) -> Any:
    groups = coordinator(ctx)
    if groups is None:
        return ctx.build(error_code=ErrorCode.coordinator_not_available)
    error = groups.heartbeat(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None), request.generation_id
    )
    return ctx.build(throttle_time=0, error_code=error)
