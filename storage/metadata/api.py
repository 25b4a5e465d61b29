"""``StreamMetadata``: what the storage engine needs from the controller (DESIGN.md §3, §6, §8).

The controller's state machine (``storage.metadata.state_machine``) implements it; a storage engine reaches it in
process on the embedded single node, or through the controller quorum's RPCs, which serve the same interface to
many brokers. Every mutating call carries the caller's ``(node_id, node_epoch)`` and, for stream operations, the
stream epoch, so a stale owner is rejected (``StreamFencedError``, ``NodeEpochExpiredError``) and can never make
data visible.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


class StreamState(enum.IntEnum):
    CLOSED = 0
    OPENED = 1


class ObjectState(enum.IntEnum):
    PREPARED = 1
    COMMITTED = 2
    MARK_DESTROYED = 3


class ObjectType(enum.IntEnum):
    STREAM_SET = 0
    STREAM = 1


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """Who is calling: the node id and the epoch it registered with (its start time in ms)."""

    node_id: int
    node_epoch: int


@dataclass(frozen=True, slots=True)
class RangeMetadata:
    """One ownership period of a stream: offsets ``[start_offset, end_offset)`` written by ``node_id`` at
    ``epoch``. The current range's ``end_offset`` is the stream's committed end."""

    epoch: int
    range_index: int
    node_id: int
    start_offset: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class StreamMetadataRecord:
    stream_id: int
    epoch: int
    state: StreamState
    start_offset: int
    end_offset: int  # committed end (exclusive)
    ranges: tuple[RangeMetadata, ...] = ()
    tags: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ObjectStreamRange:
    """A stream's offsets held by an object, as reported in commits and lookups."""

    stream_id: int
    start_offset: int
    end_offset: int
    stream_epoch: int = -1


@dataclass(frozen=True, slots=True)
class S3ObjectMetadata:
    """A committed object and the stream ranges it holds (for a stream object, exactly one range)."""

    object_id: int
    object_size: int
    object_type: ObjectType
    ranges: tuple[ObjectStreamRange, ...]
    order_id: int = 0  # commit order of stream-set objects; compaction keeps the smallest
    data_time_ms: int = 0
    node_id: int = -1  # the node whose stream-set object this is (-1 for stream objects)


@dataclass(frozen=True, slots=True)
class StreamObjectCommit:
    object_id: int
    object_size: int
    stream_id: int
    start_offset: int
    end_offset: int
    stream_epoch: int = -1


@dataclass(frozen=True, slots=True)
class CommitStreamSetObjectRequest:
    """Commit of one upload (or of a stream-set compaction when ``compacted_object_ids`` is not empty).

    ``object_id`` is -1 when the upload produced only stream objects. For an upload, each range must start
    exactly at its stream's committed end and the caller must own the stream at ``stream_epoch``.

    ``closes``: streams closed (as ``close_streams`` does) in the same metadata commit, after the ranges: a closing
    partition's last upload and its close in one controller call and one commit, which its producer waits for.
    """

    node: NodeIdentity
    object_id: int
    object_size: int
    ranges: tuple[ObjectStreamRange, ...]
    stream_objects: tuple[StreamObjectCommit, ...] = ()
    compacted_object_ids: tuple[int, ...] = ()
    order_id: int = -1  # -1: use object_id
    data_time_ms: int = 0
    closes: tuple[StreamClose, ...] = ()


@dataclass(frozen=True, slots=True)
class CommitStreamObjectRequest:
    """Commit of a stream-object compaction: ``source_object_ids`` are replaced by ``object_id``."""

    node: NodeIdentity
    object_id: int
    object_size: int
    stream_id: int
    start_offset: int
    end_offset: int
    source_object_ids: tuple[int, ...]
    data_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class StreamClose:
    """One stream of a ``close_streams`` call: closed at ``epoch``, its start first moved to ``new_start_offset``
    (a trim; -1 or not past the current start: none)."""

    stream_id: int
    epoch: int
    new_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class OpenStreamResult:
    start_offset: int
    next_offset: int  # committed end: appends continue here once the WAL tail is replayed


