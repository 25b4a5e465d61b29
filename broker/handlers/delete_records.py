"""DeleteRecords (key 21) v0-2: moves partitions' log start offsets forward (offset -1 = high watermark)."""

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


async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    async def answer(topic: str, part_cls: type[Any], p: Any) -> Any:
        try:
            log = await leader_log(ctx.broker.partitions, topic, p.partition_index)
            low = await log.delete_records_before(p.offset)
            return schema.build(
                part_cls, partition_index=p.partition_index, low_watermark=low, error_code=ErrorCode.none
            )
        except Exception as exc:
            code = error_code_logged(exc, logger, "delete records of %s-%d failed", topic, p.partition_index)
            return schema.build(part_cls, partition_index=p.partition_index, low_watermark=-1, error_code=code)

    # One at a time: two entries for one partition would race each other's move of its log start.
    return await answer_per_partition(ctx, request, answer, at_once=1)


async def authorize_delete_records(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """TOPIC DELETE on each topic, as Kafka checks."""
    refused = partitions_entry("topics", "partitions", "partition_index", low_watermark=-1)
    return await split(
        ctx, request, handler, ("topics", "topics"), denial=topics_denied(ctx, AclOperation.DELETE), refused=refused
    )
