"""The local metadata log: durable, CRC-checked record batches plus snapshots (the single-node embedded default).

Layout, under ``<metadata dir>/__cluster_metadata-0/``:

- ``metadata.log`` — appended batches. Each batch frame is
  ``length u32 | crc32c u32 | base_offset i64 | count u32 | (record_length u32 | record)*`` where ``length`` counts
  the bytes after the CRC and the CRC covers exactly those bytes. Every record gets the next offset.
- ``snapshot-<20-digit last offset>.snapshot`` — the whole state at that offset, as the same frames (with offsets
  up to the snapshot's). Written to a temporary file, fsync'd and renamed, so a snapshot is either complete or
  absent; only then is the log truncated. Taken when :class:`SnapshotPolicy` says so, by size or by time.

Recovery loads the newest snapshot, then replays log batches after its offset; a torn or corrupt tail (a crash
mid-append) ends the replay at the last complete batch and is cut off so new appends follow good data. Batches at or
below the snapshot's offset are skipped, which covers a crash between writing a snapshot and truncating the log.

The same frames carry metadata records wherever they travel as bytes (a Raft entry, a snapshot chunk, a voter's
MetadataDump): :func:`encode_metadata_records` and :func:`decode_metadata_records`, so there is one record framing.

The Raft quorum will replace this class behind :class:`RecordLog`; the controller only appends and snapshots.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import crc32c

# The log decodes every record it carries with the one registry of ``storage.metadata.record_codec``, which a record
# type joins when the module defining it is imported: these two imports register the cluster and the stream records
# before any log is read, whoever opens it.
import metadata.cluster_records  # noqa: F401
import storage.metadata.stream_records  # noqa: F401
from settings.server import ServerConfig
from storage.durable import fsync_dir, is_disk_full
from storage.errors import StorageError
from storage.metadata.record_codec import MetadataRecord, RecordDecodeError, decode_record, encode_record

logger = logging.getLogger(__name__)

LOG_DIR_NAME = "__cluster_metadata-0"
LOG_FILE = "metadata.log"
_SNAPSHOT = re.compile(r"snapshot-(\d{20})\.snapshot")
_FRAME = struct.Struct(">II")  # length, crc
_BATCH = struct.Struct(">qI")  # base offset, count
_LEN = struct.Struct(">I")
MAX_BATCH_BYTES = 256 * 1024 * 1024  # a length above this is corruption, not a batch
SNAPSHOT_CHUNK = 1000  # records per frame in a snapshot file


class MetadataLogError(StorageError):
    """The metadata log cannot be read or written; the message names the file.

    A StorageError because stream/object commits reach this log through the stream metadata: the storage engine
    then sees a failed commit as one of its own errors and retries or fails the request as it does for others.
    """


class MetadataLogFullError(MetadataLogError):
    """An append found the disk full and was undone (the log cut back to where it ended): this append failed,
    and the next one is tried, as Kafka's clients retry a KAFKA_STORAGE_ERROR."""


class RecordLog(Protocol):
    """What the controller needs from a metadata log (local file now, Raft later)."""

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        """Appends durably; returns the offset of the last record."""
        ...


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    records: tuple[MetadataRecord, ...]

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1


@dataclass(slots=True)
class Recovered:
    """What a restart replays: the snapshot (if any) then the batches after it."""

    snapshot_offset: int = -1
    snapshot_records: list[MetadataRecord] = field(default_factory=list)
    snapshot_bytes: int = 0
    batches: list[Batch] = field(default_factory=list)
    log_valid_bytes: int = 0  # the intact prefix of the log file
    log_total_bytes: int = 0

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else self.snapshot_offset


