"""InitProducerId (key 22) v0-5 for idempotent and transactional producers (v5 changes no field: Kafka 4 clients
send it with transactions v2, KIP-890 part 2; the epoch bumps of a v2 transaction's ends are EndTxn v5's).

A new producer gets a fresh id with epoch 0. A v3+ producer that passes its current id and epoch (KIP-360:
recovering from an unknown-producer or sequence error) keeps its id with the epoch bumped, which every partition
accepts as a new epoch starting at sequence 0; when the epoch is exhausted, or the id was never handed out here,
it gets a fresh id instead. With a transactional id the transaction coordinator answers (Kafka's
``handleInitProducerId``): the id's producer id with its epoch bumped, fencing any older instance of the producer.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import CLUSTER_DENIED, TXN_DENIED, refused_whole
from broker.handlers.txn_common import fenced_for_version
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from metadata.errors import error_code_for
from wire import schema
from wire.log_text import untrusted

logger = logging.getLogger(__name__)

_MAX_EPOCH = 0x7FFF


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    current_pid = getattr(request, "producer_id", -1)
    current_epoch = getattr(request, "producer_epoch", -1)
    if request.transactional_id is not None:
        return await _transactional(ctx, request, current_pid, current_epoch)
    allocator = ctx.broker.producer_ids
    try:
        if 0 <= current_epoch < _MAX_EPOCH - 1 and await allocator.was_allocated(current_pid):
            logger.info("bumping producer %d to epoch %d (%s)", current_pid, current_epoch + 1, ctx.describe())
            return ctx.build(
                throttle_time=0, error_code=ErrorCode.none, producer_id=current_pid, producer_epoch=current_epoch + 1
            )
        pid = await allocator.allocate()
    except Exception as exc:
        logger.exception("producer id allocation failed (%s)", ctx.describe())
        return ctx.build(throttle_time=0, error_code=error_code_for(exc), producer_id=-1, producer_epoch=-1)
    return ctx.build(throttle_time=0, error_code=ErrorCode.none, producer_id=pid, producer_epoch=0)


async def _transactional(ctx: RequestContext, request: Any, current_pid: int, current_epoch: int) -> Any:
    coordinator = ctx.broker.transactions
    # KIP-360: a producer recovering from an error names its current id and epoch (both -1 when it has none).
    if (current_pid == -1) != (current_epoch == -1):
        return ctx.build(throttle_time=0, error_code=ErrorCode.invalid_request, producer_id=-1, producer_epoch=-1)
    expected = (current_pid, current_epoch) if current_pid != -1 else None
    try:
        error, pid, epoch = await coordinator.init_producer_id(
            request.transactional_id, schema.millis(request.transaction_timeout), expected
        )
    except Exception as exc:
        logger.exception(
            "InitProducerId for transactional id '%s' failed (%s)",
            untrusted(request.transactional_id), ctx.describe(),
        )
        error, pid, epoch = error_code_for(exc), -1, -1
    return ctx.build(
        throttle_time=0,
        error_code=fenced_for_version(error, ctx.api_version, 4),
        producer_id=pid,
        producer_epoch=epoch,
    )


async def authorize_init_producer_id(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """TRANSACTIONAL_ID WRITE for a transactional producer; for an idempotent one CLUSTER IDEMPOTENT_WRITE, or WRITE
    on some topic, as Kafka checks."""
    transactional_id = request.transactional_id
    if transactional_id is not None:
        if not ctx.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return refused_whole(ctx, TXN_DENIED)
    elif not (
        ctx.allowed(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False)
        or ctx.authorizer.allowed_on_some(ctx.principal, ctx.client_host, AclOperation.WRITE, ResourceType.TOPIC)
    ):
        ctx.allowed(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)  # counted and logged
        return refused_whole(ctx, CLUSTER_DENIED)
    return await handler(ctx, request)
