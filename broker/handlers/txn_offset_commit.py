"""TxnOffsetCommit (key 28) v0-5: a transactional producer commits its consumer group's positions inside its
transaction (``send_offsets_to_transaction``); they become visible only when the transaction commits.

The producer first adds the group's ``__consumer_offsets`` partition to its transaction (AddOffsetsToTxn), so
the transaction coordinator writes a marker there; the group coordinator turns that marker into committed
offsets (broker/groups/txn_offsets.py). A transactions v2 client (v5, with ``transaction.version`` 2 finalized;
KIP-890 part 2) sends no AddOffsetsToTxn: the group coordinator asks the transaction coordinator to add the
partition itself before it writes the offsets, as Kafka's does. Either way the group coordinator has the
transaction verified before it writes (KIP-890, ``broker.groups.offset_commits``).
"""

from __future__ import annotations

from typing import Any

from broker.handlers.context import Handler, RequestContext
from broker.handlers.group_common import partition_errors, requested_offsets
from broker.handlers.guards import GROUP_DENIED, TXN_DENIED, partitions_entry, split, topics_denied
from metadata.acl.binding import AclOperation, ResourceType


async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    offsets = requested_offsets(request.topics)
    groups = ctx.broker.groups
    results = await groups.commit_transactional_offsets(
        request.group_id,
        transactional_id=request.transactional_id,
        producer_id=request.producer_id,
        producer_epoch=request.producer_epoch,
        member_id=getattr(request, "member_id", ""),
        group_instance_id=getattr(request, "group_instance_id", None),
        generation_id=getattr(request, "generation_id", -1),
        offsets=offsets,
        api_version=ctx.api_version,
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
