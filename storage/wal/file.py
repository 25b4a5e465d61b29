"""The ``file`` WAL mode: segment files on local disk with group commit.

Layout of the WAL directory::

    00000000000000000000.wal   segment files, named by the logical offset of their first byte
    00000000000067108900.wal   (records never span segments; offsets run on across segments without gaps)
    trim.checkpoint            the trim point, replaced atomically (temp file + rename) and fsync'd
    .lock                      flock'd while a WAL instance has the directory open

Appends are acknowledged only after their bytes are fsync'd. Concurrent appends are gathered into groups: while one
group's single write + fdatasync runs in the WAL's writer thread, the event loop keeps accepting appends, which
form the next group. Groups are written strictly one after another and acknowledged in order, so a record is never
acknowledged before one appended earlier, and a torn write can only ever affect the tail of the newest segment.

Recovery scans from the trim point and stops at the first torn or corrupt record; the intact prefix is kept and the
tail is cut off (truncated) so new appends follow it directly.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import fcntl
import logging
import os
import re
import struct
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import crc32c

from storage.config import GiB, MiB, StorageConfig
from storage.errors import WALError
from storage.record import StreamRecordBatch
from storage.wal import record as walrecord
from storage.wal.base import WALRecord
from storage.wal.capacity import CapacityGate
from storage.wal.record import RecordScanner, StopReason

logger = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".wal"
_SEGMENT_NAME = re.compile(r"^(\d{20})\.wal$")
CHECKPOINT_NAME = "trim.checkpoint"
LOCK_NAME = ".lock"
DISCARDED_SUFFIX = ".discarded"

CHECKPOINT = struct.Struct(">IIq")  # magic | version | trim offset, then a CRC-32C of these 16 bytes
CHECKPOINT_MAGIC = 0x464A5754  # "FJWT"
CHECKPOINT_VERSION = 1
_CHECKPOINT_CRC = struct.Struct(">I")

READ_CHUNK = 8 * MiB
MAX_GROUP_BYTES = 32 * MiB

_fdatasync = getattr(os, "fdatasync", os.fsync)


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    match = _SEGMENT_NAME.match(name)
    return int(match.group(1)) if match else None


def encode_checkpoint(trim_offset: int) -> bytes:
    body = CHECKPOINT.pack(CHECKPOINT_MAGIC, CHECKPOINT_VERSION, trim_offset)
    return body + _CHECKPOINT_CRC.pack(crc32c.crc32c(body))


def decode_checkpoint(data: bytes, where: str) -> int:
    """The trim offset in a checkpoint file's bytes; WALError naming ``where`` if they are not one."""
    if len(data) != CHECKPOINT.size + _CHECKPOINT_CRC.size:
        raise WALError(f"{where}: trim checkpoint is {len(data)} bytes, expected {CHECKPOINT.size + 4}")
    magic, version, trim_offset = CHECKPOINT.unpack_from(data)
    (crc,) = _CHECKPOINT_CRC.unpack_from(data, CHECKPOINT.size)
    if magic != CHECKPOINT_MAGIC or crc != crc32c.crc32c(data[: CHECKPOINT.size]):
        raise WALError(f"{where}: trim checkpoint is corrupt (bad magic or CRC)")
    if version != CHECKPOINT_VERSION:
        raise WALError(f"{where}: unsupported trim checkpoint version {version}")
    if trim_offset < 0:
        raise WALError(f"{where}: trim checkpoint holds negative offset {trim_offset}")
    return int(trim_offset)


@dataclass(frozen=True, slots=True)
class Segment:
    base_offset: int
    path: Path


@dataclass(slots=True)
class FileWALStats:
    """Counters that show group commit at work (records per write) for benchmarks and tests."""

    appends: int = 0
    groups: int = 0  # each group is one write + one fdatasync
    bytes_written: int = 0
    segments_created: int = 0
    segments_deleted: int = 0


@dataclass(frozen=True, slots=True)
class _SegmentEnd:
    length: int  # bytes of the segment holding intact records
    torn: bool  # a torn or corrupt record follows them


_NEVER = 1 << 62  # a skip_below that skips every record (validation-only scans)


