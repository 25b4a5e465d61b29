"""ListGroups (key 16) v0-5: the groups this broker coordinates (v4: filtered by state, v5: by type).

Every group here uses the classic protocol; v5 names that type, and a types filter without "classic" (Kafka 4.0
tools ask for "consumer" groups, KIP-848) matches nothing.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.group_common import coordinator
from wire import schema

CLASSIC_GROUP_TYPE = "classic"


async def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    groups = coordinator(ctx)
    if groups is None:
        return ctx.build(error_code=ErrorCode.coordinator_not_available)
    error, listed = groups.list_groups(getattr(request, "states_filter", ()) or ())
    types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
    if types and CLASSIC_GROUP_TYPE not in types:
        listed = []
    return ctx.build(
        throttle_time=0,
        error_code=error,
        groups=tuple(
            schema.build_nested(
                ctx.response_class,
                "groups",
                group_id=g.group_id,
                protocol_type=g.protocol_type or "",
                group_state=g.state.value,
                group_type=CLASSIC_GROUP_TYPE,
            )
            for g in listed
        ),
    )
