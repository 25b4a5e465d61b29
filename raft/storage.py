"""On-disk persistence of one quorum member: log segments, the quorum-state file, and snapshots.

Layout under the node's directory (synchronous, blocking I/O: the asyncio driver calls it from a worker thread)::

    quorum-state                      JSON {leader_epoch, leader_id, voted_id}, replaced atomically
    log/<base offset, 20 digits>.log  segments of entries
    snapshots/<end offset>-<epoch>.checkpoint

A log entry is ``crc u32 | length u32 | offset i64 | epoch i32 | kind u8 | data`` (big-endian) where ``length``
counts the bytes after itself and the CRC-32C covers them too. Appends and truncations are buffered until `flush`
(one fsync for a whole batch, the group commit); the quorum state and snapshots are made durable before the call
returns, because a vote or an epoch must never be lost once announced. Recovery reads every segment, stops at the
first torn or corrupt entry, cuts the file there and drops what follows: nothing before it is lost, and nothing
after it had been acknowledged (entries are only acknowledged once flushed).
"""

from __future__ import annotations

import io
import json
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c

from raft.effects import (
    AppendEntries,
    PersistEffect,
    PersistQuorumState,
    PersistSnapshot,
    QuorumState,
    ResetLog,
    TrimLogPrefix,
    TruncateLog,
)
from raft.log import EMPTY_SNAPSHOT, EntryKind, LogEntry, LogInvariantError, RaftLog, SnapshotId, entries_after_snapshot
from storage.durable import fsync_dir, write_atomically

logger = logging.getLogger(__name__)

_ENTRY_HEADER = struct.Struct(">IIqiB")  # crc, length, offset, epoch, kind
_LENGTH_FIELDS = _ENTRY_HEADER.size - 8  # offset + epoch + kind, counted by ``length`` with the data
_SNAPSHOT_HEADER = struct.Struct(">4sqiIQ")  # magic, end offset, epoch, crc of data, data length
_SNAPSHOT_MAGIC = b"FJSN"
_MAX_ENTRY_BYTES = 64 << 20
QUORUM_STATE_FILE = "quorum-state"


class RaftStorageError(Exception):
    """The Raft directory holds something recovery cannot accept; the message names the file."""


@dataclass(frozen=True, slots=True)
class RecoveredState:
    quorum_state: QuorumState
    log: RaftLog
    snapshot_data: bytes


def encode_entry(entry: LogEntry) -> bytes:
    body = _ENTRY_HEADER.pack(0, _LENGTH_FIELDS + len(entry.data), entry.offset, entry.epoch, entry.kind)[4:]
    body += entry.data
    return struct.pack(">I", crc32c.crc32c(body)) + body




@dataclass
class _Segment:
    base_offset: int
    path: Path
    positions: list[int]  # file position of each entry
    size: int

    @property
    def end_offset(self) -> int:
        return self.base_offset + len(self.positions)


