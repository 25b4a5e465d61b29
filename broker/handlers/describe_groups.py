"""DescribeGroups (key 15) v0-6: state, protocol and members of groups.

A group this coordinator does not know is described as Dead with no error below v6, and from v6 (KIP-1043) answers
GROUP_ID_NOT_FOUND with a message, as Kafka 4 does (a share group's id too, saying it is not a classic group); a
classic group's member metadata and assignments are only filled in while the group is Stable. A KIP-848 consumer
group is described as Kafka describes it to this API (``broker.groups.consumer.classic_view``).
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker import authorized_operations
from broker.groups.classic.group import Group
from broker.groups.classic.state import GroupState
from broker.groups.consumer.classic_view import described_members
from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, per_group
from metadata.acl.binding import AclOperation, ResourceType
from wire import schema

#: From this version a group that does not exist is GROUP_ID_NOT_FOUND rather than a Dead group (KIP-1043).
_NOT_FOUND_VERSION = 6


async def handle_describe_groups(ctx: RequestContext, request: Any) -> Any:
    group_cls = schema.field_entity(ctx.response_class, "groups")
    groups = ctx.broker.groups
    asked = getattr(request, "include_authorized_operations", False)
    described = []
    for group_id in request.groups:
        operations = ctx.authorized_operations(asked, ResourceType.GROUP, group_id, authorized_operations.GROUP)
        error, group = groups.describe_group(group_id)
        missing = error is ErrorCode.none and (group is None or group.dead)
        if missing and ctx.api_version >= _NOT_FOUND_VERSION:
            described.append(
                schema.build(
                    group_cls,
                    error_code=ErrorCode.group_id_not_found,
                    error_message=_not_found_message(ctx, group_id),
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    authorized_operations=operations,
                )
            )
            continue
        if group is None or error is not ErrorCode.none:
            described.append(
                schema.build(
                    group_cls,
                    error_code=error,
                    group_id=group_id,
                    group_state=GroupState.DEAD.value,
                    protocol_type="",
                    protocol_data="",
                    authorized_operations=operations,
                )
            )
            continue
        if isinstance(group, Group):
            rows = [
                (m.member_id, m.group_instance_id, m.client_id, m.client_host, metadata, assignment)
                for m, metadata, assignment in group.describe_members()
            ]
            protocol_data = (group.protocol_name or "") if group.state is GroupState.STABLE else ""
        else:
            rows = list(described_members(group, ctx.broker.controller.image.topics_by_id))
            protocol_data = group.assignor_name or next(iter(groups.consumer_config.assignors), "")
        members = tuple(
            schema.build_nested(
                group_cls,
                "members",
                member_id=member_id,
                group_instance_id=instance_id,
                client_id=client_id,
                client_host=client_host,
                member_metadata=metadata,
                member_assignment=assignment,
            )
            for member_id, instance_id, client_id, client_host, metadata, assignment in rows
        )
        described.append(
            schema.build(
                group_cls,
                error_code=ErrorCode.none,
                group_id=group_id,
                group_state=group.state_name,
                protocol_type=group.protocol_type or "",
                protocol_data=protocol_data,
                members=members,
                authorized_operations=operations,
            )
        )
    return ctx.build(throttle_time=0, groups=tuple(described))


#: GROUP DESCRIBE on each group, as Kafka checks.
authorize_describe_groups: Final[Guard] = per_group(AclOperation.DESCRIBE, "groups", "groups")


def _not_found_message(ctx: RequestContext, group_id: str) -> str:
    """Kafka's classic lookup rejects a share group by its type ("not a classic group"), not as absent."""
    _error, _message, share_group = ctx.broker.groups.describe_share_group(group_id)
    return f"Group {group_id} {'is not a classic group' if share_group is not None else 'not found'}."
