"""ListOffsets (key 2) v1-8: earliest (-2), latest (-1), max timestamp (-3, v7+) and offset by timestamp.

With isolation level 1 (read_committed, v2+) the latest offset is the last stable offset and lookups by timestamp
find only records below it, as Kafka answers."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import partitions_entry, split, topics_denied
from broker.partition.access import leader_log
from broker.partition.partition_log import MAX_TIMESTAMP
from metadata.acl.binding import AclOperation
from metadata.errors import error_code_logged
from wire import schema
from wire.errors import KafkaError

logger = logging.getLogger(__name__)


READ_COMMITTED = 1


async def _lookup(
    ctx: RequestContext, part_cls: type[Any], topic: str, p: Any, duplicate: bool, *, read_committed: bool
) -> Any:
    index = p.partition_index
    try:
        if duplicate:
            raise KafkaError(ErrorCode.invalid_request, f"{topic}-{index} appears more than once")
        if p.timestamp == MAX_TIMESTAMP and ctx.api_version < 7:
            raise KafkaError(ErrorCode.unsupported_version, "max-timestamp lookups need ListOffsets v7+")
        log = await leader_log(ctx.broker.partitions, topic, index, getattr(p, "current_leader_epoch", -1))
        found = await log.offset_for_timestamp(p.timestamp, read_committed=read_committed)
        offset, timestamp, epoch = (found.offset, found.timestamp, found.leader_epoch) if found else (-1, -1, -1)
        return schema.build(
            part_cls,
            partition_index=index,
            error_code=ErrorCode.none,
            timestamp=timestamp,
            offset=offset,
            leader_epoch=epoch,
        )
    except Exception as exc:
        code = error_code_logged(exc, logger, "list offsets of %s-%d failed (%s)", topic, index, ctx.describe())
        return schema.build(part_cls, partition_index=index, error_code=code, timestamp=-1, offset=-1, leader_epoch=-1)


async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    topic_cls = schema.field_entity(ctx.response_class, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    topics = []
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    for topic in request.topics:
        seen: dict[int, int] = {}
        for p in topic.partitions:
            seen[p.partition_index] = seen.get(p.partition_index, 0) + 1
        parts = [
            await _lookup(ctx, part_cls, topic.name, p, seen[p.partition_index] > 1, read_committed=read_committed)
            for p in topic.partitions
        ]
        topics.append(schema.build(topic_cls, name=topic.name, partitions=tuple(parts)))
    return ctx.build(throttle_time=0, topics=tuple(topics))


async def authorize_list_offsets(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """TOPIC DESCRIBE on each topic, as Kafka checks."""
    refused = partitions_entry("topics", "partitions", "partition_index", timestamp=-1, offset=-1)
    return await split(
        ctx, request, handler, ("topics", "topics"), denial=topics_denied(ctx, AclOperation.DESCRIBE), refused=refused
    )
