"""Codecs and lookups for the partition's small indexes: the time index and the leader-epoch checkpoint.

Time-index entries (``maxTimestamp i64 | offset i64``, one per time-stream record) are written when the log's max
timestamp grows, at most every ``index.interval.bytes``; an entry (T, o) means every record below offset o has a
timestamp <= T, so a timestamp search may start at the last entry whose T is below the target.
The leader-epoch checkpoint uses AutoMQ's layout: ``version i32 | n i32 | (epoch i32, startOffset i64)*``.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

_TIME_ENTRY = struct.Struct(">qq")
_EPOCH_HEADER = struct.Struct(">ii")
_EPOCH_ENTRY = struct.Struct(">iq")
EPOCH_CHECKPOINT_VERSION = 0


class IndexFormatError(ValueError):
    """An index record does not decode."""


@dataclass(frozen=True, slots=True)
class TimeIndexEntry:
    timestamp: int
    offset: int


def encode_time_entry(entry: TimeIndexEntry) -> bytes:
    return _TIME_ENTRY.pack(entry.timestamp, entry.offset)


def decode_time_entry(data: bytes) -> TimeIndexEntry:
    if len(data) != _TIME_ENTRY.size:
        raise IndexFormatError(f"time index entry of {len(data)} bytes (expected {_TIME_ENTRY.size})")
    return TimeIndexEntry(*_TIME_ENTRY.unpack(data))


class TimeIndex:
    """In-memory copy of the time stream; entries are appended in increasing timestamp and offset order."""

    def __init__(self) -> None:
        self._timestamps: list[int] = []
        self._offsets: list[int] = []

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def last(self) -> TimeIndexEntry | None:
        if not self._timestamps:
            return None
        return TimeIndexEntry(self._timestamps[-1], self._offsets[-1])

    def add(self, entry: TimeIndexEntry) -> bool:
        """Adds the entry if it extends the index (strictly newer timestamp, not older offset)."""
        if self._timestamps and (entry.timestamp <= self._timestamps[-1] or entry.offset < self._offsets[-1]):
            return False
        self._timestamps.append(entry.timestamp)
        self._offsets.append(entry.offset)
        return True

    def prepend(self, older: list[TimeIndexEntry]) -> None:
        """Puts entries read from the time stream after the newer ones were added (a partition loads its older
        entries only when a lookup needs them) in front; an entry that would not extend the merged index, such as
        the newest stored one the open already added, is left out as :meth:`add` would."""
        merged = TimeIndex()
        for entry in older:
            merged.add(entry)
        for timestamp, offset in zip(self._timestamps, self._offsets, strict=True):
            merged.add(TimeIndexEntry(timestamp, offset))
        self._timestamps, self._offsets = merged._timestamps, merged._offsets

    def drop_before(self, log_start_offset: int) -> int:
        """Forgets entries pointing below the log start (they can no longer narrow a search); returns how many."""
        n = bisect.bisect_left(self._offsets, log_start_offset)
        del self._timestamps[:n]
        del self._offsets[:n]
        return n

    def scan_start(self, target_timestamp: int, log_start_offset: int) -> int:
        """Offset from which to scan the log for the first record with timestamp >= target."""
        i = bisect.bisect_left(self._timestamps, target_timestamp)
        if i == 0:
            return log_start_offset
        return max(self._offsets[i - 1], log_start_offset)


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


def encode_epoch_checkpoint(entries: list[EpochEntry]) -> bytes:
    out = bytearray(_EPOCH_HEADER.pack(EPOCH_CHECKPOINT_VERSION, len(entries)))
    for e in entries:
        out += _EPOCH_ENTRY.pack(e.epoch, e.start_offset)
    return bytes(out)


def decode_epoch_checkpoint(data: bytes) -> list[EpochEntry]:
    if len(data) < _EPOCH_HEADER.size:
        raise IndexFormatError(f"leader-epoch checkpoint of {len(data)} bytes is truncated")
    version, count = _EPOCH_HEADER.unpack_from(data, 0)
    if version != EPOCH_CHECKPOINT_VERSION:
        raise IndexFormatError(f"unsupported leader-epoch checkpoint version {version}")
    if len(data) != _EPOCH_HEADER.size + count * _EPOCH_ENTRY.size:
        raise IndexFormatError(f"leader-epoch checkpoint says {count} entries but has {len(data)} bytes")
    return [
        EpochEntry(*_EPOCH_ENTRY.unpack_from(data, _EPOCH_HEADER.size + i * _EPOCH_ENTRY.size)) for i in range(count)
    ]


class LeaderEpochCache:
    """Epoch -> start offset, answering OffsetForLeaderEpoch like Kafka's LeaderEpochFileCache."""

    def __init__(self, entries: list[EpochEntry] | None = None) -> None:
        self.entries: list[EpochEntry] = list(entries or [])

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Records that ``epoch`` starts at ``start_offset``; True if the cache changed."""
        if self.entries and epoch <= self.entries[-1].epoch:
            return False
        # An epoch that wrote nothing is superseded by the next one starting at the same offset.
        while self.entries and self.entries[-1].start_offset >= start_offset:
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))
        return True

    def truncate_start(self, log_start_offset: int) -> None:
        """Drops epochs wholly below the log start; the first kept epoch starts at the log start at the earliest."""
        keep = [e for e in self.entries if e.start_offset >= log_start_offset]
        older = [e for e in self.entries if e.start_offset < log_start_offset]
        if older and (not keep or keep[0].start_offset > log_start_offset):
            keep.insert(0, EpochEntry(older[-1].epoch, log_start_offset))
        self.entries = keep

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end offset)`` with Kafka's answers, which Java consumers act on when validating a position:
        the current epoch ends at the log end; an older epoch ends where the next known one starts and is reported
        as the largest known epoch <= requested; an epoch older than every known one (its data deleted) is echoed
        with the start of the first known epoch; an undefined (-1) or future epoch is unknown: (-1, -1)."""
        if epoch < 0 or not self.entries or epoch > self.entries[-1].epoch:
            return -1, -1
        if epoch == self.entries[-1].epoch:
            return epoch, log_end_offset
        i = bisect.bisect_right([e.epoch for e in self.entries], epoch)
        if i == 0:
            return epoch, self.entries[0].start_offset
        return self.entries[i - 1].epoch, self.entries[i].start_offset
