"""InitProducerId (key 22) v0-4 for idempotent producers.

Without a transactional id Kafka always answers with a fresh producer id and epoch 0, also when a v3+ client
passes its current id and epoch to recover from an unknown-producer or sequence error (KIP-360): the new id
resets its sequences on every partition. Transactional ids are refused with a clear code until transactions
exist.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from kio.schema.errors import ErrorCode

from broker.errors import error_code_for
from broker.handlers.registry import RequestContext, handler
from broker.partition.manager import storage_namespace
from broker.partition.producer_ids import ProducerIdAllocator

logger = logging.getLogger(__name__)

_allocators: weakref.WeakKeyDictionary[Any, ProducerIdAllocator] = weakref.WeakKeyDictionary()


def producer_id_allocator(node: Any) -> ProducerIdAllocator:
    allocator = _allocators.get(node)
    if allocator is None:
        allocator = ProducerIdAllocator(node.controller.stream_metadata, storage_namespace(node.cluster_id))
        _allocators[node] = allocator
    return allocator


@handler(api_key=22)
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
    try:
        pid = await producer_id_allocator(ctx.node).allocate()
    except Exception as exc:
        logger.exception("producer id allocation failed (%s)", ctx.describe())
        return ctx.build(throttle_time=0, error_code=error_code_for(exc), producer_id=-1, producer_epoch=-1)
    return ctx.build(throttle_time=0, error_code=ErrorCode.none, producer_id=pid, producer_epoch=0)
