"""How an upload splits a sealed LogCache block into objects (DESIGN.md §6.3), and builds each: pure, no I/O.

Every stream holding at least ``s3.stream.object.split.size`` bytes of the block (or the block's only stream) gets
its own stream object; the others share one stream-set object. ``storage.upload`` prepares the plan's ids, PUTs the
built objects and commits them.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.cache.log_cache import CacheBlock
from storage.objects.format import ObjectBuilder
from storage.stream_record_batch import StreamRecordBatch


@dataclass(frozen=True, slots=True)
class Part:
    """One object to build: its streams' batches (sorted by stream, each in offset order)."""

    streams: tuple[tuple[int, list[StreamRecordBatch]], ...]
    is_stream_object: bool


@dataclass(slots=True)
class UploadPlan:
    """How a block is split into objects; ids are filled in once prepared."""

    parts: list[Part]
    first_id: int = -1

    @property
    def stream_ids(self) -> list[int]:
        return [sid for part in self.parts for sid, _ in part.streams]


def plan_block(block: CacheBlock, split_size: int) -> UploadPlan:
    """Splits a block into stream objects (streams with >= ``split_size`` bytes, or the only stream) and one
    stream-set object for the rest. Pure: no I/O."""
    shared: list[tuple[int, list[StreamRecordBatch]]] = []
    parts: list[Part] = []
    only_one = len(block.streams) == 1
    sizes = block.stream_sizes()
    for stream_id, batches in block.sorted_streams():
        if only_one or sizes[stream_id] >= split_size:
            parts.append(Part(((stream_id, batches),), True))
        else:
            shared.append((stream_id, batches))
    if shared:
        parts.append(Part(tuple(shared), False))
    return UploadPlan(parts)


def build_part(part: Part, block_size: int) -> list[bytes]:
    """The object's parts, not joined: the store joins them only if it has to (off the event loop)."""
    builder = ObjectBuilder(block_size)
    for _stream_id, batches in part.streams:
        builder.add_all(batches)
    return builder.finish_parts()


def streams_text(stream_ids: list[int]) -> str:
    """Stream ids for a log line: the first eight and how many."""
    if len(stream_ids) <= 8:
        return ",".join(map(str, stream_ids))
    return ",".join(map(str, stream_ids[:8])) + f",... ({len(stream_ids)} streams)"


def ids_text(plan: UploadPlan) -> str:
    """The plan's object ids for a log line."""
    return ",".join(str(plan.first_id + i) for i in range(len(plan.parts)))
