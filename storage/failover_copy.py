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

:func:`commit_in_place` reads the indexes, plans each object as soon as it and its predecessors are read, copies
each planned WAL object to its new data key (S3 CopyObject, many in flight; ids prepared for all those planned
meanwhile in one call) and commits the copied ones in WAL order, many per controller call
(``StreamMetadata.commit_stream_set_objects``: one metadata append, each object's ranges continuing where the one
before it leaves its streams). It declines (returns None, having committed nothing) when it cannot: the WAL is not
an S3 WAL, the data bucket cannot copy from the WAL's (another endpoint), or an object is v1 or damaged; the caller
then replays record by record (``storage.failover_replay``); copies left uncommitted keep prepared ids that expire,
and the object sweep deletes them. A failure after it began committing is raised (a damaged object found after some
commits too): the failover is retried and, being idempotent, commits only what is still beyond each stream's
committed end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from storage.errors import CorruptObjectError, StorageError
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
COMMIT_BATCH_OBJECTS = 64
"""WAL objects committed in one controller call at most (``StreamMetadata.commit_stream_set_objects``): a call is a
metadata append and a Raft round, ~35 ms on a loaded controller, so 64 objects (512 MiB of 8 MiB WAL objects) take
one where they took 64; beyond that the gain is nil while the append (one Raft entry, replicated to every voter)
and the streams it holds locked keep growing."""
COMMIT_BATCH_RANGES = 16_384
"""Stream ranges committed in one call at most (one object always goes, however many it has): each is ~40 bytes in
the request's JSON and the metadata record, so a call stays under ~1 MiB, well within what the controller parses
(``metadata.rpc.stream_codec.MAX_REQUEST_BODY_BYTES``) and a Raft entry."""


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


class InPlacePlanner:
    """What each object commits, one object at a time in WAL order (sans-I/O; see the module docstring): a failover
    plans an object as soon as its index is read, while later indexes are still being read. ``who`` names the
    replay in the log of records dropped after a gap (None: not logged)."""

    def __init__(self, opening: Sequence[OpeningStream], who: str | None = None) -> None:
        self._expected = {s.stream_id: s.end_offset for s in opening}
        self._epochs = {s.stream_id: s.epoch for s in opening}
        self._who = who
        self.plan = InPlacePlan()

    def straddles(self, source: IndexedObject) -> list[Straddle]:
        """The blocks of ``source`` a stream's committed end falls strictly inside: read them before ``add``."""
        out = []
        for stream_id, entries in _by_stream(source.entries):
            want = self._expected.get(stream_id)
            if want is None or entries[-1].end_offset <= want or entries[0].start_offset > want:
                continue
            inside = next(e for e in entries if e.end_offset > want)
            if inside.start_offset < want:
                out.append(Straddle(source.obj, inside, want))
        return out

    def refuse(self, stream_id: int) -> None:
        """Commits nothing more of ``stream_id``: its committed end starts no batch (the replay drops it too)."""
        self._expected.pop(stream_id, None)

    def add(self, source: IndexedObject, straddle_batches: Mapping[tuple[str, int], int]) -> InPlaceObject | None:
        """Plans the next object: what it commits (None: nothing). ``straddle_batches`` holds, for each of its
        straddles read, the batches of its block from the committed end on."""
        plan = self.plan
        ranges: list[ObjectStreamRange] = []
        batches = 0
        for stream_id, entries in _by_stream(source.entries):
            want = self._expected.get(stream_id)
            start, end = entries[0].start_offset, entries[-1].end_offset
            count = sum(e.record_count for e in entries)
            if want is None or end <= want:
                plan.skipped += count
                continue
            if start > want:
                if self._who is not None:
                    logger.error("WAL recovery of %s: stream %d offsets %d..%d in WAL object %s do not continue the "
                                 "recovered end %d; dropping them", self._who, stream_id, start, end, source.obj.key,
                                 want)
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
            ranges.append(ObjectStreamRange(stream_id, want, end, self._epochs[stream_id]))
            batches += count
            self._expected[stream_id] = end
        if not ranges:
            return None
        item = InPlaceObject(source, ranges, batches)
        plan.objects.append(item)
        plan.batches += batches
        return item


