"""The stream, object and KV records: every change to stream metadata, as the metadata log carries it (DESIGN.md §8).

Every change to stream metadata is expressed as one of these records. The stream metadata state machine
(``storage.metadata.state_machine``) applies them to its state (``storage.metadata.state``), and the controller
appends the very same records to its replicated metadata log, so a follower or a restarted node rebuilds identical
state by replaying them. They are encoded by the codec of ``storage.metadata.record_codec``, whose registry the
controller's cluster records (``metadata.cluster_records``) join.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import ClassVar

from storage.metadata.api import ObjectState, ObjectType, StreamState
from storage.metadata.record_codec import MetadataRecord, register_record

# Type ids follow AutoMQ's metadata record api keys (501..) so they never collide with the controller's
# topic/partition/broker records, which use Kafka's low numbers.


@dataclass(frozen=True, slots=True)
class RangeEntry:
    """A stream's offsets ``[start_offset, end_offset)`` inside a stream-set object."""

    stream_id: int
    start_offset: int
    end_offset: int


@register_record
@dataclass(frozen=True, slots=True)
class StreamRecord(MetadataRecord):
    """A stream's current owner epoch, range index, start offset, state and tags (created or updated)."""

    TYPE: ClassVar[int] = 501
    VERSION: ClassVar[int] = 1

    stream_id: int
    epoch: int
    range_index: int
    start_offset: int
    state: StreamState
    tags: tuple[tuple[str, str], ...] = ()


@register_record
@dataclass(frozen=True, slots=True)
class RemoveStreamRecord(MetadataRecord):
    TYPE: ClassVar[int] = 502

    stream_id: int


@register_record
@dataclass(frozen=True, slots=True)
class RangeRecord(MetadataRecord):
    """One ownership period of a stream (created when a node opens it with a new epoch)."""

    TYPE: ClassVar[int] = 503

    stream_id: int
    epoch: int
    range_index: int
    node_id: int
    start_offset: int
    end_offset: int


@register_record
@dataclass(frozen=True, slots=True)
class RemoveRangeRecord(MetadataRecord):
    """A range whose offsets are all trimmed away."""

    TYPE: ClassVar[int] = 504

    stream_id: int
    range_index: int


@register_record
@dataclass(frozen=True, slots=True)
class StreamObjectRecord(MetadataRecord):
    TYPE: ClassVar[int] = 505

    stream_id: int
    object_id: int
    start_offset: int
    end_offset: int
    data_time_ms: int = 0


@register_record
@dataclass(frozen=True, slots=True)
class RemoveStreamObjectRecord(MetadataRecord):
    TYPE: ClassVar[int] = 506

    stream_id: int
    object_id: int


@register_record
@dataclass(frozen=True, slots=True)
class StreamSetObjectRecord(MetadataRecord):
    """A node's stream-set object and the stream ranges it holds, sorted by stream id."""

    TYPE: ClassVar[int] = 507

    node_id: int
    object_id: int
    order_id: int
    data_time_ms: int
    ranges: tuple[RangeEntry, ...]


@register_record
@dataclass(frozen=True, slots=True)
class RemoveStreamSetObjectRecord(MetadataRecord):
    TYPE: ClassVar[int] = 508

    node_id: int
    object_id: int


@register_record
@dataclass(frozen=True, slots=True)
class ObjectRecord(MetadataRecord):
    """An object's lifecycle state. ``timestamp_ms`` is the deadline while PREPARED and the mark time once
    MARK_DESTROYED (it is unused while COMMITTED)."""

    TYPE: ClassVar[int] = 509
    VERSION: ClassVar[int] = 1

    object_id: int
    object_size: int
    state: ObjectState
    timestamp_ms: int
    object_type: ObjectType = ObjectType.STREAM_SET


@register_record
@dataclass(frozen=True, slots=True)
class RemoveObjectRecord(MetadataRecord):
    """The object is physically deleted; its id is gone for good."""

    TYPE: ClassVar[int] = 510

    object_id: int


@register_record
@dataclass(frozen=True, slots=True)
class NextStreamIdRecord(MetadataRecord):
    TYPE: ClassVar[int] = 511

    next_stream_id: int


@register_record
@dataclass(frozen=True, slots=True)
class NextObjectIdRecord(MetadataRecord):
    TYPE: ClassVar[int] = 512

    next_object_id: int


@register_record
@dataclass(frozen=True, slots=True)
class NodeEpochRecord(MetadataRecord):
    """The epoch a node registered with; requests carrying a lower one are rejected."""

    TYPE: ClassVar[int] = 513

    node_id: int
    node_epoch: int


@register_record
@dataclass(frozen=True, slots=True)
class StreamEndOffsetsRecord(MetadataRecord):
    """New committed end offsets ``(stream_id, end_offset)`` after a commit."""

    TYPE: ClassVar[int] = 515

    offsets: tuple[tuple[int, int], ...]


@register_record
@dataclass(frozen=True, slots=True)
class KVRecord(MetadataRecord):
    TYPE: ClassVar[int] = 516

    key: str
    value: bytes


@register_record
@dataclass(frozen=True, slots=True)
class RemoveKVRecord(MetadataRecord):
    TYPE: ClassVar[int] = 517

    key: str


StreamMetadataRecordType = (
    StreamRecord
    | RemoveStreamRecord
    | RangeRecord
    | RemoveRangeRecord
    | StreamObjectRecord
    | RemoveStreamObjectRecord
    | StreamSetObjectRecord
    | RemoveStreamSetObjectRecord
    | ObjectRecord
    | RemoveObjectRecord
    | NextStreamIdRecord
    | NextObjectIdRecord
    | NodeEpochRecord
    | StreamEndOffsetsRecord
    | KVRecord
    | RemoveKVRecord
)
"""The records this module defines (the controller's cluster records join the same registry)."""

STREAM_RECORD_TYPES: tuple[type[MetadataRecord], ...] = typing.get_args(StreamMetadataRecordType)
