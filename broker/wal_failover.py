"""The broker's side of WAL failover: replaying the S3 WAL of a dead broker the controller assigned to this one.

The controller (``controller.decisions.wal_failover``) assigns a dead broker's WAL to a live one in a
``WALFailoverRecord``; every broker sees it in its metadata image. The assigned broker opens the dead one's WAL in
failover mode (which fences the dead incarnation's WAL writer, should it be only paused), replays it with the storage
engine's own recovery (``StorageEngine.recover_wal``: upload and commit what is beyond each stream's committed end,
reset the WAL, close the streams), and reports it done. The new leaders of the dead broker's partitions, which retry
opening streams still opened elsewhere, then open them and see every acknowledged record.

A failed attempt is retried while the assignment still names this broker; if this broker dies instead, the
controller reassigns the failover and the next target finishes what is left (the replay is idempotent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from metadata.cluster_records import failover_wal_epoch
from metadata.controller_api import ControllerClient
from metadata.image import MetadataImage, WALFailoverImage
from storage.engine import StorageEngine
from storage.errors import StorageError, WALFencedError
from storage.metadata.api import NodeIdentity
from storage.wal.base import WriteAheadLog
from storage.wal.factory import open_failover_wal

logger = logging.getLogger(__name__)

RETRY_DELAY_S = 1.0
WALOpener = Callable[[int, int], WriteAheadLog]
"""(dead node id, failover epoch) -> that node's WAL opened for failover, not yet started."""


class WALFailoverRunner:
    """Watches the metadata image for WAL failovers assigned to this broker and runs each once."""

    def __init__(self, controller: ControllerClient, storage: StorageEngine, open_wal: WALOpener | None = None) -> None:
        self._controller = controller
        self._storage = storage
        self._open_wal = open_wal or (
            lambda node_id, epoch: open_failover_wal(storage.config, node_id, epoch, own_wal=storage.wal))
        self._running: dict[tuple[int, int, int], asyncio.Task[None]] = {}  # (node, node epoch, attempt) -> task
        self._changed = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def me(self) -> NodeIdentity:
        return self._storage.node

    def start(self) -> None:
        self._controller.subscribe(self._on_image)
        self._changed.set()
        self._loop_task = asyncio.create_task(self._watch(), name=f"wal-failover-{self.me.node_id}")

    async def stop(self) -> None:
        self._stopping = True
        tasks = [t for t in (self._loop_task, *self._running.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._running.clear()

    def _on_image(self, _old: MetadataImage, _new: MetadataImage) -> None:
        self._changed.set()

    def _assigned(self, image: MetadataImage) -> list[WALFailoverImage]:
        me = self.me
        return [f for f in image.wal_failovers.values() if f.delegated_to(me.node_id, me.node_epoch)]

    async def _watch(self) -> None:
        while not self._stopping:
            await self._changed.wait()
            self._changed.clear()
            for failover in self._assigned(self._controller.image):
                key = (failover.node_id, failover.node_epoch, failover.attempt)
                if key not in self._running:
                    self._running[key] = asyncio.create_task(
                        self._run(failover), name=f"wal-failover-{self.me.node_id}-of-{failover.node_id}"
                    )

    def _still_mine(self, failover: WALFailoverImage) -> bool:
        current = self._controller.image.wal_failovers.get(failover.node_id)
        return (
            current is not None
            and current.node_epoch == failover.node_epoch
            and current.attempt == failover.attempt
            and current.delegated_to(self.me.node_id, self.me.node_epoch)
        )

    async def _run(self, failover: WALFailoverImage) -> None:
        attempt = 0
        while not self._stopping and self._still_mine(failover):
            attempt += 1
            try:
                await self.replay(failover)
                return
            except WALFencedError as exc:
                logger.warning("WAL failover of broker %d: a newer owner took its WAL, giving up: %s",
                               failover.node_id, exc)
                return
            except StorageError as exc:
                logger.error("WAL failover of broker %d by broker %d failed (try %d), retrying in %.0f s: %s",
                             failover.node_id, self.me.node_id, attempt, RETRY_DELAY_S, exc)
            except Exception:
                logger.exception("WAL failover of broker %d by broker %d failed (try %d), retrying in %.0f s",
                                 failover.node_id, self.me.node_id, attempt, RETRY_DELAY_S)
            await asyncio.sleep(RETRY_DELAY_S)

    async def replay(self, failover: WALFailoverImage) -> int:
        """One run: replays the dead broker's WAL and reports the failover done; returns the batches replayed."""
        epoch = failover_wal_epoch(failover.node_epoch, failover.attempt)
        logger.info("broker %d replays the WAL of broker %d (epoch %d) at failover epoch %d", self.me.node_id,
                    failover.node_id, failover.node_epoch, epoch)
        started = time.perf_counter()
        wal = self._open_wal(failover.node_id, epoch)
        try:
            await wal.start()
            opened = time.perf_counter()
            replayed = await self._storage.recover_wal(wal, NodeIdentity(failover.node_id, failover.node_epoch))
        finally:
            await wal.close()
        replayed_at = time.perf_counter()
        await self._controller.complete_wal_failover(self.me, failover.node_id, failover.node_epoch)
        done = time.perf_counter()
        logger.info("WAL failover of broker %d done by broker %d: %d batches replayed (WAL opened in %.3f s, "
                    "replayed and closed in %.3f s, reported in %.3f s)", failover.node_id, self.me.node_id,
                    replayed, opened - started, replayed_at - opened, done - replayed_at)
        return replayed
