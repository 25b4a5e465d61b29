"""DeleteRecords (key 21) v0-2: moves partitions' log start offsets forward (offset -1 = high watermark)."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.errors import error_code_for
from broker.handlers.registry import RequestContext, handler
from broker.partition.access import leader_log
from broker.protocol import codec

logger = logging.getLogger(__name__)


@handler(api_key=21)
async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    topic_cls = codec.field_entity(ctx.response_class, "topics")
    part_cls = codec.field_entity(topic_cls, "partitions")
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            try:
                log = await leader_log(ctx.node, topic.name, p.partition_index)
                low = await log.delete_records_before(p.offset)
                parts.append(
                    codec.build(
                        part_cls, partition_index=p.partition_index, low_watermark=low, error_code=ErrorCode.none
                    )
                )
            except Exception as exc:
                code = error_code_for(exc)
                if code == ErrorCode.unknown_server_error:
                    logger.exception("delete records of %s-%d failed", topic.name, p.partition_index)
                parts.append(
                    codec.build(part_cls, partition_index=p.partition_index, low_watermark=-1, error_code=code)
                )
        topics.append(codec.build(topic_cls, name=topic.name, partitions=tuple(parts)))
    return ctx.build(throttle_time=0, topics=tuple(topics))
