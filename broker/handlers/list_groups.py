"""ListGroups (key 16) v0-4: the groups this broker coordinates (v4: filtered by state)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.group_common import coordinator
from broker.handlers.registry import RequestContext, handler
from broker.protocol import codec


@handler(api_key=16)
async def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    groups = coordinator(ctx)
    if groups is None:
        return ctx.build(error_code=ErrorCode.coordinator_not_available)
    error, listed = groups.list_groups(getattr(request, "states_filter", ()) or ())
    return ctx.build(
        throttle_time=0,
        error_code=error,
        groups=tuple(
            codec.build_nested(
                ctx.response_class,
                "groups",
                group_id=g.group_id,
                protocol_type=g.protocol_type or "",
                group_state=g.state.value,
            )
            for g in listed
        ),
    )