@dataclass(frozen=True, slots=True)
class OpeningStream:
    """A stream this node still owns (OPENED, current range on this node), for WAL recovery."""

    stream_id: int
    epoch: int
    start_offset: int
    end_offset: int


@dataclass(slots=True)
class ObjectLifecycle:
    """What the lifecycle sweep found to physically delete."""

    object_ids: list[int] = field(default_factory=list)


class StreamMetadata(Protocol):
    """Controller-side stream, object and KV metadata, as the storage engine and broker use it."""

    # ---- streams
    async def create_stream(self, node: NodeIdentity, tags: Sequence[tuple[str, str]] = ()) -> int: ...

    async def open_stream(self, node: NodeIdentity, stream_id: int, epoch: int) -> OpenStreamResult: ...

    async def close_stream(self, node: NodeIdentity, stream_id: int, epoch: int) -> None: ...

    async def close_streams(self, node: NodeIdentity, closes: Sequence[StreamClose]) -> None:
        """Closes (and trims, where asked) every stream named, in one metadata commit, or none of them: what a
        partition's close does with all its streams at once (a moved partition's producer waits for it)."""
        ...

    async def trim_stream(self, node: NodeIdentity, stream_id: int, epoch: int, new_start_offset: int) -> None: ...

    async def delete_stream(self, node: NodeIdentity, stream_id: int, epoch: int) -> None: ...

    async def get_streams(self, stream_ids: Sequence[int]) -> list[StreamMetadataRecord]:
        """The streams that exist among ``stream_ids``."""
        ...

    async def get_opening_streams(self, node: NodeIdentity) -> list[OpeningStream]: ...

    # ---- objects
    async def prepare_objects(self, node: NodeIdentity, count: int, ttl_ms: int) -> int:
        """Reserves ``count`` consecutive object ids (returns the first) that must be committed before the
        deadline or are deleted by the lifecycle sweep."""
        ...

    async def commit_stream_set_object(self, request: CommitStreamSetObjectRequest) -> None: ...

    async def commit_stream_set_objects(self, requests: Sequence[CommitStreamSetObjectRequest]) -> None:
        """Commits uploads of one node in order as one metadata append, all or none, each checked against the state
        the ones before it leave (a range may start where the previous commit's ends); one already committed is
        skipped. What a failover in place commits a dead node's WAL objects with, many per call."""
        ...

    async def commit_stream_object(self, request: CommitStreamObjectRequest) -> None: ...

    async def get_objects(
        self, stream_id: int, start_offset: int, end_offset: int, limit: int
    ) -> list[S3ObjectMetadata]:
        """Committed objects holding ``stream_id`` from ``start_offset`` on, in offset order, contiguous, at
        most ``limit``; ``end_offset`` -1 means to the stream's end."""
        ...

    async def get_stream_set_objects(self, node_id: int) -> list[S3ObjectMetadata]:
        """A node's committed stream-set objects, oldest first (for compaction)."""
        ...

    async def get_stream_objects(self, stream_id: int) -> list[S3ObjectMetadata]:
        """A stream's committed stream objects in offset order (for compaction)."""
        ...

    async def sweep_objects(self, now_ms: int) -> list[int]:
        """Moves expired PREPARED objects and unreferenced objects to MARK_DESTROYED and returns the ids that
        are now safe to delete physically; the caller deletes them then calls ``remove_objects``."""
        ...

    async def remove_objects(self, object_ids: Sequence[int]) -> None: ...

    # ---- KV (partition -> meta stream id, and similar small values)
    async def get_kv(self, key: str) -> bytes | None: ...

    async def put_kv(self, key: str, value: bytes) -> None: ...

    async def put_kv_if_absent(self, key: str, value: bytes) -> bytes:
        """Stores ``value`` unless ``key`` already has one; returns what ``key`` holds afterwards. Creating a
        partition's KV entry needs this: two brokers opening a new partition at once (its leadership moved while the
        first was still opening it) must agree on one meta stream, or the one whose entry is overwritten acknowledges
        records into streams nobody reads again."""
        ...

    async def delete_kv(self, key: str) -> None: ...
