"""DescribeTopicPartitions (key 75) v0, KIP-966: topics and their partitions a page at a time, what Kafka 4's admin
client (``describeTopics``, so ``kafka-topics.sh --describe``) asks instead of Metadata.

As Kafka's DescribeTopicPartitionsRequestHandler answers it:

- an empty topic list means every topic; topics are answered in name order, starting at the request's ``cursor``
  (its topic, from its partition index), and at most ``min(response_partition_limit, max.request.partition.size
  .limit)`` partitions (at least one) are described. When the limit stops the answer, ``next_cursor`` says where
  the next request starts: inside the topic being described, or at partition 0 of the next one.
- a cursor topic missing from a named topic list, or a negative cursor partition, is INVALID_REQUEST for every
  named topic.
- topics the principal may not DESCRIBE are left out of an every-topic answer and answered
  TOPIC_AUTHORIZATION_FAILED (with no topic id) when named, as Metadata does; a named topic that does not exist is
  UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an empty name).
- each partition reports its replicas and ISR as registered, offline replicas (fenced brokers, or without the
  client's listener), and the leader only while it is alive on that listener (else -1); a partition being moved,
  the target its election will pick, as Metadata answers (``metadata.move_leader.client_leader``).
- Fjord has no eligible leader replicas (KIP-966's ELR needs ``eligible.leader.replicas.version``, which Fjord
  does not finalize), so both ELR lists are empty, as Kafka reports them with ELR off.
- every described topic carries the principal's authorized operations (Kafka fills them unasked here).
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from broker import authorized_operations
from broker.handlers.context import RequestContext
from broker.handlers.metadata import INTERNAL_TOPICS, live_endpoint
from metadata.acl.binding import AclOperation, ResourceType
from metadata.image import MetadataImage, TopicImage
from metadata.move_leader import client_leader
from wire import schema

#: Kafka's ``max.request.partition.size.limit``: the most partitions one response describes.
PARTITION_LIMIT_KEY: Final = "max.request.partition.size.limit"


def _invalid(ctx: RequestContext, request: Any) -> Any:
    """Kafka's error response for a request it refuses (a bad cursor): every named topic with the error."""
    topic_cls = schema.field_entity(ctx.response_class, "topics")
    return ctx.build(
        throttle_time=0,
        topics=tuple(
            schema.build(topic_cls, error_code=ErrorCode.invalid_request, name=t.name, topic_id=uuid_zero,
                         is_internal=False, partitions=())
            for t in request.topics
        ),
    )


def _alive(image: MetadataImage, node_id: int, listener: str) -> bool:
    broker = image.brokers.get(node_id)
    return broker is not None and not broker.fenced and live_endpoint(broker, listener) is not None


def _partitions(
    ctx: RequestContext, topic_cls: type[Any], topic: TopicImage, start: int, upper: int
) -> tuple[Any, ...]:
    image = ctx.broker.controller.image
    out = []
    for index in range(start, upper):
        p = topic.partitions.get(index)
        if p is None:
            continue
        leader, epoch = client_leader(image, p)
        out.append(
            schema.build_nested(
                topic_cls,
                "partitions",
                error_code=ErrorCode.none,
                partition_index=index,
                leader_id=leader if _alive(image, leader, ctx.listener_name) else -1,
                leader_epoch=epoch,
                replica_nodes=p.replicas,
                isr_nodes=p.isr,
                eligible_leader_replicas=(),
                last_known_elr=(),
                offline_replicas=tuple(r for r in p.replicas if not _alive(image, r, ctx.listener_name)),
            )
        )
    return tuple(out)


async def handle_describe_topic_partitions(ctx: RequestContext, request: Any) -> Any:
    image = ctx.broker.controller.image
    topic_cls = schema.field_entity(ctx.response_class, "topics")
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    every_topic = not request.topics
    if every_topic:
        names = {name for name in image.topics_by_name if name >= cursor_topic}
    else:
        names = {t.name for t in request.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            return _invalid(ctx, request)
    if cursor is not None and cursor.partition_index < 0:
        return _invalid(ctx, request)

    refused: list[Any] = []
    allowed: list[str] = []
    for name in sorted(names):
        if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denial=not every_topic):
            allowed.append(name)
        elif not every_topic:
            refused.append(
                schema.build(topic_cls, error_code=ErrorCode.topic_authorization_failed, name=name,
                             topic_id=uuid_zero, is_internal=False, partitions=())
            )

    def ops(name: str) -> int:
        return ctx.authorized_operations(True, ResourceType.TOPIC, name, authorized_operations.TOPIC)

    limit = max(min(int(ctx.broker.config.value(PARTITION_LIMIT_KEY)), int(request.response_partition_limit)), 1)
    remaining = limit
    described: list[Any] = []
    next_cursor: tuple[str, int] | None = None
    for name in allowed:
        if remaining <= 0:
            next_cursor = (name, 0)
            break
        topic = image.topics_by_name.get(name)
        if topic is None:
            if not every_topic:
                code = ErrorCode.unknown_topic_or_partition if name else ErrorCode.invalid_topic_exception
                described.append(
                    schema.build(topic_cls, error_code=code, name=name, topic_id=uuid_zero,
                                 is_internal=name in INTERNAL_TOPICS, partitions=(),
                                 topic_authorized_operations=ops(name))
                )
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        count = len(topic.partitions)
        upper = min(count, start + remaining)
        partitions = _partitions(ctx, topic_cls, topic, start, upper)
        described.append(
            schema.build(topic_cls, error_code=ErrorCode.none, name=name, topic_id=topic.topic_id,
                         is_internal=name in INTERNAL_TOPICS, partitions=partitions,
                         topic_authorized_operations=ops(name))
        )
        if upper < count:
            next_cursor = (name, upper)
            break
        remaining -= len(partitions)

    cursor_cls = schema.field_entity(ctx.response_class, "next_cursor")
    return ctx.build(
        throttle_time=0,
        topics=(*described, *refused),
        next_cursor=(
            schema.build(cursor_cls, topic_name=next_cursor[0], partition_index=next_cursor[1])
            if next_cursor is not None
            else None
        ),
    )
