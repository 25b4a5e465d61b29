"""What a compaction round will write, decided from object indexes and stream metadata alone (sans-I/O).

Compaction must never change what a reader sees, so every decision here is about *where* existing data blocks
go, never about their content: blocks of trimmed or deleted streams are dropped, the remaining blocks of each
stream are grouped into contiguous runs, and each run is assigned to a new stream object or to the single new
stream-set object. The I/O side (``storage.compaction.copy``) then copies exactly those blocks.

An object may hold only one contiguous range per stream (metadata records one range per stream and object), so
when the merged objects leave a stream with several runs (the gaps are held by that stream's stream objects),
only the first small run stays in the stream-set object and every other run becomes a stream object of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from storage.errors import CompactionError
from storage.metadata.api import S3ObjectMetadata
from storage.objects.format import IndexEntry


@dataclass(frozen=True, slots=True)
class SourceBlock:
    """One data block of an existing object that compaction keeps: its batches from ``start_offset`` up to
    ``end_offset``, the block's own offsets unless the object's committed range starts or ends inside it (an S3
    WAL object committed in place from a stream's committed end on, storage/failover_copy.py). A clipped block is
    re-encoded without the batches outside the range, which the object holds but no reader may see."""

    object_id: int
    entry: IndexEntry
    start_offset: int = -1
    end_offset: int = -1

    def __post_init__(self) -> None:
        if self.start_offset < 0:
            object.__setattr__(self, "start_offset", self.entry.start_offset)
        if self.end_offset < 0:
            object.__setattr__(self, "end_offset", self.entry.end_offset)

    @property
    def clipped(self) -> bool:
        return (self.start_offset, self.end_offset) != (self.entry.start_offset, self.entry.end_offset)


@dataclass(slots=True)
class StreamRun:
    """Blocks of one stream with contiguous offsets, in offset order: one range of one new object."""

    stream_id: int
    blocks: list[SourceBlock] = field(default_factory=list)

    @property
    def start_offset(self) -> int:
        return self.blocks[0].start_offset

    @property
    def end_offset(self) -> int:
        return self.blocks[-1].end_offset

    @property
    def size(self) -> int:
        return sum(b.entry.size for b in self.blocks)


@dataclass(slots=True)
class OutputObject:
    """A new object to build: a stream object holds one run, a stream-set object one run per stream."""

    runs: list[StreamRun]
    is_stream_object: bool


@dataclass(slots=True)
class CompactionPlan:
    """The objects one commit replaces and the objects that replace them."""

    source_ids: list[int]
    outputs: list[OutputObject]
    dropped_blocks: int = 0

    def runs_in_copy_order(self) -> list[tuple[int, StreamRun]]:
        """Every run with the index of its output, sorted by (stream, offset): the order blocks lie in the
        sources, so reads of consecutive runs touch adjacent bytes."""
        pairs = [(i, r) for i, o in enumerate(self.outputs) for r in o.runs]
        pairs.sort(key=lambda p: (p[1].stream_id, p[1].start_offset))
        return pairs


def live_blocks(
    obj: S3ObjectMetadata, entries: Sequence[IndexEntry], start_offsets: Mapping[int, int]
) -> tuple[list[SourceBlock], int]:
    """The blocks of ``obj`` that a reader can still reach, and how many were dropped.

    A block is kept when its stream still exists (``start_offsets`` holds it), it ends after the stream's start
    offset, and it overlaps the range metadata records for that stream in this object. A block straddling the
    start offset is kept whole (what lies below a stream's start is committed, only trimmed); one straddling an end
    of the range is clipped to it (what lies outside was never committed).
    """
    claimed: dict[int, tuple[int, int]] = {}
    for r in obj.ranges:
        low, high = claimed.get(r.stream_id, (r.start_offset, r.end_offset))
        claimed[r.stream_id] = (min(low, r.start_offset), max(high, r.end_offset))
    kept: list[SourceBlock] = []
    dropped = 0
    for entry in entries:
        start = start_offsets.get(entry.stream_id)
        bounds = claimed.get(entry.stream_id)
        if (
            start is None
            or bounds is None
            or entry.end_offset <= max(start, bounds[0])
            or entry.start_offset >= bounds[1]
        ):
            dropped += 1
            continue
        low, high = max(entry.start_offset, bounds[0]), min(entry.end_offset, bounds[1])
        kept.append(SourceBlock(obj.object_id, entry, low, high))
    return kept, dropped


def contiguous_runs(stream_id: int, blocks: Iterable[SourceBlock]) -> list[StreamRun]:
    """Groups one stream's blocks into runs of contiguous offsets. Overlapping blocks mean the metadata lists
    the same offsets in two objects, which compaction refuses to guess about."""
    runs: list[StreamRun] = []
    for block in sorted(blocks, key=lambda b: b.start_offset):
        current = runs[-1] if runs else None
        if current is not None and block.start_offset < current.end_offset:
            other = current.blocks[-1]
            raise CompactionError(
                f"stream {stream_id}: offsets [{block.start_offset}, {block.end_offset}) of object "
                f"{block.object_id} overlap [{other.start_offset}, {other.end_offset}) of object "
                f"{other.object_id}; not compacting them"
            )
        if current is not None and block.start_offset == current.end_offset:
            current.blocks.append(block)
        else:
            runs.append(StreamRun(stream_id, [block]))
    return runs


def plan_stream_set_compaction(
    sources: Sequence[tuple[S3ObjectMetadata, Sequence[IndexEntry]]],
    start_offsets: Mapping[int, int],
    split_size: int,
) -> CompactionPlan:
    """Merges stream-set objects: runs of at least ``split_size`` bytes become stream objects, the rest share one
    new stream-set object. ``split_size`` 0 force-splits: every run becomes a stream object."""
    per_stream: dict[int, list[SourceBlock]] = {}
    dropped = 0
    for obj, entries in sources:
        kept, lost = live_blocks(obj, entries, start_offsets)
        dropped += lost
        for block in kept:
            per_stream.setdefault(block.entry.stream_id, []).append(block)
    stream_set = OutputObject([], is_stream_object=False)
    outputs: list[OutputObject] = []
    for stream_id in sorted(per_stream):
        in_stream_set = False
        for run in contiguous_runs(stream_id, per_stream[stream_id]):
            if split_size > 0 and run.size < split_size and not in_stream_set:
                stream_set.runs.append(run)
                in_stream_set = True
            else:
                outputs.append(OutputObject([run], is_stream_object=True))
    if stream_set.runs:
        outputs.insert(0, stream_set)  # the stream-set object takes the first prepared id, as uploads do
    return CompactionPlan([obj.object_id for obj, _ in sources], outputs, dropped)


def select_merge_candidates(
    objects: Sequence[S3ObjectMetadata], max_objects: int, max_bytes: int
) -> list[S3ObjectMetadata]:
    """Stream-set objects worth merging this round, oldest first: only those sharing a stream with another
    candidate (merging unrelated objects buys no read locality), at most ``max_objects`` and ``max_bytes`` in
    total so one round's memory stays bounded. Fewer than two means there is nothing to merge."""
    holders: dict[int, int] = {}
    for obj in objects:
        for stream_id in {r.stream_id for r in obj.ranges}:
            holders[stream_id] = holders.get(stream_id, 0) + 1
    shared = [obj for obj in objects if any(holders[r.stream_id] > 1 for r in obj.ranges)]
    chosen: list[S3ObjectMetadata] = []
    total = 0
    for obj in shared:
        if len(chosen) >= max_objects or total + obj.object_size > max_bytes:
            break
        chosen.append(obj)
        total += obj.object_size
    if len(chosen) < 2:
        return []
    # Objects that no longer share a stream with the rest of the chosen set would only be rewritten.
    streams_of = [{r.stream_id for r in obj.ranges} for obj in chosen]
    keep = [
        obj
        for i, obj in enumerate(chosen)
        if any(streams_of[i] & other for j, other in enumerate(streams_of) if j != i)
    ]
    return keep if len(keep) >= 2 else []


@dataclass(slots=True)
class StreamObjectPlan:
    """One stream's stream-object compaction: objects to drop outright and groups to merge into one object each."""

    expired: list[int]
    groups: list[list[S3ObjectMetadata]]


def plan_stream_object_compaction(
    objects: Sequence[S3ObjectMetadata], stream_id: int, start_offset: int, small_size: int
) -> StreamObjectPlan:
    """``objects`` are the stream's stream objects in offset order. Objects ending at or below ``start_offset``
    hold only trimmed data and are dropped. Adjacent objects smaller than ``small_size`` whose offsets continue
    each other are grouped until a group reaches ``small_size``; groups of one object are left alone."""
    expired: list[int] = []
    groups: list[list[S3ObjectMetadata]] = []
    group: list[S3ObjectMetadata] = []
    group_size = 0
    group_end = -1
    for obj in objects:
        rng = next((r for r in obj.ranges if r.stream_id == stream_id), None)
        if rng is None:
            continue
        if rng.end_offset <= start_offset:
            expired.append(obj.object_id)
            continue
        small = obj.object_size < small_size
        if group and (not small or rng.start_offset != group_end or group_size >= small_size):
            if len(group) > 1:
                groups.append(group)
            group, group_size = [], 0
        if small:
            group.append(obj)
            group_size += obj.object_size
            group_end = rng.end_offset
    if len(group) > 1:
        groups.append(group)
    return StreamObjectPlan(expired, groups)