def plan_in_place(
    indexed: Sequence[IndexedObject],
    opening: Sequence[OpeningStream],
    straddle_batches: Mapping[tuple[str, int], int],
    refused: frozenset[int] = frozenset(),
    who: str | None = None,
) -> InPlacePlan:
    """The plan of all of ``indexed`` at once (:class:`InPlacePlanner`); ``refused``: the streams whose committed
    end was found not to start a batch."""
    planner = InPlacePlanner(opening, who)
    for stream_id in refused:
        planner.refuse(stream_id)
    for source in indexed:
        planner.add(source, straddle_batches)
    return planner.plan


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
    index_seconds: float = 0.0  # reading the objects' indexes (and straddled blocks) and planning, as copies run
    commits: int = 0  # controller calls that committed them


@dataclass(slots=True)
class _Copy:
    item: InPlaceObject
    object_id: int
    task: asyncio.Future[None]

    @property
    def copied(self) -> bool:
        return self.task.done() and not self.task.cancelled() and self.task.exception() is None


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
    None, having committed nothing, when it cannot (see the module docstring)."""
    if not isinstance(wal, CopyableWAL) or not store.copies_from(wal.store):
        return None
    chain = wal.recovery_chain
    if any(obj.version != 2 for obj in chain):
        logger.info("WAL recovery of %s: the WAL holds objects older than v2; replaying it record by record", who)
        return None
    return await _InPlaceRun(wal, store, uploader, node=node, namespace=namespace, who=who).run(chain, opening)


class _InPlaceRun:
    """One failover in place, three stages overlapping: the indexes are read (:data:`INDEX_READS_IN_FLIGHT` at a
    time) and each object is planned as soon as its own and its predecessors' are; the planned objects get their ids
    (one prepare for all those planned meanwhile) and are copied (:data:`COPIES_IN_FLIGHT`); the copied ones are
    committed in WAL order, as many as are copied in one call (:func:`_next_batch`)."""

    def __init__(self, wal: CopyableWAL, store: ObjectStore, uploader: UploadPipeline, *, node: NodeIdentity,
                 namespace: str, who: str) -> None:
        self._wal, self._store, self._uploader = wal, store, uploader
        self._node, self._namespace, self._who = node, namespace, who
        self._copies: list[_Copy] = []
        self._copy_slots = asyncio.Semaphore(COPIES_IN_FLIGHT)
        self._added = asyncio.Event()
        self._planned = False  # no more copies will be added
        self._stop = False  # the plan was given up (a damaged object): commit nothing more
        self._committed = 0
        self._commits = 0
        self._copy_wait = 0.0

    async def run(self, chain: Sequence[WALObjectKey], opening: Sequence[OpeningStream]) -> InPlaceResult | None:
        started = time.perf_counter()
        slots = asyncio.Semaphore(INDEX_READS_IN_FLIGHT)

        async def read_index(obj: WALObjectKey) -> IndexedObject | None:
            async with slots:
                found = await self._wal.read_index(obj)
            return None if found is None else IndexedObject(obj, *found)

        reads = [asyncio.ensure_future(read_index(obj)) for obj in chain]
        committer = asyncio.ensure_future(self._commit_copies())
        try:
            plan = await self._plan(reads, opening, committer)
            planning = time.perf_counter() - started
            self._stop, self._planned = plan is None, True
            self._added.set()
            await committer
        finally:
            pending: list[asyncio.Future[Any]] = [*reads, committer, *(c.task for c in self._copies)]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if plan is None:
            if self._committed:
                raise StorageError(f"WAL recovery of {self._who}: a WAL object is damaged after {self._committed} "
                                   "were committed in place; the failover is retried, and replays the rest record "
                                   "by record")
            return None
        copied = sum(c.item.source.size for c in self._copies)
        logger.info("WAL recovery of %s: %d WAL objects committed in place in %d controller call(s)", self._who,
                    self._committed, self._commits)
        return InPlaceResult(plan.batches, plan.skipped, len(self._copies), copied, self._copy_wait, planning,
                             self._commits)

    async def _plan(
        self, reads: Sequence[asyncio.Future[IndexedObject | None]], opening: Sequence[OpeningStream],
        committer: asyncio.Future[None],
    ) -> InPlacePlan | None:
        """Plans the objects in WAL order as their indexes arrive, starting their copies; None, when an object is
        v1 or damaged (the plan is given up)."""
        planner = InPlacePlanner(opening, self._who)
        group: list[InPlaceObject] = []
        for read in reads:
            if group and (not read.done() or len(group) >= COMMIT_BATCH_OBJECTS):
                await self._start_copies(group)
                group = []
            if committer.done():
                committer.result()  # a commit failed: raise it here
            source = await read
            if source is None:
                logger.info("WAL recovery of %s: the WAL holds a damaged object; replaying it record by record",
                            self._who)
                return None
            straddles = planner.straddles(source)
            try:
                counts, refused = await _read_straddles(self._wal, straddles, self._who) if straddles else ({}, [])
            except CorruptObjectError as exc:
                logger.warning("WAL recovery of %s: %s; replaying the WAL record by record", self._who, exc)
                return None
            for stream_id in refused:
                planner.refuse(stream_id)
            item = planner.add(source, counts)
            if item is not None:
                group.append(item)
        if group:
            await self._start_copies(group)
        return planner.plan

    async def _start_copies(self, group: Sequence[InPlaceObject]) -> None:
        first_id = await self._uploader.prepare(len(group), f"the WAL of {self._who} in place")
        for index, item in enumerate(group):
            object_id = first_id + index
            task = asyncio.ensure_future(self._copy(item.source.obj.key, object_id))
            self._copies.append(_Copy(item, object_id, task))
        self._added.set()

    async def _copy(self, key: str, object_id: int) -> None:
        async with self._copy_slots:
            await self._store.copy(self._wal.store, key, fmt.object_key(object_id, self._namespace))

    async def _commit_copies(self) -> None:
        """Commits the copies in WAL order, each call all those copied by then (within the bounds)."""
        position = 0
        while True:
            while position == len(self._copies) and not self._planned:
                self._added.clear()
                await self._added.wait()
            if position == len(self._copies) or self._stop:
                return
            waiting = time.perf_counter()
            await self._copies[position].task
            self._copy_wait += time.perf_counter() - waiting
            if self._stop:
                return
            batch = _next_batch(self._copies, position)
            requests = [
                CommitStreamSetObjectRequest(node=self._node, object_id=c.object_id, object_size=c.item.source.size,
                                             ranges=tuple(c.item.ranges), data_time_ms=int(time.time() * 1000))
                for c in batch
            ]
            await self._uploader.commit_many(requests, f"commit of WAL objects {batch[0].item.source.obj.key}.."
                                                       f"{batch[-1].item.source.obj.key} of {self._who} in place as "
                                                       f"objects {batch[0].object_id}..{batch[-1].object_id}")
            position += len(batch)
            self._committed += len(batch)
            self._commits += 1


def _next_batch(copies: Sequence[_Copy], start: int) -> list[_Copy]:
    """The copies from ``start`` on (the first copied) that one commit takes: the next ones copied, in order, up
    to :data:`COMMIT_BATCH_OBJECTS` objects and :data:`COMMIT_BATCH_RANGES` ranges."""
    batch = [copies[start]]
    ranges = len(copies[start].item.ranges)
    for copy in copies[start + 1:]:
        ranges += len(copy.item.ranges)
        if len(batch) >= COMMIT_BATCH_OBJECTS or ranges > COMMIT_BATCH_RANGES or not copy.copied:
            break
        batch.append(copy)
    return batch


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