class RaftStorage:
    def __init__(self, directory: Path | str, *, segment_bytes: int = 16 << 20) -> None:
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self._log_dir = self.directory / "log"
        self._snapshot_dir = self.directory / "snapshots"
        self._segments: list[_Segment] = []
        self._active: io.BufferedWriter | None = None
        self._dirty_files: set[Path] = set()
        self._dirty_dir = False
        self._snapshot_id = EMPTY_SNAPSHOT

    # ---- recovery ------------------------------------------------------------------------------------------
    def recover(self) -> RecoveredState:
        """Load everything durable, repairing a torn log tail; call once before any write."""
        for d in (self.directory, self._log_dir, self._snapshot_dir):
            d.mkdir(parents=True, exist_ok=True)
        state = self._read_quorum_state()
        snapshot_id, snapshot_data = self._read_latest_snapshot()
        self._snapshot_id = snapshot_id
        entries = self._read_segments()
        kept = entries_after_snapshot(snapshot_id, entries)
        if not kept and entries and entries[-1].offset >= snapshot_id.end_offset:
            logger.warning("raft storage %s: dropping log entries beyond snapshot %s that predate its epoch",
                           self.directory, snapshot_id)
        if kept and kept[0].offset != snapshot_id.end_offset:
            raise RaftStorageError(
                f"{self._log_dir}: log resumes at offset {kept[0].offset} but snapshot {snapshot_id} ends at "
                f"{snapshot_id.end_offset}; entries in between are missing"
            )
        if not kept and (not self._segments or self._segments[-1].end_offset != snapshot_id.end_offset):
            # The snapshot is ahead of (or replaces) the whole log: start an empty log at its end.
            self._reset_segments(snapshot_id.end_offset)
        try:
            log = RaftLog(snapshot_id, kept)
        except LogInvariantError as e:
            raise RaftStorageError(f"{self._log_dir}: {e}") from e
        self._open_active()
        logger.info(
            "raft storage %s: recovered epoch %d, snapshot %s, log [%d, %d)",
            self.directory, state.leader_epoch, snapshot_id, log.start_offset, log.end_offset,
        )
        return RecoveredState(state, log, snapshot_data)

    def _read_quorum_state(self) -> QuorumState:
        path = self.directory / QUORUM_STATE_FILE
        path.with_name(path.name + ".tmp").unlink(missing_ok=True)
        if not path.exists():
            return QuorumState()
        try:
            raw = json.loads(path.read_bytes())
            return QuorumState(int(raw["leader_epoch"]), raw["leader_id"], raw["voted_id"])
        except (ValueError, KeyError, TypeError) as e:
            raise RaftStorageError(f"{path}: unreadable quorum state ({e})") from e

    def _read_latest_snapshot(self) -> tuple[SnapshotId, bytes]:
        found: list[tuple[SnapshotId, Path]] = []
        for path in self._snapshot_dir.iterdir():
            if path.suffix != ".checkpoint":
                path.unlink()  # a temp file from an interrupted write
                continue
            try:
                end, epoch = (int(part) for part in path.stem.split("-"))
            except ValueError:
                logger.warning("raft storage: ignoring unexpected file %s", path)
                continue
            found.append((SnapshotId(end, epoch), path))
        for snapshot_id, path in sorted(found, reverse=True):
            data = self._read_snapshot_file(snapshot_id, path)
            if data is not None:
                for older, older_path in found:
                    if older < snapshot_id:
                        older_path.unlink()
                return snapshot_id, data
        return EMPTY_SNAPSHOT, b""

    def _read_snapshot_file(self, snapshot_id: SnapshotId, path: Path) -> bytes | None:
        raw = path.read_bytes()
        if len(raw) < _SNAPSHOT_HEADER.size:
            logger.warning("raft storage: snapshot %s is truncated; ignoring it", path)
            return None
        magic, end, epoch, crc, length = _SNAPSHOT_HEADER.unpack_from(raw)
        data = raw[_SNAPSHOT_HEADER.size :]
        if magic != _SNAPSHOT_MAGIC or SnapshotId(end, epoch) != snapshot_id or length != len(data):
            logger.warning("raft storage: snapshot %s has a bad header; ignoring it", path)
            return None
        if crc32c.crc32c(data) != crc:
            logger.warning("raft storage: snapshot %s fails its CRC; ignoring it", path)
            return None
        return data

    def _read_segments(self) -> list[LogEntry]:
        paths = sorted(p for p in self._log_dir.iterdir() if p.suffix == ".log")
        entries: list[LogEntry] = []
        for index, path in enumerate(paths):
            try:
                base = int(path.stem)
            except ValueError:
                logger.warning("raft storage: ignoring unexpected file %s", path)
                continue
            expected = entries[-1].offset + 1 if entries else base
            if base != expected:
                logger.warning("raft storage: segment %s starts at %d, expected %d; dropping it and later ones",
                               path, base, expected)
                self._drop_files(paths[index:])
                break
            segment, good, torn = self._scan_segment(path, base, entries[-1].epoch if entries else 0)
            entries.extend(good)
            self._segments.append(segment)
            if torn:
                self._drop_files(paths[index + 1 :])
                break
        return entries

    def _scan_segment(self, path: Path, base: int, last_epoch: int) -> tuple[_Segment, list[LogEntry], bool]:
        raw = path.read_bytes()
        pos = 0
        entries: list[LogEntry] = []
        positions: list[int] = []
        problem = None
        while pos < len(raw):
            if len(raw) - pos < _ENTRY_HEADER.size:
                problem = "a torn entry header"
                break
            crc, length, offset, epoch, kind = _ENTRY_HEADER.unpack_from(raw, pos)
            end = pos + 8 + length
            if length < _LENGTH_FIELDS or length > _MAX_ENTRY_BYTES or end > len(raw):
                problem = "a torn entry"
                break
            if crc32c.crc32c(raw[pos + 4 : end]) != crc:
                problem = "an entry failing its CRC"
                break
            if offset != base + len(entries) or epoch < last_epoch or kind not in EntryKind._value2member_map_:
                problem = f"an out-of-sequence entry (offset {offset}, epoch {epoch})"
                break
            entries.append(LogEntry(offset, epoch, raw[pos + _ENTRY_HEADER.size : end], EntryKind(kind)))
            positions.append(pos)
            last_epoch = epoch
            pos = end
        if problem is not None:
            logger.warning(
                "raft storage: %s at byte %d of %s (after offset %d); truncating the log there",
                problem, pos, path, base + len(entries) - 1,
            )
            with open(path, "r+b") as f:
                f.truncate(pos)
                os.fsync(f.fileno())
        return _Segment(base, path, positions, pos), entries, problem is not None

    def _drop_files(self, paths: list[Path]) -> None:
        for path in paths:
            path.unlink()
        if paths:
            fsync_dir(self._log_dir)

    # ---- writes --------------------------------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        return self._segments[-1].end_offset

    def apply(self, effect: PersistEffect) -> None:
        """Carry out one of the core's persistence effects (durable at the next `flush`, or at once for state)."""
        match effect:
            case PersistQuorumState(state=state):
                self.write_quorum_state(state)
            case AppendEntries(entries=entries):
                self.append(entries)
            case TruncateLog(end_offset=end):
                self.truncate(end)
            case PersistSnapshot(snapshot_id=snapshot_id, data=data):
                self.write_snapshot(snapshot_id, data)
            case TrimLogPrefix(snapshot_id=snapshot_id):
                self.trim_prefix(snapshot_id)
            case ResetLog(snapshot_id=snapshot_id):
                self._close_active()
                self._reset_segments(snapshot_id.end_offset)
                self._open_active()
                self.flush()

    def write_quorum_state(self, state: QuorumState) -> None:
        payload = {"leader_epoch": state.leader_epoch, "leader_id": state.leader_id, "voted_id": state.voted_id}
        write_atomically(self.directory / QUORUM_STATE_FILE, json.dumps(payload).encode())

    def append(self, entries: tuple[LogEntry, ...] | list[LogEntry]) -> None:
        for entry in entries:
            if entry.offset != self.end_offset:
                raise RaftStorageError(
                    f"{self._log_dir}: append at offset {entry.offset}, log ends at {self.end_offset}"
                )
            segment = self._segments[-1]
            if segment.size >= self.segment_bytes and segment.positions:
                self._roll(entry.offset)
                segment = self._segments[-1]
            record = encode_entry(entry)
            assert self._active is not None
            self._active.write(record)
            segment.positions.append(segment.size)
            segment.size += len(record)
            self._dirty_files.add(segment.path)

    def truncate(self, end_offset: int) -> None:
        """Drop entries from ``end_offset`` on (a diverged suffix)."""
        if end_offset >= self.end_offset:
            return
        self._close_active()
        while len(self._segments) > 1 and self._segments[-1].base_offset >= end_offset:
            dropped = self._segments.pop()
            dropped.path.unlink()
            self._dirty_files.discard(dropped.path)
            self._dirty_dir = True
        segment = self._segments[-1]
        keep = max(0, end_offset - segment.base_offset)
        cut = segment.positions[keep] if keep < len(segment.positions) else segment.size
        del segment.positions[keep:]
        segment.size = cut
        with open(segment.path, "r+b") as f:
            f.truncate(cut)
        self._dirty_files.add(segment.path)
        self._open_active()

    def write_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        name = f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}.checkpoint"
        header = _SNAPSHOT_HEADER.pack(
            _SNAPSHOT_MAGIC, snapshot_id.end_offset, snapshot_id.epoch, crc32c.crc32c(data), len(data)
        )
        write_atomically(self._snapshot_dir / name, header + data)
        for path in self._snapshot_dir.iterdir():
            if path.suffix == ".checkpoint" and path.name != name:
                path.unlink()
        self._snapshot_id = snapshot_id

    def trim_prefix(self, snapshot_id: SnapshotId) -> None:
        """Delete whole segments the snapshot covers (the active one stays, recovery skips its covered prefix)."""
        while len(self._segments) > 1 and self._segments[1].base_offset <= snapshot_id.end_offset:
            dropped = self._segments.pop(0)
            dropped.path.unlink()
            self._dirty_files.discard(dropped.path)
            self._dirty_dir = True

    def flush(self) -> int:
        """Make every buffered append and truncation durable; returns the durable log end offset."""
        active_path = self._segments[-1].path if self._active is not None else None
        if self._active is not None:
            self._active.flush()
        for path in sorted(self._dirty_files):
            if path == active_path and self._active is not None:
                os.fsync(self._active.fileno())
            elif path.exists():
                with open(path, "rb") as f:
                    os.fsync(f.fileno())
        self._dirty_files.clear()
        if self._dirty_dir:
            fsync_dir(self._log_dir)
            self._dirty_dir = False
        return self.end_offset

    def close(self) -> None:
        self.flush()
        self._close_active()

    def abandon(self) -> None:
        """Closes the log after a write failed, without trying the buffered bytes again: what is on disk is what
        recovery reads at the next start (a torn tail is cut there), and writing more could only fail again."""
        if self._active is not None:
            self._active.raw.close()  # the buffered writer goes with it, and its buffer unwritten
            self._active = None

    # ---- segment plumbing ----------------------------------------------------------------------------------
    def _segment_path(self, base_offset: int) -> Path:
        return self._log_dir / f"{base_offset:020d}.log"

    def _reset_segments(self, base_offset: int) -> None:
        for segment in self._segments:
            segment.path.unlink(missing_ok=True)
        self._segments = [_Segment(base_offset, self._segment_path(base_offset), [], 0)]
        self._segment_path(base_offset).write_bytes(b"")
        self._dirty_files = {self._segment_path(base_offset)}
        self._dirty_dir = True

    def _roll(self, base_offset: int) -> None:
        self._close_active()
        path = self._segment_path(base_offset)
        path.write_bytes(b"")
        self._segments.append(_Segment(base_offset, path, [], 0))
        self._dirty_dir = True
        self._open_active()

    def _open_active(self) -> None:
        if not self._segments:
            self._reset_segments(self._snapshot_id.end_offset)
        self._active = open(self._segments[-1].path, "ab")  # noqa: SIM115 - lives as long as the storage

    def _close_active(self) -> None:
        if self._active is not None:
            self._active.flush()
            self._active.close()
            self._active = None
