"""``StreamMetadataQueries``: the reads of the stream metadata, answered from the applied state.

Reads take no write lock and change nothing: a write validates and appends (``storage.metadata.state_machine``),
``apply`` changes the state (``storage.metadata.state``), and these look at what is applied. Kept apart from the
writes so that the state machine's module holds the validation alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.metadata.api import (
    NodeIdentity,
    ObjectState,
    ObjectStreamRange,
    ObjectType,
    OpeningStream,
    S3ObjectMetadata,
    StreamMetadataRecord,
    StreamState,
)
from storage.metadata.state import Placement, StreamMetadataState


class StreamMetadataQueries(StreamMetadataState):
    """The read calls of ``storage.metadata.api.StreamMetadata`` over the applied state."""

    async def get_streams(self, stream_ids: Sequence[int]) -> list[StreamMetadataRecord]:
        out = []
        for stream_id in stream_ids:
            s = self._streams.get(stream_id)
            if s is not None:
                out.append(
                    StreamMetadataRecord(
                        s.stream_id,
                        s.epoch,
                        s.state,
                        s.start_offset,
                        s.end_offset,
                        tuple(sorted(s.ranges.values(), key=lambda r: r.range_index)),
                        s.tags,
                    )
                )
        return out

    async def get_opening_streams(self, node: NodeIdentity) -> list[OpeningStream]:
        out = []
        for s in self._streams.values():
            current = s.current_range
            if s.state == StreamState.OPENED and current is not None and current.node_id == node.node_id:
                out.append(OpeningStream(s.stream_id, s.epoch, s.start_offset, s.end_offset))
        return sorted(out, key=lambda o: o.stream_id)

    def _metadata_of(self, object_id: int, only: Placement | None = None, stream_id: int = -1) -> S3ObjectMetadata:
        """The object's metadata; with ``only``, its ranges are just that placement of ``stream_id`` (what a
        reader needs, without walking a stream-set object's thousands of ranges)."""
        obj = self._objects[object_id]
        sso = self._stream_set_objects.get(object_id)
        if sso is not None:
            if only is not None:
                ranges: tuple[ObjectStreamRange, ...] = (ObjectStreamRange(stream_id, only.start, only.end),)
            else:
                ranges = tuple(ObjectStreamRange(r.stream_id, r.start_offset, r.end_offset) for r in sso.ranges)
            return S3ObjectMetadata(
                object_id, obj.size, ObjectType.STREAM_SET, ranges, sso.order_id, sso.data_time_ms, sso.node_id
            )
        so = self._stream_objects[object_id]
        return S3ObjectMetadata(
            object_id,
            obj.size,
            ObjectType.STREAM,
            (ObjectStreamRange(so.stream_id, so.start_offset, so.end_offset),),
            object_id,
            so.data_time_ms,
        )

    async def get_objects(
        self, stream_id: int, start_offset: int, end_offset: int, limit: int
    ) -> list[S3ObjectMetadata]:
        """For a stream-set object the returned ranges are only ``stream_id``'s (what a reader needs)."""
        stream = self._streams.get(stream_id)
        index = self._index.get(stream_id)
        if stream is None or index is None:
            return []
        out: list[S3ObjectMetadata] = []
        expected: int | None = None
        for placement in index.from_offset(max(start_offset, stream.start_offset)):
            if len(out) >= limit or (end_offset != -1 and placement.start >= end_offset):
                break
            if expected is not None and placement.start != expected:
                break
            out.append(self._metadata_of(placement.object_id, placement, stream_id))
            expected = placement.end
        return out

    async def get_stream_set_objects(self, node_id: int) -> list[S3ObjectMetadata]:
        ssos = [s for s in self._stream_set_objects.values() if s.node_id == node_id]
        ssos.sort(key=lambda s: (s.order_id, s.object_id))
        return [self._metadata_of(s.object_id) for s in ssos]

    async def get_stream_objects(self, stream_id: int) -> list[S3ObjectMetadata]:
        index = self._index.get(stream_id)
        if index is None:
            return []
        return [self._metadata_of(p.object_id) for p in index.from_offset(-1) if p.object_id in self._stream_objects]

    def object_state(self, object_id: int) -> ObjectState | None:
        """The object's lifecycle state, or None once removed (for operators and tests)."""
        obj = self._objects.get(object_id)
        return obj.state if obj is not None else None

    async def get_kv(self, key: str) -> bytes | None:
        return self._kv.get(key)

    def closed_streams(self) -> list[tuple[int, tuple[tuple[str, str], ...]]]:
        """(id, tags) of every closed stream: what the controller's sweep of deleted topics' streams looks at."""
        return [(s.stream_id, s.tags) for s in self._streams.values() if s.state == StreamState.CLOSED]

    def kv_keys(self, prefix: str) -> list[str]:
        """The KV keys starting with ``prefix``."""
        return [key for key in self._kv if key.startswith(prefix)]
