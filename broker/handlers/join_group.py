"""JoinGroup (key 11) v0-9: the first half of a rebalance; parks until every member has rejoined."""

from __future__ import annotations

from typing import Any

from broker.groups.classic.group import JoinRequest
from broker.handlers.context import RequestContext
from broker.handlers.group_common import member_host
from wire import schema


async def handle_join_group(ctx: RequestContext, request: Any) -> Any:
    cls = ctx.response_class
    groups = ctx.broker.groups
    # Before v7 the protocol name is a non-nullable string; an unset one is sent empty.
    nullable_name = schema.is_nullable(cls, "protocol_name")
    session_ms = schema.millis(request.session_timeout)
    join = JoinRequest(
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=member_host(ctx),
        session_timeout_ms=session_ms,
        # v0 has no rebalance timeout: the session timeout doubled as one.
        rebalance_timeout_ms=schema.millis(request.rebalance_timeout) if ctx.api_version >= 1 else session_ms,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        require_known_member_id=ctx.api_version >= 4,
        supports_skip_assignment=ctx.api_version >= 9,
        reason=getattr(request, "reason", None),
    )
    result = await groups.join_group(request.group_id, join)
    members = tuple(
        schema.build_nested(cls, "members", member_id=member_id, group_instance_id=instance_id, metadata=metadata)
        for member_id, instance_id, metadata in result.members
    )
    return ctx.build(
        throttle_time=0,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if result.protocol_name is not None or nullable_name else "",
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )
