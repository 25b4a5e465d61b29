"""DeleteGroups (key 42) v0-2: removes empty groups (classic, consumer and share groups) and their committed offsets
(tombstones).

A share group's share-partition state goes first, as Kafka's GroupCoordinatorService deletes it through its
persister before the group: every partition of the topics the group has state on is asked of its leader
(``broker.share.state_rpc``); a group whose state could not all be deleted keeps existing and answers that error,
so the deletion can be retried.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, per_group
from metadata.acl.binding import AclOperation
from wire import schema

#: A partition whose share state is already gone (or whose topic is) needs nothing more.
_NOTHING_LEFT: Final = frozenset((ErrorCode.none, ErrorCode.unknown_topic_or_partition))


async def _share_state_error(ctx: RequestContext, group_id: str) -> ErrorCode:
    """Deletes an empty share group's state on its partitions' leaders; the first failure, or NONE."""
    groups = ctx.broker.groups
    image = ctx.broker.controller.image
    partitions = [
        (name, p)
        for name in groups.share_group_topics(group_id)
        if (topic := image.topics_by_name.get(name)) is not None
        for p in sorted(topic.partitions)
    ]
    if not partitions:
        return ErrorCode.none
    deleted = await ctx.broker.share_offsets.access.deletes(group_id, partitions)
    return next((code for code in deleted.values() if code not in _NOTHING_LEFT), ErrorCode.none)


async def handle_delete_groups(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.broker.groups
    names = list(request.groups_names)
    results: dict[str, ErrorCode] = {}
    for name in dict.fromkeys(n for n in names if n):
        error, _message, share_group = groups.describe_share_group(name)
        if error is ErrorCode.none and share_group is not None and share_group.is_empty:
            failed = await _share_state_error(ctx, name)
            if failed is not ErrorCode.none:
                results[name] = failed
    remaining = [n for n in dict.fromkeys(n for n in names if n) if n not in results]
    results.update(await groups.delete_groups(remaining))
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
