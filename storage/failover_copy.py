"""Failover in place: a dead node's S3 WAL objects become stream-set objects by a server-side copy, none of their
bytes passing through the replaying broker.

A v2 WAL object (storage/wal/s3_format.py) is a valid stream-set object once copied whole, and its key says it is
v2, so a failover needs only each object's index (one tail GET) to know which offsets of which streams it holds.
:func:`plan_in_place` then filters exactly as the record-by-record replay (``storage.tail_recovery.recoverable``)
does: the streams the dead node still has opened, from each one's committed
end on, without a gap. In one object a stream's blocks hold one contiguous range (the index is checked for it), so
each object commits at most one range per stream, clipped to start at the stream's committed end; ranges advance
that end, so the objects commit in WAL order, each range starting exactly where the controller expects it. A block
the committed end falls inside (the dead node had uploaded part of it) is read once to check that a batch starts
exactly there, as the replay checks every batch; the read path and compaction never look below a range's start.

:func:`commit_in_place` prepares the objects' ids in one call, copies each WAL object to its new data key (S3
CopyObject, many in flight) and commits them in order. It declines (returns None) when it cannot: the WAL is not an
S3 WAL, the data bucket cannot copy from the WAL's (another endpoint), or an object is v1 or damaged; the caller then
replays record by record (``storage.failover_replay``). A failure after it began is raised: the failover is retried
and, being idempotent, commits only what is still beyond each stream's committed end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from storage.errors import CorruptObjectError
from storage.metadata.api import CommitStreamSetObjectRequest, NodeIdentity, ObjectStreamRange, OpeningStream
from storage.objects import format as fmt
from storage.objectstore.base import ObjectStore
from storage.upload import UploadPipeline
from storage.wal.base import WriteAheadLog

if TYPE_CHECKING:  # a node with a file WAL never imports the S3 WAL's modules (tests/node/test_start_imports.py)
    from storage.wal.s3_format import WALObjectKey

logger = logging.getLogger(__name__)

INDEX_READS_IN_FLIGHT = 16
"""WAL objects whose header and index are read at once (two small GETs each)."""
COPIES_IN_FLIGHT = 16
"""Server-side copies in flight. S3 copies each object on its own, at a rate per request, so a WAL of 64 objects of
8 MiB copies in about the time of four copies; an S3-compatible server in one process (moto) copies no faster with
more in flight, nor slower. The S3 store's own concurrency (``s3.max.concurrency``) bounds it too."""


@runtime_checkable
class CopyableWAL(Protocol):
    """A WAL whose objects can be committed in place: the S3 WAL (``storage.wal.s3.S3WAL``)."""

    @property
    def store(self) -> ObjectStore: ...

    @property
    def recovery_chain(self) -> list[WALObjectKey]: ...

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes: ...

    async def read_index(self, obj: WALObjectKey) -> tuple[int, list[fmt.IndexEntry]] | None: ...


@dataclass(frozen=True, slots=True)
class IndexedObject:
    """A v2 WAL object of the log to replay, as its index describes it."""

    obj: WALObjectKey
    size: int
    entries: list[fmt.IndexEntry]


@dataclass(frozen=True, slots=True)
class Straddle:
    """A block that a stream's committed end falls strictly inside: read to find the batch starting there."""

    obj: WALObjectKey
    entry: fmt.IndexEntry
    offset: int


@dataclass(slots=True)
class InPlaceObject:
    """One WAL object to copy and commit, with the ranges it commits and their batches."""

    source: IndexedObject
    ranges: list[ObjectStreamRange]
    batches: int


@dataclass(slots=True)
class InPlacePlan:
    objects: list[InPlaceObject] = field(default_factory=list)
    straddles: list[Straddle] = field(default_factory=list)
    batches: int = 0
    skipped: int = 0  # batches (by whole blocks) not committed: not ours, already committed, or after a gap


def plan_in_place(
    indexed: Sequence[IndexedObject],
    opening: Sequence[OpeningStream],
    straddle_batches: Mapping[tuple[str, int], int],
    refused: frozenset[int] = frozenset(),
    who: str | None = None,
) -> InPlacePlan:
    """What each object commits (sans-I/O; see the module docstring). ``straddle_batches`` holds, for each
    straddle already read, the batches of its block from the committed end on; ``refused`` the streams whose
    committed end was found not to start a batch (nothing of theirs is committed, as the replay drops them).
    Records dropped after a gap are logged as the replay's (``who``), unless ``who`` is None (a first pass)."""
    expected = {s.stream_id: s.end_offset for s in opening if s.stream_id not in refused}
    epochs = {s.stream_id: s.epoch for s in opening}
    plan = InPlacePlan()
    for source in indexed:
        ranges: list[ObjectStreamRange] = []
        batches = 0
        for stream_id, entries in _by_stream(source.entries):
            want = expected.get(stream_id)
            start, end = entries[0].start_offset, entries[-1].end_offset
            count = sum(e.record_count for e in entries)
            if want is None or end <= want:
                plan.skipped += count
                continue
            if start > want:
                if who is not None:
                    logger.error("WAL recovery of %s: stream %d offsets %d..%d in WAL object %s do not continue the "
                                 "recovered end %d; dropping them", who, stream_id, start, end, source.obj.key, want)
                plan.skipped += count
                continue
            kept = [e for e in entries if e.end_offset > want]
            inside = kept[0]
            count = sum(e.record_count for e in kept[1:])
            if inside.start_offset < want:
                plan.straddles.append(Straddle(source.obj, inside, want))
                count += straddle_batches.get((source.obj.key, stream_id), 0)
            else:
                count += inside.record_count
            ranges.append(ObjectStreamRange(stream_id, want, end, epochs[stream_id]))
            batches += count
            expected[stream_id] = end
        if ranges:
            plan.objects.append(InPlaceObject(source, ranges, batches))
            plan.batches += batches
    return plan


