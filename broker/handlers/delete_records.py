"""DeleteRecords (key 21) v0-2: moves partitions' log start offsets forward (offset -1 = high watermark).

Refused as Kafka refuses it: on an internal topic (INVALID_TOPIC_EXCEPTION, ReplicaManager's check: deleting a
prefix of ``__consumer_offsets`` or ``__transaction_state`` would lose committed offsets and transaction states),
and on a topic whose ``cleanup.policy`` lacks ``delete`` (POLICY_VIOLATION, Partition.deleteRecordsOnLeader's
check: a compacted topic keeps every key's latest record until the cleaner replaces it)."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import partitions_entry, split, topics_denied
from broker.handlers.metadata import INTERNAL_TOPICS
from broker.handlers.per_partition import answer_per_partition
from broker.partition.access import leader_log
from metadata.acl.binding import AclOperation
from metadata.errors import error_code_logged
from wire import schema
from wire.errors import KafkaError

logger = logging.getLogger(__name__)


async def handle_delete_records(ctx: RequestContext, request: Any) -> Any:
    async def answer(topic: str, part_cls: type[Any], p: Any) -> Any:
        try:
            manager = ctx.broker.partitions
            # Kafka answers an unknown partition UNKNOWN_TOPIC_OR_PARTITION first, then an internal topic's on any
            # broker (before the leader is looked up), then a policy refusal on the leader only.
            if topic in INTERNAL_TOPICS and manager.controller.image.partition(topic, p.partition_index) is not None:
                raise KafkaError(ErrorCode.invalid_topic_exception, f"Cannot delete records of internal topic {topic}")
            log = await leader_log(manager, topic, p.partition_index)
            if not log.config.delete_retention_enabled:
                raise KafkaError(
                    ErrorCode.policy_violation,
                    f"Records of partition {log.where} can not be deleted due to the configured policy",
                )
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
