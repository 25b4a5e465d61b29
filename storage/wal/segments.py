"""Segment files of the file-mode WAL and what sits next to them: names, the trim checkpoint, spare
(preallocated) files, and the writer that appends groups to the active segment.

Everything here is blocking file I/O, meant to run in the WAL's threads (storage/wal/file.py owns the asyncio side).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import re
import struct
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c

from storage.config import MiB
from storage.durable import (
    fdatasync,
    fsync_dir,
    is_disk_full,
    overwrite_in_place,
    write_atomically,
    write_durably,
)
from storage.errors import WALError

logger = logging.getLogger(__name__)

SEGMENT_SUFFIX = ".wal"
_SEGMENT_NAME = re.compile(r"^(\d{20})\.wal$")
CHECKPOINT_NAME = "trim.checkpoint"
LOCK_NAME = ".lock"
DISCARDED_SUFFIX = ".discarded"
SPARE_SUFFIX = ".wal-spare"
SPARE_SEGMENTS = 4  # spares kept at least (more while the WAL's capacity has room for them)
_ZEROS = bytes(2 * MiB)
_PACED_MIN_STEP = 128 * 1024  # smallest zero-fill step worth an fdatasync of its own
_PACED_MAX_STEP = 1 * MiB  # largest: the longest a group commit can wait behind the filler
_PACED_RETRY_S = 10.0  # after a failed step (disk full), new segments are new files for this long


class Preallocation(enum.Enum):
    """How the file WAL prepares the file of its next segment when no trimmed segment can be recycled.

    Overwriting allocated, already-synced blocks lets fdatasync skip the file-size and extent metadata: on ext4 a
    100 KiB write + fdatasync takes about half as long as appending to a fresh or fallocate'd file (unwritten
    extents need the same journal commit as a size change, so ``fallocate`` buys nothing). Zero-filling costs disk
    time, though, and when it ran next to the WAL it put whole 2 MiB synced chunks in front of group commits.
    """

    OFF = "off"
    """New segments are new files (trimmed segments are still recycled: they cost nothing)."""
    PACED = "paced"
    """The spare is zero-filled in the WAL's writer thread while the WAL is idle between group commits, in steps
    sized to finish just before the active segment is full: never concurrent with a group, at most 1 MiB at once."""
    EAGER = "eager"
    """The earlier behaviour, kept for comparison: a background thread zero-fills a whole spare in 2 MiB
    fdatasync'd chunks once the active segment is half full, concurrently with group commits."""


CHECKPOINT = struct.Struct(">IIq")  # magic | version | trim offset, then a CRC-32C of these 16 bytes
CHECKPOINT_MAGIC = 0x464A5754  # "FJWT"
CHECKPOINT_VERSION = 1
_CHECKPOINT_CRC = struct.Struct(">I")


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    match = _SEGMENT_NAME.match(name)
    return int(match.group(1)) if match else None


def encode_checkpoint(trim_offset: int) -> bytes:
    body = CHECKPOINT.pack(CHECKPOINT_MAGIC, CHECKPOINT_VERSION, trim_offset)
    return body + _CHECKPOINT_CRC.pack(crc32c.crc32c(body))


def persist_checkpoint(directory: Path, trim_offset: int) -> None:
    """Makes ``trim_offset`` the directory's durable trim point: the checkpoint file replaced atomically, or on a
    full disk, which has no block for the temporary file, written over the old one (one sector with its CRC:
    ``storage.wal.disk_full``), or the trim that would free the disk could never happen; a WAL that never trimmed has
    none to write over, and its trim is retried after the next upload. Raises WALError."""
    path = directory / CHECKPOINT_NAME
    data = encode_checkpoint(trim_offset)
    try:
        try:
            write_atomically(path, data)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            overwrite_in_place(path, data)
    except OSError as exc:
        raise WALError(f"WAL {path}: cannot persist trim offset {trim_offset}: {exc.strerror}") from exc


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


