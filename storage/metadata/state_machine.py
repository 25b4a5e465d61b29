"""``StreamMetadataStateMachine``: the authoritative stream and object metadata (DESIGN.md §3, §6.4, §8, §10).

The controller holds one (``controller.controller.Controller``, the embedded single node's and every quorum
voter's alike) and serves the ``StreamMetadata`` interface (``storage.metadata.api``) from it; the storage tests and
benchmarks use one alone, without a sink, as the controller a storage engine talks to.

Every mutating call follows the same steps, holding the keys it touches (``storage.metadata.write_locks``: writes
on other streams, objects or KV keys proceed meanwhile): validate the request against the current state
(node epoch, stream epoch and range ownership, commit continuity, object states), build the metadata records
that express the change, hand them to the optional ``sink`` (the controller replicates them there before they
take effect) and finally apply them with ``apply``. ``apply`` and the state it changes are
:class:`storage.metadata.state.StreamMetadataState`: pure state transition, also what replays a metadata log or a
``snapshot()`` on restart, so validation never lives in it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING

from storage.errors import (
    CompactedObjectsNotFoundError,
    NodeEpochExpiredError,
    ObjectNotPreparedError,
    OffsetNotMatchedError,
    StorageError,
    StreamFencedError,
    StreamNotClosedError,
    StreamNotFoundError,
    StreamNotOpenedError,
)
from storage.metadata.api import (
    CommitStreamObjectRequest,
    CommitStreamSetObjectRequest,
    NodeIdentity,
    ObjectState,
    ObjectType,
    OpenStreamResult,
    StreamClose,
    StreamMetadata,
    StreamState,
)
from storage.metadata.queries import StreamMetadataQueries
from storage.metadata.record_codec import MetadataRecord
from storage.metadata.state import StreamEntry
from storage.metadata.stream_records import (
    KVRecord,
    NextObjectIdRecord,
    NextStreamIdRecord,
    NodeEpochRecord,
    ObjectRecord,
    RangeEntry,
    RemoveKVRecord,
    RemoveObjectRecord,
    RemoveStreamObjectRecord,
    RemoveStreamRecord,
    RemoveStreamSetObjectRecord,
    StreamEndOffsetsRecord,
    StreamObjectRecord,
    StreamRecord,
    StreamSetObjectRecord,
)
from storage.metadata.write_locks import EVERYTHING, WriteLocks

logger = logging.getLogger(__name__)

Sink = Callable[[Sequence[MetadataRecord]], Awaitable[None]]
Clock = Callable[[], int]
Delegations = Callable[[NodeIdentity], Collection[int]]
"""The dead nodes whose opened streams a node may commit to and close for them (a WAL failover assigned to it)."""


def _stream_key(stream_id: int) -> tuple[str, int]:
    return ("stream", stream_id)


def _object_key(object_id: int) -> tuple[str, int]:
    return ("object", object_id)


def _kv_key(key: str) -> tuple[str, str]:
    return ("kv", key)


def _new_object_ids(request: CommitStreamSetObjectRequest) -> list[int]:
    """The objects a commit makes visible: its stream-set object (unless -1) and its stream objects."""
    return ([request.object_id] if request.object_id != -1 else []) + [so.object_id for so in request.stream_objects]


def _commit_keys(request: CommitStreamSetObjectRequest) -> list[Hashable] | None:
    """What an upload commit reads and changes: its new objects and the streams it continues. A compaction
    (compacted objects replaced) touches the streams of objects it does not name: it runs alone."""
    if request.compacted_object_ids:
        return EVERYTHING
    keys: list[Hashable] = [_object_key(i) for i in _new_object_ids(request)]
    keys += [_stream_key(r.stream_id) for r in request.ranges]
    keys += [_stream_key(so.stream_id) for so in request.stream_objects]
    keys += [_stream_key(close.stream_id) for close in request.closes]
    return keys


def no_delegations(_node: NodeIdentity) -> Collection[int]:
    return ()


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class StreamMetadataStateMachine(StreamMetadataQueries):
    """The StreamMetadata state machine. ``clock`` gives milliseconds (deadlines, mark times, data times)."""

    def __init__(
        self,
        *,
        sink: Sink | None = None,
        clock: Clock = wall_clock_ms,
        object_delete_retention_ms: int = 60_000,
        delegations: Delegations = no_delegations,
    ) -> None:
        super().__init__()
        self._sink = sink
        self._delegations = delegations
        self._clock = clock
        self._retention_ms = object_delete_retention_ms
        self._locks = WriteLocks()
        # Ids handed to writes still being committed: the next write takes the next ones without waiting. A write
        # whose append fails leaves a gap (never an id given twice).
        self._reserved_stream_id = 0
        self._reserved_object_id = 0

    async def _commit(self, records: Sequence[MetadataRecord]) -> None:
        """Persists (via the sink) then applies; called holding the write's keys (``storage.metadata.write_locks``)
        so its decision and its effect stay atomic for everything it read."""
        if not records:
            return
        if self._sink is not None:
            await self._sink(records)
        for record in records:
            self.apply(record)

    # ------------------------------------------------------------------------------------------- validation

    def _check_node(self, node: NodeIdentity) -> None:
        registered = self._nodes.get(node.node_id)
        if registered is not None and node.node_epoch < registered:
            raise NodeEpochExpiredError(
                f"node {node.node_id}: epoch {node.node_epoch} is older than the registered epoch {registered}"
            )

    def _stream(self, stream_id: int) -> StreamEntry:
        stream = self._streams.get(stream_id)
        if stream is None:
            raise StreamNotFoundError(stream_id)
        return stream

    def _check_owner(self, node: NodeIdentity, stream: StreamEntry, epoch: int, action: str) -> None:
        if epoch != stream.epoch:
            raise StreamFencedError(
                f"stream {stream.stream_id}: cannot {action} at epoch {epoch}, the stream is at epoch {stream.epoch}"
            )
        current = stream.current_range
        delegated = current is not None and action in ("commit", "close") and current.node_id != node.node_id
        if delegated and current is not None and current.node_id in self._delegations(node):
            return  # replaying the dead owner's WAL: its data, its epoch, committed by the assigned node
        if current is None or current.node_id != node.node_id:
            owner = current.node_id if current is not None else None
            raise StreamFencedError(
                f"stream {stream.stream_id}: node {node.node_id} cannot {action}, epoch {epoch} is owned by node "
                f"{owner}"
            )

    # ------------------------------------------------------------------------------------------------ nodes

    async def register_node(self, node_id: int, node_epoch: int) -> None:
        """Records the node's epoch (its start time); requests with a lower epoch are then rejected."""
        async with self._locks.hold(EVERYTHING):
            registered = self._nodes.get(node_id)
            if registered is not None and node_epoch < registered:
                raise NodeEpochExpiredError(
                    f"node {node_id}: cannot register epoch {node_epoch}, epoch {registered} is already registered"
                )
            if registered != node_epoch:
                await self._commit([NodeEpochRecord(node_id, node_epoch)])

    # ---------------------------------------------------------------------------------------------- streams

    async def create_stream(self, node: NodeIdentity, tags: Sequence[tuple[str, str]] = ()) -> int:
        async with self._locks.hold(()):
            self._check_node(node)
            stream_id = max(self._next_stream_id, self._reserved_stream_id)
            self._reserved_stream_id = stream_id + 1
            await self._commit(
                [
                    NextStreamIdRecord(stream_id + 1),
                    StreamRecord(stream_id, -1, -1, 0, StreamState.CLOSED, tuple((k, v) for k, v in tags)),
                ]
            )
            logger.debug("created stream %d for node %d", stream_id, node.node_id)
            return stream_id

    async def open_stream(self, node: NodeIdentity, stream_id: int, epoch: int) -> OpenStreamResult:
        async with self._locks.hold((_stream_key(stream_id),)):
            self._check_node(node)
            stream = self._stream(stream_id)
            if epoch < stream.epoch:
                raise StreamFencedError(
                    f"stream {stream_id}: cannot open at epoch {epoch}, the stream is already at epoch {stream.epoch}"
                )
            if epoch == stream.epoch:
                current = stream.current_range
                if current is None or current.node_id != node.node_id:
                    raise StreamFencedError(
                        f"stream {stream_id}: epoch {epoch} belongs to node "
                        f"{current.node_id if current else None}, not node {node.node_id}"
                    )
                if stream.state != StreamState.OPENED:
                    await self._commit([stream.record(state=StreamState.OPENED)])
                return OpenStreamResult(stream.start_offset, stream.end_offset)
            if stream.state != StreamState.CLOSED:
                current = stream.current_range
                raise StreamNotClosedError(
                    f"stream {stream_id}: cannot open at epoch {epoch}, it is still opened at epoch {stream.epoch} "
                    f"by node {current.node_id if current else None}"
                )
            await self._commit(stream.opened(epoch, node.node_id))
            logger.debug("node %d opened stream %d at epoch %d", node.node_id, stream_id, epoch)
            return OpenStreamResult(stream.start_offset, stream.end_offset)

    async def close_stream(self, node: NodeIdentity, stream_id: int, epoch: int) -> None:
        await self.close_streams(node, [StreamClose(stream_id, epoch)])

    async def close_streams(self, node: NodeIdentity, closes: Sequence[StreamClose]) -> None:
        ids = [close.stream_id for close in closes]
        if len(set(ids)) != len(ids):
            raise ValueError(f"close_streams names a stream more than once: {ids}")
        async with self._locks.hold([_stream_key(stream_id) for stream_id in ids]):
            self._check_node(node)
            await self._commit(self._close_records(node, closes))
            logger.debug("node %d closed streams %s", node.node_id, [(c.stream_id, c.epoch) for c in closes])

    def _close_records(self, node: NodeIdentity, closes: Sequence[StreamClose]) -> list[MetadataRecord]:
        """The records closing (and trimming) ``closes``; every check before any record: all close, or none."""
        records: list[MetadataRecord] = []
        for close in closes:
            stream = self._stream(close.stream_id)
            self._check_owner(node, stream, close.epoch, "close")
            trim = close.new_start_offset > stream.start_offset
            if trim and stream.state != StreamState.OPENED:
                raise StreamNotOpenedError(f"stream {close.stream_id}: cannot trim a closed stream")
            if stream.state != StreamState.CLOSED:
                records += stream.trimmed(close.new_start_offset, StreamState.CLOSED) if trim else [
                    stream.record(state=StreamState.CLOSED)]
        return records

    async def trim_stream(self, node: NodeIdentity, stream_id: int, epoch: int, new_start_offset: int) -> None:
        async with self._locks.hold((_stream_key(stream_id),)):
            self._check_node(node)
            stream = self._stream(stream_id)
            self._check_owner(node, stream, epoch, "trim")
            if stream.state != StreamState.OPENED:
                raise StreamNotOpenedError(f"stream {stream_id}: cannot trim a closed stream")
            if new_start_offset > stream.start_offset:
                await self._commit(stream.trimmed(new_start_offset))

    async def delete_stream(self, node: NodeIdentity, stream_id: int, epoch: int) -> None:
        async with self._locks.hold((_stream_key(stream_id),)):
            self._check_node(node)
            stream = self._stream(stream_id)
            if epoch < stream.epoch:
                raise StreamFencedError(
                    f"stream {stream_id}: cannot delete at epoch {epoch}, the stream is at epoch {stream.epoch}"
                )
            if stream.state != StreamState.CLOSED:
                raise StreamNotClosedError(f"stream {stream_id}: close it before deleting it")
            await self._commit([RemoveStreamRecord(stream_id)])
            logger.debug("node %d deleted stream %d", node.node_id, stream_id)

    async def delete_orphans(self, stream_ids: Sequence[int], kv_keys: Sequence[str]) -> tuple[list[int], list[str]]:
        """Removes streams and KV entries of topics that no longer exist, which their broker could not delete
        (``controller.orphan_streams``: it crashed or lost the controller half way), whatever node last owned them:
        a closed stream has nothing left in any WAL. A stream opened since is left alone. Returns what it removed."""
        async with self._locks.hold([*map(_stream_key, stream_ids), *map(_kv_key, kv_keys)]):
            closed = {s.stream_id for s in self._streams.values() if s.state == StreamState.CLOSED}
            streams = [i for i in stream_ids if i in closed]
            keys = [key for key in kv_keys if key in self._kv]
            await self._commit([*map(RemoveStreamRecord, streams), *map(RemoveKVRecord, keys)])
            return streams, keys

    # ---------------------------------------------------------------------------------------------- objects

    async def prepare_objects(self, node: NodeIdentity, count: int, ttl_ms: int) -> int:
        if count <= 0:
            raise ValueError(f"node {node.node_id}: prepare_objects needs a positive count, got {count}")
        async with self._locks.hold(()):
            self._check_node(node)
            first = max(self._next_object_id, self._reserved_object_id)
            self._reserved_object_id = first + count
            deadline = self._clock() + ttl_ms
            records: list[MetadataRecord] = [NextObjectIdRecord(first + count)]
            records += [ObjectRecord(i, 0, ObjectState.PREPARED, deadline) for i in range(first, first + count)]
            await self._commit(records)
            return first

    def _check_prepared(self, object_id: int, now: int, what: str) -> None:
        obj = self._objects.get(object_id)
        if obj is None or obj.state != ObjectState.PREPARED:
            state = obj.state.name if obj is not None else "unknown"
            raise ObjectNotPreparedError(f"{what}: object {object_id} is not prepared (it is {state})")
        if obj.timestamp_ms < now:
            raise ObjectNotPreparedError(f"{what}: object {object_id} missed its commit deadline")

    def _is_committed(self, object_id: int) -> bool:
        obj = self._objects.get(object_id)
        return obj is not None and obj.state == ObjectState.COMMITTED

    async def commit_stream_set_object(self, request: CommitStreamSetObjectRequest) -> None:
        if not request.compacted_object_ids:
            await self.commit_stream_set_objects((request,))
            return
        async with self._locks.hold(_commit_keys(request)):
            self._check_node(request.node)
            what = f"node {request.node.node_id} commit of object {request.object_id}"
            now = self._clock()
            if not self._check_new_objects(request, now, what):
                return
            compacted = [self._stream_set_objects.get(i) for i in request.compacted_object_ids]
            missing = [i for i, sso in zip(request.compacted_object_ids, compacted, strict=True) if sso is None]
            if missing:
                raise CompactedObjectsNotFoundError(f"{what}: compacted stream-set objects {missing} not found")
            olds = [c for c in compacted if c is not None]
            order_id = min(c.order_id for c in olds) if request.order_id == -1 else request.order_id
            data_time = request.data_time_ms or min(c.data_time_ms for c in olds)
            records = self._object_records(request, now, order_id, data_time)
            for old in olds:
                records.append(RemoveStreamSetObjectRecord(old.node_id, old.object_id))
                records.append(self._mark_destroyed(old.object_id, now))
            await self._commit(records)

    async def commit_stream_set_objects(self, requests: Sequence[CommitStreamSetObjectRequest]) -> None:
        """Commits uploads (no compactions) of one node in their order, as one metadata append: all of them or,
        raising, none. Each is checked as ``commit_stream_set_object`` checks it, against the state the ones before
        it leave, so one continues a stream where the one before it ends (a failover in place commits a dead node's
        WAL objects in chunks so). One whose objects are all committed already is skipped, as a single commit
        is: a retried call commits nothing twice."""
        if not requests:
            return
        nodes = {r.node for r in requests}
        if len(nodes) != 1 or any(r.compacted_object_ids for r in requests):
            raise ValueError("a batch of commits holds uploads of one node, not compactions")
        ids = [i for r in requests for i in _new_object_ids(r)]
        if len(ids) != len(set(ids)):
            raise ValueError(f"a batch of commits names objects more than once: {sorted(ids)}")
        keys = [key for r in requests for key in _commit_keys(r) or ()]
        async with self._locks.hold(keys):
            self._check_node(requests[0].node)
            now = self._clock()
            ends: dict[int, int] = {}
            records: list[MetadataRecord] = []
            for request in requests:
                what = f"node {request.node.node_id} commit of object {request.object_id}"
                if self._check_new_objects(request, now, what):
                    ends.update(self._check_continuity(request, what, ends))
                    records += self._object_records(request, now, request.order_id, request.data_time_ms or now)
            if ends:
                records.append(StreamEndOffsetsRecord(tuple(sorted(ends.items()))))
            for request in requests:  # closes after every range: a stream's last records, then its close
                records += self._close_records(request.node, request.closes)
            await self._commit(records)

    def _check_new_objects(self, request: CommitStreamSetObjectRequest, now: int, what: str) -> bool:
        """Whether the commit has anything to do; raises if its new objects are not (all) prepared. All of them
        committed already means a retry of a commit that succeeded: nothing to do, as for the first."""
        new_ids = _new_object_ids(request)
        if new_ids and all(self._is_committed(i) for i in new_ids):
            logger.info("%s: already committed, nothing to do", what)
            return False
        if not new_ids and not request.compacted_object_ids:
            return False
        for object_id in new_ids:
            self._check_prepared(object_id, now, what)
        return True

    def _object_records(
        self, request: CommitStreamSetObjectRequest, now: int, order_id: int, data_time: int
    ) -> list[MetadataRecord]:
        """The records of the commit's new stream-set and stream objects."""
        records: list[MetadataRecord] = []
        if request.object_id != -1:
            records.append(
                ObjectRecord(request.object_id, request.object_size, ObjectState.COMMITTED, now, ObjectType.STREAM_SET)
            )
            ranges = tuple(
                RangeEntry(r.stream_id, r.start_offset, r.end_offset)
                for r in sorted(request.ranges, key=lambda r: (r.stream_id, r.start_offset))
                if r.end_offset > r.start_offset and r.stream_id in self._streams
            )
            records.append(
                StreamSetObjectRecord(
                    request.node.node_id,
                    request.object_id,
                    request.object_id if order_id == -1 else order_id,
                    data_time,
                    ranges,
                )
            )
        for so in request.stream_objects:
            records.append(ObjectRecord(so.object_id, so.object_size, ObjectState.COMMITTED, now, ObjectType.STREAM))
            records.append(StreamObjectRecord(so.stream_id, so.object_id, so.start_offset, so.end_offset, data_time))
        return records

    def _check_continuity(
        self, request: CommitStreamSetObjectRequest, what: str, ends: Mapping[int, int]
    ) -> list[tuple[int, int]]:
        """Validates an upload commit: every range continues its stream's committed end (or its end in ``ends``,
        what the commits before it in the same batch leave), owned by the caller. Returns the new end offsets."""
        per_stream: dict[int, list[tuple[int, int, int]]] = {}
        for r in request.ranges:
            per_stream.setdefault(r.stream_id, []).append((r.start_offset, r.end_offset, r.stream_epoch))
        for so in request.stream_objects:
            per_stream.setdefault(so.stream_id, []).append((so.start_offset, so.end_offset, so.stream_epoch))
        new_ends = []
        for stream_id, ranges in sorted(per_stream.items()):
            stream = self._stream(stream_id)
            if stream.state != StreamState.OPENED:
                raise StreamNotOpenedError(f"{what}: stream {stream_id} is not opened")
            epochs = {e for _s, _e, e in ranges if e != -1}
            for epoch in epochs:
                self._check_owner(request.node, stream, epoch, "commit")
            if not epochs:
                self._check_owner(request.node, stream, stream.epoch, "commit")
            expected = ends.get(stream_id, stream.end_offset)
            for start, end, _epoch in sorted(ranges):
                if start != expected or end < start:
                    raise OffsetNotMatchedError(
                        f"{what}: stream {stream_id} range [{start}, {end}) does not start at the committed end "
                        f"{expected}"
                    )
                expected = end
            new_ends.append((stream_id, expected))
        return new_ends

    def _mark_destroyed(self, object_id: int, now: int) -> ObjectRecord:
        obj = self._objects.get(object_id)
        size = obj.size if obj is not None else 0
        kind = obj.object_type if obj is not None else ObjectType.STREAM_SET
        return ObjectRecord(object_id, size, ObjectState.MARK_DESTROYED, now, kind)

    async def commit_stream_object(self, request: CommitStreamObjectRequest) -> None:
        keys = [_stream_key(request.stream_id), _object_key(request.object_id)]
        keys += [_object_key(i) for i in request.source_object_ids]
        async with self._locks.hold(keys):
            self._check_node(request.node)
            what = f"node {request.node.node_id} commit of stream object {request.object_id}"
            if request.object_id != -1 and self._is_committed(request.object_id):
                logger.info("%s: already committed, nothing to do", what)
                return
            now = self._clock()
            if request.object_id != -1:
                self._check_prepared(request.object_id, now, what)
            sources = [self._stream_objects.get(i) for i in request.source_object_ids]
            missing = [
                i
                for i, so in zip(request.source_object_ids, sources, strict=True)
                if so is None or so.stream_id != request.stream_id
            ]
            if missing:
                raise CompactedObjectsNotFoundError(
                    f"{what}: source stream objects {missing} of stream {request.stream_id} not found"
                )
            records: list[MetadataRecord] = []
            if request.object_id != -1:
                data_time = request.data_time_ms or min((s.data_time_ms for s in sources if s is not None), default=now)
                records.append(
                    ObjectRecord(request.object_id, request.object_size, ObjectState.COMMITTED, now, ObjectType.STREAM)
                )
                records.append(
                    StreamObjectRecord(
                        request.stream_id, request.object_id, request.start_offset, request.end_offset, data_time
                    )
                )
            for source in sources:
                if source is not None:
                    records.append(RemoveStreamObjectRecord(source.stream_id, source.object_id))
                    records.append(self._mark_destroyed(source.object_id, now))
            await self._commit(records)

    def _referenced(self, stream_id: int, end_offset: int) -> bool:
        stream = self._streams.get(stream_id)
        return stream is not None and end_offset > stream.start_offset

    async def sweep_objects(self, now_ms: int) -> list[int]:
        async with self._locks.hold(EVERYTHING):
            records: list[MetadataRecord] = []
            for obj in self._objects.values():
                if obj.state == ObjectState.PREPARED and obj.timestamp_ms <= now_ms:
                    logger.info("object %d was prepared but not committed before its deadline", obj.object_id)
                    records.append(self._mark_destroyed(obj.object_id, now_ms))
            for so in self._stream_objects.values():
                if not self._referenced(so.stream_id, so.end_offset):
                    records.append(RemoveStreamObjectRecord(so.stream_id, so.object_id))
                    records.append(self._mark_destroyed(so.object_id, now_ms))
            for sso in self._stream_set_objects.values():
                if not any(self._referenced(r.stream_id, r.end_offset) for r in sso.ranges):
                    records.append(RemoveStreamSetObjectRecord(sso.node_id, sso.object_id))
                    records.append(self._mark_destroyed(sso.object_id, now_ms))
            await self._commit(records)
            return sorted(
                o.object_id
                for o in self._objects.values()
                if o.state == ObjectState.MARK_DESTROYED and o.timestamp_ms + self._retention_ms <= now_ms
            )

    async def remove_objects(self, object_ids: Sequence[int]) -> None:
        async with self._locks.hold(EVERYTHING):
            records: list[MetadataRecord] = []
            for object_id in object_ids:
                obj = self._objects.get(object_id)
                if obj is None:
                    continue
                if obj.state != ObjectState.MARK_DESTROYED:
                    raise StorageError(f"object {object_id} is {obj.state.name}, not MARK_DESTROYED: not removing it")
                records.append(RemoveObjectRecord(object_id))
            await self._commit(records)

    # --------------------------------------------------------------------------------------------------- KV

    async def put_kv(self, key: str, value: bytes) -> None:
        async with self._locks.hold((_kv_key(key),)):
            await self._commit([KVRecord(key, bytes(value))])

    async def put_kv_if_absent(self, key: str, value: bytes) -> bytes:
        async with self._locks.hold((_kv_key(key),)):
            existing = self._kv.get(key)
            if existing is not None:
                return existing
            await self._commit([KVRecord(key, bytes(value))])
            return bytes(value)

    async def delete_kv(self, key: str) -> None:
        async with self._locks.hold((_kv_key(key),)):
            if key in self._kv:
                await self._commit([RemoveKVRecord(key)])


if TYPE_CHECKING:  # mypy proves the state machine serves the whole interface the engine and brokers use

    def _conforms(metadata: StreamMetadataStateMachine) -> StreamMetadata:
        return metadata
