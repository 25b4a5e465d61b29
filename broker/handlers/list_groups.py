"""ListGroups (key 16) v0-5: the groups this broker coordinates (v4: filtered by state, v5: by type, ``classic``,
``consumer`` (KIP-848) or ``share`` (KIP-932), case-insensitive as Kafka matches them; an unknown type matches
nothing)."""

from __future__ import annotations

import dataclasses
from typing import Any

from broker.handlers.context import Handler, RequestContext
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from wire import schema


async def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.broker.groups
    error, listed = groups.list_groups(
        getattr(request, "states_filter", ()) or (), getattr(request, "types_filter", ()) or ()
    )
    return ctx.build(
        throttle_time=0,
        error_code=error,
        groups=tuple(
            schema.build_nested(
                ctx.response_class,
                "groups",
                group_id=g.group_id,
                protocol_type=g.protocol_type or "",
                group_state=g.state_name,
                group_type=g.group_type,
            )
            for g in listed
        ),
    )


async def authorize_list_groups(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """Kafka lists only the groups the principal may describe (all of them with CLUSTER DESCRIBE; no error for the
    others)."""
    response = await handler(ctx, request)
    if ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False):
        return response
    return dataclasses.replace(
        response,
        groups=tuple(
            g
            for g in response.groups
            if ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id, log_denial=False)
        ),
    )
