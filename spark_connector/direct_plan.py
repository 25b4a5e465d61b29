"""Which part of a partition's offset range is read straight from object storage, and from which objects. No I/O.

A Kafka partition's log stream holds the RecordBatches exactly as produced, stream offset = Kafka offset (DESIGN.md
§4), and the controller knows which committed objects hold which offsets of it. A compacted partition keeps its
cleaned prefix in the cleaned stream, also addressed by Kafka offsets (:meth:`PartitionStreams.pieces`). A range
``[start, end)`` therefore splits into a head that committed objects cover contiguously from ``start`` (read by the
executor with range GETs) and a tail that is only in the leader's WAL and LogCache (read through the broker with
Fetch). :func:`cover_slices` makes that split from the controller's answer, per stream piece
(``storage_lookup`` calls it); :func:`partition_streams` finds the log (and txn) stream in the partition's meta
stream.

A ``read_committed`` read also needs the partition's aborted transactions, which the broker keeps in the txn stream
(one entry per ABORT marker, in marker order, each with the LSO right after that abort). The driver reads the
uploaded prefix of that stream; :func:`committed_view` turns it into what an executor needs: the aborted
transactions overlapping the range, and ``known_below``, the offset below which every transaction's outcome is known
from that prefix. That offset is the newest uploaded entry's LSO: a transaction with data below it was decided no
later than that abort, so its ABORT entry (if any) is at or before the newest one. Above it, an uploaded entry may
still be missing (the txn stream's tail is in the WAL), so the executor hands the rest of the range to the broker at
the first transactional batch it meets there; non-transactional batches are read directly all the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from metadata.meta_stream_records import KEY_LOG, MetaFormatError, decode_entry
from spark_connector.offsets import OffsetRange
from storage.metadata.api import S3ObjectMetadata
from wire.aborted_txns import AbortedTxn, AbortedTxnEntry

__all__ = [
    "CommittedView",
    "DirectRange",
    "MetaFormatError",
    "ObjectSlice",
    "PartitionStreams",
    "committed_view",
    "cover",
    "cover_slices",
    "partition_streams",
]


@dataclass(frozen=True)
class ObjectSlice:
    """Offsets ``[start, end)`` of one stream (the log stream, or the cleaned stream of a compacted partition), all
    held by one object (its size is what metadata recorded, so a truncated object is reported instead of parsed)."""

    stream_id: int
    object_id: int
    object_size: int
    start: int
    end: int


@dataclass(frozen=True)
class CommittedView:
    """What a ``read_committed`` direct task applies: the aborted transactions overlapping its range, and the offset
    from which a transactional batch's outcome may be unknown (the rest of the range then goes through the
    broker)."""

    aborted: tuple[AbortedTxn, ...]
    known_below: int


@dataclass(frozen=True)
class DirectRange:
    """One Spark task of the direct path: ``slices`` cover ``[offsets.start, direct_end)`` in order; the rest of
    ``offsets`` goes through the broker. ``namespace`` (``_fjord_<clusterId>``) names the objects' keys.
    ``committed`` is set for a ``read_committed`` read (None: every data batch is returned)."""

    offsets: OffsetRange
    namespace: str
    slices: tuple[ObjectSlice, ...]
    committed: CommittedView | None = None

    @property
    def direct_end(self) -> int:
        return self.slices[-1].end if self.slices else self.offsets.start


def committed_view(offsets: OffsetRange, entries: Sequence[AbortedTxnEntry]) -> CommittedView:
    """The read_committed view of ``offsets`` from the uploaded txn-stream entries (in marker order): those
    overlapping the range (marker at or after its start, data before its end; Kafka's collectAbortedTxns), and the
    newest entry's LSO as the bound of what they decide (the range's start when there is none)."""
    aborted = tuple(
        AbortedTxn(e.producer_id, e.first_offset)
        for e in entries
        if e.last_offset >= offsets.start and e.first_offset < offsets.end
    )
    return CommittedView(aborted, entries[-1].last_stable_offset if entries else offsets.start)


def cover(offsets: OffsetRange, stream_id: int, namespace: str, objects: Sequence[S3ObjectMetadata]) -> DirectRange:
    """The objects' contiguous coverage of ``offsets`` from its start, in one stream; stops at the first gap
    (offsets not uploaded yet, or trimmed below the stream's start)."""
    return DirectRange(offsets, namespace, cover_slices(offsets.start, offsets.end, stream_id, objects))


def cover_slices(start: int, end: int, stream_id: int, objects: Sequence[S3ObjectMetadata]) -> tuple[ObjectSlice, ...]:
    """The slices of ``objects`` covering ``[start, end)`` of stream ``stream_id`` contiguously from ``start``."""
    spans = sorted(
        (r.start_offset, r.end_offset, obj.object_id, obj.object_size)
        for obj in objects
        for r in obj.ranges
        if r.stream_id == stream_id
    )
    cursor = start
    slices: list[ObjectSlice] = []
    for low, high, object_id, size in spans:
        if cursor >= end or low > cursor:
            break
        if high <= cursor:
            continue
        stop = min(high, end)
        slices.append(ObjectSlice(stream_id, object_id, size, cursor, stop))
        cursor = stop
    return tuple(slices)


@dataclass(frozen=True)
class PartitionStreams:
    """The stream ids a partition's LOG entry names (-1 for a cleaned or txn stream it does not have yet), and the
    cleaner offset: a compacted partition's offsets below it are in the cleaned stream (the records a consumer
    sees, Kafka offsets unchanged), the rest in the log stream (broker/partition/partition_log/stored_log.py)."""

    log: int
    cleaned: int
    txn: int
    cleaner_offset: int = 0

    def pieces(self, offsets: OffsetRange) -> list[tuple[int, int, int]]:
        """``offsets`` as (stream id, start, end) pieces in offset order: below the cleaner offset from the cleaned
        stream, the rest from the log stream."""
        split = self.cleaner_offset if self.cleaned >= 0 else offsets.start
        split = min(max(split, offsets.start), offsets.end)
        found = [(self.cleaned, offsets.start, split)] if split > offsets.start else []
        return [*found, (self.log, split, offsets.end)] if offsets.end > split else found


def partition_streams(payloads: Iterable[bytes], where: str) -> PartitionStreams | None:
    """The stream ids from the meta stream's records, replayed in offset order (last write of a key wins); None
    when the LOG entry is not among them (the partition's first records are not uploaded yet)."""
    log: bytes | None = None
    for payload in payloads:
        try:
            key, value = decode_entry(payload)
        except (MetaFormatError, UnicodeDecodeError) as exc:
            raise MetaFormatError(f"meta stream of {where}: {exc}") from exc
        if key == KEY_LOG:
            log = value
    if log is None:
        return None
    try:
        info = json.loads(log)
        stream_map = info["streamMap"]
        cleaned = int(info.get("cleaned", -1))
        return PartitionStreams(
            int(stream_map["log"]),
            cleaned,
            int(stream_map.get("txn", -1)),
            int(info.get("co", 0)) if cleaned >= 0 else 0,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise MetaFormatError(f"meta stream of {where}: LOG entry does not decode: {exc}") from exc
