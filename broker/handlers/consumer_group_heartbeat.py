"""ConsumerGroupHeartbeat (key 68) v0-1: the KIP-848 consumer protocol's one membership request.

A member joins (epoch 0), heartbeats at its epoch (reporting the partitions it owns), and leaves (epoch -1, or -2 for
a static member that will be back); each answer carries its epoch and, when it changed, its assignment. v1 (KIP-1082)
makes the member id the client's own (a UUID it keeps for its lifetime) and adds regex subscriptions. The request is
checked here as Kafka checks it (INVALID_REQUEST naming the field, UNSUPPORTED_ASSIGNOR,
INVALID_REGULAR_EXPRESSION) before the group sees it. The protocol is off (UNSUPPORTED_VERSION, with a message
saying why) when ``group.coordinator.rebalance.protocols`` leaves it out or the ``group.version`` feature is
finalized below 1 (``kafka-features.sh downgrade --feature group.version=0``), as in Kafka 4.
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from broker.groups.consumer.group import HeartbeatRequest, HeartbeatResult
from broker.groups.consumer.member import JOIN_EPOCH, STATIC_LEAVE_EPOCH
from broker.groups.consumer_membership import Audience
from broker.handlers.context import Handler, RequestContext
from broker.handlers.group_common import member_host
from broker.handlers.guards import GROUP_DENIED, TOPIC_DENIED, refused_whole
from broker.name_patterns import InvalidRegex, compile_regex
from metadata.acl.binding import AclOperation, ResourceType
from settings.kafka_uuid import new_kafka_uuid
from wire import schema
from wire.api_versions import GROUP_VERSION
from wire.stored_schema import MAX_STORED_STRING_BYTES


class _Invalid(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def new_member_id() -> str:
    """A member id as Kafka makes one (its Uuid's URL-safe base64 form), for v0 members joining without one."""
    return new_kafka_uuid()


def _owned(request: Any) -> dict[uuid.UUID, frozenset[int]] | None:
    if request.topic_partitions is None:
        return None
    owned: dict[uuid.UUID, frozenset[int]] = {}
    for tp in request.topic_partitions:
        if tp.topic_id is not None:
            owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(int(p) for p in tp.partitions)
    return owned


def _check(ctx: RequestContext, request: Any) -> None:
    """Kafka's checks of the request, in Kafka's order; raises _Invalid with its code and message."""
    regex = getattr(request, "subscribed_topic_regex", None)
    epoch = int(request.member_epoch)

    def non_empty(value: str | None, what: str) -> None:
        if value is not None and not value:
            raise _Invalid(ErrorCode.invalid_request, f"{what} can't be empty.")
        if value is not None and len(value.encode("utf-8")) > MAX_STORED_STRING_BYTES:
            raise _Invalid(ErrorCode.invalid_request, f"{what} is longer than {MAX_STORED_STRING_BYTES} bytes.")

    non_empty(request.group_id, "GroupId")
    non_empty(request.instance_id, "InstanceId")
    non_empty(request.rack_id, "RackId")
    if ctx.api_version >= 1 or epoch != JOIN_EPOCH:
        non_empty(request.member_id or "", "MemberId")
    if epoch == JOIN_EPOCH:
        if schema.millis(request.rebalance_timeout) == -1:
            raise _Invalid(ErrorCode.invalid_request, "RebalanceTimeoutMs must be provided in first request.")
        if request.topic_partitions is None or request.topic_partitions:
            raise _Invalid(ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining.")
        if request.subscribed_topic_names is None and regex is None:
            raise _Invalid(
                ErrorCode.invalid_request,
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
            )
    elif epoch == STATIC_LEAVE_EPOCH:
        if request.instance_id is None:
            raise _Invalid(ErrorCode.invalid_request, "InstanceId can't be null.")
    elif epoch < STATIC_LEAVE_EPOCH:
        raise _Invalid(ErrorCode.invalid_request, "MemberEpoch is invalid.")
    if regex:
        try:
            compile_regex(regex)
        except InvalidRegex as exc:
            raise _Invalid(ErrorCode.invalid_regular_expression, str(exc)) from None
    assignor = request.server_assignor
    known = ctx.broker.groups.consumer_config.assignors
    if assignor is not None and assignor and assignor not in known:
        raise _Invalid(
            ErrorCode.unsupported_assignor,
            f"ServerAssignor {assignor} is not supported. Supported assignors: {', '.join(known)}.",
        )


def _answer(ctx: RequestContext, result: HeartbeatResult) -> Any:
    assignment = None
    if result.assignment is not None:
        assignment = schema.build(
            schema.field_entity(ctx.response_class, "assignment"),
            topic_partitions=tuple(
                schema.build_nested(
                    schema.field_entity(ctx.response_class, "assignment"),
                    "topic_partitions",
                    topic_id=topic_id,
                    partitions=tuple(sorted(partitions)),
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


async def handle_consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.broker.groups
    disabled = None
    if not groups.consumer_protocol_enabled:
        disabled = "the consumer group protocol is disabled (group.coordinator.rebalance.protocols)"
    elif ctx.broker.controller.image.feature_level(GROUP_VERSION.name) < 1:
        disabled = "the consumer group protocol is disabled: feature group.version is finalized below 1"
    if disabled is not None:
        return _answer(ctx, HeartbeatResult(ErrorCode.unsupported_version, disabled, member_id=request.member_id))
    try:
        _check(ctx, request)
    except _Invalid as exc:
        return _answer(ctx, HeartbeatResult(exc.code, str(exc), member_id=request.member_id))
    member_id = request.member_id
    if not member_id and int(request.member_epoch) == JOIN_EPOCH:
        member_id = new_member_id()
    heartbeat = HeartbeatRequest(
        member_id=member_id,
        member_epoch=int(request.member_epoch),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=schema.millis(request.rebalance_timeout),
        subscribed_topic_names=(
            tuple(request.subscribed_topic_names) if request.subscribed_topic_names is not None else None
        ),
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=_owned(request),
        client_id=ctx.client_id or "",
        client_host=member_host(ctx),
    )
    return _answer(ctx, await groups.consumer_group_heartbeat(request.group_id, heartbeat, _audience(ctx)))


def _audience(ctx: RequestContext) -> Audience | None:
    """With an authorizer, who heartbeats: a regex subscription matches only the topics it may DESCRIBE (Kafka's
    regex resolution filters them so), resolved with the principal whose heartbeat finds the group's regexes stale
    (the topics or the ACLs changed)."""
    authorizer, principal, host, listener = ctx.authorizer, ctx.principal, ctx.client_host, ctx.listener_name
    if not authorizer.enabled:
        return None

    def describable(name: str) -> bool:  # holds no request: the group keeps its last heartbeat's audience
        return authorizer.allowed(principal, host, listener, AclOperation.DESCRIBE, resource=ResourceType.TOPIC,
                                  name=name, log_denial=False)

    return Audience((principal, host, listener), describable)


async def authorize_consumer_group_heartbeat(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """GROUP READ on the group, then TOPIC DESCRIBE on every subscribed topic name (TOPIC_AUTHORIZATION_FAILED
    when any is refused, whether or not it exists), as Kafka's KafkaApis checks: a subscription is no way to learn
    which topics exist. The topics a regex matches are not filtered by TOPIC DESCRIBE here (Kafka's regex
    resolution does filter them); describing the group hides them (``guards.per_group_with_topics``)."""
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return refused_whole(ctx, GROUP_DENIED)
    names = set(request.subscribed_topic_names or ())
    if any(not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, n) for n in sorted(names)):
        # Kafka's answer carries the error code alone (member epoch and interval at their defaults, no message).
        return ctx.build(throttle_time=0, error_code=TOPIC_DENIED)
    return await handler(ctx, request)
