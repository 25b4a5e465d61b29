"""ListTransactions (key 66) v0-2: the transactional ids this broker coordinates, optionally only those in the named
states or of the given producer ids (``kafka-transactions.sh list`` asks every broker); v1 (KIP-994) only those
running longer than a duration (``--duration-filter``), v2 (KIP-1152) only ids a regular expression matches."""

from __future__ import annotations

import dataclasses
from typing import Any

from broker.handlers.context import Handler, RequestContext
from metadata.acl.binding import AclOperation, ResourceType
from wire import schema


async def handle_list_transactions(ctx: RequestContext, request: Any) -> Any:
    coordinator = ctx.broker.transactions
    error, found, unknown = coordinator.list_transactions(
        request.state_filters,
        request.producer_id_filters,
        duration_filter_ms=getattr(request, "duration_filter", -1),
        transactional_id_pattern=getattr(request, "transactional_id_pattern", None),
    )
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


async def authorize_list_transactions(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """Kafka lists only the transactional ids the principal may describe (no error for the others)."""
    response = await handler(ctx, request)
    return dataclasses.replace(
        response,
        transaction_states=tuple(
            t
            for t in response.transaction_states
            if ctx.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id, log_denial=False)
        ),
    )
