"""Stream-object compaction, per stream (DESIGN.md §10; AutoMQ's StreamObjectCompactor).

Force splits and uploads of busy streams leave a stream with many stream objects, some small. For each stream
this node has open, a round:

1. drops the stream objects whose data lies entirely below the stream's start offset (trimmed away), and
2. merges adjacent small stream objects (each under ``stream_object_compaction_small_size``, offsets continuing
   each other) into one object per group, a group closing once it reaches the small size, so merged objects
   stay about 1-2x that size and one merge holds at most that much in memory.

Whole data blocks are copied (``ObjectBuilder.add_raw_block``) when they are full; small blocks are re-blocked.
Each merge is one ``commit_stream_object`` naming its sources, which the metadata swaps atomically; the sources
stay in the bucket for ``object_delete_retention_ms`` so a reader holding their ids still succeeds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from storage.compaction.copy import PlanWriter
from storage.compaction.plan import plan_stream_object_compaction, plan_stream_set_compaction
from storage.config import StorageConfig
from storage.errors import CompactionError, StorageError
from storage.metadata.api import CommitStreamObjectRequest, NodeIdentity, S3ObjectMetadata, StreamMetadata
from storage.objects.reader import ObjectReader

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class StreamObjectCompactionResult:
    """What one round did over all streams (for logs, metrics and tests)."""

    expired_objects: int = 0  # dropped because all their data was trimmed
    merged_objects: int = 0  # sources replaced by merges
    written_objects: int = 0
    bytes_written: int = 0
    failures: list[str] = field(default_factory=list)


class StreamObjectCompactor:
    """See the module docstring."""

    def __init__(
        self, *, config: StorageConfig, metadata: StreamMetadata, reader: ObjectReader, node: NodeIdentity
    ) -> None:
        self._config = config
        self._metadata = metadata
        self._reader = reader
        self._node = node

    async def run_once(self, stream_ids: Iterable[int]) -> StreamObjectCompactionResult:
        """Compacts each stream in turn; a failure is logged, reported, and does not stop the other streams."""
        result = StreamObjectCompactionResult()
        # One lookup for every stream's start offset; deleted streams are skipped (the sweep reclaims them).
        for stream in await self._metadata.get_streams(list(stream_ids)):
            stream_id = stream.stream_id
            try:
                await self._compact(stream_id, stream.start_offset, result)
            except asyncio.CancelledError:
                raise
            except StorageError as exc:
                message = f"node {self._node.node_id}: stream-object compaction of stream {stream_id} failed: {exc}"
                logger.warning("%s; its objects stay as they are", message)
                result.failures.append(message)
        return result

    async def _compact(self, stream_id: int, start_offset: int, result: StreamObjectCompactionResult) -> None:
        objects = await self._metadata.get_stream_objects(stream_id)
        plan = plan_stream_object_compaction(
            objects, stream_id, start_offset, self._config.stream_object_compaction_small_size
        )
        if plan.expired:
            await self._drop(stream_id, start_offset, plan.expired)
            result.expired_objects += len(plan.expired)
        for group in plan.groups:
            await self._merge(stream_id, start_offset, group, result)

    async def _drop(self, stream_id: int, start_offset: int, object_ids: Sequence[int]) -> None:
        await self._metadata.commit_stream_object(
            CommitStreamObjectRequest(
                node=self._node,
                object_id=-1,
                object_size=0,
                stream_id=stream_id,
                start_offset=start_offset,
                end_offset=start_offset,
                source_object_ids=tuple(object_ids),
            )
        )
        logger.info(
            "node %d: stream %d: dropped stream objects %s, all below the start offset %d",
            self._node.node_id,
            stream_id,
            list(object_ids),
            start_offset,
        )

    async def _merge(
        self, stream_id: int, start_offset: int, group: Sequence[S3ObjectMetadata], result: StreamObjectCompactionResult
    ) -> None:
        ids = [o.object_id for o in group]
        indexes = await asyncio.gather(*(self._reader.index(o.object_id, o.object_size) for o in group))
        # The same planner as stream-set compaction, forcing every run into a stream object.
        plan = plan_stream_set_compaction(list(zip(group, indexes, strict=True)), {stream_id: start_offset}, 0)
        if not plan.outputs:
            await self._drop(stream_id, start_offset, ids)
            result.expired_objects += len(ids)
            return
        if len(plan.outputs) != 1:
            raise CompactionError(
                f"stream {stream_id}: stream objects {ids} do not hold one contiguous range "
                f"({len(plan.outputs)} runs in their indexes)"
            )
        object_id = await self._metadata.prepare_objects(self._node, 1, self._config.object_prepare_ttl_ms)
        writer = PlanWriter(self._reader, self._config.object_block_size)
        (written,) = await writer.write(plan, object_id)
        (run,) = written.output.runs
        await self._metadata.commit_stream_object(
            CommitStreamObjectRequest(
                node=self._node,
                object_id=written.object_id,
                object_size=written.size,
                stream_id=stream_id,
                start_offset=run.start_offset,
                end_offset=run.end_offset,
                source_object_ids=tuple(ids),
            )
        )
        result.merged_objects += len(ids)
        result.written_objects += 1
        result.bytes_written += written.size
        logger.info(
            "node %d: stream %d: merged stream objects %s into %d ([%d, %d), %d bytes)",
            self._node.node_id,
            stream_id,
            ids,
            written.object_id,
            run.start_offset,
            run.end_offset,
            written.size,
        )
