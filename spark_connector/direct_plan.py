"""Which part of a partition's offset range is read straight from object storage, and from which objects. No I/O.

A Kafka partition's log stream holds the RecordBatches exactly as produced, stream offset = Kafka offset
(DESIGN.md §4), and the controller knows which committed objects hold which offsets of it. A range
``[start, end)`` therefore splits into a head that committed objects cover contiguously from ``start`` (read by the
executor with range GETs) and a tail that is only in the leader's WAL and LogCache (read through the broker with
Fetch). :func:`cover` makes that split from the controller's answer; :func:`log_stream_id` finds the log stream in
the partition's meta stream.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spark_connector.offsets import OffsetRange
from storage.meta_record import KEY_LOG, MetaFormatError, decode_entry
from storage.metadata.api import S3ObjectMetadata

__all__ = ["DirectRange", "MetaFormatError", "ObjectSlice", "cover", "log_stream_id"]



@dataclass(frozen=True)
class ObjectSlice:
    """Offsets ``[start, end)`` of the log stream, all held by one object (its size is what metadata recorded, so
    a truncated object is reported instead of parsed)."""

    object_id: int
    object_size: int
    start: int
    end: int


@dataclass(frozen=True)
class DirectRange:
    """One Spark task of the direct path: ``slices`` cover ``[offsets.start, direct_end)`` in order; the rest of
    ``offsets`` goes through the broker. ``namespace`` (``_fjord_<clusterId>``) names the objects' keys."""

    offsets: OffsetRange
    stream_id: int
    namespace: str
    slices: tuple[ObjectSlice, ...]

    @property
    def direct_end(self) -> int:
        return self.slices[-1].end if self.slices else self.offsets.start


def cover(offsets: OffsetRange, stream_id: int, namespace: str, objects: Sequence[S3ObjectMetadata]) -> DirectRange:
    """The objects' contiguous coverage of ``offsets`` from its start; stops at the first gap (offsets not
    uploaded yet, or trimmed below the stream's start)."""
    spans = sorted(
        (r.start_offset, r.end_offset, obj.object_id, obj.object_size)
        for obj in objects
        for r in obj.ranges
        if r.stream_id == stream_id
    )
    cursor = offsets.start
    slices: list[ObjectSlice] = []
    for start, end, object_id, size in spans:
        if cursor >= offsets.end or start > cursor:
            break
        if end <= cursor:
            continue
        stop = min(end, offsets.end)
        slices.append(ObjectSlice(object_id, size, cursor, stop))
        cursor = stop
    return DirectRange(offsets, stream_id, namespace, tuple(slices))


def log_stream_id(payloads: Iterable[bytes], where: str) -> tuple[int, int] | None:
    """(log stream id, cleaned stream id or -1) from the meta stream's records, replayed in offset order (last
    write of a key wins); None when the LOG entry is not among them (the partition's first records are not
    uploaded yet)."""
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
        return int(info["streamMap"]["log"]), int(info.get("cleaned", -1))
    except (ValueError, KeyError, TypeError) as exc:
        raise MetaFormatError(f"meta stream of {where}: LOG entry does not decode: {exc}") from exc
