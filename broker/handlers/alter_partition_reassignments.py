"""AlterPartitionReassignments (key 45) v0: what ``kafka-reassign-partitions.sh --execute`` and admin clients send.

The controller validates and moves the partitions (``controller.reassignment``, DESIGN §9); brokers of a cluster
forward the request to the active controller, which answers with this same handler. A failure to reach the
controller is reported on every partition of the request, never as a dropped connection.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.handlers.registry import RequestContext, handler
from controller.api import PartitionReassignment, ReassignmentResult
from controller.errors import error_code_for, error_message_for
from wire import codec

logger = logging.getLogger(__name__)


@handler(api_key=45)
async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    asked = [
        PartitionReassignment(topic.name, int(p.partition_index), None if p.replicas is None else tuple(p.replicas))
        for topic in request.topics
        for p in topic.partitions
    ]
    try:
        results = await ctx.node.controller.alter_partition_reassignments(asked)
    except Exception as exc:
        code, message = error_code_for(exc), error_message_for(exc)
        logger.error("reassigning %d partitions failed: %s", len(asked), message, exc_info=exc)
        results = [ReassignmentResult(a.topic, a.partition, code, message) for a in asked]
    topic_cls = codec.field_entity(ctx.response_class, "responses")
    by_topic: dict[str, list[Any]] = {}
    for result in results:
        by_topic.setdefault(result.topic, []).append(
            codec.build_nested(topic_cls, "partitions", partition_index=result.partition, error_code=result.error,
                               error_message=result.message)
        )
    responses = tuple(codec.build(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
    return ctx.build(throttle_time=0, responses=responses)
