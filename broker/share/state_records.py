"""The records of a partition's share stream, and replaying the stream into each group's state (sans-I/O).

A topic partition's share stream (``streamMap["shr"]``, DESIGN §4) holds what Kafka's share coordinator keeps in
``__share_group_state`` for the share groups that read the partition: per group, a **snapshot** (Kafka's
ShareSnapshotValue: snapshot epoch, state epoch, leader epoch, start offset, create and write timestamps, the state
batches) and **updates** since it (ShareUpdateValue: snapshot epoch, leader epoch, start offset, the batches that
changed), and a **tombstone** when the group's state is deleted. One stream record is one of them, for one group:

``magic u8 0x53 | type i8 (0 snapshot, 1 update, 2 tombstone) | version i16 (0) | group id (int16 string) |``
snapshot: ``snapshotEpoch i32 | stateEpoch i32 | leaderEpoch i32 | startOffset i64 | createTimestamp i64 |
writeTimestamp i64 | batches``; update: ``snapshotEpoch i32 | leaderEpoch i32 | startOffset i64 | batches``;
tombstone: nothing more. ``batches`` is ``count i32`` then ``firstOffset i64 | lastOffset i64 | deliveryState i8 |
deliveryCount i16`` each, Kafka's StateBatch.

Replaying (:class:`ShareStreamReplay`) applies each group's latest snapshot and the updates after it, in stream
order; it also remembers where each group's latest snapshot is, so the stream can be trimmed below the oldest one
still needed (:meth:`ShareStreamReplay.trim_point`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from broker.share.partition_state import Limits, PartitionShareState, StateBatch
from wire.stored_schema import SchemaError, SchemaReader, string

MAGIC = 0x53
SNAPSHOT, UPDATE, TOMBSTONE = 0, 1, 2
_VERSION = 0
_HEAD = struct.Struct(">BbH")
_BATCH = struct.Struct(">qqbh")
_SNAPSHOT = struct.Struct(">iiiqqq")
_UPDATE = struct.Struct(">iiq")


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One decoded share-stream record. Fields a type does not carry keep their defaults."""

    kind: int
    group_id: str
    snapshot_epoch: int = 0
    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = -1
    create_timestamp: int = -1
    write_timestamp: int = -1
    batches: tuple[StateBatch, ...] = ()


def encode(record: ShareRecord) -> bytes:
    head = _HEAD.pack(MAGIC, record.kind, _VERSION) + string(record.group_id)
    if record.kind == TOMBSTONE:
        return head
    batches = struct.pack(">i", len(record.batches)) + b"".join(
        _BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in record.batches
    )
    if record.kind == SNAPSHOT:
        body = _SNAPSHOT.pack(
            record.snapshot_epoch, record.state_epoch, record.leader_epoch, record.start_offset,
            record.create_timestamp, record.write_timestamp,
        )
    elif record.kind == UPDATE:
        body = _UPDATE.pack(record.snapshot_epoch, record.leader_epoch, record.start_offset)
    else:
        raise ValueError(f"unknown share record type {record.kind}")
    return head + body + batches


def decode(data: bytes) -> ShareRecord:
    """Raises SchemaError for a record this code cannot read."""
    reader = SchemaReader(data, "share state record")
    if len(data) < _HEAD.size:
        raise SchemaError("share state record: truncated header")
    magic, kind, version = _HEAD.unpack_from(data)
    reader.pos = _HEAD.size
    if magic != MAGIC or version != _VERSION or kind not in (SNAPSHOT, UPDATE, TOMBSTONE):
        raise SchemaError(f"share state record: magic {magic:#x}, type {kind}, version {version}")
    group_id = reader.string()
    if kind == TOMBSTONE:
        return ShareRecord(kind, group_id)
    if kind == SNAPSHOT:
        snapshot_epoch, state_epoch, leader_epoch, start = reader.i32(), reader.i32(), reader.i32(), reader.i64()
        created, written = reader.i64(), reader.i64()
    else:
        snapshot_epoch, leader_epoch, start = reader.i32(), reader.i32(), reader.i64()
        state_epoch, created, written = 0, -1, -1
    n = reader.i32()
    if n < 0 or n * _BATCH.size > len(data) - reader.pos:
        raise SchemaError(f"share state record: {n} state batches do not fit")
    batches = tuple(StateBatch(reader.i64(), reader.i64(), reader.i8(), reader.i16()) for _ in range(n))
    return ShareRecord(kind, group_id, snapshot_epoch, state_epoch, leader_epoch, start, created, written, batches)


@dataclass(slots=True)
class GroupReplay:
    """One group's state as replayed, and where its latest snapshot is in the stream."""

    state: PartitionShareState
    snapshot_epoch: int
    snapshot_offset: int
    create_timestamp: int
    updates_since_snapshot: int = 0


@dataclass(slots=True)
class ShareStreamReplay:
    """Every group's state of one partition, built from the share stream's records in order."""

    groups: dict[str, GroupReplay] = field(default_factory=dict)
    #: Records that could not be decoded (skipped, logged by the caller).
    skipped: int = 0

    def apply(self, stream_offset: int, record: ShareRecord) -> None:
        if record.kind == TOMBSTONE:
            self.groups.pop(record.group_id, None)
            return
        if record.kind == SNAPSHOT:
            state = PartitionShareState(record.start_offset, Limits())
            state.state_epoch = record.state_epoch
            state.leader_epoch = record.leader_epoch
            state.apply(record.start_offset, record.batches)
            self.groups[record.group_id] = GroupReplay(
                state, record.snapshot_epoch, stream_offset, record.create_timestamp
            )
            return
        group = self.groups.get(record.group_id)
        if group is None:  # an update whose snapshot was deleted: its group's state was deleted too
            return
        group.state.leader_epoch = record.leader_epoch
        group.state.apply(record.start_offset, record.batches)
        group.updates_since_snapshot += 1

    def trim_point(self, stream_end: int) -> int:
        """The stream offset below which no group needs anything: its oldest latest snapshot (the stream's end
        when no group has state left)."""
        return min((g.snapshot_offset for g in self.groups.values()), default=stream_end)