@dataclass(slots=True)
class _Pending:
    batch: StreamRecordBatch
    offset: int
    next_offset: int
    future: asyncio.Future[WALRecord]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _SegmentWriter:
    """The active segment's file descriptor. Touched only from the WAL's single writer thread, so writes, rolls
    and resets are serialized without locks."""

    def __init__(self, directory: Path, segment_size: int) -> None:
        self._dir = directory
        self._segment_size = segment_size
        self._fd = -1
        self._base = 0
        self._size = 0
        self._path: Path | None = None

    def adopt(self, segment: Segment, size: int) -> None:
        """Continues appending to an existing (recovered) segment at ``size``."""
        self.close()
        try:
            self._fd = os.open(segment.path, os.O_WRONLY)
        except OSError as exc:
            raise WALError(f"WAL segment {segment.path}: cannot open for append: {exc.strerror}") from exc
        self._base, self._size, self._path = segment.base_offset, size, segment.path

    def write_group(self, data: bytearray, offset: int) -> Segment | None:
        """Writes one group at logical ``offset`` and makes it durable; returns the new segment if it rolled."""
        rolled = None
        if self._fd < 0 or (self._size > 0 and self._size + len(data) > self._segment_size):
            rolled = self._roll(offset)
        assert self._path is not None
        if self._base + self._size != offset:
            raise WALError(
                f"WAL segment {self._path}: group at offset {offset} does not follow the segment end "
                f"{self._base + self._size}"
            )
        view = memoryview(data)
        try:
            written = 0
            while written < len(data):
                written += os.pwrite(self._fd, view[written:], self._size + written)
            _fdatasync(self._fd)
        except OSError as exc:
            raise WALError(
                f"WAL segment {self._path}: write of {len(data)} bytes at offset {offset} failed: {exc.strerror}"
            ) from exc
        finally:
            view.release()
        self._size += len(data)
        return rolled

    def _roll(self, base_offset: int) -> Segment:
        self.close()
        path = self._dir / segment_name(base_offset)
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            _fsync_dir(self._dir)  # the new name must survive a crash as much as the bytes written into it
        except OSError as exc:
            raise WALError(f"WAL segment {path}: cannot create: {exc.strerror}") from exc
        self._base, self._size, self._path = base_offset, 0, path
        logger.debug("WAL %s: new segment %s", self._dir, path.name)
        return Segment(base_offset, path)

    def drop_all(self, segments: Sequence[Segment]) -> None:
        """Closes the active segment and deletes every segment (reset)."""
        self.close()
        for segment in segments:
            segment.path.unlink(missing_ok=True)
        _fsync_dir(self._dir)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._path = None


