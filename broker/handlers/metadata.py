"""Metadata (key 3) v0-13: brokers, cluster id, controller, topics with partitions and topic ids, auto-creation.

v13 adds a top-level error code (KIP-1102), with which a server may tell a client to re-bootstrap
(REBOOTSTRAP_REQUIRED); Kafka 4.2 brokers leave it 0 in every answer, and so does Fjord."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from broker import authorized_operations
from broker.groups.offsets_topic import OFFSETS_INTERNAL_TOPIC
from broker.handlers.context import RequestContext
from broker.transactions.state_topic import TRANSACTION_STATE
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from metadata.controller_api import NewTopic
from metadata.errors import ControllerError
from metadata.image import BrokerImage, MetadataImage, TopicImage
from metadata.move_leader import client_leader
from metadata.topic_names import validate_topic_name
from wire import schema
from wire.log_text import LOG_TEXT_MAX, untrusted

logger = logging.getLogger(__name__)

#: The coordinators' topics by name. A Metadata request may name one before its coordinator first used it; it is then
#: created as the coordinator would create it (Kafka's AutoTopicCreationManager.creatableTopic).
_INTERNAL = {topic.name: topic for topic in (OFFSETS_INTERNAL_TOPIC, TRANSACTION_STATE)}
INTERNAL_TOPICS = frozenset(_INTERNAL)


#: From this version a partition whose live leader has no endpoint on the client's listener is LISTENER_NOT_FOUND
#: (Kafka's ``errorUnavailableListeners``).
_LISTENER_ERRORS_VERSION = 6


def live_endpoint(broker: BrokerImage, listener_name: str) -> tuple[str, int] | None:
    """The (host, port) a client on ``listener_name`` should use for ``broker``; None when the broker has no
    such listener (Kafka leaves those brokers out of the response)."""
    for endpoint in broker.listeners:
        if endpoint.name == listener_name:
            return endpoint.host, endpoint.port
    return None


def client_controller_id(image: MetadataImage, own_node_id: int) -> int:
    """The id Metadata and DescribeCluster report as controller. As in KRaft, clients cannot reach controllers,
    so admin requests are routed to a live broker: the active controller if it is one, else this node."""
    live = {b.node_id for b in image.live_brokers()}
    return image.controller_id if image.controller_id in live else own_node_id


@dataclass(frozen=True, slots=True)
class _Brokers:
    """Which brokers a client on this listener can be sent to: ``live`` (registered, not fenced) and of those the
    ``reachable`` (an endpoint on the listener); ``no_listener`` is the error of a leader that is live but not
    reachable (Kafka: LISTENER_NOT_FOUND from v6, LEADER_NOT_AVAILABLE before)."""

    live: set[int]
    reachable: set[int]
    no_listener: ErrorCode


def _partition_entries(
    topic_cls: type[Any], topic: TopicImage, image: MetadataImage, brokers: _Brokers
) -> tuple[Any, ...]:
    """The topic's partitions as a client should route to them. A partition being moved has no leader between its
    source's letting go and its target's election; it is answered with that target and the epoch its election will
    give it, as the Produce and Fetch refusals' KIP-951 hints name it (``metadata.move_leader.client_leader``). A
    client that took the hint and then asked for metadata would otherwise read "no leader" at an older epoch, which
    it drops as stale while its leader query goes on asking (librdkafka repeats it every 100 ms until it reads a
    leader)."""
    live = brokers.live
    out = []
    for index in sorted(topic.partitions):
        p = topic.partitions[index]
        leader, epoch = client_leader(image, p)
        if leader >= 0 and leader in brokers.reachable:
            error = ErrorCode.none
        else:
            error = brokers.no_listener if leader in live else ErrorCode.leader_not_available
            leader = -1
        out.append(
            schema.build_nested(
                topic_cls,
                "partitions",
                error_code=error,
                partition_index=p.partition,
                leader_id=leader,
                leader_epoch=epoch,
                replica_nodes=p.replicas,
                isr_nodes=tuple(r for r in p.isr if r in live),
                offline_replicas=tuple(r for r in p.replicas if r not in live),
            )
        )
    return tuple(out)


def _topic_entry(topic_cls: type[Any], topic: TopicImage, image: MetadataImage, brokers: _Brokers, ops: int) -> Any:
    return schema.build(
        topic_cls,
        error_code=ErrorCode.none,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.name in INTERNAL_TOPICS,
        partitions=_partition_entries(topic_cls, topic, image, brokers),
        topic_authorized_operations=ops,
    )


def _error_topic(
    topic_cls: type[Any], code: ErrorCode, name: str | None, topic_id: uuid.UUID | None, ops: int
) -> Any:
    return schema.build(
        topic_cls,
        error_code=code,
        name=name if name is not None else ("" if not schema.is_nullable(topic_cls, "name") else None),
        topic_id=topic_id or uuid_zero,
        is_internal=name in INTERNAL_TOPICS,
        topic_authorized_operations=ops,
    )


def _not_created_error(name: str) -> ErrorCode:
    """A missing topic this request will not create: Kafka's getTopicMetadata runs Topic.validate on its name, so a
    client asking for a name no topic can have fails at once (INVALID_TOPIC_EXCEPTION) instead of waiting for it."""
    try:
        validate_topic_name(name)
    except ControllerError as exc:
        return exc.error
    return ErrorCode.unknown_topic_or_partition


async def _auto_create(ctx: RequestContext, names: Sequence[str]) -> dict[str, ErrorCode]:
    """Asks the controller to create ``names`` with the defaults, or an internal topic as its coordinator does.

    As Kafka 4's brokers (KRaft: AutoTopicCreationManager.sendCreateTopicRequest) answer: a name no topic can have is
    INVALID_TOPIC_EXCEPTION, checked first; every topic asked of the controller is UNKNOWN_TOPIC_OR_PARTITION, a
    retriable code, whatever the controller answers (the client asks again and finds it, or keeps retrying a refused
    one until its own timeout); a refusal is logged with the controller's reason."""
    unknown = ErrorCode.unknown_topic_or_partition
    out = {name: code for name in names if (code := _not_created_error(name)) is not unknown}
    asked = [name for name in names if name not in out]
    if not asked:
        return out
    config = ctx.broker.config
    results = await ctx.broker.controller.create_topics(
        [_INTERNAL[name].new_topic(config) if name in _INTERNAL else NewTopic(name=name) for name in asked], False
    )
    for result in results:
        if result.error in (ErrorCode.none, ErrorCode.topic_already_exists):
            logger.info("auto-created topic %s for %s", untrusted(result.name), ctx.describe())
        else:
            logger.info(
                "auto-creation of topic %s refused: %s %s",
                untrusted(result.name), result.error.name, untrusted(result.message or "", 4 * LOG_TEXT_MAX),
            )
        out[result.name] = unknown
    return out


