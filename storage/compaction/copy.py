"""Builds and uploads the objects a ``CompactionPlan`` describes, copying the source blocks byte for byte.

Source blocks are fetched in read batches of consecutive runs (runs are visited in (stream, offset) order, the
order blocks lie in the sources, so one batch costs about one ranged GET per source object). Every block is
decoded once to verify it matches its index entry; a block holding at least a block's worth of payload is then
copied raw with ``ObjectBuilder.add_raw_block``, while smaller blocks (the tails of many small uploads) are
re-blocked by adding their batches, so a merged object does not inherit hundreds of tiny blocks. Either way the
batches a reader decodes are the very same bytes. A block its object's committed range starts or ends inside (an S3
WAL object committed in place, ``SourceBlock.clipped``) is re-blocked with only the batches inside the range: what
lies outside was never committed and must not become part of a new object's range.

Memory: one read batch of source blocks, the stream-set object being built, and one stream object at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from storage.compaction.plan import CompactionPlan, OutputObject, SourceBlock, StreamRun
from storage.errors import CompactionError
from storage.objects import format as fmt
from storage.objects.format import IndexEntry, ObjectBuilder
from storage.objects.reader import ObjectReader

logger = logging.getLogger(__name__)

DEFAULT_READ_BATCH_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WrittenObject:
    """An uploaded (not yet committed) output object."""

    object_id: int
    size: int
    output: OutputObject


class PlanWriter:
    """Writes plans into ``reader``'s store and namespace."""

    def __init__(self, reader: ObjectReader, block_size: int, read_batch_bytes: int = DEFAULT_READ_BATCH_BYTES) -> None:
        if read_batch_bytes <= 0:
            raise ValueError(f"read batch size must be positive, got {read_batch_bytes}")
        self._reader = reader
        self._block_size = block_size
        self._read_batch = read_batch_bytes
        self.bytes_read = 0
        self.bytes_written = 0

    async def write(self, plan: CompactionPlan, first_id: int) -> list[WrittenObject]:
        """Uploads every output of ``plan``; output ``i`` gets object id ``first_id + i``."""
        builders: dict[int, ObjectBuilder] = {}  # outputs being built: the stream-set object, or one stream object
        written: list[WrittenObject] = []
        pairs = plan.runs_in_copy_order()
        i = 0
        while i < len(pairs):
            batch = [pairs[i]]
            total = pairs[i][1].size
            i += 1
            while i < len(pairs) and total + pairs[i][1].size <= self._read_batch:
                total += pairs[i][1].size
                batch.append(pairs[i])
                i += 1
            datas = await self._fetch([block for _index, run in batch for block in run.blocks])
            for index, run in batch:
                output = plan.outputs[index]
                builder = builders.get(index)
                if builder is None:
                    builder = builders[index] = ObjectBuilder(self._block_size)
                self._copy_run(builder, run, datas)
                if output.is_stream_object:  # one run: complete, upload it now to free its memory
                    del builders[index]
                    written.append(await self._put(first_id + index, builder, output))
            del datas
        for index, builder in builders.items():
            written.append(await self._put(first_id + index, builder, plan.outputs[index]))
        return written

    async def _fetch(self, blocks: Sequence[SourceBlock]) -> dict[tuple[int, int], bytes]:
        per_object: dict[int, list[IndexEntry]] = {}
        for block in blocks:
            per_object.setdefault(block.object_id, []).append(block.entry)
        object_ids = sorted(per_object)
        for object_id in object_ids:
            per_object[object_id].sort(key=lambda e: e.position)
        results = await asyncio.gather(*(self._reader.read_blocks(oid, per_object[oid]) for oid in object_ids))
        out: dict[tuple[int, int], bytes] = {}
        for object_id, datas in zip(object_ids, results, strict=True):
            for entry, data in zip(per_object[object_id], datas, strict=True):
                out[(object_id, entry.position)] = data
                self.bytes_read += len(data)
        return out

    def _copy_run(self, builder: ObjectBuilder, run: StreamRun, datas: dict[tuple[int, int], bytes]) -> None:
        for block in run.blocks:
            data = datas.pop((block.object_id, block.entry.position))
            where = f"compaction source {self._reader.where(self._reader.key(block.object_id))}"
            batches = list(fmt.parse_block(data, block.entry, where))
            if block.clipped:
                builder.add_all(b for b in batches if block.start_offset <= b.base_offset < block.end_offset)
            elif sum(b.size for b in batches) >= self._block_size:
                builder.add_raw_block(block.entry, data)
            else:
                builder.add_all(batches)

    async def _put(self, object_id: int, builder: ObjectBuilder, output: OutputObject) -> WrittenObject:
        expected = [(r.stream_id, r.start_offset, r.end_offset) for r in output.runs]
        got = [(r.stream_id, r.start_offset, r.end_offset) for r in builder.ranges]
        if got != expected:
            raise CompactionError(f"object {object_id}: built ranges {got} differ from the planned {expected}")
        data = builder.finish()
        key = self._reader.key(object_id)
        await self._reader.store.put(key, data)
        self.bytes_written += len(data)
        logger.debug("compaction wrote object %d (%s, %d bytes, %d ranges)", object_id, key, len(data), len(got))
        return WrittenObject(object_id, len(data), output)