class FileWAL:
    """The file-mode WriteAheadLog (see the module docstring)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_size: int = 64 * MiB,
        capacity: int = 2 * GiB,
        max_group_bytes: int = MAX_GROUP_BYTES,
    ) -> None:
        if segment_size <= walrecord.HEADER_SIZE:
            raise WALError(f"WAL {directory}: segment size {segment_size} is too small")
        self._dir = Path(directory)
        self._segment_size = segment_size
        self._max_group_bytes = max(1, min(max_group_bytes, segment_size))
        self._gate = CapacityGate(capacity, f"WAL {self._dir}")
        self._executor: ThreadPoolExecutor | None = None
        self._writer = _SegmentWriter(self._dir, segment_size)
        self._lock_fd = -1
        self._segments: list[Segment] = []
        self._trim_offset = 0
        self._next_offset = 0  # assigned to the next append
        self._durable_offset = 0  # everything before it is fsync'd
        self._pending: collections.deque[_Pending] = collections.deque()
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._flusher: asyncio.Task[None] | None = None
        self._trim_lock = asyncio.Lock()
        self._recover_lock = asyncio.Lock()
        self._user_recovery = False
        self._started = False
        self._recovered = False
        self._appended = False
        self._closed = False
        self._failure: WALError | None = None
        self.stats = FileWALStats()

    @classmethod
    def from_config(cls, config: StorageConfig) -> FileWAL:
        return cls(config.wal_url.path, segment_size=config.wal_segment_size, capacity=config.wal_capacity)

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def used_bytes(self) -> int:
        return self._gate.used

    @property
    def trim_offset(self) -> int:
        return self._trim_offset

    @property
    def durable_offset(self) -> int:
        """End of the acknowledged prefix."""
        return self._durable_offset

    @property
    def segments(self) -> list[Segment]:
        return list(self._segments)

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        if self._started:
            raise WALError(f"WAL {self._dir}: already started")
        self._lock_fd, self._trim_offset, self._segments = await asyncio.to_thread(self._open_sync)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fjord-wal-writer")
        self._started = True
        logger.info(
            "WAL %s: opened with %d segment(s), trim offset %d", self._dir, len(self._segments), self._trim_offset
        )

    def _open_sync(self) -> tuple[int, int, list[Segment]]:
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            lock_fd = os.open(self._dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise WALError(f"WAL {self._dir}: cannot open the WAL directory: {exc.strerror}") from exc
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(lock_fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise WALError(f"WAL {self._dir}: directory is already open by another WAL instance") from None
            raise WALError(f"WAL {self._dir}: cannot lock the WAL directory: {exc.strerror}") from exc
        try:
            (self._dir / (CHECKPOINT_NAME + ".tmp")).unlink(missing_ok=True)
            segments = sorted(
                (Segment(base, self._dir / name) for name in os.listdir(self._dir)
                 if (base := parse_segment_name(name)) is not None),
                key=lambda s: s.base_offset,
            )
            trim_offset = self._read_checkpoint_sync(segments)
        except BaseException:
            os.close(lock_fd)
            raise
        return lock_fd, trim_offset, segments

    def _read_checkpoint_sync(self, segments: list[Segment]) -> int:
        path = self._dir / CHECKPOINT_NAME
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise WALError(f"WAL {path}: cannot read the trim checkpoint: {exc.strerror}") from exc
        try:
            return decode_checkpoint(data, str(path))
        except WALError as exc:
            # Replaying from the oldest segment only re-delivers records that were already uploaded, which recovery
            # tolerates; refusing to start would lose availability for no gain in safety.
            fallback = segments[0].base_offset if segments else 0
            logger.error("%s; replaying from the oldest segment (offset %d)", exc, fallback)
            return fallback

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        closed = WALError(f"WAL {self._dir}: closed")
        self._gate.fail(closed)
        if self._flusher is not None:
            self._wakeup.set()
            await self._flusher
        for entry in self._pending:  # only left when the flusher failed
            if not entry.future.done():
                entry.future.set_exception(self._failure or closed)
        self._pending.clear()
        if self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._writer.close)
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
            raise WALError(f"WAL {self._dir}: recover() must run before the first append")
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
            raise WALError(f"WAL {self._dir}: cannot append, trim or reset while recover() is still iterating")
        async with self._recover_lock:
            if not self._recovered:
                async for _ in self._scan(decode=False):
                    pass

    async def _scan(self, *, decode: bool) -> AsyncIterator[WALRecord]:
        trim = self._trim_offset
        segments = list(self._segments)
        trimmed = [s for i, s in enumerate(segments[:-1]) if segments[i + 1].base_offset <= trim]
        live = segments[len(trimmed) :]
        end = live[0].base_offset if live else trim
        cut: tuple[int, int] | None = None  # (index into live, intact byte length; -1: drop the whole segment)
        for index, segment in enumerate(live):
            if segment.base_offset != end:
                logger.error(
                    "WAL segment %s starts at offset %d but the previous segment ends at %d; recovery stops there",
                    segment.path, segment.base_offset, end,
                )
                cut = (index, -1)
                break
            async for item in self._scan_segment(segment, trim, decode):
                if isinstance(item, WALRecord):
                    yield item
                    continue
                end = segment.base_offset + item.length
                if item.torn:
                    cut = (index, item.length)
            if cut is not None:
                break
        assert self._executor is not None
        self._segments = await asyncio.get_running_loop().run_in_executor(
            self._executor, self._finish_recovery_sync, trimmed, live, cut, trim
        )
        end = max(end, trim)
        self._next_offset = self._durable_offset = end
        self._gate.reset_used(end - trim)
        self._recovered = True
        logger.info("WAL %s: recovered up to offset %d (trim offset %d)", self._dir, end, trim)

    async def _scan_segment(
        self, segment: Segment, trim: int, decode: bool
    ) -> AsyncIterator[WALRecord | _SegmentEnd]:
        """Yields the segment's intact records, then where its intact prefix ends and whether a torn or corrupt
        tail follows. Reads in chunks so recovery memory stays bounded by the chunk (or the largest record)."""
        where = f"WAL segment {segment.path}"
        try:
            fd = await asyncio.to_thread(os.open, segment.path, os.O_RDONLY)
        except OSError as exc:
            raise WALError(f"{where}: cannot open for recovery: {exc.strerror}") from exc
        try:
            consumed = 0  # bytes of the file before ``buf``
            buf = b""
            while True:
                want = READ_CHUNK
                if len(buf) >= walrecord.HEADER_SIZE:
                    # A record bigger than a chunk: read the rest of it at once.
                    _magic, body_length, *_ = walrecord.HEADER.unpack_from(buf)
                    want = max(want, walrecord.HEADER_SIZE + body_length - len(buf))
                chunk = await asyncio.to_thread(os.pread, fd, want, consumed + len(buf))
                eof = not chunk
                buf = buf + chunk if buf else chunk
                scanner = RecordScanner(
                    buf,
                    segment.base_offset + consumed,
                    where=where,
                    skip_below=trim if decode else _NEVER,
                    verify_skipped_bodies=not decode,
                )
                for rec in scanner:
                    yield rec
                stop = scanner.stop
                assert stop is not None
                consumed += scanner.position
                buf = buf[scanner.position :]
                if (stop.reason is StopReason.END or stop.reason.truncated) and not eof:
                    continue
                if stop.reason is StopReason.END:
                    yield _SegmentEnd(consumed, torn=False)
                elif stop.reason.truncated:
                    logger.warning("%s; cutting off the torn tail", stop.describe(where))
                    yield _SegmentEnd(consumed, torn=True)
                else:
                    logger.error("%s; recovery keeps the %d intact bytes before it", stop.describe(where), consumed)
                    yield _SegmentEnd(consumed, torn=True)
                return
        except OSError as exc:
            raise WALError(f"{where}: read failed during recovery: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def _finish_recovery_sync(
        self, trimmed: list[Segment], live: list[Segment], cut: tuple[int, int] | None, trim: int
    ) -> list[Segment]:
        """Makes the directory match the recovered log: trimmed segments deleted, the torn tail cut off, segments
        after a corrupt one set aside, and the last intact segment opened for appends."""
        for segment in trimmed:
            segment.path.unlink(missing_ok=True)
        keep = list(live)
        if cut is not None:
            index, length = cut
            after = live[index + 1 :] if length >= 0 else live[index:]
            for segment in after:
                aside = segment.path.with_name(segment.path.name + DISCARDED_SUFFIX)
                logger.error("WAL segment %s follows a corrupt record; set aside as %s", segment.path, aside.name)
                os.replace(segment.path, aside)
            keep = live[: index + 1] if length >= 0 else live[:index]
            if length >= 0:
                try:
                    with open(live[index].path, "r+b") as f:
                        f.truncate(length)
                        f.flush()
                        os.fsync(f.fileno())
                except OSError as exc:
                    raise WALError(f"WAL segment {live[index].path}: cannot cut off the torn tail: {exc}") from exc
        if keep:
            last = keep[-1]
            size = last.path.stat().st_size
            if last.base_offset + size < trim:
                # Everything left is below the trim point: start afresh at it.
                for segment in keep:
                    segment.path.unlink(missing_ok=True)
                keep = []
            else:
                self._writer.adopt(last, size)
        if trimmed or cut is not None:
            _fsync_dir(self._dir)
        return keep

    # ---------------------------------------------------------------- appends

    async def append(self, batch: StreamRecordBatch) -> WALRecord:
        self._check_writable()
        if not self._recovered:
            await self._ensure_recovered()
        size = walrecord.record_size(batch)
        await self._gate.acquire(size)
        self._check_writable()
        offset = self._next_offset
        self._next_offset = offset + size
        future: asyncio.Future[WALRecord] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(batch, offset, offset + size, future))
        self._appended = True
        self.stats.appends += 1
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush_loop(), name=f"wal-flush {self._dir}")
        self._idle.clear()
        self._wakeup.set()
        return await future

    def _require_started(self) -> None:
        if not self._started:
            raise WALError(f"WAL {self._dir}: not started")
        if self._closed:
            raise WALError(f"WAL {self._dir}: closed")

    def _check_writable(self) -> None:
        if self._failure is not None:
            raise self._failure
        self._require_started()

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._executor is not None
        while True:
            if not self._pending:
                self._idle.set()
                if self._closed:
                    return
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            group = self._take_group()
            start, end = group[0].offset, group[-1].next_offset
            try:
                rolled = await loop.run_in_executor(self._executor, self._write_group_sync, group, start)
            except Exception as exc:
                failure = exc if isinstance(exc, WALError) else WALError(f"WAL {self._dir}: write failed: {exc}")
                self._fail(failure, group)
                return
            if rolled is not None:
                self._segments.append(rolled)
                self.stats.segments_created += 1
            self._durable_offset = end
            self.stats.groups += 1
            self.stats.bytes_written += end - start
            for entry in group:
                if not entry.future.done():
                    entry.future.set_result(WALRecord(entry.offset, entry.next_offset, entry.batch))

    def _take_group(self) -> list[_Pending]:
        group = [self._pending.popleft()]
        size = group[0].next_offset - group[0].offset
        while self._pending:
            nxt = self._pending[0]
            size += nxt.next_offset - nxt.offset
            if size > self._max_group_bytes:
                break
            group.append(self._pending.popleft())
        return group

    def _write_group_sync(self, group: list[_Pending], offset: int) -> Segment | None:
        data = walrecord.encode_records([entry.batch for entry in group], offset)
        return self._writer.write_group(data, offset)

    def _fail(self, failure: WALError, group: list[_Pending]) -> None:
        """A failed write leaves the file in an unknown state: nothing more may be acknowledged."""
        logger.error("%s; the WAL stops accepting appends", failure)
        self._failure = failure
        self._gate.fail(failure)
        for entry in [*group, *self._pending]:
            if not entry.future.done():
                entry.future.set_exception(failure)
        self._pending.clear()
        self._idle.set()

    # ---------------------------------------------------------------- trim and reset

    async def trim(self, offset: int) -> None:
        self._require_started()
        await self._ensure_recovered()
        async with self._trim_lock:
            if offset <= self._trim_offset:
                return
            if offset > self._durable_offset:
                raise WALError(
                    f"WAL {self._dir}: cannot trim to offset {offset}: only offsets before {self._durable_offset} "
                    "are durable"
                )
            await asyncio.to_thread(self._write_checkpoint_sync, offset)
            released = offset - self._trim_offset
            self._trim_offset = offset
            self._gate.release(released)
            doomed = [s for i, s in enumerate(self._segments[:-1]) if self._segments[i + 1].base_offset <= offset]
            if doomed:
                del self._segments[: len(doomed)]
                await asyncio.to_thread(self._delete_sync, doomed)
                self.stats.segments_deleted += len(doomed)

    def _write_checkpoint_sync(self, offset: int) -> None:
        path = self._dir / CHECKPOINT_NAME
        tmp = self._dir / (CHECKPOINT_NAME + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(encode_checkpoint(offset))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_dir(self._dir)
        except OSError as exc:
            raise WALError(f"WAL {path}: cannot persist trim offset {offset}: {exc.strerror}") from exc

    def _delete_sync(self, segments: list[Segment]) -> None:
        for segment in segments:
            try:
                segment.path.unlink(missing_ok=True)
            except OSError as exc:
                # The trim point is already persisted, so a leftover segment is only wasted space: recovery
                # deletes it next time.
                logger.warning("WAL segment %s: cannot delete trimmed segment: %s", segment.path, exc.strerror)
            else:
                logger.debug("WAL segment %s: deleted (trimmed)", segment.path)

    async def reset(self) -> None:
        self._check_writable()
        await self._ensure_recovered()
        await self._idle.wait()
        async with self._trim_lock:
            end = self._next_offset
            await asyncio.to_thread(self._write_checkpoint_sync, end)
            released = end - self._trim_offset
            self._trim_offset = end
            segments, self._segments = self._segments, []
            assert self._executor is not None
            try:
                await asyncio.get_running_loop().run_in_executor(self._executor, self._writer.drop_all, segments)
            except OSError as exc:
                raise WALError(f"WAL {self._dir}: reset cannot delete segments: {exc.strerror}") from exc
            self._gate.release(released)
            self.stats.segments_deleted += len(segments)
        logger.info("WAL %s: reset; next offset %d", self._dir, end)
