"""InitProducerId (key 22) v0-4 for idempotent producers.

A new producer gets a fresh id with epoch 0. A v3+ producer that passes its current id and epoch (KIP-360:
recovering from an unknown-producer or sequence error) keeps its id with the epoch bumped, which every partition
accepts as a new epoch starting at sequence 0; when the epoch is exhausted, or the id was never handed out here,
it gets a fresh id instead. Transactional ids are refused with a clear code until transactions exist.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from controller.errors import error_code_for

logger = logging.getLogger(__name__)

_MAX_EPOCH = 0x7FFF
async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        logger.info(
            "refusing transactional id %r from %s: transactions not supported", request.transactional_id, ctx.describe()
        )
        return ctx.build(
            throttle_time=0,
            error_code=ErrorCode.transactional_id_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
        )
    allocator = ctx.node.producer_ids
    current_pid = getattr(request, "producer_id", -1)
    current_epoch = getattr(request, "producer_epoch", -1)
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
