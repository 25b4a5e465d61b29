"""Idempotent and transactional producer state of one partition (sans-I/O), and its snapshot codec.

Mirrors Kafka's ProducerStateManager semantics: for every producer id the partition remembers the epoch and the
metadata of the last five batches, which is enough to answer a retried batch with its original offsets instead of
appending it twice (the producer keeps at most five requests in flight). Checking and recording are separate steps
so the partition log can check under its lock, append, and then record the assigned offsets.

Transactions (KIP-98): a producer's first transactional batch on the partition opens its transaction there (the
entry's ``current_txn_first_offset``); the coordinator's COMMIT or ABORT marker closes it and yields a
:class:`CompletedTxn`. The last stable offset (LSO) is the first offset of the oldest transaction still undecided:
open, or closed by a marker that is not durable yet (Kafka's "unreplicated" transactions), which is why completed
transactions stay tracked until the high watermark passes their marker.
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

#: Version 2 adds each producer's open transaction and coordinator epoch; version 1 (idempotence only) still decodes.
_SNAPSHOT_VERSION = 2
_SNAP_HEADER = struct.Struct(">bqi")  # version, snapshot offset, entry count
_SNAP_ENTRY_V1 = struct.Struct(">qhqb")  # producer id, epoch, last timestamp, batch count
_SNAP_ENTRY = struct.Struct(">qhqbqi")  # ... v1 fields, open transaction's first offset (-1: none), coordinator epoch
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


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker closed on this partition: ``[first_offset, last_offset]``, the marker at
    ``last_offset`` (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    producer_epoch: int
    last_timestamp: int = -1
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    #: First offset of the producer's open transaction on this partition; -1 when none is open.
    current_txn_first_offset: int = -1
    #: Epoch of the transaction coordinator that wrote the producer's last marker (-1: none yet); older ones are fenced.
    coordinator_epoch: int = -1

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
        #: Producer id -> first offset of its open transaction (the entries' ``current_txn_first_offset``, indexed so
        #: the LSO does not walk every producer).
        self._ongoing: dict[int, int] = {}
        #: (first offset, marker offset) of transactions closed by a marker that may not be durable yet.
        self._unreplicated: list[tuple[int, int]] = []
        #: Markers applied per producer since this partition opened: a transactional produce notes the count when
        #: it is verified and is refused at its append if a marker came between (``verified_markers``).
        self._markers: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[ProducerEntry]:
        return iter(self._entries.values())

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._entries.get(producer_id)

    # ------------------------------------------------------------------ transactions
    def has_ongoing_txn(self, producer_id: int) -> bool:
        return producer_id in self._ongoing

    def markers_applied(self, producer_id: int) -> int:
        """How many COMMIT/ABORT markers of the producer this partition applied since it opened."""
        return self._markers.get(producer_id, 0)

    def ongoing_txn_start_offsets(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction on this partition."""
        return dict(self._ongoing)

    def first_unstable_offset(self, high_watermark: int) -> int:
        """The last stable offset: the first offset of the oldest undecided transaction, at most the high
        watermark. A transaction whose marker is below the high watermark is decided and forgotten here."""
        if self._unreplicated:
            self._unreplicated = [t for t in self._unreplicated if t[1] >= high_watermark]
        lso = high_watermark
        for first in self._ongoing.values():
            lso = min(lso, first)
        for first, _ in self._unreplicated:
            lso = min(lso, first)
        return lso

    def stable_offset_after(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is decided (what Kafka stores with an aborted-transaction index entry): the
        first offset of another undecided transaction, else the offset after the marker."""
        firsts = [f for p, f in self._ongoing.items() if p != completed.producer_id]
        firsts += [f for f, last in self._unreplicated if last != completed.last_offset]
        return min(firsts, default=completed.last_offset + 1)

    # ------------------------------------------------------------------ checks
    def check(self, header: BatchHeader, *, client: bool = True) -> BatchMetadata | None:
        """Validates an idempotent or transactional batch against the state. Returns the original batch's
        metadata for a duplicate (the caller answers with it and does not append); None if the batch may be
        appended; raises KafkaError for a stale epoch, a sequence gap, or a non-transactional batch from a producer
        whose transaction is open here. The broker's own writes (``client`` False: the group coordinator's
        transactional offset commits, written at sequence 0 every time) get the epoch check only, as in Kafka."""
        if not header.has_producer_id:
            return None
        pid = header.producer_id
        if client and not header.is_control and header.base_sequence < 0:  # Kafka's LogValidator refuses it too
            raise KafkaError(
                ErrorCode.invalid_record, f"producer {pid} sent a batch without a sequence number to {self.where}"
            )
        entry = self._entries.get(pid)
        if entry is None:
            # Unknown producer (new, or expired after producer.id.expiration.ms): accept any sequence, like Kafka.
            return None
        self._check_epoch(entry, header.producer_epoch)
        if header.is_control:
            return None  # markers: see check_marker
        if not client:
            return None
        duplicate = entry.find_duplicate(header)
        if duplicate is not None:
            return duplicate
        if header.producer_epoch != entry.producer_epoch:
            if header.base_sequence != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {pid} started epoch {header.producer_epoch} at sequence {header.base_sequence} "
                    f"(expected 0) on {self.where}",
                )
        elif entry.batches:
            if not _in_sequence(entry.last_seq, header.base_sequence):
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {pid} epoch {header.producer_epoch} sent sequence {header.base_sequence} after "
                    f"{entry.last_seq} on {self.where}",
                )
        elif entry.producer_epoch != NO_PRODUCER_EPOCH and header.base_sequence != 0:
            # The epoch is known with no batch yet: a coordinator's marker bumped it (Kafka's empty entry).
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"producer {pid} epoch {header.producer_epoch} must start at sequence 0 on {self.where}, "
                f"not {header.base_sequence}",
            )
        if not header.is_transactional and entry.current_txn_first_offset >= 0:
            raise KafkaError(
                ErrorCode.invalid_txn_state,
                f"producer {pid} sent a non-transactional batch to {self.where} while its transaction started at "
                f"offset {entry.current_txn_first_offset} is open",
            )
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """A transaction marker may be written: raises INVALID_PRODUCER_EPOCH for an older producer epoch and
        TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch than the partition has seen (Kafka fences
        both, so a zombie coordinator cannot end a newer transaction)."""
        entry = self._entries.get(producer_id)
        if entry is None:
            return
        self._check_epoch(entry, producer_epoch)
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(
                ErrorCode.transaction_coordinator_fenced,
                f"marker for producer {producer_id} on {self.where} has coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}",
            )

    def _check_epoch(self, entry: ProducerEntry, producer_epoch: int) -> None:
        if producer_epoch < entry.producer_epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"producer {entry.producer_id} epoch {producer_epoch} is older than the current epoch "
                f"{entry.producer_epoch} on {self.where}",
            )

    # ------------------------------------------------------------------ recording
    def record(self, header: BatchHeader, base_offset: int) -> None:
        """Records an appended data batch (also used to replay the log during recovery, without checks). Control
        batches only refresh the producer's timestamp here: their marker is applied by :meth:`complete_txn`."""
        if not header.has_producer_id or header.is_control:
            if header.has_producer_id and header.is_control:
                entry = self._entries.get(header.producer_id)
                if entry is not None:
                    entry.last_timestamp = header.max_timestamp
            return
        entry = self._entries.get(header.producer_id)
        if entry is None or header.producer_epoch != entry.producer_epoch:
            txn_first = entry.current_txn_first_offset if entry is not None else -1
            coordinator_epoch = entry.coordinator_epoch if entry is not None else -1
            entry = ProducerEntry(
                header.producer_id,
                header.producer_epoch,
                current_txn_first_offset=txn_first,
                coordinator_epoch=coordinator_epoch,
            )
            self._entries[header.producer_id] = entry
        # The last batch's time, not the highest seen, as Kafka's ProducerStateEntry keeps it: DescribeProducers
        # reports it (find-hanging ages a transaction by it) and expiry counts idleness from it.
        entry.last_timestamp = header.max_timestamp
        entry.batches.append(
            BatchMetadata(
                header.base_sequence, header.last_sequence, base_offset, header.last_offset_delta, header.max_timestamp
            )
        )
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = base_offset
            self._ongoing[header.producer_id] = base_offset

    def complete_txn(
        self,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        marker_offset: int,
        timestamp: int,
    ) -> CompletedTxn | None:
        """Applies a COMMIT/ABORT marker appended at ``marker_offset`` (also during recovery). Returns the
        transaction it closed, or None when the producer had none open here (the marker is written anyway, as
        Kafka does). The marker's epoch becomes the producer's: a bumped epoch forgets the cached batches, so the
        producer's next batch starts at sequence 0."""
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = self._entries[producer_id] = ProducerEntry(producer_id, producer_epoch)
        completed: CompletedTxn | None = None
        if entry.current_txn_first_offset >= 0:
            completed = CompletedTxn(producer_id, entry.current_txn_first_offset, marker_offset, not commit)
            self._unreplicated.append((entry.current_txn_first_offset, marker_offset))
        if entry.producer_epoch != producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = producer_epoch
        entry.current_txn_first_offset = -1
        self._ongoing.pop(producer_id, None)
        self._markers[producer_id] = self._markers.get(producer_id, 0) + 1
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        return completed

    def on_log_start_advanced(self, log_start_offset: int) -> None:
        """Forgets decided transactions whose markers a log-start move (DeleteRecords, retention) deleted. The
        producers themselves stay, as in Kafka since KIP-360: their epochs and sequence numbers still check their
        next batches, so a producer whose records were all deleted continues its sequence, and a marker that lands
        after the deletion does not leave an empty entry that refuses it. A running partition forgets a producer
        only when it expires (:meth:`expire`); a recovery from a snapshot older than the log start drops what that
        snapshot cannot vouch for (:meth:`drop_stale`)."""
        self._unreplicated = [t for t in self._unreplicated if t[1] >= log_start_offset]

    def drop_stale(self, log_start_offset: int) -> None:
        """Recovery from a snapshot taken before the log start moved past it: a producer whose last batch lies below
        the log start may have written batches and markers since, in records that are gone, so its sequence and
        any transaction the snapshot shows open cannot be trusted (that transaction's marker may be among the
        deleted records, and would pin the last stable offset for ever). Kafka rebuilds producer state from the
        log start in that case; such producers become unknown here, which accepts their next sequence. A
        producer known only from a marker keeps the epoch that fences its zombie."""
        for pid in [p for p, e in self._entries.items() if e.batches and e.last_offset < log_start_offset]:
            del self._entries[pid]
            self._ongoing.pop(pid, None)
        self.on_log_start_advanced(log_start_offset)

    @staticmethod
    def _expired(entry: ProducerEntry, now_ms: int, max_idle_ms: int) -> bool:
        idle = entry.last_timestamp >= 0 and now_ms - entry.last_timestamp >= max_idle_ms  # Kafka's >=
        return idle and entry.current_txn_first_offset < 0

    def any_expired(self, now_ms: int, max_idle_ms: int) -> bool:
        return any(self._expired(e, now_ms, max_idle_ms) for e in self._entries.values())

    def expire(self, now_ms: int, max_idle_ms: int) -> list[int]:
        """Drops producers idle longer than ``producer.id.expiration.ms``; returns their ids. A producer with an
        open transaction is never expired (its transaction would vanish from the LSO)."""
        expired = [p for p, e in self._entries.items() if self._expired(e, now_ms, max_idle_ms)]
        for pid in expired:
            del self._entries[pid]
        return expired

    def replace(self, entries: Iterable[ProducerEntry]) -> None:
        self._entries = {e.producer_id: e for e in entries}
        self._ongoing = {
            p: e.current_txn_first_offset for p, e in self._entries.items() if e.current_txn_first_offset >= 0
        }
        self._unreplicated = []


