"""The ``file`` WAL mode: segment files on local disk with group commit.

Layout of the WAL directory::

    00000000000000000000.wal   segment files, named by the logical offset of their first byte
    00000000000067108900.wal   (records never span segments; offsets run on across segments without gaps)
    trim.checkpoint            the trim point, replaced atomically (temp file + rename; in place on a full disk)
    spare-<n>.wal-spare        preallocated files waiting to become the next segment
    .lock                      flock'd while a WAL instance has the directory open

Appends are acknowledged only after their bytes are fsync'd. Concurrent appends are gathered into groups: while one
group's single synced write (``storage.durable.write_durably``) runs in the WAL's writer thread, the event loop
keeps accepting appends, which form the next group; a lone append is written at once, with no linger. The writer
thread hands a written group back with one ``call_soon_threadsafe`` whose callback acknowledges it. Groups are
written strictly one after another and acknowledged in order, so a record is never acknowledged before one appended
earlier, and a torn write can only ever affect the tail of the newest segment.

A small group is written on the event loop instead, where the hop to the thread would cost more than the write
(``storage.wal.inline_writes``); a caller of ``writes_begun`` wants its write to overlap its own work, so a group it
waits on goes to the thread.

Segments are preallocated: a new segment is a *spare* file renamed into place — either a trimmed segment recycled
whole (as many are kept as the WAL's capacity has room for, so a steady load rolls onto recycled files only), or,
when none is left, a file the writer thread zero-fills in steps while the WAL idles (``Preallocation``).
Overwriting allocated blocks lets fdatasync skip the file-size metadata update, which halves its latency on ext4.
Old bytes left in a recycled file cannot be mistaken for records: every record header carries its own logical
position.

A write that finds the disk full waits for room instead of failing the WAL (``storage.wal.disk_full``).

Recovery scans from the trim point and stops at the first torn or corrupt record; the intact prefix is kept, the
tail is cut off (truncated), and appends continue at the end of the prefix in a fresh segment
(``storage.wal.recovery``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from storage.config import GiB, MiB, StorageConfig
from storage.durable import is_disk_full
from storage.errors import WALError
from storage.stream_record_batch import StreamRecordBatch
from storage.wal import early_read
from storage.wal import record as walrecord
from storage.wal.base import WALRecord
from storage.wal.capacity import CapacityGate
from storage.wal.disk_full import DiskFull
from storage.wal.inline_writes import InlineWrites
from storage.wal.pending import PendingAppend
from storage.wal.recovery import SegmentScan, finish_recovery_sync
from storage.wal.segments import (
    SPARE_SEGMENTS,
    SPARE_SUFFIX,
    PacedSpareFiller,
    Preallocation,
    Segment,
    SegmentWriter,
    SparePool,
    persist_checkpoint,
    retire_segments,
)
from storage.wal.state import WALState

logger = logging.getLogger(__name__)

MAX_GROUP_BYTES = 32 * MiB
_FILL_AFTER_IDLE_S = 0.001  # how long the WAL waits for another append before a paced zero-fill step


@dataclass(slots=True)
class FileWALStats:
    """Counters that show group commit at work (records per write) for benchmarks and tests."""

    appends: int = 0
    groups: int = 0  # each group is one synced write
    bytes_written: int = 0
    segments_created: int = 0
    segments_preallocated: int = 0  # of those, how many were spares (recycled or zero-filled) rather than new files
    segments_deleted: int = 0
    segments_recycled: int = 0
    fill_steps: int = 0  # paced zero-fill steps taken (each one write + fdatasync on the writer thread)


class FileWAL(WALState):
    """The file-mode WriteAheadLog (see the module docstring)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_size: int = 64 * MiB,
        capacity: int = 2 * GiB,
        max_group_bytes: int = MAX_GROUP_BYTES,
        preallocate: bool | Preallocation = True,
    ) -> None:
        """``preallocate``: how new segment files are prepared when no trimmed one can be recycled (True is
        ``Preallocation.PACED``, False ``Preallocation.OFF``)."""
        if segment_size <= walrecord.HEADER_SIZE:
            raise WALError(f"WAL {directory}: segment size {segment_size} is too small")
        self._dir = Path(directory)
        self._name = f"WAL {self._dir}"
        self._segment_size = segment_size
        self._max_group_bytes = max(1, min(max_group_bytes, segment_size))
        self._gate = CapacityGate(capacity, self._name, self._admit)
        self._executor: ThreadPoolExecutor | None = None
        if isinstance(preallocate, bool):
            preallocate = Preallocation.PACED if preallocate else Preallocation.OFF
        self._preallocation = preallocate
        self._spares = SparePool(self._dir, SPARE_SEGMENTS)
        self._zero_fill: asyncio.Task[None] | None = None  # Preallocation.EAGER only
        self._filler = PacedSpareFiller(self._spares, segment_size) if preallocate is Preallocation.PACED else None
        self._unpaced = 0  # bytes written since the paced zero-fill last took a step: what its next step is sized by
        self._fill_timer: asyncio.TimerHandle | None = None
        self._filling = False  # a paced zero-fill step is on the writer thread
        self._inline = InlineWrites(self._name)
        self._idle_since = 0.0  # event-loop time the flusher last ran out of appends
        self._writer = SegmentWriter(self._dir, segment_size, self._spares)
        self._lock_fd = -1
        self._early: early_read.EarlyRead | None = None
        self._segments: list[Segment] = []
        self._trim_offset = 0
        self._next_offset = 0  # assigned to the next append
        self._durable_offset = 0  # everything before it is fsync'd
        self._begun_offset = 0  # end of the last group the writer thread has taken up, as the loop learnt it
        self._begun_waiters: list[tuple[int, asyncio.Future[None]]] = []  # writes_begun: (WAL offset, its waiter)
        self._pending: collections.deque[PendingAppend] = collections.deque()
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._flusher: asyncio.Task[None] | None = None
        self._trim_lock = asyncio.Lock()
        self._recover_lock = asyncio.Lock()
        self._user_recovery = False
        self._opening: asyncio.Task[None] | None = None  # recovery started by an append that came before recover()
        self._started = False
        self._recovered = False
        self._appended = False
        self._closed = False
        self._failure: WALError | None = None
        self._disk_full = DiskFull(self._name, self._episode_began, self._episode_ended)  # fjord_wal_unwritable
        self.stats = FileWALStats()
        #: Told when a write first finds the disk full: the engine uploads, so that a trim can delete segments.
        self.on_disk_full: Callable[[], None] = lambda: None
        #: Learns the seconds of each group's encoding and synced write (the engine's ``fjord_wal_flush_seconds``).
        self.observe_flush: Callable[[float], None] = lambda _seconds: None

    @classmethod
    def from_config(cls, config: StorageConfig) -> FileWAL:
        return cls(config.wal_url.path, segment_size=config.wal_segment_size, capacity=config.wal_capacity)

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def segments(self) -> list[Segment]:
        return list(self._segments)

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        if self._started:
            raise WALError(f"{self._name}: already started")
        opened: early_read.OpenedDirectory | None = None
        early = early_read.claim(self._dir)
        if early is not None:  # the process started reading this WAL back already: it has the lock
            try:
                opened = await asyncio.to_thread(early.opened)
                self._early = early
            except Exception as exc:  # e.g. the previous process still held the lock then: try again now
                logger.debug("WAL %s: not read early (%s); opening it now", self._dir, exc)
        if opened is None:
            opened = await asyncio.to_thread(early_read.open_directory_sync, self._dir)
        self._lock_fd, self._trim_offset, self._segments = opened.lock_fd, opened.trim_offset, opened.segments
        try:
            await asyncio.to_thread(self._adopt_spares_sync)
        except BaseException:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fjord-wal-writer")
        self._started = True
        logger.info(
            "WAL %s: opened with %d segment(s), trim offset %d", self._dir, len(self._segments), self._trim_offset
        )

    def _adopt_spares_sync(self) -> None:
        spares = [self._dir / n for n in os.listdir(self._dir) if n.endswith(SPARE_SUFFIX) or
                  (n.startswith("spare-") and n.endswith(".tmp"))]
        self._spares.adopt_existing(
            [p for p in spares if p.name.endswith(SPARE_SUFFIX)],
            self._segment_size // 2,
            limit=self._gate.capacity // self._segment_size,
        )
        for leftover in spares:
            if leftover.name.endswith(".tmp"):
                leftover.unlink(missing_ok=True)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._early is not None:
            self._early.cancel()
        closed = WALError(f"{self._name}: closed")
        self._gate.fail(closed)
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
            await asyncio.gather(self._opening, return_exceptions=True)
        if self._flusher is not None:
            self._wakeup.set()
            self._disk_full.room()  # a flusher waiting for room writes once more, and fails for good if it must
            await self._flusher
        if self._zero_fill is not None:
            await self._zero_fill
        if self._fill_timer is not None:
            self._fill_timer.cancel()
            self._fill_timer = None
        for entry in self._pending:  # only left when the flusher failed
            entry.fail(self._failure or closed)
        self._pending.clear()
        if self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._close_files_sync)
            self._executor.shutdown(wait=True)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1
        logger.info("WAL %s: closed at offset %d", self._dir, self._durable_offset)

    # ---------------------------------------------------------------- recovery

    def recover(self) -> AsyncIterator[WALRecord]:
        return self._recover()

    async def _recover(self) -> AsyncIterator[WALRecord]:
        self._require_started()
        if self._appended:
            raise WALError(f"{self._name}: recover() must run before the first append")
        async with self._recover_lock:
            self._user_recovery = True
            try:
                async for rec in self._scan(decode=True):
                    yield rec
            finally:
                self._user_recovery = False

    async def _ensure_recovered(self) -> None:
        """Appends, trims and resets need the end of the intact prefix: find it if recover() was not run to the
        end (the scan then only validates, it does not decode)."""
        if self._recovered:
            return
        if self._user_recovery:
            raise WALError(f"{self._name}: cannot append, trim or reset while recover() is still iterating")
        async with self._recover_lock:
            if not self._recovered:
                async for _ in self._scan(decode=False):
                    pass

    async def _scan(self, *, decode: bool) -> AsyncIterator[WALRecord]:
        trim = self._trim_offset
        early, self._early = self._early, None
        if early is not None and decode and early.scan is not None:
            scan, records = early.scan, early.records()  # the read the process started (storage.wal.early_read)
        else:
            scan = SegmentScan(list(self._segments), trim, decode=decode)
            records = scan.records()
        try:
            async for rec in records:
                yield rec
        finally:
            if early is not None:
                early.cancel()  # read to the end, or not needed: a scan cut short starts afresh next time
        assert self._executor is not None
        self._segments = await asyncio.get_running_loop().run_in_executor(
            self._executor, finish_recovery_sync, self._dir, scan
        )
        end = max(scan.end, trim)
        self._next_offset = self._durable_offset = end
        self._gate.open(end - trim)
        self._recovered = True
        logger.info("WAL %s: recovered up to offset %d (trim offset %d)", self._dir, end, trim)

    # ---------------------------------------------------------------- appends

    async def append(self, batch: StreamRecordBatch) -> WALRecord:
        self._check_writable()
        if self._user_recovery:
            raise WALError(f"{self._name}: cannot append while recover() is still iterating")
        self._appended = True
        self.stats.appends += 1
        pending = PendingAppend.submit(self._gate, batch)
        if not self._recovered and self._opening is None:
            self._opening = asyncio.create_task(self._recover_for_appends(), name=f"wal-open {self._dir}")
        return await pending.future

    async def _recover_for_appends(self) -> None:
        """Appends made without a prior recover() queue in the gate until the end of the log is known."""
        try:
            await self._ensure_recovered()
        except Exception as exc:
            failure = exc if isinstance(exc, WALError) else WALError(f"{self._name}: recovery failed: {exc!r}")
            logger.error("%s; the WAL cannot accept appends", failure)
            self._failure = failure
            self._gate.fail(failure)

    def _admit(self, entry: PendingAppend, size: int) -> None:
        """Called by the gate in append order: the record gets its WAL position and joins the next group."""
        self._next_offset = entry.place(self._next_offset, size)
        self._pending.append(entry)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_loop(), name=f"wal-flush {self._dir}")
        self._idle.clear()
        self._wakeup.set()

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._executor is not None
        while True:
            if not self._pending:
                self._idle.set()
                if self._closed:
                    return
                self._idle_since = loop.time()
                self._schedule_fill_step(_FILL_AFTER_IDLE_S)
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            if self._disk_full.active and not self._closed:
                self._drop_trimmed_live_segment()  # the trim may have come before this write failed
                await self._disk_full.wait()
            group = self._take_group()
            if self._in_place(group, loop.time()):
                if not self._write_group_inline(group, loop.time()):
                    return
                await asyncio.sleep(0)  # let the acknowledged appends' callers run before the next group
                continue
            written: asyncio.Future[bool] = loop.create_future()
            self._executor.submit(self._write_group_sync, group, loop, written)
            if not await written:
                return

    def _in_place(self, group: list[PendingAppend], now: float) -> bool:
        """Whether ``group`` is written on the event loop (``storage.wal.inline_writes``)."""
        length = group[-1].next_offset - group[0].offset
        return (
            self._inline.allows(length, now)
            and not self._begun_waiters
            and not self._filling
            and (self._zero_fill is None or self._zero_fill.done())
        )

    def _write_group_inline(self, group: list[PendingAppend], now: float) -> bool:
        """Writes a small group on the event loop; False when the write failed (the WAL has failed with it)."""
        try:
            rolled, seconds = self._write(group)
        except Exception as exc:  # a KeyboardInterrupt on the loop stops the node instead
            return self._group_failed(group, exc)
        self._inline.wrote(seconds, now)
        self._group_written(group, rolled, seconds)
        return True

    async def writes_begun(self) -> None:
        """``WriteAheadLog.writes_begun``. The writer thread needs the GIL to take a group up: while the event loop
        runs Python (a ShareFetch acquiring and reading after it issued its acknowledgements' write) the thread
        gets it only when the loop idles or the switch interval forces a hand-over, so the write started after that
        work rather than during it (a 0.4 ms acquisition, then the 0.5-1 ms write). Awaiting this idles the loop
        until the thread has taken up every group admitted so far; its write and fdatasync then run, GIL released,
        during the caller's work. Costs one hop back from the thread, so only worth it before such work."""
        target = self._next_offset
        if self._begun_offset >= target or self._durable_offset >= target or self._failure is not None:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._begun_waiters.append((target, waiter))
        await waiter

    def _group_begun(self, end: int) -> None:
        """The writer has taken up (or written, or failed) everything before WAL offset ``end``."""
        self._begun_offset = max(self._begun_offset, end)
        waiting = self._begun_waiters
        self._begun_waiters = [(target, waiter) for target, waiter in waiting if target > end]
        for target, waiter in waiting:
            if target <= end and not waiter.done():
                waiter.set_result(None)

    def _write_group_sync(
        self, group: list[PendingAppend], loop: asyncio.AbstractEventLoop, written: asyncio.Future[bool]
    ) -> None:
        """The writer thread's part of a group: encode, write, make durable, then one hop back to the loop, which
        acknowledges the group at once (``_group_written``): the appends' futures are settled on the loop's first
        pass after the write, not on a later pass of the flusher task. A ``writes_begun`` waiter hears first that
        the group was taken up (a list read from this thread: at worst it hears at ``_group_written`` instead)."""
        if self._begun_waiters:
            loop.call_soon_threadsafe(self._group_begun, group[-1].next_offset)
        try:
            rolled, seconds = self._write(group)
        except BaseException as exc:  # the loop must hear of every outcome, or the flusher would wait for ever
            loop.call_soon_threadsafe(self._thread_group_failed, group, exc, written)
            return
        loop.call_soon_threadsafe(self._thread_group_written, group, rolled, seconds, written)

    def _write(self, group: list[PendingAppend]) -> tuple[Segment | None, float]:
        """Encodes and durably writes ``group``; returns the segment it rolled onto, if any, and the seconds taken."""
        started = time.perf_counter()
        start = group[0].offset
        parts = walrecord.encode_record_parts([entry.batch for entry in group], start)
        rolled = self._writer.write_group(parts, start)
        return rolled, time.perf_counter() - started

    def _thread_group_written(
        self, group: list[PendingAppend], rolled: Segment | None, seconds: float, written: asyncio.Future[bool]
    ) -> None:
        self._group_written(group, rolled, seconds)
        if not written.done():  # the flusher may have been cancelled (the loop shutting down) while it waited
            written.set_result(True)

    def _thread_group_failed(
        self, group: list[PendingAppend], exc: BaseException, written: asyncio.Future[bool]
    ) -> None:
        goes_on = self._group_failed(group, exc)
        if not written.done():
            written.set_result(goes_on)

    def _group_written(self, group: list[PendingAppend], rolled: Segment | None, seconds: float) -> None:
        start, end = group[0].offset, group[-1].next_offset
        if rolled is not None:
            self._segments.append(rolled)
            self.stats.segments_created += 1
            self.stats.segments_preallocated += self._writer.preallocated
        self._durable_offset = end
        self._disk_full.ended()
        if self._begun_waiters:
            self._group_begun(end)
        self.stats.groups += 1
        self.stats.bytes_written += end - start
        for entry in group:
            entry.acknowledge()
        self._unpaced += end - start
        self.observe_flush(seconds)
        self._maybe_preallocate()

    def _group_failed(self, group: list[PendingAppend], exc: BaseException) -> bool:
        """False when the WAL failed with the write; True when the group waits for room (a full disk)."""
        if is_disk_full(exc) and not self._closed:
            self._pending.extendleft(reversed(group))
            if self._disk_full.begin(exc):
                self._free_room()
            return True
        failure = exc if isinstance(exc, WALError) else WALError(f"{self._name}: write failed: {exc!r}")
        self._fail(failure, group)
        return False

    def _free_room(self) -> None:
        """Drops the spares (on the writer's thread) and asks for an upload, so that a trim can delete segments."""
        assert self._executor is not None
        dropped = asyncio.get_running_loop().run_in_executor(self._executor, self._drop_spares_sync)
        dropped.add_done_callback(self._disk_full.spares_dropped)
        self.on_disk_full()

    def _drop_spares_sync(self) -> int:
        if self._filler is not None:
            self._filler.abandon()
        return self._spares.drop_all()

    def _maybe_preallocate(self) -> None:
        """``Preallocation.EAGER``: once the active segment is half full, make sure a spare is ready for the next
        roll."""
        if (
            self._preallocation is not Preallocation.EAGER
            or self._closed
            or self._disk_full.active
            or (self._zero_fill is not None and not self._zero_fill.done())
            or self._writer.size < self._segment_size // 2
            or len(self._spares) > 0
        ):
            return
        self._zero_fill = asyncio.create_task(asyncio.to_thread(self._spares.zero_fill, self._segment_size))

    def _take_group(self) -> list[PendingAppend]:
        group = [self._pending.popleft()]
        size = group[0].size
        while self._pending:
            size += self._pending[0].size
            if size > self._max_group_bytes:
                break
            group.append(self._pending.popleft())
        return group

    def _schedule_fill_step(self, delay: float) -> None:
        """The WAL went idle: if the paced zero-fill has work, it gets a step once the idleness lasts a moment.
        Under a steady stream of appends (closed-loop producers) it never delays a group, and a roll then simply
        creates a new file; at a modest rate the idle gaps between groups fill the spare."""
        if self._filler is None or self._fill_timer is not None or self._disk_full.active:
            return
        if not self._filler.step_for(self._unpaced, self._writer.size):
            return
        self._fill_timer = asyncio.get_running_loop().call_later(delay, self._fill_step)

    def _fill_step(self) -> None:
        self._fill_timer = None
        if self._filler is None or self._closed or self._pending or not self._idle.is_set():
            return
        idle_for = asyncio.get_running_loop().time() - self._idle_since
        if idle_for < _FILL_AFTER_IDLE_S:  # it was busy again meanwhile: wait for this idle spell to last
            self._schedule_fill_step(_FILL_AFTER_IDLE_S - idle_for)
            return
        # On the writer's own thread, so the step and group commits never overlap; an append arriving meanwhile
        # waits for this one step at most.
        size = self._filler.step_for(self._unpaced, self._writer.size)
        if not size:
            return
        self._unpaced = 0
        self.stats.fill_steps += 1
        assert self._executor is not None
        self._filling = True
        step = asyncio.get_running_loop().run_in_executor(self._executor, self._filler.fill_step, size)
        step.add_done_callback(self._fill_step_done)

    def _fill_step_done(self, step: asyncio.Future[None]) -> None:
        self._filling = False
        if not step.cancelled() and step.exception() is not None:
            logger.warning("%s: zero-filling a spare segment failed: %r", self._name, step.exception())

    def _close_files_sync(self) -> None:
        self._writer.close()
        if self._filler is not None:
            self._filler.abandon()

    def _fail(self, failure: WALError, group: list[PendingAppend]) -> None:
        """A failed write leaves the file in an unknown state: nothing more may be acknowledged."""
        logger.error("%s; the WAL stops accepting appends", failure)
        self._failure = failure
        self._gate.fail(failure)
        for entry in [*group, *self._pending]:
            entry.fail(failure)
        self._pending.clear()
        self._idle.set()
        self._group_begun(self._next_offset)  # nothing more will be written: no one waits for it

    # ---------------------------------------------------------------- trim and reset

    async def trim(self, offset: int) -> None:
        self._require_started()
        await self._ensure_recovered()
        async with self._trim_lock:
            if not self._moves_trim_point(offset):
                return
            await asyncio.to_thread(persist_checkpoint, self._dir, offset)
            released = offset - self._trim_offset
            self._trim_offset = offset
            self._gate.release(released)
            doomed = [s for i, s in enumerate(self._segments[:-1]) if self._segments[i + 1].base_offset <= offset]
            if doomed:
                del self._segments[: len(doomed)]
                # Keep as many trimmed files as the capacity has room for beside the live log: a steady load then
                # rolls onto recycled files only, and the disk never holds much more than the capacity. On a full
                # disk they are deleted: the live segment needs their blocks.
                room = (self._gate.capacity - self._gate.used) // self._segment_size
                spares = None if self._disk_full.active else self._spares
                recycled, deleted = await asyncio.to_thread(retire_segments, doomed, spares, self._segment_size, room)
                self.stats.segments_recycled += recycled
                self.stats.segments_deleted += deleted
            if self._disk_full.parked:
                self._drop_trimmed_live_segment()
            self._disk_full.room()

    def _drop_trimmed_live_segment(self) -> None:
        """On a full disk, once the trim point covers all that was written, the live segment goes as well (on the
        loop, while no write runs: the flusher waits for room), and the waiting group rolls a new one."""
        if self._trim_offset >= self._durable_offset and self._segments:
            self._writer.drop_all(self._segments)
            self.stats.segments_deleted += len(self._segments)
            self._segments = []

    async def reset(self) -> None:
        self._check_writable()
        await self._ensure_recovered()
        await self._idle.wait()
        async with self._trim_lock:
            end = self._next_offset
            await asyncio.to_thread(persist_checkpoint, self._dir, end)
            released = end - self._trim_offset
            self._trim_offset = end
            segments, self._segments = self._segments, []
            assert self._executor is not None
            try:
                await asyncio.get_running_loop().run_in_executor(self._executor, self._writer.drop_all, segments)
            except OSError as exc:
                raise WALError(f"{self._name}: reset cannot delete segments: {exc.strerror}") from exc
            self._gate.release(released)
            self.stats.segments_deleted += len(segments)
        logger.info("WAL %s: reset; next offset %d", self._dir, end)
