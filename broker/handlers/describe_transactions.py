"""DescribeTransactions (key 65) v0: the state of transactional ids this broker coordinates
(``kafka-transactions.sh describe``)."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import TXN_DENIED, split
from metadata.acl.binding import AclOperation, ResourceType
from wire import schema


async def handle_describe_transactions(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.broker.transactions
    state_cls = schema.field_entity(ctx.response_class, "transaction_states")
    # An id that cannot be described carries only its error; the other fields keep the schema's defaults (0),
    # as Kafka answers them.
    epoch_zero = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
    states = []
    for transactional_id in request.transactional_ids:
        error, metadata = coordinator.describe(transactional_id)
        if metadata is None:
            states.append(
                schema.build(
                    state_cls,
                    error_code=error,
                    transactional_id=transactional_id,
                    transaction_state="",
                    transaction_timeout=0,
                    transaction_start_time=epoch_zero,
                    producer_id=0,
                    producer_epoch=0,
                )
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(metadata.described_partitions):
            by_topic.setdefault(topic, []).append(partition)
        states.append(
            schema.build(
                state_cls,
                error_code=ErrorCode.none,
                transactional_id=transactional_id,
                transaction_state=metadata.state.display,
                transaction_timeout=metadata.timeout_ms,
                transaction_start_time=datetime.datetime.fromtimestamp(metadata.txn_start_ms / 1000, tz=datetime.UTC),
                producer_id=metadata.producer_id,
                producer_epoch=metadata.producer_epoch,
                topics=tuple(
                    schema.build_nested(state_cls, "topics", topic=name, partitions=tuple(parts))
                    for name, parts in by_topic.items()
                ),
            )
        )
    return ctx.build(throttle_time=0, transaction_states=tuple(states))


async def authorize_describe_transactions(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """TRANSACTIONAL_ID DESCRIBE on each id, as Kafka checks; then each described transaction keeps only the topics
    the caller may DESCRIBE, as Kafka's handleDescribeTransactionsRequest removes the others: rights on a
    transactional id are no way to learn topic names."""

    def refused(response_cls: type[Any], transactional_id: str, code: ErrorCode) -> Any:
        # Only the id and its error, the rest the schema's defaults (producer id and epoch 0), as Kafka answers.
        return schema.build_nested(response_cls, "transaction_states", transactional_id=transactional_id,
                                   error_code=code)

    response = await split(
        ctx,
        request,
        handler,
        ("transactional_ids", "transaction_states"),
        denial=lambda t: None if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t) else TXN_DENIED,
        refused=refused,
    )

    def describable(state: Any) -> Any:
        topics = tuple(t for t in state.topics if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic))
        return dataclasses.replace(state, topics=topics)

    return dataclasses.replace(response, transaction_states=tuple(map(describable, response.transaction_states)))
