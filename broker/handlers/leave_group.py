"""LeaveGroup (key 13) v0-5: members leave at once instead of waiting for their session to expire.

v3+ carries a batch of member identities (static members leave by group.instance.id, e.g. from the admin
client's removeMembersFromConsumerGroup) and answers per member.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from wire import schema


async def handle_leave_group(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.broker.groups
    if ctx.api_version < 3:
        error, results = groups.leave_group(request.group_id, [(request.member_id, None)])
        return ctx.build(throttle_time=0, error_code=results[0] if error is ErrorCode.none else error)
    identities = [(m.member_id, m.group_instance_id) for m in request.members]
    reasons = {r for m in request.members if (r := getattr(m, "reason", None))}
    error, results = groups.leave_group(request.group_id, identities, "; ".join(sorted(reasons)) or None)
    members = tuple(
        schema.build_nested(
            ctx.response_class, "members", member_id=member_id, group_instance_id=instance_id, error_code=code
        )
        for (member_id, instance_id), code in zip(identities, results, strict=False)
    )
    return ctx.build(throttle_time=0, error_code=error, members=members)
