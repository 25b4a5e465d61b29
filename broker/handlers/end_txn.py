"""EndTxn (key 26) v0-5: commit or abort a producer's transaction.

Answered once PrepareCommit/PrepareAbort is durable in ``__transaction_state``; the coordinator then writes the
markers on every partition of the transaction in the background (broker/transactions/coordinator.py), as Kafka does.
v5 is a transactions v2 client (KIP-890 part 2; Kafka's ``transactionVersionForEndTxn`` reads it from the version
alone): every end bumps the producer epoch, the markers carry the bumped epoch, and the answer carries the producer
id and epoch the client continues with.
"""

from __future__ import annotations

from typing import Any, Final

from broker.handlers.context import RequestContext
from broker.handlers.guards import TXN_DENIED, Guard, whole
from broker.handlers.txn_common import fenced_for_version
from metadata.acl.binding import AclOperation, ResourceType


async def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.broker.transactions
    error, producer_id, producer_epoch = await coordinator.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed,
        v2=ctx.api_version >= 5,
    )
    return ctx.build(throttle_time=0, error_code=fenced_for_version(error, ctx.api_version, 2),
                     producer_id=producer_id, producer_epoch=producer_epoch)


#: TRANSACTIONAL_ID WRITE, as Kafka checks; a refusal refuses the whole request.
authorize_end_txn: Final[Guard] = whole(
    ResourceType.TRANSACTIONAL_ID, AclOperation.WRITE, lambda r: r.transactional_id, TXN_DENIED
)
