"""OffsetForLeaderEpoch (key 23): where a leader epoch ended, for consumers validating their position after a
leader change (KIP-320)."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.errors import error_code_for
from broker.handlers.registry import RequestContext, handler
from broker.partition.access import leader_log
from broker.protocol import codec

logger = logging.getLogger(__name__)


@handler(api_key=23)
async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    topic_cls = codec.field_entity(ctx.response_class, "topics")
    part_cls = codec.field_entity(topic_cls, "partitions")
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            try:
                log = await leader_log(ctx.node, topic.topic, p.partition, getattr(p, "current_leader_epoch", -1))
                epoch, end_offset = log.end_offset_for_epoch(p.leader_epoch)
                parts.append(
                    codec.build(
                        part_cls,
                        partition=p.partition,
                        error_code=ErrorCode.none,
                        leader_epoch=epoch,
                        end_offset=end_offset,
                    )
                )
            except Exception as exc:
                code = error_code_for(exc)
                if code == ErrorCode.unknown_server_error:
                    logger.exception("leader epoch lookup of %s-%d failed", topic.topic, p.partition)
                parts.append(
                    codec.build(part_cls, partition=p.partition, error_code=code, leader_epoch=-1, end_offset=-1)
                )
        topics.append(codec.build(topic_cls, topic=topic.topic, partitions=tuple(parts)))
    return ctx.build(throttle_time=0, topics=tuple(topics))
