"""The upload pipeline: sealed LogCache blocks become objects in storage, committed in order (DESIGN.md §6.3-4).

For each block: sort by (stream, offset); every stream holding at least ``stream_object_split_size`` bytes gets
its own stream object, the others share one stream-set object (so a block of one stream yields only stream
objects). One ``prepare_objects`` call reserves all the ids while the objects are built, they are PUT in
parallel, and the commit follows. Blocks are prepared and uploaded concurrently, but commits are strictly FIFO:
block N+1 is never committed before block N, because each commit must start exactly at its streams' committed
ends. After a commit the owner's ``on_committed`` callback trims the WAL and marks the block uploaded in the cache.
A block that failed fails the blocks after it of its own lane only, the node's own LogCache's or a WAL replay's
(they hold different streams): a dead node's failover refused for good does not stop the node's own uploads.
Streams closing (a moved partition's) join the commit of the last block submitted while it is not sent yet
(``close_with``): one controller call and one metadata commit carry their last records and their close.

A failed prepare, PUT or commit is logged (naming the objects and streams) and retried with backoff, never
skipped: skipping would leave a hole that every later commit of those streams trips over. Only ``close``
abandons pending work; the data is still in the WAL then, so recovery uploads it on the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from storage.cache.log_cache import CacheBlock
from storage.config import StorageConfig
from storage.errors import (
    NodeEpochExpiredError,
    ObjectNotPreparedError,
    OffsetNotMatchedError,
    StorageError,
    StreamFencedError,
    StreamNotFoundError,
    StreamNotOpenedError,
)
from storage.metadata.api import (
    CommitStreamSetObjectRequest,
    NodeIdentity,
    ObjectStreamRange,
    StreamClose,
    StreamMetadata,
    StreamObjectCommit,
    StreamState,
)
from storage.objects.format import object_key
from storage.objectstore.base import ObjectStore, data_size
from storage.offload import offload
from storage.stream_record_batch import StreamRecordBatch
from storage.upload_plan import Part, UploadPlan, build_part, ids_text, plan_block, streams_text

logger = logging.getLogger(__name__)

T = TypeVar("T")

_BACKOFF_START_S = 0.05
_BACKOFF_MAX_S = 5.0
_UNEXPLAINED_REJECTIONS = 5
"""Rejections in a row that the streams' metadata does not explain (every stream still open at the epoch
committed) after which a commit gives up: it changed in between once or twice, it does not keep changing."""

_STREAM_REJECTIONS: tuple[type[Exception], ...] = (
    StreamFencedError,
    StreamNotOpenedError,
    StreamNotFoundError,
    OffsetNotMatchedError,
)
"""Commit errors about particular streams: the commit goes ahead without those streams."""


class UploadAbortedError(StorageError):
    """The pipeline was closed while a block was still waiting to be uploaded or committed."""


@dataclass(slots=True)
class UploadStats:
    blocks: int = 0
    stream_set_objects: int = 0
    stream_objects: int = 0
    bytes_uploaded: int = 0  # object bytes PUT (headers, index and footer included)
    payload_bytes: int = 0
    failures: int = 0  # failed attempts (each retried)
    #: Summed over blocks (objects of one block build and PUT in parallel): where an upload's time goes.
    build_seconds: float = 0.0
    put_seconds: float = 0.0
    commit_seconds: float = 0.0

    @property
    def objects(self) -> int:
        return self.stream_set_objects + self.stream_objects


@dataclass(slots=True)
class _Job:
    """What the next block waits on. It holds no data: the pipeline keeps the last job, and must not keep the
    last block's batches alive after the cache evicted them."""

    block_id: int
    #: Closes may join its commit: the node's own upload of its LogCache (not a recovery's or a failover's).
    joinable: bool
    prepared: asyncio.Event = field(default_factory=asyncio.Event)
    #: Committed at the controller; ``done`` follows once ``on_committed`` (the WAL trim) ran too.
    committed: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    #: Streams closed in this block's commit (``UploadPipeline.close_with``), until its commit is sent (``sealed``).
    closes: list[StreamClose] = field(default_factory=list)
    #: None: closes may still join; then whether the commit that succeeded carried them.
    closes_committed: bool | None = None


