"""Idempotent-producer state of one partition (sans-I/O), and its snapshot codec.

Mirrors Kafka's ProducerStateManager semantics: for every producer id the partition remembers the epoch and the
metadata of the last five batches, which is enough to answer a retried batch with its original offsets instead of
appending it twice (the producer keeps at most five requests in flight). Checking and recording are separate steps
so the partition log can check under its lock, append, and then record the assigned offsets.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from crc32c import crc32c
from kio.schema.errors import ErrorCode

from wire.errors import KafkaError
from wire.record_batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader

MAX_CACHED_BATCHES = 5
_INT32_MAX = 0x7FFFFFFF

_SNAPSHOT_VERSION = 1
_SNAP_HEADER = struct.Struct(">bqi")  # version, snapshot offset, entry count
_SNAP_ENTRY = struct.Struct(">qhqb")  # producer id, epoch, last timestamp, batch count
_SNAP_BATCH = struct.Struct(">iiqiq")  # first seq, last seq, first offset, last offset delta, max timestamp


class SnapshotFormatError(ValueError):
    """A producer snapshot does not decode (wrong version, truncated, bad checksum)."""


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset_delta: int
    timestamp: int

    @property
    def last_offset(self) -> int:
        return self.first_offset + self.last_offset_delta


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    producer_epoch: int
    last_timestamp: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == header.base_sequence and meta.last_seq == header.last_sequence:
                return meta
        return None


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


class ProducerStateManager:
    """Per-partition producer state. ``where`` names the partition in error messages."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._entries: dict[int, ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[ProducerEntry]:
        return iter(self._entries.values())

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Validates an idempotent batch against the state. Returns the original batch's metadata for a duplicate
        (the caller answers with it and does not append); None if the batch may be appended; raises KafkaError
        for a stale epoch or a sequence gap."""
        if not header.has_producer_id:
            return None
        pid = header.producer_id
        entry = self._entries.get(pid)
        if entry is None:
            # Unknown producer (new, or all its data was deleted/expired): accept any sequence, like Kafka.
            return None
        if header.producer_epoch < entry.producer_epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"producer {pid} epoch {header.producer_epoch} is older than the current epoch "
                f"{entry.producer_epoch} on {self.where}",
            )
        duplicate = entry.find_duplicate(header)
        if duplicate is not None:
            return duplicate
        if header.base_sequence == NO_SEQUENCE:
            raise KafkaError(
                ErrorCode.invalid_record, f"producer {pid} sent a batch without a sequence number to {self.where}"
            )
        if header.producer_epoch != entry.producer_epoch:
            if header.base_sequence != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {pid} started epoch {header.producer_epoch} at sequence {header.base_sequence} "
                    f"(expected 0) on {self.where}",
                )
            return None
        if entry.batches and not _in_sequence(entry.last_seq, header.base_sequence):
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"producer {pid} epoch {header.producer_epoch} sent sequence {header.base_sequence} after "
                f"{entry.last_seq} on {self.where}",
            )
        return None

    def record(self, header: BatchHeader, base_offset: int) -> None:
        """Records an appended batch (also used to replay the log during recovery, without checks)."""
        if not header.has_producer_id or header.is_control:
            if header.has_producer_id and header.is_control:
                entry = self._entries.get(header.producer_id)
                if entry is not None:
                    entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
            return
        entry = self._entries.get(header.producer_id)
        if entry is None or header.producer_epoch != entry.producer_epoch:
            entry = ProducerEntry(header.producer_id, header.producer_epoch)
            self._entries[header.producer_id] = entry
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        entry.batches.append(
            BatchMetadata(
                header.base_sequence, header.last_sequence, base_offset, header.last_offset_delta, header.max_timestamp
            )
        )

    def evict_before(self, log_start_offset: int) -> None:
        """Forgets producers all of whose batches were deleted (DeleteRecords/retention), as Kafka does."""
        for pid in [p for p, e in self._entries.items() if e.last_offset < log_start_offset]:
            del self._entries[pid]

    def expire(self, now_ms: int, max_idle_ms: int) -> list[int]:
        """Drops producers idle longer than ``producer.id.expiration.ms``; returns their ids."""
        expired = [
            p for p, e in self._entries.items() if e.last_timestamp >= 0 and now_ms - e.last_timestamp > max_idle_ms
        ]
        for pid in expired:
            del self._entries[pid]
        return expired

    def replace(self, entries: Iterable[ProducerEntry]) -> None:
        self._entries = {e.producer_id: e for e in entries}


def encode_snapshot(offset: int, entries: Iterable[ProducerEntry]) -> bytes:
    """``version i8 | offset i64 | n i32 | entries | crc32c u32``; ``offset`` is the log end offset the snapshot
    covers, so recovery replays the log only from there."""
    items = list(entries)
    out = bytearray(_SNAP_HEADER.pack(_SNAPSHOT_VERSION, offset, len(items)))
    for e in items:
        out += _SNAP_ENTRY.pack(e.producer_id, e.producer_epoch, e.last_timestamp, len(e.batches))
        for b in e.batches:
            out += _SNAP_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset_delta, b.timestamp)
    out += struct.pack(">I", crc32c(bytes(out)))
    return bytes(out)


def decode_snapshot(data: bytes) -> tuple[int, list[ProducerEntry]]:
    """Inverse of ``encode_snapshot``: ``(offset, entries)``."""
    if len(data) < _SNAP_HEADER.size + 4:
        raise SnapshotFormatError(f"producer snapshot of {len(data)} bytes is truncated")
    (stored,) = struct.unpack_from(">I", data, len(data) - 4)
    if crc32c(data[:-4]) != stored:
        raise SnapshotFormatError("producer snapshot checksum mismatch")
    version, offset, count = _SNAP_HEADER.unpack_from(data, 0)
    if version != _SNAPSHOT_VERSION:
        raise SnapshotFormatError(f"unsupported producer snapshot version {version}")
    pos = _SNAP_HEADER.size
    entries: list[ProducerEntry] = []
    try:
        for _ in range(count):
            pid, epoch, last_ts, n = _SNAP_ENTRY.unpack_from(data, pos)
            pos += _SNAP_ENTRY.size
            entry = ProducerEntry(pid, epoch, last_ts)
            for _ in range(n):
                entry.batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(data, pos)))
                pos += _SNAP_BATCH.size
            entries.append(entry)
    except struct.error as exc:
        raise SnapshotFormatError(f"producer snapshot is truncated: {exc}") from exc
    if pos != len(data) - 4:
        raise SnapshotFormatError(f"producer snapshot has {len(data) - 4 - pos} trailing bytes")
    return offset, entries
