"""The ``s3`` WAL mode: batches of records written as objects, over any ObjectStore.

Appends are buffered and flushed as one WAL object every ``batch_interval_ms`` or as soon as
``max_bytes_in_batch`` bytes are pending. Several uploads may be in flight at once, but an append is acknowledged
only when its own object *and every earlier one* are stored and the writer has re-read the reservation and found
itself still the owner. A broker on another machine can therefore replay a dead broker's WAL and lose nothing that
was acknowledged.

Ownership: at start the writer records (node id, node epoch) in the node's reservation object. A writer that finds
a newer epoch there — at start, after any upload, or before a trim — is fenced: its pending and future appends fail
with WALFencedError. See storage/wal/s3_format.py for the key layout and how recovery tells a fenced writer's late
objects from the log.

Failover: another broker opens a dead node's WAL with ``failover=True`` under an epoch higher than the dead
incarnation's. It takes the reservation (flagged as a failover, so a dead node that was only paused is fenced at its
next check and its pending acks fail), replays the log like the node's own restart would, and resets it; it never
appends. The restarted node later starts on the emptied log with its own, still higher, epoch.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from storage.config import GiB, MiB, StorageConfig
from storage.errors import (
    CorruptObjectError,
    ObjectNotFoundError,
    ObjectStoreError,
    WALError,
    WALFencedError,
    WALUnavailableError,
)
from storage.objects import format as fmt
from storage.objects.format import DEFAULT_BLOCK_SIZE, IndexEntry
from storage.objectstore.base import ObjectData, ObjectStore, data_size
from storage.offload import offload
from storage.stream_record_batch import StreamRecordBatch
from storage.wal import record as walrecord
from storage.wal import s3_format
from storage.wal.base import WALRecord
from storage.wal.capacity import CapacityGate
from storage.wal.pending import PendingAppend
from storage.wal.s3_bucket import WALBucket
from storage.wal.s3_format import ObjectHeader, Reservation, TrimPoint, WALObjectKey
from storage.wal.state import WALState

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_INFLIGHT_UPLOADS = 8
RECOVERY_READ_AHEAD = 8
"""WAL objects (``maxBytesInBatch``, 8 MiB by default) a replay GETs ahead of the one it decodes: one GET is
latency-bound on S3 (tens of MB/s), several in flight are not; bounds the replay's read memory to ~64 MiB."""
RETRY_BASE_S = 0.1
RETRY_CAP_S = 1.0
"""An upload that failed after the object store's own retries is tried again after a full-jitter backoff up to
this: short enough that appends flow again within about a second of S3 answering."""
DEFAULT_UNWRITABLE_MAX_MS = 30_000
#: How long a close waits for an upload S3 has not answered yet (a black-holed request waits for the client's read
#: timeout): past it the upload is cancelled and its records fail, never acknowledged (an object S3 stored anyway
#: is found by recovery like any other).
CLOSE_UPLOAD_WAIT_S = 3.0


@dataclass(slots=True)
class S3WALStats:
    appends: int = 0
    objects: int = 0
    bytes_uploaded: int = 0
    reservation_checks: int = 0
    objects_deleted: int = 0
    #: The last start's listing of the log, and its replay (``recover``): what a failover's read phase cost.
    list_seconds: float = 0.0
    replay_objects: int = 0
    replay_bytes: int = 0
    replay_get_seconds: float = 0.0  # summed over the GETs, which overlap (RECOVERY_READ_AHEAD)
    replay_get_wait_seconds: float = 0.0  # the replay waiting for a GET it needed next
    replay_decode_cpu_seconds: float = 0.0  # this thread's CPU decoding records (framing, CRCs, batch headers)


