"""EndTxn (key 26) v0-3: commit or abort a producer's transaction.

Answered once PrepareCommit/PrepareAbort is durable in ``__transaction_state``; the coordinator then writes the
markers on every partition of the transaction in the background (broker/transactions/coordinator.py), as Kafka does.
"""

from __future__ import annotations

from typing import Any, Final

from broker.handlers.context import RequestContext
from broker.handlers.guards import TXN_DENIED, Guard, whole
from broker.handlers.txn_common import fenced_for_version
from metadata.acl.binding import AclOperation, ResourceType


async def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.broker.transactions
    error = await coordinator.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    return ctx.build(throttle_time=0, error_code=fenced_for_version(error, ctx.api_version, 2))


#: TRANSACTIONAL_ID WRITE, as Kafka checks; a refusal refuses the whole request.
authorize_end_txn: Final[Guard] = whole(
    ResourceType.TRANSACTIONAL_ID, AclOperation.WRITE, lambda r: r.transactional_id, TXN_DENIED
)
