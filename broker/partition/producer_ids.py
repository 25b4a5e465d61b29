"""Durable producer-id allocation for InitProducerId.

Ids are handed out from blocks reserved in the controller's KV store (``<namespace>/producer_ids`` holds the
first id of the next unreserved block), so an id is never reused across restarts: a restart skips the rest of
its block, as Kafka's ProducerIdManager does. The read-then-write of the KV entry is safe with one broker per
cluster; several brokers need a controller-side allocation RPC (compare-and-set), not available yet.
"""

from __future__ import annotations

import asyncio
import logging
import struct

from storage.metadata.api import StreamMetadata

logger = logging.getLogger(__name__)

BLOCK_SIZE = 1000
_MAX_PRODUCER_ID = (1 << 63) - 1


class ProducerIdAllocator:
    def __init__(self, kv: StreamMetadata, namespace: str, block_size: int = BLOCK_SIZE) -> None:
        self._kv = kv
        self._key = f"{namespace}/producer_ids"
        self._block_size = block_size
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def _reserved_end(self) -> int:
        raw = await self._kv.get_kv(self._key)
        return int(struct.unpack(">q", raw)[0]) if raw is not None and len(raw) == 8 else 0

    async def was_allocated(self, producer_id: int) -> bool:
        """Whether ``producer_id`` was ever handed out in this cluster (it lies below the reserved blocks)."""
        if 0 <= producer_id < self._end:
            return True
        return 0 <= producer_id < await self._reserved_end()

    async def allocate(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                start = await self._reserved_end()
                end = start + self._block_size
                if end > _MAX_PRODUCER_ID:
                    raise OverflowError("producer id space exhausted")
                await self._kv.put_kv(self._key, struct.pack(">q", end))
                self._next, self._end = start, end
                logger.info("reserved producer id block [%d, %d)", start, end)
            pid = self._next
            self._next += 1
            return pid
