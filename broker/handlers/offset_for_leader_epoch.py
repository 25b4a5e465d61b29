"""OffsetForLeaderEpoch (key 23): where a leader epoch ended, for consumers validating their position after a
leader change (KIP-320)."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import partitions_entry, split, topics_denied
from broker.handlers.per_partition import answer_per_partition
from broker.partition.access import leader_log
from metadata.acl.binding import AclOperation
from metadata.errors import error_code_logged
from wire import schema

logger = logging.getLogger(__name__)


async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    async def answer(topic: str, part_cls: type[Any], p: Any) -> Any:
        try:
            log = await leader_log(ctx.broker.partitions, topic, p.partition, getattr(p, "current_leader_epoch", -1))
            epoch, end_offset = log.end_offset_for_epoch(p.leader_epoch)
            return schema.build(
                part_cls, partition=p.partition, error_code=ErrorCode.none, leader_epoch=epoch, end_offset=end_offset
            )
        except Exception as exc:
            code = error_code_logged(exc, logger, "leader epoch lookup of %s-%d failed", topic, p.partition)
            return schema.build(part_cls, partition=p.partition, error_code=code, leader_epoch=-1, end_offset=-1)

    return await answer_per_partition(ctx, request, answer, topic_field="topic")


async def authorize_offset_for_leader_epoch(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """TOPIC DESCRIBE on each topic, as Kafka checks a consumer's request."""
    refused = partitions_entry(
        "topics", "partitions", "partition", topic_field="topic", item_index="partition", end_offset=-1, leader_epoch=-1
    )
    return await split(
        ctx,
        request,
        handler,
        ("topics", "topics"),
        denial=topics_denied(ctx, AclOperation.DESCRIBE, "topic"),
        refused=refused,
    )