@dataclass(slots=True)
class _Upload:
    key: WALObjectKey
    records: list[PendingAppend]
    done: bool = False
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class S3WAL(WALState):
    """The s3-mode WriteAheadLog (see the module docstring)."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        namespace: str,
        node_id: int,
        node_epoch: int,
        batch_interval_ms: int = 250,
        max_bytes_in_batch: int = 8 * MiB,
        capacity: int = 2 * GiB,
        max_inflight_uploads: int = DEFAULT_MAX_INFLIGHT_UPLOADS,
        owns_store: bool = False,
        failover: bool = False,
        unwritable_max_ms: int = DEFAULT_UNWRITABLE_MAX_MS,
        object_block_size: int = DEFAULT_BLOCK_SIZE,
        object_version: int = 2,
    ) -> None:
        if object_version not in s3_format.OBJECT_VERSIONS:
            raise WALError(f"S3 WAL of node {node_id}: no WAL object version {object_version}")
        if batch_interval_ms <= 0 or max_bytes_in_batch <= 0 or max_inflight_uploads <= 0:
            raise WALError(
                f"S3 WAL of node {node_id}: batch interval, batch size and upload concurrency must be positive"
            )
        self._store = store
        self._namespace = namespace
        self._node_id = node_id
        self._node_epoch = node_epoch
        self._interval = batch_interval_ms / 1000
        self._max_batch = max_bytes_in_batch
        self._owns_store = owns_store
        self._object_block_size = object_block_size
        self._object_version = object_version  # 1 only where a test needs what an older Fjord wrote
        self._reservation = Reservation(node_id, node_epoch, failover)
        self._prefix = s3_format.node_prefix(namespace, node_id)
        role = "failover of node" if failover else "node"
        self._name = f"S3 WAL {store.name}/{self._prefix} ({role} {node_id}, epoch {node_epoch})"
        self._bucket = WALBucket(store, namespace, node_id, self._name)
        self._gate = CapacityGate(capacity, self._name, self._admit)
        self._slots = asyncio.Semaphore(max_inflight_uploads)
        self._chain: list[WALObjectKey] = []  # durable objects of the log, in offset order
        self._recovery_chain: list[WALObjectKey] = []
        self._trim_offset = 0
        self._next_offset = 0
        self._durable_offset = 0
        self._batch: list[PendingAppend] = []
        self._batch_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._uploads: collections.deque[_Upload] = collections.deque()
        self._idle = asyncio.Event()
        self._idle.set()
        self._trim_lock = asyncio.Lock()
        self._started = False
        self._closed = False
        self._failure: WALError | None = None
        self._closing = False
        self._unwritable_max = unwritable_max_ms / 1000
        self._random = random.Random()
        self.stats = S3WALStats()
        #: Learns the seconds of each WAL object's PUT (the engine's ``fjord_wal_flush_seconds``).
        self.observe_flush: Callable[[float], None] = lambda _seconds: None

    @classmethod
    def from_config(
        cls, config: StorageConfig, store: ObjectStore, *, owns_store: bool = False, failover: bool = False
    ) -> S3WAL:
        """Honours AutoMQ's URL parameters too: ``s3.wal.path=0@s3://b?batchInterval=250&maxBytesInBatch=...``.
        With ``failover``, ``config.node_id`` is the dead node's and ``config.node_epoch`` the failover epoch."""
        params = config.wal_url.params
        try:
            interval = int(params.get("batchInterval", config.wal_batch_interval_ms))
            max_bytes = int(params.get("maxBytesInBatch", config.wal_max_bytes_in_batch))
        except ValueError as exc:
            raise WALError(f"s3.wal.path: bad batchInterval or maxBytesInBatch parameter: {exc}") from None
        return cls(
            store,
            namespace=config.namespace,
            node_id=config.node_id,
            node_epoch=config.node_epoch,
            batch_interval_ms=interval,
            max_bytes_in_batch=max_bytes,
            capacity=config.wal_capacity,
            owns_store=owns_store,
            failover=failover,
            unwritable_max_ms=config.wal_unwritable_max_ms,
            object_block_size=config.object_block_size,
        )

    @property
    def node_epoch(self) -> int:
        return self._node_epoch

    @property
    def failover(self) -> bool:
        return self._reservation.failover

    @property
    def store(self) -> ObjectStore:
        return self._store

    @property
    def recovery_chain(self) -> list[WALObjectKey]:
        """The non-empty objects ``recover`` replays, in offset order (a failover may commit them in place)."""
        return list(self._recovery_chain)

    @property
    def fenced(self) -> bool:
        return isinstance(self._failure, WALFencedError)

    # ---------------------------------------------------------------- start and recovery

    async def start(self) -> None:
        if self._started:
            raise WALError(f"{self._name}: already started")
        # S3 being away at start (or during a failover) is waited out, as it is for appends.
        started = time.perf_counter()
        current = await self._retrying("reservation read", self._bucket.read_reservation)
        if current is not None and current.node_epoch > self._node_epoch:
            raise WALFencedError(
                f"{self._name}: node {self._node_id} WAL is owned by a newer epoch {current.node_epoch}"
            )
        if current is not None and current.node_epoch == self._node_epoch:
            logger.warning("%s: restarting with the epoch already reserved; it cannot fence a live writer of the "
                           "same epoch", self._name)
        reservation = self._reservation.encode()
        await self._retrying("reservation", lambda: self._bucket.put(self._bucket.reservation_key, reservation))
        listed = time.perf_counter()
        listing = await self._retrying("listing", self._bucket.list)
        self.stats.list_seconds = time.perf_counter() - listed
        # A newer writer may have reserved between our put and our list.
        await self._retrying("reservation check", lambda: self._verify_owner("start"))
        trim = await self._retrying("trim point read", self._bucket.read_trim)
        objects = [k for info in listing if (k := s3_format.parse_object_key(info.key, self._prefix)) is not None]
        plan = s3_format.plan_recovery(objects, trim)
        if plan.gap_at is not None:
            logger.error("%s: WAL objects are missing from offset %d; recovery ends there and %d later object(s) "
                         "are discarded", self._name, plan.gap_at, len(plan.orphaned))
        if plan.fenced:
            logger.warning("%s: ignoring %d object(s) written by fenced writers after a takeover", self._name,
                           len(plan.fenced))

        # The marker makes this epoch's takeover point durable before anything is deleted or appended.
        marker = s3_format.object_key(self._namespace, self._node_id, self._node_epoch, plan.end, plan.end)
        header = ObjectHeader(self._node_id, self._node_epoch, plan.end, 0, plan.start).encode()
        await self._retrying("takeover marker", lambda: self._bucket.put(marker.key, header))
        if plan.discard:
            discard = [o.key for o in plan.discard]
            await self._retrying("discard", lambda: self._delete(discard))
        self._trim_offset = plan.start
        self._next_offset = self._durable_offset = plan.end
        self._recovery_chain = [o for o in plan.chain if not o.empty]
        self._chain = [o for o in plan.chain if o.key != marker.key] + [marker]
        self._started = True
        self._gate.open(plan.end - plan.start)
        logger.info("%s: started in %.3f s (reservation %.3f s, listing %.3f s); log %d..%d in %d object(s)",
                    self._name, time.perf_counter() - started, listed - started, self.stats.list_seconds, plan.start,
                    plan.end, len(self._recovery_chain))

    def recover(self) -> AsyncIterator[WALRecord]:
        return self._recover()

    async def _recover(self) -> AsyncIterator[WALRecord]:
        """Replays the objects found at start. A corrupt object loses only its own unreadable remainder: later
        objects are still replayed, because their offsets are known from their keys. Up to
        :data:`RECOVERY_READ_AHEAD` GETs are in flight ahead of the object being decoded."""
        self._require_started()
        chain = list(self._recovery_chain)
        trim = self._trim_offset
        stats = self.stats
        reads: collections.deque[asyncio.Task[bytes]] = collections.deque()
        next_read = 0
        started = time.perf_counter()
        try:
            for obj in chain:
                while next_read < len(chain) and len(reads) < RECOVERY_READ_AHEAD:
                    reads.append(asyncio.create_task(self._timed_get(chain[next_read].key)))
                    next_read += 1
                waited = time.perf_counter()
                data = await reads.popleft()
                stats.replay_get_wait_seconds += time.perf_counter() - waited
                stats.replay_objects += 1
                stats.replay_bytes += len(data)
                records = s3_format.object_records(obj, data, self._node_id, trim, self._name)
                while True:
                    cpu = time.thread_time()
                    rec = next(records, None)
                    stats.replay_decode_cpu_seconds += time.thread_time() - cpu
                    if rec is None:
                        break
                    yield rec
                    # Decoding copies each payload out of the object (milliseconds per MiB on a busy machine): the
                    # loop runs between records, or a replay of hundreds of MiB stalls the broker's heartbeats long
                    # enough for its own session to expire mid-failover. (A worker thread would starve the loop's
                    # socket reads instead, each waiting for the GIL.)
                    await asyncio.sleep(0)
        finally:
            for task in reads:
                task.cancel()
        logger.info("%s: replay read %d object(s), %.1f MiB in %.2f s: GETs %.2f s summed (%d in flight at most), "
                    "%.2f s waiting for them, decoding %.2f s CPU", self._name, stats.replay_objects,
                    stats.replay_bytes / MiB, time.perf_counter() - started, stats.replay_get_seconds,
                    RECOVERY_READ_AHEAD, stats.replay_get_wait_seconds, stats.replay_decode_cpu_seconds)

    async def _timed_get(self, key: str) -> bytes:
        started = time.perf_counter()
        data = await self._retrying(f"read of {key}", partial(self._bucket.get, key))
        self.stats.replay_get_seconds += time.perf_counter() - started
        return data

    # ---------------------------------------------------------------- appends

    async def append(self, batch: StreamRecordBatch) -> WALRecord:
        self._check_writable()
        if self._reservation.failover:
            raise WALError(f"{self._name}: a failover only replays and resets a dead node's WAL; it never appends")
        self.stats.appends += 1
        return await PendingAppend.submit(self._gate, batch).future

    def _admit(self, entry: PendingAppend, size: int) -> None:
        """Called by the gate in append order: the record gets its WAL position and joins the open batch."""
        self._next_offset = entry.place(self._next_offset, size)
        self._batch.append(entry)
        self._batch_bytes += size
        self._idle.clear()
        if self._batch_bytes >= self._max_batch:
            self._seal()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._seal)

    def _seal(self) -> None:
        """Turns the pending batch into an upload (from the timer or when the batch is full)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._batch or self._failure is not None:
            return
        records, self._batch, self._batch_bytes = self._batch, [], 0
        key = s3_format.object_key(
            self._namespace, self._node_id, self._node_epoch, records[0].offset, records[-1].next_offset,
            self._object_version,
        )
        upload = _Upload(key, records)
        upload.task = asyncio.create_task(self._upload(upload), name=f"wal-upload {key.key}")
        self._uploads.append(upload)

    async def _upload(self, upload: _Upload) -> None:
        try:
            async with self._slots:
                if self._failure is not None:
                    return
                size = upload.key.end - upload.key.start
                version, data = await offload(size, self._encode_object, upload)
                if version != upload.key.version:
                    k = upload.key
                    upload.key = s3_format.object_key(self._namespace, self._node_id, k.epoch, k.start, k.end, version)
                put_started = time.perf_counter()
                await self._retrying(f"upload of {upload.key.key}", lambda: self._bucket.put(upload.key.key, data))
                self.observe_flush(time.perf_counter() - put_started)
                self.stats.objects += 1
                self.stats.bytes_uploaded += data_size(data)
                await self._retrying(
                    "reservation check", lambda: self._verify_owner(f"upload of {upload.key.key}")
                )
        except WALError as exc:
            self._fail(exc)
            return
        except Exception as exc:  # anything unexpected still must not leave appends hanging
            self._fail(WALError(f"{self._name}: upload of {upload.key.key} failed: {exc!r}"))
            return
        upload.done = True
        self._release_acks()

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """Runs ``call`` until S3 answers it. S3 being away is no reason to fail the WAL (every stream on it would
        become unwritable for good): the appends behind an upload wait, unacknowledged, and the producers' timeouts
        answer them; past ``s3.wal.unwritable.max.ms`` new appends are refused (``refusal``) until S3 answers. A
        fence, an answer (a missing or corrupt object) and the WAL's close end the retries."""
        failures = 0
        while True:
            try:
                result = await call()
            except WALError as exc:
                cause = exc.__cause__
                transient = isinstance(cause, ObjectStoreError) and not isinstance(cause, ObjectNotFoundError)
                if not transient or isinstance(exc, WALFencedError) or self._closing or self._failure is not None:
                    raise
                failures += 1
                self._note_unwritable(what, exc)
                await asyncio.sleep(self._random.uniform(0, min(RETRY_CAP_S, RETRY_BASE_S * 2 ** min(failures, 8))))
                continue
            if self._unwritable_since is not None:
                self._note_writable()
            return result

    def _note_unwritable(self, what: str, exc: WALError) -> None:
        if self._unwritable_since is not None:
            logger.debug("%s: %s failed again: %s", self._name, what, exc)
            return
        self._episode_began()
        logger.warning(
            "%s: cannot write to S3 (%s failed: %s); appends wait, unacknowledged, and are refused with a retriable "
            "error after %.1fs",
            self._name,
            what,
            exc.__cause__ or exc,
            self._unwritable_max,
        )
        self._refuse_timer = asyncio.get_running_loop().call_later(self._unwritable_max, self._start_refusing)

    def _start_refusing(self) -> None:
        self._refuse_timer = None
        self._refusing = WALUnavailableError(
            f"{self._name}: S3 has been unwritable for more than {self._unwritable_max:.1f}s"
        )
        logger.warning("%s; new appends are refused until it answers", self._refusing)

    def _note_writable(self) -> None:
        seconds = self._episode_ended()
        self._refusing = None
        if self._refuse_timer is not None:
            self._refuse_timer.cancel()
            self._refuse_timer = None
        logger.info("%s: S3 writable again after %.1fs; appends flow", self._name, seconds)

    def _encode_object(self, upload: _Upload) -> tuple[int, ObjectData]:
        """The WAL object of one upload: v2 (the object format, what a failover copies in place) unless the batches
        cannot form one stream-set object or the WAL was made to write v1."""
        header = ObjectHeader(self._node_id, self._node_epoch, upload.key.start, upload.key.end - upload.key.start,
                              self._trim_offset)
        batches = [p.batch for p in upload.records]
        if self._object_version == 2:
            encoded = s3_format.encode_v2(header, batches, self._object_block_size)
            if encoded is not None:
                return 2, encoded[1]
            logger.info("%s: the batches of %s are not contiguous per stream; writing it as a v1 WAL object",
                        self._name, upload.key.key)
        out = walrecord.encode_records(batches, upload.key.start, reserve=s3_format.OBJECT_HEADER_SIZE)
        header.pack_into(out)
        return 1, bytes(out)

    def _release_acks(self) -> None:
        """Acknowledges finished uploads strictly in order: a finished upload waits for every earlier one."""
        while self._uploads and self._uploads[0].done:
            upload = self._uploads.popleft()
            self._chain.append(upload.key)
            self._durable_offset = upload.key.end
            for entry in upload.records:
                entry.acknowledge()
        self._update_idle()

    def _update_idle(self) -> None:
        if not self._uploads and not self._batch:
            self._idle.set()

    def _fail(self, failure: WALError) -> None:
        """Nothing after a lost or fenced upload may be acknowledged: fail everything not yet acknowledged."""
        if self._failure is None:
            self._failure = failure
            if isinstance(failure, WALFencedError):
                logger.warning("%s", failure)
            else:
                logger.error("%s; the WAL stops accepting appends", failure)
        failure = self._failure
        self._gate.fail(failure)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending = [entry for upload in self._uploads for entry in upload.records] + self._batch
        self._uploads.clear()
        self._batch, self._batch_bytes = [], 0
        for entry in pending:
            entry.fail(failure)
        self._idle.set()

    # ---------------------------------------------------------------- trim, reset, close

    async def trim(self, offset: int) -> None:
        self._check_writable()
        async with self._trim_lock:
            if not self._moves_trim_point(offset):
                return
            await self._retrying("reservation check", lambda: self._verify_owner(f"trim to {offset}"))
            point = TrimPoint(self._node_id, self._node_epoch, offset).encode()
            await self._retrying("trim point", lambda: self._bucket.put(self._bucket.trim_key, point))
            self._gate.release(offset - self._trim_offset)
            self._trim_offset = offset
            newest = self._chain[-1] if self._chain else None
            doomed = [o for o in self._chain if o.end <= offset and o is not newest]
            if doomed:
                gone = {o.key for o in doomed}
                self._chain = [o for o in self._chain if o.key not in gone]
                try:
                    await self._delete([o.key for o in doomed])
                except WALError as exc:
                    # The trim point is persisted, so leftovers are only wasted space; the next start deletes them.
                    logger.warning("%s; %d trimmed object(s) left behind", exc, len(doomed))

    async def reset(self) -> None:
        self._check_writable()
        self._seal()
        await self._idle.wait()
        self._check_writable()
        await self.trim(self._durable_offset)
        logger.info("%s: reset; next offset %d", self._name, self._durable_offset)

    async def close(self) -> None:
        """Flushes what is pending (unless the WAL already failed), then stops."""
        if self._closed:
            return
        self._closing = True  # an upload still retrying gives up: what it holds was never acknowledged
        if self._refuse_timer is not None:
            self._refuse_timer.cancel()
            self._refuse_timer = None
        if self._failure is None and self._started:
            self._seal()
            tasks = [u.task for u in self._uploads if u.task is not None]
            if tasks:
                _, hanging = await asyncio.wait(tasks, timeout=CLOSE_UPLOAD_WAIT_S)
                if hanging:
                    logger.warning("%s: %d upload(s) unanswered after %.0fs at close; their appends fail, never "
                                   "acknowledged", self._name, len(hanging), CLOSE_UPLOAD_WAIT_S)
        self._closed = True
        closed = self._failure or WALError(f"{self._name}: closed")
        self._gate.fail(closed)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for upload in self._uploads:
            if upload.task is not None:
                upload.task.cancel()
        for entry in [e for u in self._uploads for e in u.records] + self._batch:
            entry.fail(closed)
        self._uploads.clear()
        self._batch = []
        if self._owns_store:
            await self._store.close()
        logger.info("%s: closed at offset %d", self._name, self._durable_offset)

    # ---------------------------------------------------------------- object-store calls

    async def _verify_owner(self, when: str) -> None:
        self.stats.reservation_checks += 1
        current = await self._bucket.read_reservation()
        if current != self._reservation:
            holder = "nobody" if current is None else f"node {current.node_id} epoch {current.node_epoch}"
            if current is not None and current.failover:
                holder += " (a failover by another broker)"
            raise WALFencedError(f"{self._name}: fenced at {when}: the WAL reservation now belongs to {holder}")

    async def _delete(self, keys: list[str]) -> None:
        await self._bucket.delete(keys)
        self.stats.objects_deleted += len(keys)

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of one of this WAL's objects, retried while S3 is away."""
        return await self._retrying(f"read of {key}", partial(self._bucket.get, key, start, end))

    async def read_index(self, obj: WALObjectKey) -> tuple[int, list[IndexEntry]] | None:
        """The size and index of a v2 object of this WAL from its tail (one GET, retried while S3 is away; one more
        if the index is longer than guessed), or None if its key is not v2 or its tail is not a sound index: what a
        failover in place needs (storage/failover_copy.py)."""
        if obj.version != 2:
            return None
        where = f"WAL object {obj.key}"
        guess = fmt.index_tail_guess(obj.end - obj.start)
        tail, size = await self._retrying(f"read of {obj.key}", partial(self._bucket.get_tail, obj.key, guess))
        try:
            footer = fmt.parse_footer(tail, size, where)
            if footer.index_position < size - len(tail):  # an index longer than the guess: read it whole
                tail = await self.read(obj.key, footer.index_position)
            return size, s3_format.v2_index(tail, size, where)
        except CorruptObjectError as exc:
            logger.warning("%s: %s", self._name, exc)
            return None
