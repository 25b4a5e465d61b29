"""WriteTxnMarkers (key 27) v1-2: a transaction coordinator asks this broker to write COMMIT/ABORT markers on
partitions it leads (the inter-broker half of EndTxn; Kafka 4 no longer knows v0, and neither does the codec).
v2 (KIP-1228) says each marker's transaction version: a transactions v2 marker must carry a newer producer epoch
than the partition has (``broker.partition.partition_log.txn_markers``).

Each partition is answered on its own through ``broker.transactions.markers.write_markers``, all of them written
at once, so one failing partition (moved leader, fenced epoch) does not hold the others back.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import CLUSTER_DENIED
from broker.transactions.markers import write_markers
from broker.transactions.state import TopicPartition
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from wire import schema

logger = logging.getLogger(__name__)


async def handle_write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    marker_cls = schema.field_entity(ctx.response_class, "markers")
    topic_cls = schema.field_entity(marker_cls, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    written: list[dict[TopicPartition, ErrorCode]] = await asyncio.gather(
        *(
            write_markers(
                ctx.broker.partitions,
                ctx.broker.groups,
                ((topic.name, index) for topic in marker.topics for index in topic.partition_indexes),
                producer_id=marker.producer_id,
                producer_epoch=marker.producer_epoch,
                coordinator_epoch=marker.coordinator_epoch,
                commit=marker.transaction_result,
                transaction_version=getattr(marker, "transaction_version", 0),
            )
            for marker in request.markers
        )
    )
    markers = []
    for number, marker in enumerate(request.markers):
        topics = []
        for topic in marker.topics:
            parts = []
            for index in topic.partition_indexes:
                code = written[number][(topic.name, index)]
                parts.append(schema.build(part_cls, partition_index=index, error_code=code))
            topics.append(schema.build(topic_cls, name=topic.name, partitions=tuple(parts)))
        markers.append(schema.build(marker_cls, producer_id=marker.producer_id, topics=tuple(topics)))
    logger.debug("WriteTxnMarkers from %s: %d markers", ctx.describe(), len(markers))
    return ctx.build(markers=tuple(markers))


async def authorize_write_txn_markers(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """CLUSTER ALTER or CLUSTER_ACTION, as Kafka checks (KIP-1037): brokers write markers with CLUSTER_ACTION, and
    an admin with ALTER may too, to abort a hanging transaction (``kafka-transactions.sh abort``). ALTER is asked
    first without logging its denial, as Kafka does, since a broker is not expected to have it. A refusal answers
    every partition."""
    if ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False) or ctx.allowed(
        AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        return await handler(ctx, request)
    marker_cls = schema.field_entity(ctx.response_class, "markers")
    topic_cls = schema.field_entity(marker_cls, "topics")
    return ctx.build(
        markers=tuple(
            schema.build(
                marker_cls,
                producer_id=m.producer_id,
                topics=tuple(
                    schema.build(
                        topic_cls,
                        name=t.name,
                        partitions=tuple(
                            schema.build_nested(topic_cls, "partitions", partition_index=p, error_code=CLUSTER_DENIED)
                            for p in t.partition_indexes
                        ),
                    )
                    for t in m.topics
                ),
            )
            for m in request.markers
        )
    )
