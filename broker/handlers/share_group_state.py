"""InitializeShareGroupState (key 83) v0, DeleteShareGroupState (86) v0 and ReadShareGroupStateSummary (87) v0-1:
Kafka's share-coordinator APIs, which in Fjord a group coordinator sends to the leader of each partition (the
share-partition state lives with the partition: ``broker.share.state_rpc``). Only brokers call them, so, as Kafka
authorizes them, they need CLUSTER CLUSTER_ACTION; a refusal answers every partition.

InitializeShareGroupState sets the group's start offset on the partition (AlterShareGroupOffsets); its state epoch
is the leader's to keep, so the request's is not used. A summary of a group with no state on the partition answers
start offset -1.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import CLUSTER_DENIED
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from wire import schema


def _results(ctx: RequestContext, request: Any, answers: dict[tuple[Any, int], dict[str, object]]) -> Any:
    result_cls = schema.field_entity(ctx.response_class, "results")
    return ctx.build(
        results=tuple(
            schema.build(
                result_cls,
                topic_id=topic.topic_id,
                partitions=tuple(
                    schema.build_nested(result_cls, "partitions", partition=p.partition,
                                        **answers[(topic.topic_id, p.partition)])
                    for p in topic.partitions
                ),
            )
            for topic in request.topics
        )
    )


def _error(code: ErrorCode) -> dict[str, object]:
    return {"error_code": code, "error_message": None if code is ErrorCode.none else code.name}


async def handle_read_share_group_state_summary(ctx: RequestContext, request: Any) -> Any:
    access = ctx.broker.share_offsets.access
    answers: dict[tuple[Any, int], dict[str, object]] = {}
    for topic in request.topics:
        for p in topic.partitions:
            summary = await access.answer_summary(request.group_id, topic.topic_id, p.partition)
            answers[(topic.topic_id, p.partition)] = {
                **_error(summary.error),
                "state_epoch": summary.state_epoch,
                "leader_epoch": summary.leader_epoch,
                "start_offset": summary.start_offset,
                "delivery_complete_count": summary.delivery_complete_count,
            }
    return _results(ctx, request, answers)


async def handle_initialize_share_group_state(ctx: RequestContext, request: Any) -> Any:
    access = ctx.broker.share_offsets.access
    answers = {
        (topic.topic_id, p.partition): _error(
            await access.answer_reset(request.group_id, topic.topic_id, p.partition, p.start_offset)
        )
        for topic in request.topics
        for p in topic.partitions
    }
    return _results(ctx, request, answers)


async def handle_delete_share_group_state(ctx: RequestContext, request: Any) -> Any:
    access = ctx.broker.share_offsets.access
    answers = {
        (topic.topic_id, p.partition): _error(await access.answer_delete(request.group_id, topic.topic_id, p.partition))
        for topic in request.topics
        for p in topic.partitions
    }
    return _results(ctx, request, answers)


async def authorize_share_group_state(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """CLUSTER CLUSTER_ACTION (only brokers reach a partition's share state), as Kafka checks."""
    if ctx.allowed(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    denied = _error(CLUSTER_DENIED)
    return _results(ctx, request, {(t.topic_id, p.partition): denied for t in request.topics for p in t.partitions})
