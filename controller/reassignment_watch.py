"""The second half of a reassignment: electing the target once the source has let go (DESIGN §9).

An accepted reassignment leaves the partition with no leader (``controller.decisions.reassignment``). This watch,
run by the active controller while moves are pending, elects each target once the source broker has closed the
partition's streams (its meta stream closes last, so its state says it), or once the election timer
(``partition.reassignment.election.timeout.ms``, from when this controller first saw the move) fires because the
source is dead or slow: the WAL makes its data recoverable either way. It looks at the stream metadata, which is
the controller's own state, as soon as a stream closes (:meth:`ReassignmentWatch.saw`: the election follows the
source's last close at once, which is what a moved partition's producer waits for) and every few tens of
milliseconds besides, until no move waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import uuid
from collections.abc import Awaitable, Callable, Sequence

from controller.decisions import reassignment
from metadata.image import MetadataImage, PartitionImage, partitions_being_reassigned
from metadata.kv_keys import partition_kv_key
from settings.server import ServerConfig
from storage.metadata.api import StreamMetadata, StreamState
from storage.metadata.record_codec import MetadataRecord
from storage.metadata.stream_records import StreamRecord
from storage.namespace import namespace_for

logger = logging.getLogger(__name__)

POLL_S = 0.05  # how often the watch looks at the source's streams while a move waits and none closes

#: Decides, under the controller's write lock, the records to commit from the current image.
Decide = Callable[[MetadataImage], Awaitable[list[MetadataRecord]]]


class ReassignmentWatch:
    """Completes the pending reassignments through ``write`` (the controller's locked decide-and-commit)."""

    def __init__(
        self, config: ServerConfig, streams: Callable[[], StreamMetadata], write: Callable[[Decide], Awaitable[None]]
    ) -> None:
        """``streams``: the controller's stream metadata as of each look (a snapshot load replaces it)."""
        self._config = config
        self._streams = streams
        self._write = write
        self._task: asyncio.Task[None] | None = None
        # (topic id, partition, leader epoch) of each reassignment in flight -> loop time this controller saw it.
        self._seen: dict[tuple[uuid.UUID, int, int], float] = {}
        self._closed = asyncio.Event()  # a stream closed since the watch last looked

    def start(self) -> None:
        """Runs the watch unless it runs already."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="partition-reassignments")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def saw(self, records: Sequence[MetadataRecord]) -> None:
        """Stream records the controller just committed: a closed stream may be a source's last, so the watch looks
        now rather than at its next poll (the stream metadata applies them before the watch's task runs)."""
        if any(isinstance(r, StreamRecord) and r.state is StreamState.CLOSED for r in records):
            self._closed.set()

    async def _run(self) -> None:
        while True:
            self._closed.clear()
            try:
                pending = await self.complete()
            except Exception as exc:  # NotControllerError after losing leadership, a log write failed, ...
                logger.info("controller %d: reassignment watch stopped: %s", self._config.node_id, exc)
                return
            if not pending:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), POLL_S)

    async def complete(self) -> int:
        """Elects the target of each reassigned partition whose source closed its streams, or whose election timer
        fired. Returns how many reassignments are still waiting."""
        timeout_s = int(self._config.value("partition.reassignment.election.timeout.ms")) / 1000
        now = asyncio.get_running_loop().time()
        waiting = 0

        async def decide(image: MetadataImage) -> list[MetadataRecord]:
            nonlocal waiting
            moving = partitions_being_reassigned(image)
            keys = {(p.topic_id, p.partition, p.leader_epoch) for _, p in moving}
            for stale in [k for k in self._seen if k not in keys]:
                del self._seen[stale]
            records: list[MetadataRecord] = []
            for name, partition in moving:
                seen = self._seen.setdefault((partition.topic_id, partition.partition, partition.leader_epoch), now)
                closed = await self._streams_closed(image.cluster_id, partition)
                if closed or now - seen >= timeout_s:
                    records.append(reassignment.complete(image, partition))
                    logger.info(
                        "partition %s-%d: %s; electing broker %s (reassigned from %s)", name, partition.partition,
                        "the source closed its streams" if closed else f"no close after {timeout_s:.1f} s",
                        list(partition.replicas), list(partition.removing_replicas),
                    )
            waiting = len(moving) - len(records)
            return records

        await self._write(decide)
        return waiting

    async def _streams_closed(self, cluster_id: str, partition: PartitionImage) -> bool:
        """Whether the partition's streams are all closed: its meta stream is closed last (PartitionLog.close),
        so its state says it. A partition never opened has no streams to wait for."""
        raw = await self._streams().get_kv(
            partition_kv_key(namespace_for(cluster_id), partition.topic_id, partition.partition)
        )
        if raw is None or len(raw) != 8:
            return True
        (meta_id,) = struct.unpack(">q", raw)
        streams = await self._streams().get_streams([meta_id])
        return not streams or streams[0].state is StreamState.CLOSED
