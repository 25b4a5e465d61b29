"""TxnOffsetCommit (key 28) v0-5: a transactional producer commits its consumer group's positions inside its
transaction (``send_offsets_to_transaction``); they become visible only when the transaction commits.

The producer first adds the group's ``__consumer_offsets`` partition to its transaction (AddOffsetsToTxn), so
the transaction coordinator writes a marker there; the group coordinator turns that marker into committed
offsets (broker/groups/txn_offsets.py). A transactions v2 client (v5, with ``transaction.version`` 2 finalized;
KIP-890 part 2) sends no AddOffsetsToTxn: the group coordinator asks the transaction coordinator to add the
partition itself before it writes the offsets, as Kafka's does.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.groups.offsets_topic import OFFSETS_TOPIC
from broker.handlers.context import Handler, RequestContext
from broker.handlers.group_common import partition_errors, requested_offsets
from broker.handlers.guards import GROUP_DENIED, TXN_DENIED, partitions_entry, split, topics_denied
from metadata.acl.binding import AclOperation, ResourceType
from wire.api_versions import TRANSACTION_VERSION


async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    offsets = requested_offsets(request.topics)
    groups = ctx.broker.groups
    # An empty group id is refused by the coordinator (INVALID_GROUP_ID) before the transaction is touched.
    tv2 = ctx.api_version >= 5 and ctx.broker.controller.image.feature_level(TRANSACTION_VERSION.name) >= 2
    if request.group_id and tv2:
        error, _, _ = await groups.find_coordinator(request.group_id)
        if error is ErrorCode.none:
            error = await ctx.broker.transactions.verify_produce(
                request.transactional_id, request.producer_id, request.producer_epoch,
                (OFFSETS_TOPIC, groups.partition_for(request.group_id)), add=True,
            )
        if error is not ErrorCode.none:
            refused: dict[tuple[str, int], ErrorCode] = dict.fromkeys(offsets, error)
            return ctx.build(throttle_time=0, topics=partition_errors(ctx.response_class, request.topics, refused))
    results = await groups.commit_transactional_offsets(
        request.group_id,
        transactional_id=request.transactional_id,
        producer_id=request.producer_id,
        producer_epoch=request.producer_epoch,
        member_id=getattr(request, "member_id", ""),
        group_instance_id=getattr(request, "group_instance_id", None),
        generation_id=getattr(request, "generation_id", -1),
        offsets=offsets,
    )
    return ctx.build(throttle_time=0, topics=partition_errors(ctx.response_class, request.topics, results))


async def authorize_txn_offset_commit(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """TRANSACTIONAL_ID WRITE, then GROUP READ (either refusing every partition when denied), then TOPIC READ on
    each topic, in Kafka's order."""
    refused = partitions_entry("topics", "partitions", "partition_index")
    for resource, name, code in (
        (ResourceType.TRANSACTIONAL_ID, request.transactional_id, TXN_DENIED),
        (ResourceType.GROUP, request.group_id, GROUP_DENIED),
    ):
        op = AclOperation.WRITE if resource is ResourceType.TRANSACTIONAL_ID else AclOperation.READ
        if not ctx.allowed(op, resource, name):
            return ctx.build(topics=tuple(refused(ctx.response_class, t, code) for t in request.topics))
    return await split(
        ctx, request, handler, ("topics", "topics"), denial=topics_denied(ctx, AclOperation.READ), refused=refused
    )