def _by_stream(entries: Sequence[fmt.IndexEntry]) -> list[tuple[int, list[fmt.IndexEntry]]]:
    out: list[tuple[int, list[fmt.IndexEntry]]] = []
    for entry in entries:
        if out and out[-1][0] == entry.stream_id:
            out[-1][1].append(entry)
        else:
            out.append((entry.stream_id, [entry]))
    return out


@dataclass(slots=True)
class InPlaceResult:
    batches: int
    skipped: int
    objects: int
    bytes_copied: int
    copy_wait: float = 0.0  # commits waiting for the next object's copy: the store's part of the replay
    index_seconds: float = 0.0  # reading the objects' headers and indexes (and straddled blocks), before any copy


async def commit_in_place(
    wal: WriteAheadLog,
    store: ObjectStore,
    opening: Sequence[OpeningStream],
    uploader: UploadPipeline,
    *,
    node: NodeIdentity,
    namespace: str,
    who: str,
) -> InPlaceResult | None:
    """Commits the recoverable part of ``wal`` (started, not appended to) in place into ``store``, the data bucket;
    None, having changed nothing, when it cannot (see the module docstring)."""
    if not isinstance(wal, CopyableWAL) or not store.copies_from(wal.store):
        return None
    chain = wal.recovery_chain
    reading = time.perf_counter()
    slots = asyncio.Semaphore(INDEX_READS_IN_FLIGHT)

    async def read_index(obj: WALObjectKey) -> IndexedObject | None:
        async with slots:
            found = await wal.read_index(obj)
        return None if found is None else IndexedObject(obj, *found)

    indexed = await asyncio.gather(*(read_index(obj) for obj in chain))
    if any(i is None for i in indexed):
        logger.info("WAL recovery of %s: the WAL holds objects older than v2 (or damaged ones); replaying it record "
                    "by record", who)
        return None
    sources = [i for i in indexed if i is not None]
    straddles = plan_in_place(sources, opening, {}).straddles
    try:
        counts, refused = await _read_straddles(wal, straddles, who)
    except CorruptObjectError as exc:
        logger.warning("WAL recovery of %s: %s; replaying the WAL record by record", who, exc)
        return None
    plan = plan_in_place(sources, opening, counts, frozenset(refused), who)
    indexes_read = time.perf_counter() - reading
    if not plan.objects:
        return InPlaceResult(0, plan.skipped, 0, 0, 0.0, indexes_read)
    first_id = await uploader.prepare(len(plan.objects), f"the WAL of {who} in place")
    copies = asyncio.Semaphore(COPIES_IN_FLIGHT)

    async def copy(index: int, item: InPlaceObject) -> None:
        async with copies:
            await store.copy(wal.store, item.source.obj.key, fmt.object_key(first_id + index, namespace))

    tasks = [asyncio.ensure_future(copy(i, item)) for i, item in enumerate(plan.objects)]
    waited = 0.0
    try:
        for index, (task, item) in enumerate(zip(tasks, plan.objects, strict=True)):
            started = time.perf_counter()
            await task
            waited += time.perf_counter() - started
            object_id = first_id + index
            request = CommitStreamSetObjectRequest(
                node=node, object_id=object_id, object_size=item.source.size, ranges=tuple(item.ranges),
                data_time_ms=int(time.time() * 1000),
            )
            streams = ", ".join(str(r.stream_id) for r in item.ranges)
            await uploader.commit(request, f"commit of WAL object {item.source.obj.key} in place as object "
                                           f"{object_id} (streams {streams})")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    copied = sum(item.source.size for item in plan.objects)
    return InPlaceResult(plan.batches, plan.skipped, len(plan.objects), copied, waited, indexes_read)


async def _read_straddles(
    wal: CopyableWAL, straddles: Sequence[Straddle], who: str
) -> tuple[dict[tuple[str, int], int], set[int]]:
    """Reads each straddled block: the batches from the committed end on, per (object, stream), and the streams
    whose committed end starts no batch in it."""
    counts: dict[tuple[str, int], int] = {}
    refused: set[int] = set()
    blocks = await asyncio.gather(
        *(wal.read(s.obj.key, s.entry.position, s.entry.position + s.entry.size) for s in straddles)
    )
    for straddle, data in zip(straddles, blocks, strict=True):
        stream_id = straddle.entry.stream_id
        bases = [b.base_offset for b in fmt.parse_block(data, straddle.entry, f"WAL object {straddle.obj.key}")]
        if straddle.offset in bases:
            counts[(straddle.obj.key, stream_id)] = len(bases) - bases.index(straddle.offset)
        else:
            logger.error("WAL recovery of %s: stream %d has no record at its recovered end %d in WAL object %s; "
                         "dropping its records", who, stream_id, straddle.offset, straddle.obj.key)
            refused.add(stream_id)
    return counts, refused