def encode_snapshot(offset: int, entries: Iterable[ProducerEntry]) -> bytes:
    """``version i8 | offset i64 | n i32 | entries | crc32c u32``; ``offset`` is the log end offset the snapshot
    covers, so recovery replays the log only from there."""
    items = list(entries)
    out = bytearray(_SNAP_HEADER.pack(_SNAPSHOT_VERSION, offset, len(items)))
    for e in items:
        out += _SNAP_ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_timestamp,
            len(e.batches),
            e.current_txn_first_offset,
            e.coordinator_epoch,
        )
        for b in e.batches:
            out += _SNAP_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset_delta, b.timestamp)
    out += struct.pack(">I", crc32c(bytes(out)))
    return bytes(out)


def decode_snapshot(data: bytes) -> tuple[int, list[ProducerEntry]]:
    """Inverse of ``encode_snapshot`` (versions 1 and 2): ``(offset, entries)``."""
    if len(data) < _SNAP_HEADER.size + 4:
        raise SnapshotFormatError(f"producer snapshot of {len(data)} bytes is truncated")
    (stored,) = struct.unpack_from(">I", data, len(data) - 4)
    if crc32c(data[:-4]) != stored:
        raise SnapshotFormatError("producer snapshot checksum mismatch")
    version, offset, count = _SNAP_HEADER.unpack_from(data, 0)
    if version not in (1, _SNAPSHOT_VERSION):
        raise SnapshotFormatError(f"unsupported producer snapshot version {version}")
    pos = _SNAP_HEADER.size
    entries: list[ProducerEntry] = []
    try:
        for _ in range(count):
            if version == 1:
                pid, epoch, last_ts, n = _SNAP_ENTRY_V1.unpack_from(data, pos)
                pos += _SNAP_ENTRY_V1.size
                entry = ProducerEntry(pid, epoch, last_ts)
            else:
                pid, epoch, last_ts, n, txn_first, coordinator_epoch = _SNAP_ENTRY.unpack_from(data, pos)
                pos += _SNAP_ENTRY.size
                entry = ProducerEntry(
                    pid, epoch, last_ts, current_txn_first_offset=txn_first, coordinator_epoch=coordinator_epoch
                )
            for _ in range(n):
                entry.batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(data, pos)))
                pos += _SNAP_BATCH.size
            entries.append(entry)
    except struct.error as exc:
        raise SnapshotFormatError(f"producer snapshot is truncated: {exc}") from exc
    if pos != len(data) - 4:
        raise SnapshotFormatError(f"producer snapshot has {len(data) - 4 - pos} trailing bytes")
    return offset, entries
