"""The in-memory model of the replicated log the Raft core reasons about.

Offsets are dense: the log holds entries ``[start_offset, end_offset)``; everything below ``start_offset`` is
covered by the snapshot ``snapshot_id``. An epoch index (epoch -> first offset) answers the question pull-based
replication keeps asking: "where does epoch E end in this log?" (the diverging-epoch check).

This class does no I/O; `raft.storage` persists the same operations.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum


class EntryKind(IntEnum):
    """DATA entries go to the state machine; control entries are the quorum's own bookkeeping."""

    DATA = 0
    LEADER_CHANGE = 1
    VOTERS = 2  # the quorum's voters from this entry on (raft.voter_set)


@dataclass(frozen=True, slots=True)
class LogEntry:
    offset: int
    epoch: int
    data: bytes
    kind: EntryKind = EntryKind.DATA


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """A snapshot covers offsets ``[0, end_offset)``; ``epoch`` is the epoch of the entry at ``end_offset - 1``."""

    end_offset: int
    epoch: int


EMPTY_SNAPSHOT = SnapshotId(0, 0)


class LogInvariantError(ValueError):
    """A caller asked the log to do something that would break offset density or epoch monotonicity."""


class RaftLog:
    def __init__(self, snapshot: SnapshotId = EMPTY_SNAPSHOT, entries: Iterable[LogEntry] = ()) -> None:
        self._snapshot = snapshot
        self._entries: list[LogEntry] = []
        # (epoch, start offset) pairs, strictly increasing in both; the first is the snapshot's epoch at its end.
        self._epoch_starts: list[tuple[int, int]] = [(snapshot.epoch, snapshot.end_offset)]
        self.append(list(entries))

    # ---- queries -------------------------------------------------------------------------------------------
    @property
    def snapshot_id(self) -> SnapshotId:
        return self._snapshot

    @property
    def start_offset(self) -> int:
        return self._snapshot.end_offset

    @property
    def end_offset(self) -> int:
        return self._snapshot.end_offset + len(self._entries)

    @property
    def last_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else self._snapshot.epoch

    def __len__(self) -> int:
        return len(self._entries)

    def entry(self, offset: int) -> LogEntry:
        if not self.start_offset <= offset < self.end_offset:
            raise IndexError(f"offset {offset} outside log [{self.start_offset}, {self.end_offset})")
        return self._entries[offset - self.start_offset]

    def epoch_at(self, offset: int) -> int:
        """Epoch of the entry at ``offset``; ``start_offset - 1`` answers with the snapshot's epoch."""
        if offset == self.start_offset - 1:
            return self._snapshot.epoch
        return self.entry(offset).epoch

    def read(self, start: int, end: int | None = None, max_bytes: int | None = None) -> list[LogEntry]:
        """Entries from ``start``; at least one if any exist, however large (so a big entry cannot stall a fetch)."""
        stop = self.end_offset if end is None else min(end, self.end_offset)
        if start < self.start_offset:
            raise IndexError(f"offset {start} is below the log start {self.start_offset}")
        out: list[LogEntry] = []
        size = 0
        for offset in range(start, stop):
            entry = self._entries[offset - self.start_offset]
            size += len(entry.data)
            if out and max_bytes is not None and size > max_bytes:
                break
            out.append(entry)
        return out

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int] | None:
        """The largest epoch ``<= epoch`` this log knows and the offset where it ends, or None if it is unknown.

        None means the answer lies below the snapshot: the caller must fall back to sending the snapshot.
        """
        idx = bisect.bisect_right(self._epoch_starts, epoch, key=lambda pair: pair[0]) - 1
        if idx < 0:
            return None
        found_epoch, _ = self._epoch_starts[idx]
        end = self._epoch_starts[idx + 1][1] if idx + 1 < len(self._epoch_starts) else self.end_offset
        return found_epoch, end

    def epoch_start(self, epoch: int) -> int | None:
        """First offset of ``epoch`` if the log has an entry of exactly that epoch after the snapshot."""
        for e, start in self._epoch_starts[1:]:
            if e == epoch:
                return start
        return None

    def epoch_starts(self) -> Sequence[tuple[int, int]]:
        return tuple(self._epoch_starts)

    # ---- mutations -----------------------------------------------------------------------------------------
    def append(self, entries: Sequence[LogEntry]) -> None:
        for entry in entries:
            if entry.offset != self.end_offset:
                raise LogInvariantError(f"append at offset {entry.offset}, log ends at {self.end_offset}")
            last = self._epoch_starts[-1][0]
            if entry.epoch < self.last_epoch:
                raise LogInvariantError(f"entry epoch {entry.epoch} at {entry.offset} < last epoch {self.last_epoch}")
            if entry.epoch > last:
                self._epoch_starts.append((entry.epoch, entry.offset))
            self._entries.append(entry)

    def truncate_to(self, end_offset: int) -> None:
        """Drop entries at ``end_offset`` and above (a follower discarding a diverged suffix)."""
        if end_offset < self.start_offset:
            raise LogInvariantError(f"truncate to {end_offset} below the log start {self.start_offset}")
        if end_offset >= self.end_offset:
            return
        del self._entries[end_offset - self.start_offset :]
        while len(self._epoch_starts) > 1 and self._epoch_starts[-1][1] >= end_offset:
            self._epoch_starts.pop()

    def truncate_prefix(self, snapshot: SnapshotId) -> None:
        """Make ``snapshot`` the base: entries below its end offset are gone for good."""
        if snapshot.end_offset < self.start_offset or snapshot.end_offset > self.end_offset:
            raise LogInvariantError(
                f"snapshot end {snapshot.end_offset} outside log [{self.start_offset}, {self.end_offset}]"
            )
        if snapshot.end_offset > self.start_offset and self.epoch_at(snapshot.end_offset - 1) != snapshot.epoch:
            raise LogInvariantError(f"snapshot {snapshot} does not match the log's epoch at its end")
        del self._entries[: snapshot.end_offset - self.start_offset]
        tail = [(e, s) for e, s in self._epoch_starts if s >= snapshot.end_offset and e > snapshot.epoch]
        self._snapshot = snapshot
        self._epoch_starts = [(snapshot.epoch, snapshot.end_offset), *tail]

    def reset(self, snapshot: SnapshotId) -> None:
        """Replace everything with an empty log based on ``snapshot`` (a follower installing a fetched snapshot)."""
        self._entries.clear()
        self._snapshot = snapshot
        self._epoch_starts = [(snapshot.epoch, snapshot.end_offset)]


def entries_after_snapshot(snapshot: SnapshotId, entries: Sequence[LogEntry]) -> list[LogEntry]:
    """Which durable entries a restarted node keeps on top of its newest snapshot.

    Entries the snapshot covers are skipped. A suffix whose first entry is older than the snapshot's epoch is a
    diverged tail that an installed snapshot replaced before the deletion reached the disk: it goes too.
    """
    kept = [e for e in entries if e.offset >= snapshot.end_offset]
    if kept and kept[0].epoch < snapshot.epoch:
        return []
    return kept
