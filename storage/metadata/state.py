"""The stream metadata's state and how each record changes it: the half of the state machine that replays.

:class:`StreamMetadataState` holds what the stream metadata is (node epochs, streams and their ranges, objects and
their lifecycle, the stream-set and stream objects with each stream's index of them by offset, the KV entries, the
id counters) and applies the records of ``storage.metadata.stream_records`` to it. ``apply`` is pure state
transition, no validation: records are facts already decided, whether they come from a write of the state machine
(``storage.metadata.state_machine``, which validates and builds them) or from replaying a metadata log or a
``snapshot()`` on restart or on a follower. Kept apart from the validation so that what a replay runs is all here.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from storage.errors import StorageError
from storage.metadata.api import ObjectState, ObjectType, RangeMetadata, StreamState
from storage.metadata.record_codec import MetadataRecord
from storage.metadata.stream_records import (
    KVRecord,
    NextObjectIdRecord,
    NextStreamIdRecord,
    NodeEpochRecord,
    ObjectRecord,
    RangeRecord,
    RemoveKVRecord,
    RemoveObjectRecord,
    RemoveRangeRecord,
    RemoveStreamObjectRecord,
    RemoveStreamRecord,
    RemoveStreamSetObjectRecord,
    StreamEndOffsetsRecord,
    StreamObjectRecord,
    StreamRecord,
    StreamSetObjectRecord,
)


@dataclass(slots=True)
class StreamEntry:
    """One stream: its owner epoch, current range, offsets, state and tags, and every range it still has."""

    stream_id: int
    epoch: int
    range_index: int
    start_offset: int
    state: StreamState
    tags: tuple[tuple[str, str], ...]
    end_offset: int = 0
    ranges: dict[int, RangeMetadata] = field(default_factory=dict)

    @property
    def current_range(self) -> RangeMetadata | None:
        return self.ranges.get(self.range_index)

    def record(self, *, state: StreamState | None = None, start_offset: int | None = None) -> StreamRecord:
        """This stream as a StreamRecord, its state or start changed where given."""
        return StreamRecord(
            self.stream_id,
            self.epoch,
            self.range_index,
            self.start_offset if start_offset is None else start_offset,
            self.state if state is None else state,
            self.tags,
        )

    def opened(self, epoch: int, node_id: int) -> list[MetadataRecord]:
        """The records opening this stream at a new ``epoch`` for ``node_id``: a new range from the stream's end, and
        the removal of every range that holds no offset. Such a range is the mark of an epoch that wrote nothing (a
        partition reopened before anything was appended, as every one of a node in a crash loop, or an internal
        topic's idle partition at each restart or move); nothing reads it, since commits and ownership go by the
        current range only. Kept, each open left one more behind: 197 ranges of each idle ``__consumer_offsets``
        stream, 4,267 of a node's 5,354 snapshot records, after about 200 restarts."""
        range_index = self.range_index + 1
        return [
            StreamRecord(self.stream_id, epoch, range_index, self.start_offset, StreamState.OPENED, self.tags),
            RangeRecord(self.stream_id, epoch, range_index, node_id, self.end_offset, self.end_offset),
            *(RemoveRangeRecord(self.stream_id, r.range_index) for r in self.ranges.values()
              if r.start_offset == r.end_offset),
        ]

    def trimmed(self, start: int, state: StreamState | None = None) -> list[MetadataRecord]:
        """The records moving this stream's start to ``start`` (its state to ``state``): ranges wholly below go."""
        removed = [r.range_index for r in self.ranges.values()
                   if r.range_index != self.range_index and r.end_offset <= start]
        return [self.record(state=state, start_offset=start), *(RemoveRangeRecord(self.stream_id, i) for i in removed)]


@dataclass(slots=True)
class ObjectEntry:
    """One object's size, kind and lifecycle state (``timestamp_ms``: see ``ObjectRecord``)."""

    object_id: int
    size: int
    state: ObjectState
    timestamp_ms: int
    object_type: ObjectType


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one stream's offsets ``[start, end)`` live: in object ``object_id`` (a stream-set or stream object)."""

    start: int
    end: int
    object_id: int


class StreamIndex:
    """A stream's committed objects ordered by offset, for ``get_objects`` without scanning.

    ``_placed`` finds an object's placements by id, so a removal (every compaction and retention sweep removes
    objects, and a restart replays all of them) bisects to them instead of rebuilding the stream's whole list."""

    __slots__ = ("_ends", "_items", "_placed")

    def __init__(self) -> None:
        self._items: list[Placement] = []
        self._ends: list[int] = []
        self._placed: dict[int, list[Placement]] = {}

    def add(self, placement: Placement) -> None:
        i = bisect.bisect_left(self._ends, placement.end)
        self._items.insert(i, placement)
        self._ends.insert(i, placement.end)
        self._placed.setdefault(placement.object_id, []).append(placement)

    def remove(self, object_id: int) -> None:
        for placement in self._placed.pop(object_id, ()):
            # Placements sharing an end sit side by side from bisect_left: find this one among them.
            i = bisect.bisect_left(self._ends, placement.end)
            while self._items[i] is not placement:
                i += 1
            del self._items[i]
            del self._ends[i]

    def from_offset(self, offset: int) -> Iterable[Placement]:
        """Placements ending after ``offset``, in offset order."""
        i = bisect.bisect_right(self._ends, offset)
        return self._items[i:]

    def __len__(self) -> int:
        return len(self._items)


class StreamMetadataState:
    """The stream and object metadata, changed only by :meth:`apply`; :meth:`snapshot` rebuilds it."""

    def __init__(self) -> None:
        self._next_stream_id = 0
        self._next_object_id = 0
        self._nodes: dict[int, int] = {}
        self._streams: dict[int, StreamEntry] = {}
        self._objects: dict[int, ObjectEntry] = {}
        self._stream_set_objects: dict[int, StreamSetObjectRecord] = {}
        self._stream_objects: dict[int, StreamObjectRecord] = {}
        self._index: dict[int, StreamIndex] = {}
        self._kv: dict[str, bytes] = {}

    def apply(self, record: MetadataRecord) -> None:
        """Applies one record to the state. No validation: records are facts already decided."""
        match record:
            case StreamRecord():
                stream = self._streams.get(record.stream_id)
                if stream is None:
                    self._streams[record.stream_id] = StreamEntry(
                        record.stream_id,
                        record.epoch,
                        record.range_index,
                        record.start_offset,
                        record.state,
                        record.tags,
                    )
                    self._index.setdefault(record.stream_id, StreamIndex())
                else:
                    stream.epoch = record.epoch
                    stream.range_index = record.range_index
                    stream.start_offset = record.start_offset
                    stream.state = record.state
                    stream.tags = record.tags
            case RemoveStreamRecord():
                self._streams.pop(record.stream_id, None)
                index = self._index.get(record.stream_id)
                if index is not None and not len(index):
                    del self._index[record.stream_id]  # objects still holding its data keep theirs until swept
            case RangeRecord():
                stream = self._replayed_stream(record.stream_id, record)
                stream.ranges[record.range_index] = RangeMetadata(
                    record.epoch, record.range_index, record.node_id, record.start_offset, record.end_offset
                )
                if record.range_index == stream.range_index:
                    stream.end_offset = record.end_offset
            case RemoveRangeRecord():
                self._replayed_stream(record.stream_id, record).ranges.pop(record.range_index, None)
            case StreamEndOffsetsRecord():
                for stream_id, end in record.offsets:
                    stream = self._replayed_stream(stream_id, record)
                    stream.end_offset = end
                    current = stream.current_range
                    if current is not None:
                        stream.ranges[current.range_index] = RangeMetadata(
                            current.epoch, current.range_index, current.node_id, current.start_offset, end
                        )
            case ObjectRecord():
                self._objects[record.object_id] = ObjectEntry(
                    record.object_id, record.object_size, record.state, record.timestamp_ms, record.object_type
                )
            case RemoveObjectRecord():
                self._objects.pop(record.object_id, None)
            case StreamSetObjectRecord():
                self._stream_set_objects[record.object_id] = record
                for r in record.ranges:
                    self._index.setdefault(r.stream_id, StreamIndex()).add(
                        Placement(r.start_offset, r.end_offset, record.object_id)
                    )
            case RemoveStreamSetObjectRecord():
                sso = self._stream_set_objects.pop(record.object_id, None)
                if sso is not None:
                    for r in sso.ranges:
                        self._drop_placement(r.stream_id, record.object_id)
            case StreamObjectRecord():
                self._stream_objects[record.object_id] = record
                self._index.setdefault(record.stream_id, StreamIndex()).add(
                    Placement(record.start_offset, record.end_offset, record.object_id)
                )
            case RemoveStreamObjectRecord():
                if self._stream_objects.pop(record.object_id, None) is not None:
                    self._drop_placement(record.stream_id, record.object_id)
            case NextStreamIdRecord():
                # max: writes taking ids concurrently may apply out of log order; the counter only grows.
                self._next_stream_id = max(self._next_stream_id, record.next_stream_id)
            case NextObjectIdRecord():
                self._next_object_id = max(self._next_object_id, record.next_object_id)
            case NodeEpochRecord():
                self._nodes[record.node_id] = record.node_epoch
            case KVRecord():
                self._kv[record.key] = record.value
            case RemoveKVRecord():
                self._kv.pop(record.key, None)
            case _:
                raise StorageError(f"stream metadata cannot apply {type(record).__name__}")

    def _replayed_stream(self, stream_id: int, record: MetadataRecord) -> StreamEntry:
        stream = self._streams.get(stream_id)
        if stream is None:
            raise StorageError(
                f"stream metadata: {type(record).__name__} refers to stream {stream_id}, which does not exist "
                f"(records applied out of order, or a damaged metadata log)"
            )
        return stream

    def _drop_placement(self, stream_id: int, object_id: int) -> None:
        index = self._index.get(stream_id)
        if index is None:
            return
        index.remove(object_id)
        if not len(index) and stream_id not in self._streams:
            del self._index[stream_id]

    def snapshot(self) -> list[MetadataRecord]:
        """Records that rebuild the current state when applied to an empty instance, in a valid order."""
        out: list[MetadataRecord] = [NextStreamIdRecord(self._next_stream_id), NextObjectIdRecord(self._next_object_id)]
        out += [NodeEpochRecord(node, epoch) for node, epoch in sorted(self._nodes.items())]
        ends: list[tuple[int, int]] = []
        for s in sorted(self._streams.values(), key=lambda s: s.stream_id):
            out.append(StreamRecord(s.stream_id, s.epoch, s.range_index, s.start_offset, s.state, s.tags))
            out += [
                RangeRecord(s.stream_id, r.epoch, r.range_index, r.node_id, r.start_offset, r.end_offset)
                for r in sorted(s.ranges.values(), key=lambda r: r.range_index)
            ]
            ends.append((s.stream_id, s.end_offset))
        if ends:
            out.append(StreamEndOffsetsRecord(tuple(ends)))
        out += [
            ObjectRecord(o.object_id, o.size, o.state, o.timestamp_ms, o.object_type)
            for o in sorted(self._objects.values(), key=lambda o: o.object_id)
        ]
        out += [self._stream_set_objects[i] for i in sorted(self._stream_set_objects)]
        out += [self._stream_objects[i] for i in sorted(self._stream_objects)]
        out += [KVRecord(k, v) for k, v in sorted(self._kv.items())]
        return out