#: The log since the snapshot a local metadata log always lets grow to before its replay trigger snapshots
#: (``SnapshotPolicy``): about 20 ms of a restart, and 64 KiB of snapshot writes at most that often.
REPLAY_FLOOR_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When a metadata snapshot is due: Kafka's two triggers, shared by the local log, the quorum voters and the
    brokers' replicas. A snapshot bounds what a restart replays: its state (a few hundred records for a 10 GB
    partition) instead of every record since the last one (thousands of upload commits, 0.2 s and more to decode
    and apply), and only the records after it.

    ``max_bytes``: ``metadata.log.max.record.bytes.between.snapshots``, once that many bytes of records were
    appended since the last snapshot. ``max_interval_ms``: ``metadata.log.max.snapshot.interval.ms`` (KIP-876), once a
    record not in a snapshot is that old; 0 turns it off. Both only when there are records since the last snapshot.

    A third trigger bounds what a restart replays by what the state is, for a log that knows the size of its
    snapshot (``snapshot_bytes``; the local log): once the records since the snapshot outweigh it, and at least
    :data:`REPLAY_FLOOR_BYTES`. Decoding and applying a record here takes about 17 µs (about 0.3 s a MB), so
    Kafka's 20 MB alone let a restart replay for seconds: a combined node in a crash loop, which lives too short to
    append 20 MB, replayed 13,216 records (0.35 s) where its state was 5,354 (0.10 s), a few more with each restart
    (2026-12-01, bench/kill_acks.py's 10 GB partition). The restart then replays at most about twice its state;
    the log writes each state about once more for as many bytes of records, where the state is small that is a
    snapshot every :data:`REPLAY_FLOOR_BYTES`.
    """

    max_bytes: int = 20 * 1024 * 1024
    max_interval_ms: int = 0

    @classmethod
    def of(cls, config: ServerConfig) -> SnapshotPolicy:
        return cls(
            int(config.value("metadata.log.max.record.bytes.between.snapshots")),
            int(config.value("metadata.log.max.snapshot.interval.ms")),
        )

    def due(self, bytes_since: int, last_snapshot_ms: float, now_ms: float, snapshot_bytes: int | None = None) -> bool:
        """Whether to snapshot now, ``bytes_since`` bytes appended since the snapshot taken at ``last_snapshot_ms``
        (or since the log began, if it has none), whose records take ``snapshot_bytes`` (0: none; None: not
        known, which turns the replay trigger off)."""
        if bytes_since <= 0:
            return False
        if bytes_since >= self.max_bytes:
            return True
        if snapshot_bytes is not None and bytes_since >= max(REPLAY_FLOOR_BYTES, snapshot_bytes):
            return True
        return self.max_interval_ms > 0 and now_ms - last_snapshot_ms >= self.max_interval_ms


def wall_ms() -> float:
    return time.time() * 1000


def encode_batch(base_offset: int, records: Sequence[MetadataRecord]) -> bytes:
    parts = [_BATCH.pack(base_offset, len(records))]
    for record in records:
        data = encode_record(record)
        parts.append(_LEN.pack(len(data)))
        parts.append(data)
    body = b"".join(parts)
    return _FRAME.pack(len(body), crc32c.crc32c(body)) + body


def iter_batches(data: bytes, source: str) -> Iterator[tuple[int, Batch]]:
    """Yields ``(end position, batch)`` for each intact frame; stops at the first torn or corrupt one."""
    position = 0
    while position + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, position)
        start = position + _FRAME.size
        if length < _BATCH.size or length > MAX_BATCH_BYTES or start + length > len(data):
            return
        body = data[start : start + length]
        if crc32c.crc32c(body) != crc:
            logger.warning("%s: CRC mismatch in the batch at byte %d; ignoring it and what follows", source, position)
            return
        base_offset, count = _BATCH.unpack_from(body, 0)
        records: list[MetadataRecord] = []
        cursor = _BATCH.size
        try:
            for _ in range(count):
                (size,) = _LEN.unpack_from(body, cursor)
                cursor += _LEN.size
                records.append(decode_record(body[cursor : cursor + size]))
                cursor += size
        except (struct.error, RecordDecodeError) as exc:
            # The CRC matched, so this is not a torn write: the log holds records this code cannot read.
            raise MetadataLogError(f"{source}: batch at offset {base_offset} cannot be decoded: {exc}") from None
        position = start + length
        yield position, Batch(base_offset, tuple(records))


def encode_metadata_records(records: Sequence[MetadataRecord]) -> bytes:
    """Metadata records as ``metadata.log`` batch frames (CRC'd), in chunks; one Raft entry, a snapshot or a
    MetadataDump all carry records this way."""
    return b"".join(
        encode_batch(start, records[start : start + SNAPSHOT_CHUNK]) for start in range(0, len(records), SNAPSHOT_CHUNK)
    )


def decode_metadata_records(data: bytes, source: str) -> list[MetadataRecord]:
    """Inverse of :func:`encode_metadata_records`; ``source`` names the data in errors (MetadataLogError)."""
    records: list[MetadataRecord] = []
    intact = 0
    for position, batch in iter_batches(data, source):
        records.extend(batch.records)
        intact = position
    if intact != len(data):
        raise MetadataLogError(f"{source}: {len(data) - intact} bytes after the last intact batch")
    return records



def list_snapshots(directory: Path) -> list[tuple[int, Path]]:
    """(offset, path) of every complete snapshot in ``directory``, oldest first."""
    found = []
    for entry in directory.iterdir():
        match = _SNAPSHOT.fullmatch(entry.name)
        if match:
            found.append((int(match.group(1)), entry))
    return sorted(found)


def read_metadata(directory: str | os.PathLike[str]) -> Recovered:
    """Reads a metadata log directory without changing it (restart recovery, and offline tools such as a
    metadata shell): the newest snapshot, then the intact batches after it."""
    folder = Path(directory)
    recovered = Recovered()
    snapshots = list_snapshots(folder) if folder.is_dir() else []
    if snapshots:
        offset, path = snapshots[-1]
        data = path.read_bytes()
        consumed = 0
        for position, batch in iter_batches(data, str(path)):
            recovered.snapshot_records.extend(batch.records)
            consumed = position
        if consumed != len(data):
            raise MetadataLogError(f"snapshot {path} is damaged at byte {consumed} of {len(data)}")
        recovered.snapshot_offset = offset
        recovered.snapshot_bytes = len(data)
    log_path = folder / LOG_FILE
    data = log_path.read_bytes() if log_path.exists() else b""
    recovered.log_total_bytes = len(data)
    for end, batch in iter_batches(data, str(log_path)):
        recovered.log_valid_bytes = end
        if batch.last_offset <= recovered.snapshot_offset:
            continue  # already in the snapshot (a crash came between writing it and truncating the log)
        expected = recovered.last_offset + 1
        if batch.base_offset != expected:
            raise MetadataLogError(
                f"{log_path}: batch at offset {batch.base_offset} does not follow offset {expected - 1}"
            )
        recovered.batches.append(batch)
    return recovered


def _fail(appends: Sequence[tuple[Sequence[MetadataRecord], asyncio.Future[int]]], exc: BaseException) -> None:
    """Fails the appends of a group that could not be written (those whose callers still wait)."""
    for _, done in appends:
        if not done.done():
            done.set_exception(exc)


def _append_frame(fd: int, frame: bytes) -> None:
    """Writes ``frame`` at the end of the log file (opened O_APPEND), continuing short writes."""
    view = memoryview(frame)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class LocalMetadataLog:
    """A single-writer metadata log in one directory. Open with :meth:`open`, then :meth:`recover` once."""

    def __init__(self, directory: Path, policy: SnapshotPolicy) -> None:
        self._dir = directory
        self._path = directory / LOG_FILE
        self._policy = policy
        self._last_snapshot_ms = wall_ms()  # see recover()
        self._lock = asyncio.Lock()
        #: Appends waiting for the group being written to finish, and the task writing them (see :meth:`append`).
        self._queued: list[tuple[Sequence[MetadataRecord], asyncio.Future[int]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._next_offset = 0
        self._file: int | None = None
        self._log_bytes = 0  # also the file's size: the log is truncated to 0 by each snapshot
        self._snapshot_bytes = 0  # the newest snapshot file's size, for SnapshotPolicy's replay trigger
        self._failure: str | None = None
        self._full_since: float | None = None  # monotonic time of the first append of a full-disk episode

    @classmethod
    def open(cls, metadata_dir: str | os.PathLike[str], policy: SnapshotPolicy | None = None) -> LocalMetadataLog:
        directory = Path(metadata_dir) / LOG_DIR_NAME
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MetadataLogError(f"cannot create metadata log directory {directory}: {exc.strerror}") from None
        return cls(directory, policy or SnapshotPolicy())

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def log_bytes(self) -> int:
        """Bytes in the log since the last snapshot."""
        return self._log_bytes

    def should_snapshot(self) -> bool:
        return self._policy.due(self._log_bytes, self._last_snapshot_ms, wall_ms(), self._snapshot_bytes)

    # ------------------------------------------------------------------ recovery

    def recover(self) -> Recovered:
        """Reads the newest snapshot and the log after it, cuts a torn tail, and opens the log for appends."""
        self._last_snapshot_ms = self._last_snapshot_time()
        for leftover in self._dir.glob("*.tmp"):
            leftover.unlink()
        recovered = read_metadata(self._dir)
        if recovered.log_valid_bytes != recovered.log_total_bytes:
            logger.warning(
                "%s: torn tail of %d bytes after byte %d (offset %d) cut off",
                self._path,
                recovered.log_total_bytes - recovered.log_valid_bytes,
                recovered.log_valid_bytes,
                recovered.last_offset,
            )
            with open(self._path, "r+b") as handle:
                handle.truncate(recovered.log_valid_bytes)
                os.fsync(handle.fileno())
        self._next_offset = recovered.last_offset + 1
        self._log_bytes = recovered.log_valid_bytes
        self._snapshot_bytes = recovered.snapshot_bytes
        self._file = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(self._dir)
        logger.info(
            "metadata log %s recovered: snapshot at offset %d (%d records), %d batches after it, next offset %d",
            self._dir,
            recovered.snapshot_offset,
            len(recovered.snapshot_records),
            len(recovered.batches),
            self._next_offset,
        )
        return recovered

    def _last_snapshot_time(self) -> float:
        """When the newest snapshot was written, so the interval trigger spans restarts (KIP-876 counts from the
        oldest record's append time, which outlives the process): the snapshot file's modification time or, with
        none, the log directory's, which nothing but the log's creation and snapshots changes. The records after
        a snapshot are no older than it, so this snapshots at most one interval after the oldest of them."""
        snapshots = list_snapshots(self._dir)
        newest = snapshots[-1][1] if snapshots else self._dir
        return newest.stat().st_mtime_ns / 1e6

    # ------------------------------------------------------------------ appends

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        """Appends ``records`` as one batch and returns its last offset once it is durable.

        Appends made while a write is running are written together after it, each still its own batch, with one
        fsync for all of them (a group commit, as the Raft log's driver does): a node opening many partitions at
        once makes a few stream records for each, and one write and fsync per append queued them one behind the
        other. They take their offsets, and their place in the file, in the order they were called; each caller
        returns once its group is durable, and a group that fails fails every append in it.

        The callers of a group are woken, in offset order, before the lock is released, so a snapshot waiting for
        it captures a state those callers have applied (they apply what they appended as soon as this returns).
        """
        if not records:
            raise ValueError("append needs at least one record")
        self._require_open()
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        entry = (records, done)
        self._queued.append(entry)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_queued())
        try:
            return await done
        except asyncio.CancelledError:
            # Still queued: taken back, nothing of it written (as when a caller gave up waiting for the lock
            # before). Already in the group being written, it reaches the log all the same, as it did then.
            self._queued = [e for e in self._queued if e is not entry]
            raise

    async def _write_queued(self) -> None:
        """Writes what is queued, a group at a time, until nothing is: the one task that writes the log."""
        while self._queued:
            async with self._lock:  # a snapshot waits for the group being written, and the next group for it
                taken, self._queued = self._queued, []
                try:
                    fd = self._require_open()
                except MetadataLogError as exc:
                    _fail(taken, exc)
                    continue
                first = end = self._next_offset
                frames: list[bytes] = []
                group: list[tuple[Sequence[MetadataRecord], asyncio.Future[int]]] = []
                for entry in taken:
                    try:
                        frames.append(encode_batch(end, entry[0]))
                    except Exception as exc:  # a record that cannot be encoded fails its own append alone
                        _fail([entry], exc)
                        continue
                    group.append(entry)
                    end += len(entry[0])
                if not group:
                    continue
                data = b"".join(frames)
                # The offsets are taken before the write: should it fail or be interrupted, the log takes no
                # further writes (what reached the file is unknown) and a restart recovers the last intact batch.
                # A disk found full is the exception: the write was undone, and the offsets are given back.
                size = self._log_bytes
                self._next_offset, self._log_bytes = end, size + len(data)
                try:
                    await asyncio.to_thread(self._write_durably, fd, data, size)
                except MetadataLogFullError as exc:
                    self._next_offset, self._log_bytes = first, size
                    _fail(group, exc)
                    continue
                except Exception as exc:
                    self._failure = self._failure or str(exc)
                    _fail(group, exc)
                    continue
                except BaseException:
                    self._failure = self._failure or "a write was interrupted"
                    interrupted = MetadataLogError(f"metadata log {self._path}: the write was interrupted")
                    _fail(group + self._queued, interrupted)
                    self._queued = []
                    raise
                if self._full_since is not None:
                    logger.info("metadata log %s: the disk has room again; appends written after %.1f s",
                                self._path, time.monotonic() - self._full_since)
                    self._full_since = None
                last = first - 1
                for records, done in group:
                    last += len(records)
                    if not done.done():  # a caller cancelled meanwhile: its records are written all the same
                        done.set_result(last)

    def _require_open(self) -> int:
        if self._failure is not None:
            raise MetadataLogError(f"metadata log {self._path} failed earlier and accepts no writes: {self._failure}")
        if self._file is None:
            raise MetadataLogError(f"metadata log {self._path} is not open (call recover() first, or it was closed)")
        return self._file

    def _write_durably(self, fd: int, frame: bytes, size: int) -> None:
        """Writes and fsyncs one frame at the end of the file, ``size`` bytes long before it. After a failure the
        file's state is unknown (a failed fsync may have lost pages already reported written), so the log refuses
        every later write instead of guessing; a restart recovers the last intact batch. A write that found the
        disk full is undone instead, and only its appends fail (:class:`MetadataLogFullError`): cutting the file
        back needs no room, and a full disk (the WAL or a ``file://`` object store beside the log) must not stop
        the node's metadata for good, where Kafka would halt the process."""
        try:
            _append_frame(fd, frame)
        except OSError as exc:
            if is_disk_full(exc) and self._undo(fd, size, exc):
                raise MetadataLogFullError(f"cannot append to metadata log {self._path}: {exc.strerror}") from None
            raise self._stopped_by(exc) from None
        try:
            os.fsync(fd)
        except OSError as exc:
            raise self._stopped_by(exc) from None

    def _stopped_by(self, exc: OSError) -> MetadataLogError:
        """Stops the log's writes for good (see :meth:`_write_durably`); returns the append's error."""
        self._failure = exc.strerror or str(exc)
        logger.error("metadata log %s: append failed (%s); no further writes until restart", self._path, exc)
        return MetadataLogError(f"cannot append to metadata log {self._path}: {exc.strerror}")

    def _undo(self, fd: int, size: int, cause: OSError) -> bool:
        """Cuts the log back to ``size`` bytes after a write found the disk full; False if even that failed."""
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        except OSError as exc:
            logger.error("metadata log %s: cannot cut back a write the full disk refused: %s", self._path, exc)
            return False
        if self._full_since is None:
            self._full_since = time.monotonic()
            logger.warning("metadata log %s: %s; appends are refused (KAFKA_STORAGE_ERROR, retriable) until the "
                           "disk has room again", self._path, cause.strerror)
        return True

    # ------------------------------------------------------------------ snapshots

    async def snapshot(self, capture: Callable[[], Sequence[MetadataRecord]]) -> int:
        """Writes a snapshot of the state at the last appended offset and truncates the log.

        ``capture`` is called with appends blocked and must return, without awaiting, records that rebuild the
        state as of the last appended record. Returns the snapshot's offset.
        """
        async with self._lock:
            fd = self._require_open()
            offset = self._next_offset - 1
            records = list(capture())
            self._snapshot_bytes = await asyncio.to_thread(self._write_snapshot, fd, offset, records)
            self._log_bytes = 0
            self._last_snapshot_ms = wall_ms()
            return offset

    def _write_snapshot(self, fd: int, offset: int, records: list[MetadataRecord]) -> int:
        """Writes the snapshot, truncates the log and removes older snapshots; returns the snapshot's size."""
        final = self._dir / f"snapshot-{offset:020d}.snapshot"
        tmp = final.with_name(final.name + ".tmp")
        base = max(offset - len(records) + 1, 0)
        size = 0
        with open(tmp, "wb") as handle:
            for start in range(0, len(records), SNAPSHOT_CHUNK):
                size += handle.write(encode_batch(base + start, records[start : start + SNAPSHOT_CHUNK]))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
        fsync_dir(self._dir)
        os.ftruncate(fd, 0)
        os.fsync(fd)
        for older, path in list_snapshots(self._dir):
            if older < offset:
                path.unlink()
        logger.info("metadata snapshot %s written (%d records, %d bytes); log truncated", final, len(records), size)
        return size

    async def written(self) -> None:
        """Returns once the appends made so far are written (or failed): what a close waits for, so that it does
        not close the file under a write."""
        while self._writer is not None and not self._writer.done():
            await asyncio.wait({self._writer})

    def close(self) -> None:
        if self._file is not None:
            os.close(self._file)
            self._file = None
