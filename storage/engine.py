"""``StorageEngine``: one node's storage (WAL, LogCache, uploads, read path, streams) behind ``StreamClient``.

Life cycle:

- ``start()`` registers the node epoch (when the metadata supports it), opens the WAL and runs *recovery*:
  the streams the metadata still shows opened by this node are exactly those whose tail may exist only in the
  WAL; their WAL records at or beyond each stream's committed end go into the LogCache and are uploaded in the
  background, while the node already serves them from there (``storage.tail_recovery``): a restart takes as long
  as reading the WAL, not as uploading it. Streams with nothing to recover are closed, so the broker reopens them
  with a higher epoch. ``recover_wal`` is the replay that uploads before it returns, for a dead node's S3 WAL
  that a live node takes over when the controller assigns it the failover.
- While running, a timer seals the LogCache's active block once it is older than ``wal_upload_interval_ms``.
- After each committed upload, the listeners added with ``add_upload_listener`` learn which streams it covered up to
  which offset: the broker advances its partitions' recovery points then (``storage.stream_api.UploadEvents``).
- ``shutdown()`` uploads everything, closes the open streams, then the WAL and the object store.
- ``halt()`` drops everything *without* uploading or closing: exactly what a crash leaves behind.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from storage.cache.block_cache import BlockCache
from storage.cache.log_cache import CacheBlock, LogCache
from storage.compaction.scheduler import CompactionScheduler
from storage.config import BucketURL, StorageConfig
from storage.errors import StorageError, StreamFencedError
from storage.failover_replay import ReplayClock, replay_wal
from storage.metadata.api import NodeIdentity, OpeningStream, StreamClose, StreamMetadata
from storage.metrics import EngineStats, StorageMetrics
from storage.objects.reader import ObjectReader
from storage.objectstore.base import ObjectStore
from storage.objectstore.factory import open_object_store
from storage.objectstore.metered import MeteredStore
from storage.opened_stream import StorageStream
from storage.read import ObjectReadPath
from storage.stream_api import CommittedRecords, Stream, UploadListener
from storage.stream_client import StreamClientImpl
from storage.stream_record_batch import StreamRecordBatch
from storage.tail_recovery import Recovered, recoverable, upload_recovered_tail
from storage.upload import UploadAbortedError, UploadPipeline
from storage.wal.base import WALRecord, WriteAheadLog
from storage.wal.factory import open_wal

logger = logging.getLogger(__name__)

@dataclass(slots=True)
class _PendingWrite:
    """A WAL append the cache has not taken yet (``next_offset`` -1 while the WAL has not acknowledged it)."""

    next_offset: int = -1
    settled: bool = False


class StorageEngine:
    """See the module docstring. Implements ``storage.stream_api.StreamClient``."""

    def __init__(
        self,
        config: StorageConfig,
        metadata: StreamMetadata,
        *,
        store: ObjectStore | None = None,
        wal: WriteAheadLog | None = None,
    ) -> None:
        config.validate()
        if not config.node_epoch:
            # The node epoch fences older incarnations (metadata commits, the S3 WAL): a restart must raise it.
            config = dataclasses.replace(config, node_epoch=int(time.time() * 1000))
        self._config = config
        #: A shutdown ran out of time and left streams opened, their tail only in the WAL (replayed elsewhere).
        self.left_wal_tail = False
        self._metadata = metadata
        self._node = NodeIdentity(config.node_id, config.node_epoch)
        self.metrics = StorageMetrics()
        if store is None:
            store = open_object_store(config.data_buckets[0], config)
        store = MeteredStore(store, self.metrics.store_seconds, self.metrics.store_errors)  # times every request
        if wal is None:
            # A file WAL whose disk is full asks for an upload, as a full LogCache does: its trim frees segments.
            wal = open_wal(config, self._metered_store, observe_flush=self.metrics.wal_flush_seconds.observe,
                           on_disk_full=self._cache_full)
        self._store = store
        self._wal = wal
        self._log_cache = LogCache(config.wal_cache_size, config.wal_upload_threshold, on_full=self._cache_full)
        self._reader = ObjectReader(store, config.namespace)
        self._block_cache = BlockCache(config.block_cache_size, self._readahead_evicted)
        self._read_path = ObjectReadPath(
            metadata,
            self._reader,
            self._block_cache,
            block_size=config.object_block_size,
            readahead_max=config.readahead_max,
        )
        self._uploader = UploadPipeline(
            config=config, metadata=metadata, store=store, node=self._node, on_committed=self._on_committed,
            observe_upload=self.metrics.upload_seconds.observe,
        )
        self._compaction = CompactionScheduler(
            config=config,
            metadata=metadata,
            reader=self._reader,
            node=self._node,
            streams=lambda: list(self._client.open_streams),
            clock=lambda: int(time.time() * 1000),
            observe_round=self.metrics.observe_compaction,
        )
        self._io = _EngineIO(self)
        self._client = StreamClientImpl(self._io)
        self._trimmed_to = 0
        self._writes: collections.deque[_PendingWrite] = collections.deque()
        self._unsettled: dict[int, _PendingWrite] = {}
        self._cached_wal_end = 0  # every WAL record before this position is in a cache block or discarded
        self._timer: asyncio.Task[None] | None = None
        self._state = "new"
        self._appends = 0
        self._bytes_appended = 0
        self._recovered = 0
        self._log_cache_hits = 0
        self._upload_listeners: list[UploadListener] = []
        self._tail_upload: asyncio.Task[None] | None = None

    def _metered_store(self, url: BucketURL, config: StorageConfig) -> ObjectStore:
        """The S3 WAL's store, timed like the data store so ``fjord_object_store_request_seconds`` covers its PUTs."""
        return MeteredStore(open_object_store(url, config), self.metrics.store_seconds, self.metrics.store_errors)

    # ------------------------------------------------------------------------------------------ properties

    @property
    def config(self) -> StorageConfig:
        return self._config

    @property
    def node(self) -> NodeIdentity:
        return self._node

    @property
    def metadata(self) -> StreamMetadata:
        return self._metadata

    @property
    def store(self) -> ObjectStore:
        return self._store

    @property
    def wal(self) -> WriteAheadLog:
        return self._wal

    @property
    def log_cache(self) -> LogCache:
        return self._log_cache

    @property
    def block_cache(self) -> BlockCache:
        return self._block_cache

    @property
    def read_path(self) -> ObjectReadPath:
        return self._read_path

    @property
    def compaction(self) -> CompactionScheduler:
        return self._compaction

    @property
    def open_streams(self) -> dict[int, StorageStream]:
        return dict(self._client.open_streams)

    def stats(self) -> EngineStats:
        upload = self._uploader.stats
        cache = self._log_cache.stats()
        blocks = self._block_cache.stats()
        return EngineStats(
            appends=self._appends,
            bytes_appended=self._bytes_appended,
            blocks_uploaded=upload.blocks,
            objects_uploaded=upload.objects,
            stream_set_objects=upload.stream_set_objects,
            stream_objects=upload.stream_objects,
            bytes_uploaded=upload.bytes_uploaded,
            upload_failures=upload.failures,
            puts=self._store.stats.puts,
            gets=self._store.stats.gets,
            log_cache_bytes=cache.size,
            log_cache_unuploaded_bytes=cache.unuploaded,
            block_cache_bytes=blocks.size,
            block_cache_hits=blocks.hits,
            block_cache_misses=blocks.misses,
            wal_bytes=self._wal.used_bytes,
            wal_unwritable_seconds=self._wal.unwritable_seconds,
            wal_unwritable=self._wal.unwritable,
            open_streams=len(self._client.open_streams),
            recovered_batches=self._recovered,
            log_cache_hits=self._log_cache_hits,
            # A miss is a fetch that needed objects: the read path counts those already.
            log_cache_misses=self._read_path.stats.object_reads,
        )

    # --------------------------------------------------------------------------------------------- StreamClient

    async def create_stream(self, tags: Sequence[tuple[str, str]] = ()) -> int:
        self._require_running()
        return await self._client.create_stream(tags)

    async def open_stream(self, stream_id: int, epoch: int) -> StorageStream:
        self._require_running()
        return await self._client.open_stream(stream_id, epoch)

    async def delete_stream(self, stream_id: int, epoch: int) -> None:
        self._require_running()
        await self._client.delete_stream(stream_id, epoch)

    async def close_streams(self, closes: Sequence[tuple[Stream, int]]) -> None:
        await self._client.close_streams(closes)

    async def read_committed(self, stream_id: int, max_bytes: int) -> CommittedRecords:
        self._require_running()
        return await self._client.read_committed(stream_id, max_bytes)

    def _require_running(self) -> None:
        if self._state != "running":
            raise StorageError(f"storage engine of node {self._node.node_id} is {self._state}, not running")

    # ------------------------------------------------------------------------------------------- life cycle

    async def start(self) -> None:
        if self._state != "new":
            raise StorageError(f"storage engine of node {self._node.node_id} was already started")
        self._state = "starting"
        register = getattr(self._metadata, "register_node", None)
        if register is not None:
            await register(self._node.node_id, self._node.node_epoch)
        await self._wal.start()
        await self._recover()
        self._state = "running"
        self._timer = asyncio.create_task(self._upload_timer(), name=f"fjord-upload-timer-{self._node.node_id}")
        self._compaction.start()
        logger.info("storage engine of node %d (epoch %d) started: WAL %s, objects in %s", self._node.node_id,
                    self._node.node_epoch, self._config.wal_url.describe(),
                    ", ".join(bucket.describe() for bucket in self._config.data_buckets))

    async def _recover(self) -> None:
        """This node's own WAL after a restart: its recoverable records go into the LogCache (``reserve`` waits
        for room while earlier recovered blocks upload, should the tail be larger than the cache), the node serves
        as soon as they are there, and ``upload_recovered_tail`` waits for their upload in the background."""
        who = f"node {self._node.node_id}"
        found = Recovered(await self._metadata.get_opening_streams(self._node))
        async for record in recoverable(self._wal, found, who):
            batch = record.batch
            if not self._log_cache.try_reserve(batch.size):
                await self._log_cache.reserve(batch.size)
            sealed = self._log_cache.put(batch, record.offset, record.next_offset)
            if sealed is not None:
                self._submit(sealed)
        self._recovered += found.replayed
        if not found.replayed:
            await self._wal.reset()
            await self._close_recovered(found.opening, who)
            return
        sealed = self._log_cache.seal()
        if sealed is not None:
            self._submit(sealed)
        # Every record read is in a cache block or not needed: the WAL may be trimmed up to the blocks' floors.
        self._cached_wal_end = max(self._cached_wal_end, found.wal_end)
        await self._close_recovered([s for s in found.opening if s.stream_id not in found.streams], who)
        self._client.recovering.add(found.streams)
        logger.info("WAL recovery of %s: %d batches of %d streams in the LogCache, serving them while they upload "
                    "(%d records skipped)", who, found.replayed, len(found.streams), found.skipped)
        self._tail_upload = asyncio.create_task(
            upload_recovered_tail(self._uploader.drain, self._client.close_recovered, who),
            name=f"fjord-tail-upload-{who}",
        )

    async def recovered_tail_uploaded(self) -> None:
        """Returns once the tail a restart recovered is committed (at once when there was none)."""
        if self._tail_upload is not None:
            await asyncio.shield(self._tail_upload)

    async def recover_wal(self, wal: WriteAheadLog, owner: NodeIdentity) -> int:
        """Replays ``wal`` (started, not yet appended to), written by ``owner``: the records of the streams
        ``owner`` still has opened at or beyond each one's committed end are uploaded and committed under the
        streams' current epochs, then the WAL is reset and those streams are closed. Returns the batches replayed.

        ``owner`` is a dead node whose WAL the controller assigned to this one (failover): commits and closes
        carry this node's identity and the controller accepts them for the dead node's streams only while the
        assignment holds. Running it twice is harmless: what was committed is below the committed end and
        skipped, closed streams are no longer opened."""
        who = f"node {owner.node_id}"
        if owner != self._node:
            who += f" (failover by node {self._node.node_id})"
        clock = ReplayClock(self._uploader.stats)
        found = Recovered(await self._metadata.get_opening_streams(owner))
        clock.mark("opened streams")
        await replay_wal(wal, found, self._store, self._uploader, node=self._node, config=self._config, clock=clock,
                         who=who)
        await wal.reset()
        clock.mark("WAL reset")
        self._recovered += found.replayed
        if found.replayed or found.opening:
            logger.info("WAL recovery of %s: %s %d batches for %d streams (%d records skipped)", who,
                        "committed in place" if clock.in_place else "re-uploaded", found.replayed, len(found.opening),
                        found.skipped)
        await self._close_recovered(found.opening, who)
        clock.mark(f"{len(found.opening)} streams closed")
        clock.log(who, found.replayed)
        return found.replayed

    async def _close_recovered(self, opening: Sequence[OpeningStream], who: str) -> None:
        for stream in opening:
            try:
                await self._metadata.close_stream(self._node, stream.stream_id, stream.epoch)
            except StreamFencedError as exc:
                logger.info("recovery of %s: stream %d already moved on: %s", who, stream.stream_id, exc)

    async def shutdown(self, timeout: float | None = None) -> None:
        """Uploads everything, closes open streams, then the WAL and the store. Safe to call twice.

        If uploading and closing take longer than ``timeout`` seconds (default ``s3.shutdown.upload.max.ms``;
        object storage or the controller is unreachable), the rest is abandoned instead of hanging: the streams stay
        opened at the controller and their tail stays in the WAL, so the next start (or, for an S3 WAL, another
        broker's replay) recovers them, exactly as after a crash (:attr:`left_wal_tail`).
        """
        if timeout is None:
            timeout = self._config.shutdown_upload_max_ms / 1000
        if self._state in ("stopped", "halted"):
            return
        self._state = "stopping"
        await self._stop_tasks()
        await self._compaction.stop()
        try:
            await asyncio.wait_for(self._upload_and_close_all(), timeout)
        except TimeoutError:
            logger.error("shutdown of node %d: uploads and stream closes did not finish within %.0f s; the rest stays "
                         "in the WAL, recovered by the next start or a replay", self._node.node_id, timeout)
            for stream in list(self._client.open_streams.values()):
                stream.abandon()
        await self._uploader.close()
        await self._read_path.close()
        # What an operator draining a broker checks: an empty WAL means nothing needs recovering or replaying.
        left = self._wal.used_bytes
        await self._wal.close()
        await self._store.close()
        self._state = "stopped"
        self.left_wal_tail = bool(self._client.open_streams) or bool(left)
        if left:
            logger.info("storage engine of node %d stopped; its WAL holds %d bytes not uploaded (recovered on the "
                        "next start or by a replay)", self._node.node_id, left)
        else:
            logger.info("storage engine of node %d stopped; WAL empty: every record is in object storage",
                        self._node.node_id)

    async def _upload_and_close_all(self) -> None:
        try:
            await self._flush(None)
        except StorageError as exc:
            logger.error("shutdown of node %d: upload failed, data stays in the WAL: %s", self._node.node_id, exc)
        else:
            await self._client.close_recovered()
        streams = list(self._client.open_streams.values())
        results = await asyncio.gather(*(s.close() for s in streams), return_exceptions=True)
        for stream, result in zip(streams, results, strict=True):
            if isinstance(result, BaseException):
                logger.error(
                    "shutdown of node %d: closing stream %d failed: %s", self._node.node_id, stream.stream_id, result
                )

    async def halt(self) -> None:
        """Stops without uploading, closing streams or trimming the WAL: the state a crash leaves behind (for
        fencing paths and crash tests). Unacknowledged appends fail."""
        if self._state in ("stopped", "halted"):
            return
        self._state = "halted"
        await self._stop_tasks()
        await self._compaction.stop()
        await self._uploader.close()
        await self._read_path.close()
        for stream in list(self._client.open_streams.values()):
            stream.abandon()
        with contextlib.suppress(Exception):
            await self._wal.close()
        with contextlib.suppress(Exception):
            await self._store.close()

    async def _stop_tasks(self) -> None:
        """Stops the upload timer and the wait for the recovered tail (whose blocks the upload pipeline owns)."""
        for task in (self._timer, self._tail_upload):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._timer = self._tail_upload = None

    def add_upload_listener(self, listener: UploadListener) -> None:
        """``listener`` learns, after each committed upload of this node's LogCache, which streams it covered and up
        to which end offset (``storage.stream_api.UploadEvents``)."""
        self._upload_listeners.append(listener)

    async def force_upload(self, stream_id: int | None = None) -> None:
        """Uploads and commits everything appended so far (all streams share the block, so ``stream_id`` only
        names the reason in logs)."""
        await self._flush(stream_id)

    # ---------------------------------------------------------------------------------------------- internals

    async def _flush(self, stream_id: int | None, closes: Sequence[StreamClose] = ()) -> bool:
        """Everything appended so far committed; for streams with nothing in the active block, only the uploads
        in flight are waited for (a closing stream does not upload what other partitions just appended). For one
        stream the wait ends at the commit, without the WAL trim after it (a closing stream's records are durable
        and committed then); for all (shutdown) it includes the trim. ``closes`` (closing streams, ``stream_id``
        one of them) upload their own records from the active block (``LogCache.seal_streams``: a moved
        partition's producer waits for that upload, which need not carry every partition's) and are closed in the
        last upload's commit where they can join it (``UploadPipeline.close_with``): returns whether they were,
        else the caller closes them."""
        wait = self._uploader.drain if stream_id is None else self._uploader.committed
        ids = {c.stream_id for c in closes} | ({stream_id} if stream_id is not None else set())
        cache = self._log_cache
        if closes:
            sealed = cache.seal_streams(ids)
        else:
            sealed = cache.seal() if stream_id is None or stream_id in cache.active.streams else None
        if sealed is not None:
            logger.debug("forced upload of cache block %d (%d bytes) for streams %s", sealed.block_id, sealed.size,
                         sorted(ids) or "all")
            self._submit(sealed)
        joined = self._uploader.close_with(list(closes)) if closes else None
        if joined is not None:
            return await joined
        await wait()
        return False

    def _submit(self, block: CacheBlock) -> None:
        future = self._uploader.submit(block)
        future.add_done_callback(self._uploaded)

    def _uploaded(self, future: asyncio.Future[None]) -> None:
        """Background uploads nobody awaits. One that failed for good (a fenced node) means nothing will be
        uploaded again, so appends must fail rather than wait for cache room forever."""
        if future.cancelled():
            return
        exc = future.exception()
        if exc is None or isinstance(exc, UploadAbortedError):
            return
        error = (
            exc if isinstance(exc, StorageError) else StorageError(f"node {self._node.node_id}: upload failed: {exc}")
        )
        self._log_cache.fail(error)

    async def _on_committed(self, block: CacheBlock) -> None:
        """Trims the WAL up to the oldest record not yet in object storage, then frees the block in the cache."""
        floors = [
            b.min_wal_offset
            for b in self._log_cache.unuploaded_blocks()
            if b is not block and b.min_wal_offset is not None
        ]
        trim_to = min([*floors, self._cached_wal_end])
        if trim_to > self._trimmed_to:
            try:
                await self._wal.trim(trim_to)
                self._trimmed_to = trim_to
            except StorageError as exc:
                logger.warning(
                    "node %d: WAL trim to %d failed (retried after the next upload): %s",
                    self._node.node_id,
                    trim_to,
                    exc,
                )
        self._log_cache.mark_uploaded(block)
        ends = {stream_id: batches[-1].last_offset for stream_id, batches in block.streams.items() if batches}
        self._client.committed(ends)
        for listener in self._upload_listeners:
            try:
                listener(ends)
            except Exception:
                logger.exception("node %d: upload listener failed", self._node.node_id)

    async def _upload_timer(self) -> None:
        interval = self._config.wal_upload_interval_ms / 1000
        tick = max(0.01, min(1.0, interval / 4))
        while True:
            await asyncio.sleep(tick)
            active = self._log_cache.active
            if not active.empty and time.monotonic() - active.created >= interval:
                sealed = self._log_cache.seal()
                if sealed is not None:
                    logger.debug("upload interval: sealing cache block %d (%d bytes)", sealed.block_id, sealed.size)
                    self._submit(sealed)

    def _cache_full(self) -> None:
        sealed = self._log_cache.seal()
        if sealed is not None:
            logger.debug("LogCache full: sealing cache block %d (%d bytes) early", sealed.block_id, sealed.size)
            self._submit(sealed)

    def _readahead_evicted(self, stream_id: int) -> None:
        self._read_path.readahead_evicted(stream_id)

    async def _write(self, batch: StreamRecordBatch) -> WALRecord:
        if not self._log_cache.try_reserve(batch.size):
            await self._log_cache.reserve(batch.size)
        pending = _PendingWrite()
        self._writes.append(pending)  # WAL positions follow append order, so this queue is in WAL order
        started = time.perf_counter()
        try:
            record = await self._wal.append(batch)
        except BaseException:
            self._log_cache.release(batch.size)
            pending.settled = True
            self._advance_cached_end()
            raise
        pending.next_offset = record.next_offset
        self._unsettled[record.offset] = pending
        self._appends += 1
        self._bytes_appended += batch.size
        self.metrics.wal_append_seconds.observe(time.perf_counter() - started)
        return record

    def _cache(self, batch: StreamRecordBatch, record: WALRecord) -> None:
        sealed = self._log_cache.put(batch, record.offset, record.next_offset)
        self._settle(record)
        if sealed is not None:
            self._submit(sealed)

    def _settle(self, record: WALRecord) -> None:
        """The record is in a cache block (or will never be): it no longer holds the WAL trim point back."""
        pending = self._unsettled.pop(record.offset, None)
        if pending is not None:
            pending.settled = True
            self._advance_cached_end()

    def _advance_cached_end(self) -> None:
        # A record the WAL acknowledged may wait a moment before its stream puts it in the cache (its task has
        # not resumed yet, or an earlier offset of the stream is still in flight). Until then no cache block
        # knows it, so the WAL is never trimmed past the first record that is not settled.
        writes = self._writes
        while writes and writes[0].settled:
            done = writes.popleft()
            self._cached_wal_end = max(self._cached_wal_end, done.next_offset)