class UploadPipeline:
    """Uploads sealed blocks; see the module docstring. One instance per node."""

    def __init__(
        self,
        *,
        config: StorageConfig,
        metadata: StreamMetadata,
        store: ObjectStore,
        node: NodeIdentity,
        on_committed: Callable[[CacheBlock], Awaitable[None]],
        observe_upload: Callable[[float], None] = lambda _seconds: None,
    ) -> None:
        """``observe_upload`` gets the seconds each block took from being planned to being committed (for metrics)."""
        self._config = config
        self._observe_upload = observe_upload
        self._metadata = metadata
        self._store = store
        self._node = node
        self._on_committed = on_committed
        self._namespace = config.namespace
        self.stats = UploadStats()
        self._last: _Job | None = None
        #: The last block of each lane: the node's own LogCache's (``_Job.joinable``), a WAL replay's (the rest).
        #: A block fails with the failure of the block before it in its lane only: a dead node's replay refused
        #: for good (its delegation withdrawn) must not fail this node's own uploads, hence its appends.
        self._last_own: _Job | None = None
        self._last_replay: _Job | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        # One block's objects are built and PUT at a time: the bytes of an object being uploaded are the only
        # memory the engine holds beyond its caches, so this bounds it to about one block (wal_upload_threshold).
        self._upload_slot = asyncio.Semaphore(1)

    def submit(
        self,
        block: CacheBlock,
        epochs: Mapping[int, int] | None = None,
        *,
        on_committed: Callable[[CacheBlock], Awaitable[None]] | None = None,
        own_memory: bool = False,
    ) -> asyncio.Future[None]:
        """Queues a sealed block; the future completes once it is committed (and ``on_committed`` ran).

        ``epochs`` overrides the stream epoch committed for each stream (WAL recovery commits old records
        under the epoch the stream is open with now); by default the batches' own epoch is used.
        ``on_committed`` replaces the pipeline's callback for this block (recovery blocks are not cached).
        ``own_memory``: the caller bounds the blocks it has in flight (a failover replay does), so this block's
        objects are built and PUT without waiting for the one upload slot: beside the previous blocks' PUTs.
        """
        if self._closed:
            raise UploadAbortedError(f"upload pipeline of node {self._node.node_id} is closed")
        previous = self._last
        job = _Job(block.block_id, joinable=epochs is None and on_committed is None)
        self._last = job
        if job.joinable:
            lane_previous, self._last_own = self._last_own, job
        else:
            lane_previous, self._last_replay = self._last_replay, job
        task = asyncio.ensure_future(self._run(
            job, previous, block, epochs, on_committed or self._on_committed, lane_previous=lane_previous,
            own_memory=own_memory,
        ))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job.done

    async def drain(self) -> None:
        """Waits until every submitted block is committed; raises if the last block of the node's own LogCache
        failed or was abandoned (not a WAL replay's: the replay learns that from its block's future)."""
        await self._wait_for_last(lambda job: job.done)

    def close_with(self, closes: list[StreamClose]) -> asyncio.Future[bool] | None:
        """Closes ``closes`` in the commit of the last block submitted, if it is this node's own upload and its
        commit was not sent yet: a closing partition's last records are in that block or an earlier one (committed
        first), and one controller call then commits them and closes the streams. The future says, once that
        block is committed, whether the closes were committed with it (False: a stream was rejected, the caller
        closes them itself); None: nothing to join, the caller waits for ``committed`` and closes them."""
        job = self._last
        if job is None or not job.joinable or job.closes_committed is not None or job.committed.done():
            return None
        job.closes += closes
        return asyncio.ensure_future(self._closes_committed(job))

    @staticmethod
    async def _closes_committed(job: _Job) -> bool:
        await asyncio.shield(job.committed)
        return bool(job.closes_committed)

    async def committed(self) -> None:
        """Waits until every submitted block is committed at the controller, not for what follows a commit (the
        WAL trim): a closing stream needs its records committed, not the WAL trimmed (a moved partition's
        producer waits for the close)."""
        await self._wait_for_last(lambda job: job.committed)

    async def _wait_for_last(self, stage: Callable[[_Job], asyncio.Future[None]]) -> None:
        """Waits for ``stage`` of the last block submitted, whatever its lane, then raises the failure of the last
        block of the node's own LogCache, if any."""
        last, own = self._last, self._last_own
        if last is not None:
            await asyncio.wait((stage(last),))
        if own is not None:
            await asyncio.shield(stage(own))

    @property
    def pending(self) -> int:
        return len(self._tasks)

    async def close(self) -> None:
        """Abandons pending blocks (their data stays in the WAL for recovery) and stops retrying."""
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------------------------------------ steps

    async def _run(
        self,
        job: _Job,
        previous: _Job | None,
        block: CacheBlock,
        epochs: Mapping[int, int] | None,
        on_committed: Callable[[CacheBlock], Awaitable[None]],
        *,
        lane_previous: _Job | None,
        own_memory: bool,
    ) -> None:
        try:
            await self._upload_and_commit(job, previous, block, epochs, lane_previous=lane_previous,
                                          own_memory=own_memory)
            committed = time.perf_counter()
            job.committed.set_result(None)
            await on_committed(block)
            logger.debug("cache block %d: after its commit %.1f ms (WAL trim)", job.block_id,
                         (time.perf_counter() - committed) * 1000)
        except asyncio.CancelledError:
            aborted = UploadAbortedError(f"upload of cache block {job.block_id} abandoned: pipeline closed")
            for future in (job.committed, job.done):
                if not future.done():
                    future.set_exception(aborted)
                    future.exception()  # retrieved: a waiter may not exist
            job.prepared.set()
        except Exception as exc:  # a fenced node, or the block before this one failed
            job.prepared.set()
            logger.error(
                "node %d: upload of cache block %d failed; its data stays in the WAL for recovery: %s",
                self._node.node_id,
                job.block_id,
                exc,
                exc_info=not isinstance(exc, StorageError),
            )
            for future in (job.committed, job.done):
                if not future.done():
                    future.set_exception(exc)
                    future.exception()  # the pipeline logged it; waiters still receive it
        else:
            if not job.done.done():
                job.done.set_result(None)

    async def _upload_and_commit(
        self, job: _Job, previous: _Job | None, block: CacheBlock, epochs: Mapping[int, int] | None, *,
        lane_previous: _Job | None, own_memory: bool,
    ) -> None:
        started = time.perf_counter()
        plan = await offload(block.size, plan_block, block, self._config.stream_object_split_size)
        streams = plan.stream_ids
        if previous is not None:
            await previous.prepared.wait()  # ids follow commit order, so order ids do too
        while True:
            # The objects are built while their ids are prepared (the bytes do not depend on the ids): a closing
            # partition's upload, which its producer waits for, pays the longer of the two rather than both.
            # The prepare holds no upload slot, so a block waiting for the slot never holds up the next one's ids.
            preparing = asyncio.ensure_future(self._prepare(job, plan))
            try:
                async with contextlib.nullcontext() if own_memory else self._upload_slot:
                    built = await asyncio.gather(*(offload(block.size, self._timed_build, part)
                                                   for part in plan.parts))
                    plan.first_id = await preparing
                    prepared = time.perf_counter()
                    request: CommitStreamSetObjectRequest | None = await self._upload(plan, built, epochs)
            finally:
                if not preparing.done():
                    preparing.cancel()
            uploaded = time.perf_counter()
            if previous is not None:
                # Commits go in submission order, but a block of the other lane holds other streams (a dead
                # node's, or this node's own): its failure leaves no gap in this block's streams.
                await asyncio.wait((previous.done,))
            if lane_previous is not None:
                # Its lane's block before it failed: committing this one would leave a gap in its streams.
                await asyncio.shield(lane_previous.done)
            committing = time.perf_counter()
            if job.closes and request is not None:
                request = dataclasses.replace(request, closes=tuple(job.closes))
            job.closes_committed = False  # closes joining from here would miss the commit
            try:
                job.closes_committed = await self.commit(
                    request, f"commit of objects {ids_text(plan)} (streams {streams_text(streams)})")
            except ObjectNotPreparedError as exc:
                logger.warning("%s; preparing new object ids and uploading again", exc)
                continue
            break
        self.stats.blocks += 1
        self.stats.payload_bytes += block.size
        self._observe_upload(time.perf_counter() - started)
        logger.debug("committed cache block %d as objects %s (prepare and build %.1f ms, put %.1f ms, previous %.1f "
                     "ms, commit %.1f ms)", block.block_id, ids_text(plan), (prepared - started) * 1000,
                     (uploaded - prepared) * 1000, (committing - uploaded) * 1000,
                     (time.perf_counter() - committing) * 1000)

    async def prepare(self, count: int, what: str) -> int:
        """Reserves ``count`` object ids (the first returned), retrying until the controller answers."""
        return await self._retry(
            f"prepare of {count} object(s) for {what}",
            lambda: self._metadata.prepare_objects(self._node, count, self._config.object_prepare_ttl_ms),
        )

    async def commit(self, request: CommitStreamSetObjectRequest | None, what: str) -> bool:
        """Commits ``request`` (retrying until the controller answers), without the streams it rejects as no longer
        this node's (``_without_rejected``). ObjectNotPreparedError when the objects' prepare deadline passed: the
        caller prepares new ids and stores the objects again. A request with closes that fails at all goes on
        without them (their callers close them on their own call, and learn any rejection there: a closing stream
        rejected, or a controller that does not know the field yet, INVALID_REQUEST). Returns whether its closes
        were committed."""
        if request is not None and request.closes:
            started = time.perf_counter()
            try:
                await self._retry(what, functools.partial(self._metadata.commit_stream_set_object, request),
                                  give_up_on=(Exception,))
                return True
            except ObjectNotPreparedError:
                raise
            except Exception as exc:
                logger.info("node %d: %s with stream closes failed (%s); committing without them",
                            self._node.node_id, what, exc)
                request = dataclasses.replace(request, closes=())
            finally:
                self.stats.commit_seconds += time.perf_counter() - started
        await self.commit_many(() if request is None else (request,), what)
        return False

    async def commit_many(self, requests: Sequence[CommitStreamSetObjectRequest], what: str) -> None:
        """Commits ``requests`` in order as ``commit`` commits one, in one controller call (all or none:
        ``StreamMetadata.commit_stream_set_objects``); a failover in place commits through it."""
        started = time.perf_counter()
        pending = list(requests)
        unexplained = 0
        try:
            while pending:
                try:
                    # One commit goes as CommitStreamSetObject, which a controller of an older Fjord serves too.
                    attempt = (functools.partial(self._metadata.commit_stream_set_object, pending[0])
                               if len(pending) == 1 else
                               functools.partial(self._metadata.commit_stream_set_objects, tuple(pending)))
                    await self._retry(what, attempt, give_up_on=(ObjectNotPreparedError, *_STREAM_REJECTIONS))
                    return
                except _STREAM_REJECTIONS as exc:
                    kept = await self._without_rejected(pending, exc)
                    unexplained = unexplained + 1 if kept is pending else 0
                    if unexplained >= _UNEXPLAINED_REJECTIONS:
                        raise  # e.g. a failover's delegation withdrawn: the failover fails and runs again elsewhere
                    pending = kept
        finally:
            self.stats.commit_seconds += time.perf_counter() - started

    async def _prepare(self, job: _Job, plan: UploadPlan) -> int:
        """Reserves the plan's object ids (the first of them returned) and lets the next block prepare its own."""
        first_id = await self.prepare(len(plan.parts), f"streams {streams_text(plan.stream_ids)}")
        job.prepared.set()
        return first_id

    async def _upload(
        self, plan: UploadPlan, built: list[list[bytes]], epochs: Mapping[int, int] | None
    ) -> CommitStreamSetObjectRequest:
        """PUTs the plan's objects (``built``: each part's bytes) under their prepared ids, in parallel."""

        async def put(index: int, part: Part) -> tuple[int, int]:
            object_id = plan.first_id + index
            data = built[index]
            putting = time.perf_counter()
            size = data_size(data)
            key = object_key(object_id, self._namespace)
            await self._retry(
                f"upload of object {object_id} ({key}, {size} bytes, streams "
                f"{streams_text([sid for sid, _ in part.streams])}) to {self._store.name}",
                lambda: self._store.put(key, data),
            )
            self.stats.put_seconds += time.perf_counter() - putting
            return object_id, size

        results = await asyncio.gather(*(put(i, part) for i, part in enumerate(plan.parts)))
        stream_set_id, stream_set_size = -1, 0
        ranges: list[ObjectStreamRange] = []
        stream_objects: list[StreamObjectCommit] = []
        for part, (object_id, size) in zip(plan.parts, results, strict=True):
            self.stats.bytes_uploaded += size
            if part.is_stream_object:
                self.stats.stream_objects += 1
                ((stream_id, batches),) = part.streams
                stream_objects.append(
                    StreamObjectCommit(
                        object_id,
                        size,
                        stream_id,
                        batches[0].base_offset,
                        batches[-1].last_offset,
                        self._epoch(epochs, stream_id, batches),
                    )
                )
            else:
                self.stats.stream_set_objects += 1
                stream_set_id, stream_set_size = object_id, size
                ranges += [
                    ObjectStreamRange(sid, bs[0].base_offset, bs[-1].last_offset, self._epoch(epochs, sid, bs))
                    for sid, bs in part.streams
                ]
        return CommitStreamSetObjectRequest(
            node=self._node,
            object_id=stream_set_id,
            object_size=stream_set_size,
            ranges=tuple(ranges),
            stream_objects=tuple(stream_objects),
            data_time_ms=int(time.time() * 1000),
        )

    @staticmethod
    def _epoch(epochs: Mapping[int, int] | None, stream_id: int, batches: list[StreamRecordBatch]) -> int:
        if epochs is not None and stream_id in epochs:
            return epochs[stream_id]
        return batches[-1].epoch

    def _timed_build(self, part: Part) -> list[bytes]:
        building = time.perf_counter()
        try:
            return build_part(part, self._config.object_block_size)
        finally:
            self.stats.build_seconds += time.perf_counter() - building

    async def _retry(
        self,
        what: str,
        attempt: Callable[[], Awaitable[T]],
        *,
        give_up_on: tuple[type[BaseException], ...] = (),
    ) -> T:
        """Runs ``attempt`` until it succeeds, with exponential backoff. A fenced node (NodeEpochExpiredError)
        and the ``give_up_on`` errors are raised instead: retrying cannot fix them."""
        delay = _BACKOFF_START_S
        failures = 0
        while True:
            try:
                return await attempt()
            except asyncio.CancelledError:
                raise
            except NodeEpochExpiredError as exc:
                logger.error("node %d: %s rejected, this node is fenced: %s", self._node.node_id, what, exc)
                raise
            except Exception as exc:
                if isinstance(exc, give_up_on):
                    raise
                failures += 1
                self.stats.failures += 1
                # One WARNING when a run of failures starts (S3 away: the object store logs the episode too) and
                # a reminder every 20th attempt; the rest at DEBUG.
                log = logger.warning if failures == 1 or failures % 20 == 0 else logger.debug
                log(
                    "node %d: %s failed (attempt %d), retrying in %.2fs: %s",
                    self._node.node_id,
                    what,
                    failures,
                    delay,
                    exc,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX_S)

    async def _without_rejected(
        self, requests: list[CommitStreamSetObjectRequest], error: Exception
    ) -> list[CommitStreamSetObjectRequest]:
        """The commits without the streams this node may no longer commit (fenced by a newer owner, closed,
        deleted, or after a gap). Their data is not made visible: that is what fencing means; the rest must not be
        held hostage by them. A stream's range continues the committed end or the end of its range in a commit
        before it (they commit in order); a commit left with nothing is dropped.

        A range at the stream's current epoch that the committed end has moved into (or past) since it was planned
        is the same writer's data committed meanwhile, not another's: a dead node's last upload that was past the
        controller's node check when its fence came lands after the failover replaying its WAL read the committed
        ends. Its part below the committed end is left out (committing it again would overlap) and the rest is kept
        from the committed end on, as are the ranges after it: dropping them would lose records the dead node
        acknowledged, and the failover then closes the stream short. The committed end is a batch boundary there
        (it is the end of that writer's upload of the same batches), and readers and compaction never look below a
        range's start (an object committed in place does the same, ``storage.failover_copy``)."""
        stream_ids = sorted({r.stream_id for q in requests for r in q.ranges}
                            | {s.stream_id for q in requests for s in q.stream_objects})
        current = {s.stream_id: s for s in await self._metadata.get_streams(stream_ids)}
        ends = {s.stream_id: s.end_offset for s in current.values()}
        dropped: set[int] = set()
        clipped: set[int] = set()

        def kept_from(stream_id: int, start: int, end: int, epoch: int) -> int | None:
            """Where the part of the range this commit may make visible starts; None: no part."""
            s = current.get(stream_id)
            if s is None or s.state != StreamState.OPENED or not s.ranges:
                dropped.add(stream_id)
                return None
            # Every open raises the epoch, so a range at the stream's epoch is the current opener's: this node's,
            # or a dead node's whose WAL this node replays (the controller checks that delegation). Only a range
            # without an epoch is judged by the node that opened the stream.
            if (epoch == -1 and s.ranges[-1].node_id != self._node.node_id) or epoch not in (-1, s.epoch):
                dropped.add(stream_id)
                return None
            committed = ends[stream_id]
            if start > committed:  # a gap: nothing after it can be committed
                dropped.add(stream_id)
                return None
            if start < committed:
                clipped.add(stream_id)
                if end <= committed:
                    return None  # committed already, by the same writer
            ends[stream_id] = end
            return committed

        kept: list[CommitStreamSetObjectRequest] = []
        for request in requests:
            ranges: list[ObjectStreamRange] = []
            for r in request.ranges:
                start = kept_from(r.stream_id, r.start_offset, r.end_offset, r.stream_epoch)
                if start is not None:
                    ranges.append(dataclasses.replace(r, start_offset=start))
            stream_objects: list[StreamObjectCommit] = []
            for so in request.stream_objects:
                start = kept_from(so.stream_id, so.start_offset, so.end_offset, so.stream_epoch)
                if start is not None:
                    stream_objects.append(dataclasses.replace(so, start_offset=start))
            if ranges or stream_objects:
                kept.append(dataclasses.replace(
                    request,
                    object_id=request.object_id if ranges else -1,
                    object_size=request.object_size if ranges else 0,
                    ranges=tuple(ranges),
                    stream_objects=tuple(stream_objects),
                ))
        if not dropped and not clipped:
            # The rejection does not match what the metadata shows now (it changed in between): try again.
            logger.warning(
                "node %d: commit rejected (%s) but every stream is still ours; retrying", self._node.node_id, error
            )
            await asyncio.sleep(_BACKOFF_START_S)
            return requests
        if clipped:
            logger.warning(
                "node %d: commit rejected (%s); streams %s were committed meanwhile at their epoch into or past "
                "these ranges, committing only what lies beyond their committed ends",
                self._node.node_id,
                error,
                streams_text(sorted(clipped)),
            )
        if dropped:
            logger.error(
                "node %d: commit rejected (%s); leaving out streams %s, their data in this upload is not ours to "
                "make visible",
                self._node.node_id,
                error,
                streams_text(sorted(dropped)),
            )
        return kept
