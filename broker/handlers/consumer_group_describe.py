"""ConsumerGroupDescribe (key 69) v0-1: a KIP-848 consumer group's epochs, assignor and members, each with its
current assignment and its share of the target (what ``kafka-consumer-groups --describe --members`` shows for a
consumer group). A group that does not exist, or is not a consumer group, answers GROUP_ID_NOT_FOUND, as Kafka."""

from __future__ import annotations

import uuid
from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker import authorized_operations
from broker.groups.consumer.assignment import Assignment
from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, per_group_with_topics
from metadata.acl.binding import AclOperation, ResourceType
from metadata.image import MetadataImage
from wire import schema

#: ConsumerGroupDescribe v1's member types: a classic member (one still speaking JoinGroup during an online
#: migration) and a member that speaks the consumer protocol.
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1


def described_assignment(assignment_cls: type[Any], image: MetadataImage, assignment: Assignment) -> Any:
    """An assignment as the describe APIs show it, topics by name (ShareGroupDescribe shows its members' so too)."""
    def name(topic_id: uuid.UUID) -> str:
        topic = image.topics_by_id.get(topic_id)
        return topic.name if topic is not None else ""

    return schema.build(
        assignment_cls,
        topic_partitions=tuple(
            schema.build_nested(
                assignment_cls,
                "topic_partitions",
                topic_id=topic_id,
                topic_name=name(topic_id),
                partitions=tuple(sorted(ps)),
            )
            for topic_id, ps in sorted(assignment.items(), key=lambda item: name(item[0]))
            if ps
        ),
    )


def described_failure(
    group_cls: type[Any], group_id: str, error: ErrorCode, message: str | None, operations: int
) -> Any:
    """A group the describe APIs cannot show (not found, of another type, share groups off): its error, no members."""
    return schema.build(
        group_cls,
        error_code=error,
        error_message=message,
        group_id=group_id,
        group_state="",
        group_epoch=-1,
        assignment_epoch=-1,
        assignor_name="",
        members=(),
        authorized_operations=operations,
    )


async def handle_consumer_group_describe(ctx: RequestContext, request: Any) -> Any:
    group_cls = schema.field_entity(ctx.response_class, "groups")
    member_cls = schema.field_entity(group_cls, "members")
    assignment_cls = schema.field_entity(member_cls, "assignment")
    groups = ctx.broker.groups
    image = ctx.broker.controller.image
    asked = bool(getattr(request, "include_authorized_operations", False))
    described = []
    for group_id in request.group_ids:
        operations = ctx.authorized_operations(asked, ResourceType.GROUP, group_id, authorized_operations.GROUP)
        error, message, group = groups.describe_consumer_group(group_id)
        if group is None or error is not ErrorCode.none:
            described.append(described_failure(group_cls, group_id, error, message, operations))
            continue
        members = tuple(
            schema.build(
                member_cls,
                member_id=member.member_id,
                instance_id=member.instance_id,
                rack_id=member.rack_id,
                member_epoch=member.member_epoch,
                client_id=member.client_id,
                client_host=member.client_host,
                subscribed_topic_names=tuple(sorted(member.subscribed_topic_names)),
                subscribed_topic_regex=member.subscribed_topic_regex,
                assignment=described_assignment(assignment_cls, image, member.assigned),
                target_assignment=described_assignment(assignment_cls, image, target),
                member_type=CLASSIC_MEMBER_TYPE if member.classic is not None else CONSUMER_MEMBER_TYPE,
            )
            for member, target in group.describe_members()
        )
        described.append(
            schema.build(
                group_cls,
                error_code=ErrorCode.none,
                group_id=group_id,
                group_state=group.state_name,
                group_epoch=group.group_epoch,
                assignment_epoch=group.target_epoch,
                assignor_name=group.assignor_name or next(iter(groups.consumer_config.assignors), ""),
                members=members,
                authorized_operations=operations,
            )
        )
    return ctx.build(throttle_time=0, groups=tuple(described))


#: GROUP DESCRIBE on each group, as Kafka checks.
authorize_consumer_group_describe: Final[Guard] = per_group_with_topics(AclOperation.DESCRIBE, "group_ids", "groups")