class _EngineIO:
    """The engine as seen by streams (``storage.opened_stream.StreamIO``)."""

    def __init__(self, engine: StorageEngine) -> None:
        self._engine = engine
        self.write = engine._write  # no coroutine of its own in between: it is on every append's path
        self.refusal = engine.wal.refusal
        self.writes_begun = engine.wal.writes_begun
        cache = engine.log_cache  # the LogCache's reads and trims, as they are
        self.cache_read, self.cache_trim = cache.read, cache.trim
        self.cache_first_offset, self.cache_end_offset = cache.first_offset, cache.end_offset

    @property
    def node(self) -> NodeIdentity:
        return self._engine.node

    @property
    def metadata(self) -> StreamMetadata:
        return self._engine.metadata

    def cache(self, batch: StreamRecordBatch, record: WALRecord) -> None:
        self._engine._cache(batch, record)

    def discard(self, record: WALRecord) -> None:
        self._engine.log_cache.release(record.batch.size)  # it was reserved but will never be put
        self._engine._settle(record)

    def cache_hit(self) -> None:
        self._engine._log_cache_hits += 1

    async def object_read(self, stream_id: int, start: int, end: int, max_bytes: int) -> list[StreamRecordBatch]:
        return await self._engine.read_path.read(stream_id, start, end, max_bytes)

    async def flush(self, stream_id: int | None, closes: Sequence[StreamClose] = ()) -> bool:
        return await self._engine._flush(stream_id, closes)

    def forget(self, stream_id: int) -> None:
        self._engine.log_cache.forget(stream_id)
        self._engine.read_path.forget(stream_id)

    def stream_closed(self, stream: StorageStream) -> None:
        self._engine._client.discard(stream)
        self.forget(stream.stream_id)


if TYPE_CHECKING:
    from storage.stream_api import ObservedStreamClient

    def _engine_conforms(engine: StorageEngine) -> ObservedStreamClient:
        return engine
