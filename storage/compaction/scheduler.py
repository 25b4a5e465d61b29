"""Runs compaction and the object lifecycle in the background of a storage engine.

Three periodic tasks: stream-set compaction every ``stream_set_object_compaction_interval_ms``, stream-object
compaction of the node's open streams every ``stream_object_compaction_interval_ms``, and the lifecycle sweep
every ``lifecycle_interval_ms()``. The two compactions take turns (one lock), so their memory bounds do not add
up. A round that fails is logged and the next one starts on schedule; a round in progress at shutdown is
cancelled, which is safe because nothing becomes visible until a commit, and abandoned uploads stay PREPARED
until the lifecycle deletes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from storage.compaction.lifecycle import ObjectSweeper
from storage.compaction.stream_object import StreamObjectCompactor
from storage.compaction.stream_set import StreamSetCompactor
from storage.config import StorageConfig
from storage.errors import StorageError
from storage.metadata.api import NodeIdentity, StreamMetadata
from storage.objects.reader import ObjectReader

logger = logging.getLogger(__name__)


def lifecycle_interval_ms(config: StorageConfig) -> int:
    """How often to sweep: often enough that dead objects outlive the delete retention by at most half of it,
    never more often than once a second nor less often than once a minute."""
    return max(1_000, min(60_000, config.object_delete_retention_ms // 2))


class CompactionScheduler:
    """Owns the compactors and the sweeper of one engine. ``streams`` lists the stream ids this node has open."""

    def __init__(
        self,
        *,
        config: StorageConfig,
        metadata: StreamMetadata,
        reader: ObjectReader,
        node: NodeIdentity,
        streams: Callable[[], Iterable[int]],
        clock: Callable[[], int],
        run_lifecycle: bool = True,
        observe_round: Callable[[str, float, int], None] = lambda _kind, _seconds, _bytes: None,
    ) -> None:
        """``observe_round(kind, seconds, bytes_written)`` learns of each compaction round that wrote an object (for
        metrics; an idle round would only drag the latency and size series towards zero)."""
        self._config = config
        self._observe_round = observe_round
        self._node = node
        self._streams = streams
        self._run_lifecycle = run_lifecycle
        self.stream_set = StreamSetCompactor(config=config, metadata=metadata, reader=reader, node=node, clock=clock)
        self.stream_object = StreamObjectCompactor(config=config, metadata=metadata, reader=reader, node=node)
        self.sweeper = ObjectSweeper(
            metadata, reader.store, config.namespace, clock=clock, on_deleted=reader.invalidate
        )
        self._turn = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        if self._tasks:
            return
        node = self._node.node_id
        self._tasks = [
            asyncio.create_task(
                self._every(
                    self._config.stream_set_object_compaction_interval_ms,
                    "stream-set compaction",
                    self._stream_set_round,
                ),
                name=f"fjord-compaction-stream-set-{node}",
            ),
            asyncio.create_task(
                self._every(
                    self._config.stream_object_compaction_interval_ms,
                    "stream-object compaction",
                    self._stream_object_round,
                ),
                name=f"fjord-compaction-stream-object-{node}",
            ),
        ]
        if self._run_lifecycle:
            self._tasks.append(
                asyncio.create_task(
                    self._every(lifecycle_interval_ms(self._config), "object lifecycle sweep", self._sweep),
                    name=f"fjord-object-lifecycle-{node}",
                )
            )

    async def stop(self) -> None:
        """Cancels the tasks (a round in progress is abandoned safely) and waits for them to end."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _stream_set_round(self) -> None:
        async with self._turn:
            started = time.perf_counter()
            result = await self.stream_set.run_once()
            if result.bytes_written > 0:  # a round that found nothing to compact is no compaction
                self._observe_round("stream_set", time.perf_counter() - started, result.bytes_written)

    async def _stream_object_round(self) -> None:
        async with self._turn:
            started = time.perf_counter()
            result = await self.stream_object.run_once(sorted(self._streams()))
            if result.bytes_written > 0:  # a round that found nothing to compact is no compaction
                self._observe_round("stream_object", time.perf_counter() - started, result.bytes_written)

    async def _sweep(self) -> None:
        await self.sweeper.run_once()

    async def _every(self, interval_ms: int, what: str, step: Callable[[], Awaitable[None]]) -> None:
        if interval_ms <= 0:
            logger.info("node %d: %s is disabled (interval %d ms)", self._node.node_id, what, interval_ms)
            return
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except StorageError as exc:  # S3 away or a stream moving: expected, and the next round retries
                logger.warning(
                    "node %d: %s round failed; the next one runs in %d ms: %s",
                    self._node.node_id,
                    what,
                    interval_ms,
                    exc,
                )
            except Exception:
                logger.exception(
                    "node %d: %s round failed; the next one runs in %d ms", self._node.node_id, what, interval_ms
                )
