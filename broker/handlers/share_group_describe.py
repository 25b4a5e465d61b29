"""ShareGroupDescribe (key 77) v1: a KIP-932 share group's epochs, assignor and members, each with the partitions
it was assigned (what ``kafka-share-groups.sh --describe --members`` shows). A group that does not exist, or is
not a share group, answers GROUP_ID_NOT_FOUND, as Kafka; every group answers UNSUPPORTED_VERSION while the
cluster's ``share.version`` is 0."""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker import authorized_operations
from broker.handlers.consumer_group_describe import described_assignment, described_failure
from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, per_group_with_topics
from broker.handlers.share_group_heartbeat import SHARE_GROUPS_OFF
from metadata.acl.binding import AclOperation, ResourceType
from metadata.group_configs import share_groups_enabled
from wire import schema


async def handle_share_group_describe(ctx: RequestContext, request: Any) -> Any:
    group_cls = schema.field_entity(ctx.response_class, "groups")
    member_cls = schema.field_entity(group_cls, "members")
    assignment_cls = schema.field_entity(member_cls, "assignment")
    groups = ctx.broker.groups
    image = ctx.broker.controller.image
    asked = bool(getattr(request, "include_authorized_operations", False))
    enabled = share_groups_enabled(image)
    described = []
    for group_id in request.group_ids:
        operations = ctx.authorized_operations(asked, ResourceType.GROUP, group_id, authorized_operations.GROUP)
        if enabled:
            error, message, group = groups.describe_share_group(group_id)
        else:
            error, message, group = ErrorCode.unsupported_version, SHARE_GROUPS_OFF, None
        if group is None or error is not ErrorCode.none:
            described.append(described_failure(group_cls, group_id, error, message, operations))
            continue
        members = tuple(
            schema.build(
                member_cls,
                member_id=member.member_id,
                rack_id=member.rack_id,
                member_epoch=member.member_epoch,
                client_id=member.client_id,
                client_host=member.client_host,
                subscribed_topic_names=tuple(sorted(member.subscribed_topic_names)),
                assignment=described_assignment(assignment_cls, image, member.assigned),
            )
            for member in group.describe_members()
        )
        described.append(
            schema.build(
                group_cls,
                error_code=ErrorCode.none,
                group_id=group_id,
                group_state=group.state_name,
                group_epoch=group.group_epoch,
                assignment_epoch=group.target_epoch,
                assignor_name=group.assignor_name,
                members=members,
                authorized_operations=operations,
            )
        )
    return ctx.build(throttle_time=0, groups=tuple(described))


#: GROUP DESCRIBE on each group, as Kafka checks.
authorize_share_group_describe: Final[Guard] = per_group_with_topics(AclOperation.DESCRIBE, "group_ids", "groups")
