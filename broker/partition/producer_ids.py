"""Producer-id allocation for InitProducerId: blocks from the active controller, ids handed out one by one.

The broker asks the controller for a block with AllocateProducerIds (``metadata.producer_ids``): the controller
commits each block to the metadata log before answering, so the brokers of a cluster never hold overlapping blocks
and a block is never given twice, across broker and controller restarts alike. A broker restart skips the rest of
its block, as Kafka's ProducerIdManager does. The combined node's broker calls its own controller in process; a
broker of a cluster goes through ``RemoteControllerClient``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from metadata.image import MetadataImage
from metadata.producer_ids import BLOCK_SIZE, ProducerIdBlock
from metadata.producer_ids import was_allocated as allocated_in_image

__all__ = ["BLOCK_SIZE", "ProducerIdAllocator", "ProducerIdSource"]

logger = logging.getLogger(__name__)


class ProducerIdSource(Protocol):
    """The part of ``metadata.controller_api.ControllerClient`` producer ids need."""

    @property
    def image(self) -> MetadataImage: ...

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock: ...


class ProducerIdAllocator:
    """Hands out the ids of this broker's current block, fetching the next block when it runs out. ``identity``
    gives (node id, node epoch) of the broker now: the epoch changes when the broker registers again."""

    def __init__(self, source: ProducerIdSource, identity: Callable[[], tuple[int, int]]) -> None:
        self._source = source
        self._identity = identity
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def was_allocated(self, producer_id: int) -> bool:
        """Whether ``producer_id`` was ever handed out in this cluster (it lies in a block some broker got)."""
        if 0 <= producer_id < self._end:
            return True
        return allocated_in_image(self._source.image, producer_id)

    async def allocate(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                broker_id, broker_epoch = self._identity()
                block = await self._source.allocate_producer_ids(broker_id, broker_epoch)
                if block.length <= 0 or block.start < 0:
                    raise ValueError(
                        f"broker {broker_id}: the controller answered an empty producer id block "
                        f"[{block.start}, {block.end})"
                    )
                self._next, self._end = block.start, block.end
                logger.info("broker %d reserved producer id block [%d, %d)", broker_id, block.start, block.end)
            pid = self._next
            self._next += 1
            return pid