async def handle_metadata(ctx: RequestContext, request: Any) -> Any:
    node = ctx.broker
    image = node.controller.image
    response_cls = ctx.response_class
    topic_cls = schema.field_entity(response_cls, "topics")
    live_brokers = image.live_brokers()
    brokers = []
    reachable: set[int] = set()
    for broker in live_brokers:
        endpoint = live_endpoint(broker, ctx.listener_name)
        if endpoint is not None:
            reachable.add(broker.node_id)
            brokers.append(
                schema.build_nested(response_cls, "brokers", node_id=broker.node_id, host=endpoint[0],
                                   port=endpoint[1], rack=broker.rack)
            )

    routing = _Brokers({b.node_id for b in live_brokers}, reachable,
                       ErrorCode.listener_not_found if ctx.api_version >= _LISTENER_ERRORS_VERSION
                       else ErrorCode.leader_not_available)

    # v8+: Kafka fills these for every topic in the response (and v8-10 for the cluster) only when asked; with an
    # authorizer, the operations this principal may do on each.
    asked_ops = getattr(request, "include_topic_authorized_operations", False)

    def ops_on(topic: str | None) -> int:
        return ctx.authorized_operations(asked_ops, ResourceType.TOPIC, topic or "", authorized_operations.TOPIC)

    def visible(topic: str) -> bool:
        """Kafka leaves out of a Metadata answer the topics the principal may not DESCRIBE, without logging."""
        return ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic, log_denial=False)

    denied = ErrorCode.topic_authorization_failed
    requested = request.topics
    if ctx.api_version == 0 and not requested:
        requested = None  # v0: an empty list means every topic
    topics: list[Any] = []
    if requested is None:
        for topic_name in sorted(image.topics_by_name):
            if visible(topic_name):
                topic = image.topics_by_name[topic_name]
                topics.append(_topic_entry(topic_cls, topic, image, routing, ops_on(topic_name)))
    else:
        allow_auto = getattr(request, "allow_auto_topic_creation", True) and node.auto_create_topics_enable
        may_create_any = ctx.allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False)
        missing: list[str] = []
        slots: list[tuple[str | None, uuid.UUID | None]] = []
        for wanted in requested:
            name: str | None = getattr(wanted, "name", None)
            topic_id: uuid.UUID | None = getattr(wanted, "topic_id", None)
            if topic_id is not None and topic_id != uuid_zero and not name:
                slots.append((None, topic_id))
                continue
            slots.append((name, None))
            if (name and name not in image.topics_by_name and allow_auto and name not in missing and visible(name)
                    and (may_create_any or ctx.allowed(AclOperation.CREATE, ResourceType.TOPIC, name))):
                missing.append(name)
        created = await _auto_create(ctx, missing) if missing else {}
        for name, topic_id in slots:
            if topic_id is not None:
                found = image.topics_by_id.get(topic_id) if ctx.api_version >= 12 else None
                if found is None:
                    topics.append(_error_topic(topic_cls, ErrorCode.unknown_topic_id, None, topic_id, ops_on(None)))
                elif not visible(found.name):
                    topics.append(_error_topic(topic_cls, denied, None, topic_id, ops_on(None)))
                else:
                    topics.append(_topic_entry(topic_cls, found, image, routing, ops_on(found.name)))
            elif name and not visible(name):
                ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name)  # asked by name: a counted denial
                topics.append(_error_topic(topic_cls, denied, name, None, ops_on(None)))
            elif not name:
                topics.append(_error_topic(topic_cls, ErrorCode.invalid_topic_exception, name or "", None,
                                           ops_on(None)))
            elif name in created:
                topics.append(_error_topic(topic_cls, created[name], name, None, ops_on(name)))
            elif name in image.topics_by_name:
                topics.append(_topic_entry(topic_cls, image.topics_by_name[name], image, routing, ops_on(name)))
            elif allow_auto and name not in missing:  # auto-creation refused by the ACLs
                ctx.allowed(AclOperation.CREATE, ResourceType.TOPIC, name)
                topics.append(_error_topic(topic_cls, denied, name, None, ops_on(name)))
            else:
                topics.append(_error_topic(topic_cls, _not_created_error(name), name, None, ops_on(name)))

    return ctx.build(
        throttle_time=0,
        brokers=tuple(brokers),
        cluster_id=image.cluster_id,
        controller_id=client_controller_id(image, node.node_id),
        topics=tuple(topics),
        cluster_authorized_operations=ctx.cluster_authorized_operations(
            getattr(request, "include_cluster_authorized_operations", False)
        ),
    )