class SparePool:
    """Preallocated files ready to become segments; shared by the writer thread, trims and the zero-filler."""

    def __init__(self, directory: Path, limit: int) -> None:
        self._dir = directory
        self._limit = limit
        self._spares: list[Path] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._spares)

    def _new_name(self) -> Path:
        return self._dir / f"spare-{uuid.uuid4().hex[:12]}{SPARE_SUFFIX}"

    def adopt_existing(self, paths: list[Path], min_size: int, limit: int | None = None) -> None:
        """Takes over spares left by an earlier run, up to ``limit`` (default: the pool's own limit); extra or
        undersized ones are deleted."""
        keep = max(self._limit, limit or 0)
        for path in paths:
            try:
                fits = path.stat().st_size >= min_size
            except FileNotFoundError:
                continue
            with self._lock:
                if fits and len(self._spares) < keep:
                    self._spares.append(path)
                    continue
            path.unlink(missing_ok=True)

    def take(self) -> Path | None:
        with self._lock:
            return self._spares.pop() if self._spares else None

    def offer(self, path: Path, limit: int | None = None) -> bool:
        """Renames a file into the pool if it holds fewer than ``limit`` spares (default: the pool's own limit);
        False (file untouched) otherwise."""
        with self._lock:
            if len(self._spares) >= max(self._limit, limit or 0):
                return False
            spare = self._new_name()
            os.replace(path, spare)
            self._spares.append(spare)
            return True

    def drop_all(self) -> int:
        """Deletes every spare (the disk is full: their blocks are worth more to the live segment now); returns
        the bytes freed."""
        with self._lock:
            spares, self._spares = self._spares, []
        freed = 0
        for path in spares:
            with contextlib.suppress(FileNotFoundError):
                freed += path.stat().st_size
                path.unlink()
        return freed

    def new_temporary(self) -> Path:
        """A name for a spare being prepared (such leftovers are deleted when the WAL opens)."""
        return self._dir / f"spare-{uuid.uuid4().hex[:12]}.tmp"

    def zero_fill(self, size: int) -> None:
        """Creates one zero-filled spare at once (``Preallocation.EAGER``; blocking, run in a thread). Flushes as
        it goes, so the device never holds a long queue of zero blocks in front of the WAL's own fdatasync."""
        tmp = self.new_temporary()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                written = 0
                while written < size:
                    written += os.write(fd, memoryview(_ZEROS)[: min(len(_ZEROS), size - written)])
                    fdatasync(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            if not self.offer(tmp):
                tmp.unlink()
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            logger.warning("WAL %s: cannot preallocate a segment: %s", self._dir, exc.strerror)


def retire_segments(
    segments: Sequence[Segment], spares: SparePool | None, segment_size: int, room: int
) -> tuple[int, int]:
    """Recycles trimmed segments as spares while the pool has ``room``, deletes the others (all of them without a
    pool: a full disk needs their blocks); (recycled, deleted). Runs in a thread, after the trim point that covers
    them is persisted."""
    recycled = deleted = 0
    for segment in segments:
        try:
            # Segments roll a little before segment_size; a recycled file that short still saves almost all the
            # allocation work.
            big_enough = segment.path.stat().st_size >= segment_size // 2
            if big_enough and spares is not None and spares.offer(segment.path, room):
                recycled += 1
                logger.debug("WAL segment %s: trimmed; kept as a spare", segment.path)
                continue
            segment.path.unlink(missing_ok=True)
            deleted += 1
            logger.debug("WAL segment %s: trimmed; deleted", segment.path)
        except OSError as exc:
            # The trim point is already persisted, so a leftover segment is only wasted space: recovery deletes it
            # next time.
            logger.warning("WAL segment %s: cannot retire trimmed segment: %s", segment.path, exc.strerror)
    return recycled, deleted


class PacedSpareFiller:
    """Zero-fills the next spare a step at a time (``Preallocation.PACED``). Runs only in the WAL's writer thread
    once the WAL has been idle for a moment after a group commit, so the disk never sees zero-fill and a group
    commit at the same time, and an append arriving meanwhile waits for one small step at most. Each step is sized
    so the spare is ready when the active segment fills up: zero-filling goes as fast as the WAL writes and no
    faster."""

    def __init__(self, spares: SparePool, segment_size: int) -> None:
        self._spares = spares
        self._segment_size = segment_size
        self._fd = -1
        self._path: Path | None = None
        self._filled = 0
        self._resume_at = 0.0  # monotonic time before which a failed filler does not try again

    @property
    def busy(self) -> bool:
        """A spare is being filled, or the next roll has none ready (a trimmed segment may still arrive)."""
        return self._fd >= 0 or (len(self._spares) == 0 and time.monotonic() >= self._resume_at)

    def step_for(self, written: int, active_size: int) -> int:
        """The bytes of zeros due after ``written`` bytes of groups left ``active_size`` bytes in the active
        segment: the same share of what the spare still misses as those bytes took of the room the segment had, so
        the fill ends with the segment; at most ``_PACED_MAX_STEP``. 0 while that is less than the smallest step
        worth an fdatasync of its own: the bytes stay owed (the caller keeps adding them up) until it is. A step
        per idle spell whatever was written made every lone small append (a share acknowledgement, a round trip
        apart) pay for the next 128 KiB of zeros: the step ran in the gap and the next append queued behind it."""
        if not self.busy:
            return 0  # the next roll has a file already (a recycled segment, most of the time)
        remaining_segment = max(1, self._segment_size - active_size)
        missing = self._segment_size - (self._filled if self._fd >= 0 else 0)
        step = -(-missing * written // remaining_segment)
        if step < min(_PACED_MIN_STEP, missing):
            return 0
        return min(step, _PACED_MAX_STEP, missing)

    def fill_step(self, size: int) -> None:
        """Writes ``size`` more zeros (``step_for``) into the spare being filled, starting one if none is."""
        if size <= 0 or (self._fd < 0 and not self._open()):
            return
        self._fill(min(size, self._segment_size - self._filled))

    def _open(self) -> bool:
        path = self._spares.new_temporary()
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            logger.warning("WAL %s: cannot create a spare segment: %s", path.parent, exc.strerror)
            self._resume_at = time.monotonic() + _PACED_RETRY_S
            return False
        self._path, self._filled = path, 0
        return True

    def _fill(self, size: int) -> None:
        path = self._path
        assert path is not None
        try:
            end = self._filled + size
            while self._filled < end:
                chunk = memoryview(_ZEROS)[: min(len(_ZEROS), end - self._filled)]
                self._filled += os.pwrite(self._fd, chunk, self._filled)
            fdatasync(self._fd)
            if self._filled < self._segment_size:
                return
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
            self._path = None
            if not self._spares.offer(path):
                path.unlink()
        except OSError as exc:
            logger.warning(
                "WAL %s: cannot preallocate a segment (new segments are new files for the next %.0f s): %s",
                path.parent,
                _PACED_RETRY_S,
                exc.strerror,
            )
            self._resume_at = time.monotonic() + _PACED_RETRY_S
            self.abandon()

    def abandon(self) -> None:
        """Drops a half-filled spare (the WAL is closing, or the disk failed it)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._path is not None:
            self._path.unlink(missing_ok=True)
            self._path = None


class SegmentWriter:
    """The active segment's file descriptor. Touched by one writer at a time (the WAL's writer thread, or the event
    loop for a small group while that thread has nothing in hand), so writes, rolls and resets are serialized
    without locks."""

    def __init__(self, directory: Path, segment_size: int, spares: SparePool) -> None:
        self._dir = directory
        self._segment_size = segment_size
        self._spares = spares
        self._fd = -1
        self._base = 0
        self._size = 0
        self._path: Path | None = None
        self.preallocated = False  # whether the active segment came from a spare
        #: A segment rolled onto by a write that then failed (the disk was full): reported by the next write.
        self._unreported: Segment | None = None

    @property
    def size(self) -> int:
        """Bytes written to the active segment (0 if there is none)."""
        return self._size if self._fd >= 0 else 0

    def write_group(self, parts: Sequence[bytes], offset: int) -> Segment | None:
        """Writes one group (its buffers in order, see ``record.encode_record_parts``) at logical ``offset`` and
        makes it durable; returns the new segment if it rolled."""
        length = sum(len(part) for part in parts)
        rolled = self._unreported
        if self._fd < 0 or (self._size > 0 and self._size + length > self._segment_size):
            rolled = self._roll(offset)
        assert self._path is not None
        if self._base + self._size != offset:
            raise WALError(
                f"WAL segment {self._path}: group at offset {offset} does not follow the segment end "
                f"{self._base + self._size}"
            )
        try:
            write_durably(self._fd, parts, self._size)
        except OSError as exc:
            self._unreported = rolled  # the group is written again into it (storage.wal.disk_full)
            raise WALError(
                f"WAL segment {self._path}: write of {length} bytes at offset {offset} failed: {exc.strerror}"
            ) from exc
        self._size += length
        self._unreported = None
        return rolled

    def _roll(self, base_offset: int) -> Segment:
        self.close()
        path = self._dir / segment_name(base_offset)
        spare = self._spares.take()
        try:
            if spare is not None:
                os.replace(spare, path)
                self._fd = os.open(path, os.O_WRONLY)
            else:
                self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            fsync_dir(self._dir)  # the new name must survive a crash as much as the bytes written into it
        except OSError as exc:
            raise WALError(f"WAL segment {path}: cannot create: {exc.strerror}") from exc
        self._base, self._size, self._path = base_offset, 0, path
        self.preallocated = spare is not None
        logger.debug("WAL %s: new segment %s (%s)", self._dir, path.name, "preallocated" if spare else "new file")
        return Segment(base_offset, path)

    def drop_all(self, segments: Sequence[Segment]) -> None:
        """Closes the active segment and deletes every segment (reset), one not reported yet too."""
        self.close()
        unreported, self._unreported = self._unreported, None
        for segment in [*segments, *([unreported] if unreported is not None else [])]:
            segment.path.unlink(missing_ok=True)
        fsync_dir(self._dir)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._path = None
