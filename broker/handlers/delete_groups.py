"""DeleteGroups (key 42) v0-2: removes empty groups (classic, consumer and share groups) and their committed offsets
(tombstones)."""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, per_group
from metadata.acl.binding import AclOperation
from wire import schema


async def handle_delete_groups(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.broker.groups
    names = list(request.groups_names)
    valid = [n for n in names if n]
    results = await groups.delete_groups(list(dict.fromkeys(valid)))
    # TODO(lead): a deleted share group's share-partition state goes with it (H-state's seam): for each name of
    # ``valid`` that ``groups.describe_share_group`` found before the deletion and whose result is NONE,
    # ``await ctx.broker.share_partitions.delete_group_state(name)``.
    results.update(dict.fromkeys((n for n in names if not n), ErrorCode.invalid_group_id))
    return ctx.build(
        throttle_time=0,
        results=tuple(
            schema.build_nested(ctx.response_class, "results", group_id=name, error_code=results[name])
            for name in dict.fromkeys(names)
        ),
    )


#: GROUP DELETE on each group, as Kafka checks.
authorize_delete_groups: Final[Guard] = per_group(AclOperation.DELETE, "groups_names", "results")
