"""ListTransactions (key 66) v0: the transactional ids this broker coordinates, optionally only those in the named
states or of the given producer ids (``kafka-transactions.sh list`` asks every broker)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.txn_common import transaction_coordinator
from wire import schema


async def handle_list_transactions(ctx: RequestContext, request: Any) -> Any:
    coordinator = transaction_coordinator(ctx)
    if coordinator is None:
        return ctx.build(throttle_time=0, error_code=ErrorCode.coordinator_not_available)
    error, found, unknown = coordinator.list_transactions(request.state_filters, request.producer_id_filters)
    return ctx.build(
        throttle_time=0,
        error_code=error,
        unknown_state_filters=tuple(unknown),
        transaction_states=tuple(
            schema.build_nested(
                ctx.response_class,
                "transaction_states",
                transactional_id=m.transactional_id,
                producer_id=m.producer_id,
                transaction_state=m.state.display,
            )
            for m in found
        ),
    )
