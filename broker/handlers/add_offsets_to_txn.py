"""AddOffsetsToTxn (key 25) v0-4 (v4, KIP-890: the same fields, for clients that handle TRANSACTION_ABORTABLE): a
transactional producer announces it will commit a group's offsets
(``send_offsets_to_transaction``); the group's ``__consumer_offsets`` partition joins the transaction, so the
transaction's marker lands there too and makes the TxnOffsetCommit visible (or drops it)."""

from __future__ import annotations

from typing import Any

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import GROUP_DENIED, TXN_DENIED, refused_whole
from broker.handlers.txn_common import fenced_for_version
from metadata.acl.binding import AclOperation, ResourceType


async def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.broker.transactions
    error = await coordinator.add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
    )
    return ctx.build(throttle_time=0, error_code=fenced_for_version(error, ctx.api_version, 2))


async def authorize_add_offsets_to_txn(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """TRANSACTIONAL_ID WRITE, then GROUP READ, as Kafka checks; either refusal refuses the whole request."""
    if not ctx.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return refused_whole(ctx, TXN_DENIED)
    if not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return refused_whole(ctx, GROUP_DENIED)
    return await handler(ctx, request)
