"""The upload side of a failover's replay: a dead node's WAL records, read in order, go up in blocks that each
upload while the next ones are read.

A failover replay (``StorageEngine.recover_wal``) must have uploaded and committed everything the dead node
acknowledged before it closes that node's streams, so its time is reading plus uploading. One block of the whole
WAL (500 MiB by default) would add the two times up; blocks of at most :data:`REPLAY_BLOCK_MAX`, with at most
:data:`REPLAY_BLOCKS_IN_FLIGHT` read ahead of their commits, overlap them and bound the replay's memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Callable

from storage.cache.log_cache import CacheBlock
from storage.config import MiB
from storage.wal.base import WALRecord

REPLAY_BLOCK_MAX = 64 * MiB
"""A replayed block is sealed and uploaded at this size (or the upload threshold, if smaller)."""
REPLAY_BLOCKS_IN_FLIGHT = 4
"""Replayed blocks read but not yet committed, at most: bounds the replay's memory."""


async def upload_in_blocks(
    records: AsyncIterable[WALRecord],
    submit: Callable[[CacheBlock], asyncio.Future[None]],
    upload_threshold: int,
) -> None:
    """Adds ``records`` to blocks, hands each full block to ``submit`` (which seals and uploads it) and returns
    once every block is committed; an upload's failure is raised here."""
    threshold = min(upload_threshold, REPLAY_BLOCK_MAX)
    block = CacheBlock(-1)
    uploads: list[asyncio.Future[None]] = []
    async for record in records:
        block.add(record.batch, record.offset, record.next_offset)
        if block.size >= threshold:
            uploads.append(submit(block))
            block = CacheBlock(-1)
            if len(uploads) >= REPLAY_BLOCKS_IN_FLIGHT:
                await uploads.pop(0)
    if not block.empty:
        uploads.append(submit(block))
    for upload in uploads:
        await upload
