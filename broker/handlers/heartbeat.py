"""Heartbeat (key 12) v0-4: keeps a member's session alive and tells it when a rebalance is under way."""

from __future__ import annotations

from typing import Any

from broker.handlers.context import RequestContext


async def handle_heartbeat(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.broker.groups
    error = groups.heartbeat(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None), request.generation_id
    )
    return ctx.build(throttle_time=0, error_code=error)
