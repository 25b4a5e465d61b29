"""ShareGroupHeartbeat (key 76) v1: the one membership request of a KIP-932 share group.

A member joins (epoch 0, with the member id it made itself, a UUID kept for its lifetime, and its subscribed topic
names), heartbeats at its epoch and leaves (epoch -1); each answer carries its epoch and, when it changed, its
assignment: the partitions it may ShareFetch from, which other members of the group may be given too. The request
is checked here as Kafka checks it (INVALID_REQUEST naming the field) before the group sees it. v0 was Kafka 4.0's
early access and is gone from 4.2, as here. While the cluster's ``share.version`` is 0 it answers
UNSUPPORTED_VERSION, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.groups.share.group import ShareHeartbeat, ShareHeartbeatResult
from broker.groups.share.member import JOIN_EPOCH, LEAVE_EPOCH
from broker.handlers.context import Handler, RequestContext
from broker.handlers.group_common import member_host
from broker.handlers.guards import GROUP_DENIED, TOPIC_DENIED, refused_whole
from metadata.acl.binding import AclOperation, ResourceType
from metadata.group_configs import share_groups_enabled
from wire import schema
from wire.stored_schema import MAX_STORED_STRING_BYTES

#: The message of every share API's UNSUPPORTED_VERSION while the cluster's ``share.version`` is 0.
SHARE_GROUPS_OFF = "share groups are disabled: feature share.version is finalized at 0"


def _invalid(request: Any) -> str | None:
    """Kafka's ``throwIfShareGroupHeartbeatRequestIsInvalid``: the message of the first check that fails."""

    def empty(value: str | None, what: str) -> str | None:
        if value is not None and not value:
            return f"{what} can't be empty."
        if value is not None and len(value.encode("utf-8")) > MAX_STORED_STRING_BYTES:
            return f"{what} is longer than {MAX_STORED_STRING_BYTES} bytes."
        return None

    epoch = int(request.member_epoch)
    found = empty(request.member_id or "", "MemberId") or empty(request.group_id or "", "GroupId")
    found = found or empty(request.rack_id, "RackId")
    if found is not None:
        return found
    if epoch == JOIN_EPOCH and not request.subscribed_topic_names:
        return "SubscribedTopicNames must be set in first request."
    if epoch < LEAVE_EPOCH:
        return "MemberEpoch is invalid."
    return None


def _answer(ctx: RequestContext, result: ShareHeartbeatResult) -> Any:
    if result.error is not ErrorCode.none:
        # As Kafka's GroupCoordinatorService: a refused heartbeat carries its code and message only (a null member
        # id, epoch 0), so that no client takes an echoed epoch for one the coordinator gave it.
        return ctx.build(throttle_time=0, error_code=result.error, error_message=result.message, member_id=None,
                         member_epoch=0, heartbeat_interval=0, assignment=None)
    assignment = None
    if result.assignment is not None:
        assignment_cls = schema.field_entity(ctx.response_class, "assignment")
        assignment = schema.build(
            assignment_cls,
            topic_partitions=tuple(
                schema.build_nested(
                    assignment_cls, "topic_partitions", topic_id=topic_id, partitions=tuple(sorted(partitions))
                )
                for topic_id, partitions in sorted(result.assignment.items(), key=lambda item: str(item[0]))
            ),
        )
    return ctx.build(
        throttle_time=0,
        error_code=result.error,
        error_message=result.message,
        member_id=result.member_id or None,
        member_epoch=result.member_epoch,
        heartbeat_interval=result.heartbeat_interval_ms,
        assignment=assignment,
    )


async def handle_share_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    if not share_groups_enabled(ctx.broker.controller.image):
        off = ShareHeartbeatResult(ErrorCode.unsupported_version, SHARE_GROUPS_OFF, member_id=request.member_id)
        return _answer(ctx, off)
    message = _invalid(request)
    if message is not None:
        refused = ShareHeartbeatResult(ErrorCode.invalid_request, message, member_id=request.member_id)
        return _answer(ctx, refused)
    heartbeat = ShareHeartbeat(
        member_id=request.member_id,
        member_epoch=int(request.member_epoch),
        rack_id=request.rack_id,
        subscribed_topic_names=(
            tuple(request.subscribed_topic_names) if request.subscribed_topic_names is not None else None
        ),
        client_id=ctx.client_id or "",
        client_host=member_host(ctx),
    )
    return _answer(ctx, await ctx.broker.groups.share_group_heartbeat(request.group_id, heartbeat))


async def authorize_share_group_heartbeat(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """GROUP READ on the group, then TOPIC DESCRIBE on every subscribed topic (TOPIC_AUTHORIZATION_FAILED naming
    the refused ones), as Kafka's KafkaApis checks."""
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return refused_whole(ctx, GROUP_DENIED)
    names = request.subscribed_topic_names or ()
    denied = sorted(n for n in set(names) if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, n))
    if denied:
        return ctx.build(
            throttle_time=0,
            error_code=TOPIC_DENIED,
            error_message=f"The following topics are not authorized: {', '.join(denied)}",
            member_epoch=-1,
            heartbeat_interval=0,
        )
    return await handler(ctx, request)
