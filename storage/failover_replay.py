"""A failover's replay of a dead node's WAL: in place where it can (``storage.failover_copy``: its v2 S3 WAL
objects copied inside S3 and committed as stream-set objects), else its records, read in order, go up in blocks
that each upload while the next ones are read; and the account of where the replay's time went.

A failover replay (``StorageEngine.recover_wal``) must have uploaded and committed everything the dead node
acknowledged before it closes that node's streams, so its time is reading plus uploading. One block of the whole
WAL (500 MiB by default) would add the two times up; blocks of at most :data:`REPLAY_BLOCK_MAX`, with at most
:data:`REPLAY_BLOCKS_IN_FLIGHT` read ahead of their commits, overlap them and bound the replay's memory.

:class:`ReplayClock` times the phases (reading and decoding, waiting for uploads, resetting the WAL, closing the
streams) and this process's CPU, and logs them in one INFO line (``bench/failover.py`` reads it): the replay's
wall time minus the object store's is what Fjord itself costs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass, field

from storage.cache.log_cache import CacheBlock
from storage.config import MiB, StorageConfig
from storage.failover_copy import InPlaceResult, commit_in_place
from storage.metadata.api import NodeIdentity
from storage.objectstore.base import ObjectStore
from storage.tail_recovery import Recovered, recoverable
from storage.upload import UploadPipeline, UploadStats
from storage.wal.base import WALRecord, WriteAheadLog

logger = logging.getLogger(__name__)

REPLAY_BLOCK_MAX = 32 * MiB
"""A replayed block is sealed and uploaded at this size (or the upload threshold, if smaller). Replayed blocks PUT
side by side (``UploadPipeline.submit(own_memory=True)``), each holding its batches, its built objects and a joined
body at worst: 32 MiB blocks, :data:`REPLAY_BLOCKS_IN_FLIGHT` of them, keep that near 400 MiB."""
REPLAY_BLOCKS_IN_FLIGHT = 4
"""Replayed blocks read but not yet committed, at most: bounds the replay's memory."""


@dataclass(slots=True)
class ReplayClock:
    """Where one replay's time went; ``mark`` ends a phase."""

    uploads: UploadStats
    started: float = field(default_factory=time.perf_counter)
    cpu: float = field(default_factory=time.process_time)
    loop_cpu: float = field(default_factory=time.thread_time)
    phases: dict[str, float] = field(default_factory=dict)
    blocks: int = 0
    payload: int = 0
    upload_wait: float = 0.0  # reading stopped, waiting for a block's commit (REPLAY_BLOCKS_IN_FLIGHT reached);
    # in place, commits waiting for the next object's copy
    in_place: bool = False  # committed in place: ``blocks`` are WAL objects copied, ``payload`` their bytes
    _last: float = 0.0
    _base: UploadStats = field(default_factory=UploadStats)

    def __post_init__(self) -> None:
        self._last = self.started
        u = self.uploads
        self._base = UploadStats(build_seconds=u.build_seconds, put_seconds=u.put_seconds,
                                 commit_seconds=u.commit_seconds, bytes_uploaded=u.bytes_uploaded)

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = now - self._last
        self._last = now

    def log(self, who: str, batches: int) -> None:
        u, b = self.uploads, self._base
        total = time.perf_counter() - self.started
        cpu, loop_cpu = time.process_time() - self.cpu, time.thread_time() - self.loop_cpu
        mib = self.payload / MiB
        logger.info(
            "replay timing of %s: %.1f MiB, %d batches in %d %s, %.3f s wall: %s; waiting for uploads %.2f s; "
            "uploads summed: build %.2f s, PUT %.2f s (%.1f MiB), commit %.2f s; CPU %.2f s process, %.2f s event "
            "loop (%.1f ms/MiB process, %.1f ms/MiB loop)",
            who, mib, batches, self.blocks, "WAL objects copied in place" if self.in_place else "blocks", total,
            ", ".join(f"{k} {v:.3f} s" for k, v in self.phases.items()),
            self.upload_wait, u.build_seconds - b.build_seconds, u.put_seconds - b.put_seconds,
            (u.bytes_uploaded - b.bytes_uploaded) / MiB, u.commit_seconds - b.commit_seconds, cpu, loop_cpu,
            1000 * cpu / max(mib, 1e-9), 1000 * loop_cpu / max(mib, 1e-9),
        )


async def replay_wal(
    wal: WriteAheadLog,
    found: Recovered,
    store: ObjectStore,
    uploader: UploadPipeline,
    *,
    node: NodeIdentity,
    config: StorageConfig,
    clock: ReplayClock,
    who: str,
) -> None:
    """Commits what ``wal`` holds beyond the committed ends of ``found.opening``, in place when it can, and counts
    it in ``found``; returns once everything is committed."""
    copied: InPlaceResult | None = await commit_in_place(
        wal, store, found.opening, uploader, node=node, namespace=config.namespace, who=who
    )
    if copied is not None:
        found.replayed += copied.batches
        found.skipped += copied.skipped
        clock.in_place, clock.blocks, clock.payload = True, copied.objects, copied.bytes_copied
        clock.upload_wait = copied.copy_wait
        clock.mark("copied and committed in place")
        clock.phases["of which reading the WAL indexes (as copies run)"] = copied.index_seconds
        return
    epochs = {s.stream_id: s.epoch for s in found.opening}

    def submit(block: CacheBlock) -> asyncio.Future[None]:
        block.sealed = True
        return uploader.submit(block, epochs, on_committed=_nothing, own_memory=True)

    await upload_in_blocks(recoverable(wal, found, who), submit, config.wal_upload_threshold, clock)


async def _nothing(_block: CacheBlock) -> None:
    return None


async def upload_in_blocks(
    records: AsyncIterable[WALRecord],
    submit: Callable[[CacheBlock], asyncio.Future[None]],
    upload_threshold: int,
    clock: ReplayClock,
) -> None:
    """Adds ``records`` to blocks, hands each full block to ``submit`` (which seals and uploads it) and returns
    once every block is committed; an upload's failure is raised here."""
    threshold = min(upload_threshold, REPLAY_BLOCK_MAX)
    block = CacheBlock(-1)
    uploads: list[asyncio.Future[None]] = []

    def seal() -> None:
        clock.blocks += 1
        clock.payload += block.size
        uploads.append(submit(block))

    async for record in records:
        block.add(record.batch, record.offset, record.next_offset)
        if block.size >= threshold:
            seal()
            block = CacheBlock(-1)
            if len(uploads) >= REPLAY_BLOCKS_IN_FLIGHT:
                waited = time.perf_counter()
                await uploads.pop(0)
                clock.upload_wait += time.perf_counter() - waited
    if not block.empty:
        seal()
    clock.mark("read")
    for upload in uploads:
        await upload
    clock.mark("last uploads")
