"""DescribeProducers (key 61) v0: the idempotent and transactional producers a partition currently remembers, with
the first offset of each one's open transaction (what ``kafka-transactions.sh find-hanging`` looks for)."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import partitions_entry, split, topics_denied
from broker.handlers.per_partition import answer_per_partition
from broker.partition.access import leader_log
from metadata.acl.binding import AclOperation
from metadata.errors import error_code_logged, error_message_for
from metadata.topic_names import is_legal_topic_name, validate_topic_name
from wire import schema

logger = logging.getLogger(__name__)


async def handle_describe_producers(ctx: RequestContext, request: Any) -> Any:
    async def answer(topic: str, part_cls: type[Any], index: int) -> Any:
        producer_cls = schema.field_entity(part_cls, "active_producers")
        try:
            validate_topic_name(topic)  # Kafka's Topic.validate: "bad/name" is no unknown topic
            log = await leader_log(ctx.broker.partitions, topic, index)
            open_txns = log.ongoing_txn_start_offsets()
            producers = tuple(
                schema.build(
                    producer_cls,
                    producer_id=e.producer_id,
                    producer_epoch=e.producer_epoch,
                    last_sequence=e.last_seq,
                    last_timestamp=e.last_timestamp,
                    coordinator_epoch=e.coordinator_epoch,
                    current_txn_start_offset=open_txns.get(e.producer_id, -1),
                )
                for e in log.producers
            )
            return schema.build(
                part_cls,
                partition_index=index,
                error_code=ErrorCode.none,
                error_message=None,
                active_producers=producers,
            )
        except Exception as exc:
            code = error_code_logged(exc, logger, "describe producers of %s-%d failed", topic, index)
            return schema.build(
                part_cls,
                partition_index=index,
                error_code=code,
                error_message=error_message_for(exc),
                active_producers=(),
            )

    return await answer_per_partition(ctx, request, answer, partitions_field="partition_indexes")


async def authorize_describe_producers(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """TOPIC READ on each topic, as Kafka checks; a name no topic can have is not asked about but left to the
    handler's INVALID_TOPIC_EXCEPTION, as Kafka's handleDescribeProducersRequest validates a name before its ACLs."""
    refused = partitions_entry(
        "topics", "partitions", "partition_index", item_partitions="partition_indexes", item_index=None
    )
    read_denied = topics_denied(ctx, AclOperation.READ)

    def denial(item: Any) -> ErrorCode | None:
        return None if not is_legal_topic_name(item.name) else read_denied(item)

    return await split(ctx, request, handler, ("topics", "topics"), denial=denial, refused=refused)
