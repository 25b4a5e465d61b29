"""Stream-set object compaction, per node (DESIGN.md §10; AutoMQ's CompactionManager).

Every upload leaves one stream-set object holding a slice of many streams, so a stream that is read back from
the start touches every one of them. Each round:

1. Stream-set objects older than ``stream_set_object_compaction_force_split_ms`` (by data time) are
   *force-split*, one commit each and at most ``stream_set_object_compaction_max_objects`` per round: every
   stream's data becomes a stream object, so old data ends up in per-stream objects that stream-object
   compaction can merge further. Memory: one read batch of source blocks and one new stream object at a time.
2. The younger ones that share streams are *merged*, oldest first, bounded by
   ``stream_set_object_compaction_max_objects`` and ``stream_set_object_compaction_cache_size`` bytes of source
   objects (the memory one round may use): each stream's merged run of at least ``stream_object_split_size``
   becomes a stream object, the rest one new stream-set object.

Blocks of trimmed or deleted streams are dropped. New ids come from ``prepare_objects``; the commit names the
replaced objects in ``compacted_object_ids`` and swaps them atomically, so readers see either the old objects or
the new ones, both holding the same batches. Replaced objects stay in the bucket for
``object_delete_retention_ms`` (readers mid-read still find them); uploads of a failed round stay PREPARED until
their deadline, then the lifecycle sweep deletes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from storage.compaction.copy import PlanWriter, WrittenObject
from storage.compaction.plan import CompactionPlan, plan_stream_set_compaction, select_merge_candidates
from storage.config import StorageConfig
from storage.errors import StorageError
from storage.metadata.api import (
    CommitStreamSetObjectRequest,
    NodeIdentity,
    ObjectStreamRange,
    S3ObjectMetadata,
    StreamMetadata,
    StreamObjectCommit,
)
from storage.objects.reader import ObjectReader

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class StreamSetCompactionResult:
    """What one round did (for logs, metrics and tests)."""

    merged_objects: int = 0  # source objects replaced by a merge
    split_objects: int = 0  # source objects force-split
    written_objects: int = 0
    dropped_blocks: int = 0
    bytes_written: int = 0
    failures: list[str] = field(default_factory=list)


class StreamSetCompactor:
    """Compacts the stream-set objects of ``node``; see the module docstring."""

    def __init__(
        self,
        *,
        config: StorageConfig,
        metadata: StreamMetadata,
        reader: ObjectReader,
        node: NodeIdentity,
        clock: Callable[[], int],
    ) -> None:
        self._config = config
        self._metadata = metadata
        self._reader = reader
        self._node = node
        self._clock = clock

    async def run_once(self) -> StreamSetCompactionResult:
        """One round: force splits, then one bounded merge. A failed step is logged and reported in the result;
        the objects it would have replaced stay as they are."""
        result = StreamSetCompactionResult()
        objects = await self._metadata.get_stream_set_objects(self._node.node_id)
        if not objects:
            return result
        split_before = self._clock() - self._config.stream_set_object_compaction_force_split_ms
        old = [o for o in objects if o.data_time_ms <= split_before]
        young = [o for o in objects if o.data_time_ms > split_before]
        for obj in old[: self._config.stream_set_object_compaction_max_objects]:  # the rest next round
            await self._attempt([obj], 0, "force split", result)
        candidates = select_merge_candidates(
            young,
            self._config.stream_set_object_compaction_max_objects,
            self._config.stream_set_object_compaction_cache_size,
        )
        if candidates:
            await self._attempt(candidates, self._config.stream_object_split_size, "merge", result)
        return result

    async def _attempt(
        self, sources: list[S3ObjectMetadata], split_size: int, what: str, result: StreamSetCompactionResult
    ) -> None:
        ids = [o.object_id for o in sources]
        try:
            plan, written = await self._compact(sources, split_size)
        except asyncio.CancelledError:
            raise
        except StorageError as exc:
            message = f"node {self._node.node_id}: {what} of stream-set objects {ids} failed: {exc}"
            logger.warning("%s; the objects stay as they are", message)
            result.failures.append(message)
            return
        if split_size == 0:
            result.split_objects += len(sources)
        else:
            result.merged_objects += len(sources)
        result.written_objects += len(written)
        result.dropped_blocks += plan.dropped_blocks
        result.bytes_written += sum(w.size for w in written)
        logger.info(
            "node %d: %s of stream-set objects %s -> %s (%d trimmed blocks dropped)",
            self._node.node_id,
            what,
            ids,
            _describe(written),
            plan.dropped_blocks,
        )

    async def _compact(
        self, sources: Sequence[S3ObjectMetadata], split_size: int
    ) -> tuple[CompactionPlan, list[WrittenObject]]:
        indexes = await asyncio.gather(*(self._reader.index(o.object_id, o.object_size) for o in sources))
        stream_ids = sorted({e.stream_id for entries in indexes for e in entries})
        streams = await self._metadata.get_streams(stream_ids)
        start_offsets = {s.stream_id: s.start_offset for s in streams}
        plan = plan_stream_set_compaction(list(zip(sources, indexes, strict=True)), start_offsets, split_size)
        written: list[WrittenObject] = []
        if plan.outputs:
            first_id = await self._metadata.prepare_objects(
                self._node, len(plan.outputs), self._config.object_prepare_ttl_ms
            )
            writer = PlanWriter(self._reader, self._config.object_block_size, _read_batch(self._config))
            written = await writer.write(plan, first_id)
        await self._metadata.commit_stream_set_object(_commit_request(self._node, plan, written))
        return plan, written


def _read_batch(config: StorageConfig) -> int:
    return max(config.object_block_size, min(8 * 1024 * 1024, config.stream_set_object_compaction_cache_size // 4))


def _commit_request(
    node: NodeIdentity, plan: CompactionPlan, written: Sequence[WrittenObject]
) -> CommitStreamSetObjectRequest:
    object_id, object_size = -1, 0
    ranges: tuple[ObjectStreamRange, ...] = ()
    stream_objects: list[StreamObjectCommit] = []
    for obj in written:
        if obj.output.is_stream_object:
            (run,) = obj.output.runs
            stream_objects.append(
                StreamObjectCommit(obj.object_id, obj.size, run.stream_id, run.start_offset, run.end_offset)
            )
        else:
            object_id, object_size = obj.object_id, obj.size
            ranges = tuple(ObjectStreamRange(r.stream_id, r.start_offset, r.end_offset) for r in obj.output.runs)
    return CommitStreamSetObjectRequest(
        node=node,
        object_id=object_id,
        object_size=object_size,
        ranges=ranges,
        stream_objects=tuple(sorted(stream_objects, key=lambda s: s.object_id)),
        compacted_object_ids=tuple(plan.source_ids),
    )


def _describe(written: Sequence[WrittenObject]) -> str:
    if not written:
        return "nothing (all data trimmed)"
    parts = [f"{'stream object' if w.output.is_stream_object else 'stream-set object'} {w.object_id}" for w in written]
    return ", ".join(parts)
