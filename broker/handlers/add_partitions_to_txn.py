"""AddPartitionsToTxn (key 24) v0-5: partitions join a producer's transaction before it writes to them.

v0-3 carry one transaction (a client's request). v4-5 batch many transactions and are what brokers send each
other; their ``verify_only`` transactions change nothing and only report, per partition, whether it is already in
the ongoing transaction (KIP-890 part 1: the produce path refuses transactional data for a partition that is not).
v5 is transactions v2 (KIP-890 part 2): a partition leader adds the partition of a Produce v12 (or the group
coordinator that of a TxnOffsetCommit v5) with ``verify_only`` false.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import CLUSTER_DENIED, TOPIC_DENIED, TXN_DENIED, refused_whole
from broker.handlers.txn_common import fenced_for_version
from broker.transactions.state import TopicPartition
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from wire import schema


def _partitions(topics: Sequence[Any]) -> list[TopicPartition]:
    return [(topic.name, p) for topic in topics for p in topic.partitions]


def _topic_results(result_cls: type[Any], results: Mapping[TopicPartition, ErrorCode], version: int) -> tuple[Any, ...]:
    """Results grouped by topic, in request order (``result_cls`` is the entity holding ``results_by_partition``)."""
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append(
            schema.build_nested(
                result_cls,
                "results_by_partition",
                partition_index=partition,
                partition_error_code=fenced_for_version(error, version, 2),
            )
        )
    return tuple(
        schema.build(result_cls, name=name, results_by_partition=tuple(parts)) for name, parts in by_topic.items()
    )


def _not_attempted(
    ctx: RequestContext, partitions: Sequence[TopicPartition], refused_topics: Collection[str] = ()
) -> dict[TopicPartition, ErrorCode] | None:
    """Kafka's checks before the coordinator is asked: a partition of a topic the caller may not WRITE is
    TOPIC_AUTHORIZATION_FAILED, else one that does not exist UNKNOWN_TOPIC_OR_PARTITION; if any failed, the
    transaction is not touched and every other partition is answered OPERATION_NOT_ATTEMPTED. None when all
    passed."""
    image = ctx.broker.controller.image
    failed = {tp: TOPIC_DENIED for tp in partitions if tp[0] in refused_topics}
    failed.update((tp, ErrorCode.unknown_topic_or_partition) for tp in partitions
                  if tp not in failed and image.partition(*tp) is None)
    if not failed:
        return None
    return {tp: failed.get(tp, ErrorCode.operation_not_attempted) for tp in partitions}


async def _one(
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: list[TopicPartition],
    *,
    verify_only: bool,
) -> dict[TopicPartition, ErrorCode]:
    # As Kafka's KafkaApis: unknown partitions are answered before the coordinator is asked, verifying or adding.
    not_attempted = _not_attempted(ctx, partitions)
    if not_attempted is not None:
        return not_attempted
    coordinator = ctx.broker.transactions
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
    return await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, partitions)


async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version <= 3:
        partitions = _partitions(request.v3_and_below_topics)
        results = await _one(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            partitions,
            verify_only=False,
        )
        topic_cls = schema.field_entity(ctx.response_class, "results_by_topic_v3_and_below")
        return ctx.build(
            throttle_time=0, results_by_topic_v3_and_below=_topic_results(topic_cls, results, ctx.api_version)
        )
    txn_cls = schema.field_entity(ctx.response_class, "results_by_transaction")
    topic_cls = schema.field_entity(txn_cls, "topic_results")
    answers = []
    for txn in request.transactions:
        results = await _one(
            ctx,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            _partitions(txn.topics),
            verify_only=txn.verify_only,
        )
        answers.append(
            schema.build(
                txn_cls,
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(topic_cls, results, ctx.api_version),
            )
        )
    return ctx.build(throttle_time=0, error_code=ErrorCode.none, results_by_transaction=tuple(answers))


async def authorize_add_partitions_to_txn(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """v0-3: TRANSACTIONAL_ID WRITE (refused: every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then TOPIC
    WRITE on each topic: a refused topic's partitions are TOPIC_AUTHORIZATION_FAILED, and the transaction is not
    touched (the others answered as :func:`_not_attempted` does), as Kafka does. v4 (brokers verifying, KIP-890):
    CLUSTER CLUSTER_ACTION."""
    if ctx.api_version >= 4:  # the brokers' own verification (KIP-890): CLUSTER_ACTION, as Kafka checks
        if ctx.allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return await handler(ctx, request)
        return refused_whole(ctx, CLUSTER_DENIED)
    partitions = _partitions(request.v3_and_below_topics)
    if not ctx.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.v3_and_below_transactional_id):
        results = dict.fromkeys(partitions, TXN_DENIED)
    else:
        names = {name for name, _ in partitions}
        denied = {name for name in names if not ctx.allowed(AclOperation.WRITE, ResourceType.TOPIC, name)}
        if not denied:
            return await handler(ctx, request)
        results = _not_attempted(ctx, partitions, denied) or {}
    topic_cls = schema.field_entity(ctx.response_class, "results_by_topic_v3_and_below")
    return ctx.build(results_by_topic_v3_and_below=_topic_results(topic_cls, results, ctx.api_version))
