"""DescribeProducers (key 61) v0: the idempotent producers a partition currently remembers."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.errors import error_code_for, error_message_for
from broker.handlers.registry import RequestContext, handler
from broker.partition.access import leader_log
from broker.protocol import codec

logger = logging.getLogger(__name__)


@handler(api_key=61)
async def handle_describe_producers(ctx: RequestContext, request: Any) -> Any:
    topic_cls = codec.field_entity(ctx.response_class, "topics")
    part_cls = codec.field_entity(topic_cls, "partitions")
    producer_cls = codec.field_entity(part_cls, "active_producers")
    topics = []
    for topic in request.topics:
        parts = []
        for index in topic.partition_indexes:
            try:
                log = await leader_log(ctx.node, topic.name, index)
                producers = tuple(
                    codec.build(
                        producer_cls,
                        producer_id=e.producer_id,
                        producer_epoch=e.producer_epoch,
                        last_sequence=e.last_seq,
                        last_timestamp=e.last_timestamp,
                        coordinator_epoch=-1,
                        current_txn_start_offset=-1,
                    )
                    for e in log.producers
                )
                parts.append(
                    codec.build(
                        part_cls,
                        partition_index=index,
                        error_code=ErrorCode.none,
                        error_message=None,
                        active_producers=producers,
                    )
                )
            except Exception as exc:
                parts.append(
                    codec.build(
                        part_cls,
                        partition_index=index,
                        error_code=error_code_for(exc),
                        error_message=error_message_for(exc),
                        active_producers=(),
                    )
                )
        topics.append(codec.build(topic_cls, name=topic.name, partitions=tuple(parts)))
    return ctx.build(throttle_time=0, topics=tuple(topics))
