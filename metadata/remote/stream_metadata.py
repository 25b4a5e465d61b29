"""`storage.metadata.api.StreamMetadata` of a broker in a cluster: Fjord's own stream and object RPCs, answered by
the active controller.

Why stream metadata *reads* also go to the active controller rather than the broker's replica: the storage engine
trims its WAL once an object commit returns, then reads that data through ``get_objects``; a lagging local replica
could not find it yet.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from metadata.errors import NodeFencedError
from metadata.remote.channel import ActiveControllerChannel
from metadata.rpc.stream_rpcs import (
    CloseStream,
    CloseStreams,
    CommitStreamObject,
    CommitStreamSetObject,
    CommitStreamSetObjects,
    CreateStream,
    DeleteKV,
    DeleteStream,
    GetKV,
    GetObjects,
    GetOpeningStreams,
    GetStreamObjects,
    GetStreams,
    GetStreamSetObjects,
    OpenStream,
    PrepareObjects,
    PutKV,
    PutKVIfAbsent,
    RemoveObjects,
    StreamRequest,
    SweepObjects,
    TrimStream,
)
from storage.metadata.api import (
    CommitStreamObjectRequest,
    CommitStreamSetObjectRequest,
    NodeIdentity,
    OpeningStream,
    OpenStreamResult,
    S3ObjectMetadata,
    StreamClose,
    StreamMetadataRecord,
)

logger = logging.getLogger(__name__)


class RemoteStreamMetadata:
    """`storage.metadata.api.StreamMetadata` served by the active controller (Fjord's own RPCs).

    A mutation refused with NODE_FENCED while this broker's registration is still current means the controller
    fenced it for a missed session (a pause, a slow heartbeat), not that a newer incarnation exists: such a fence
    lifts at the next heartbeat once the broker has caught up. ``wait_unfenced`` waits for that (bounded) and the
    call is retried, so a broker resuming from a pause uploads and closes what it still owns instead of treating
    the fence as final (the storage engine gives up on a fenced node, leaving the data in its WAL until a restart).
    Nothing unsafe becomes possible: while fenced, every mutation is refused, and streams another broker has
    opened since carry a higher epoch, which the controller checks on every commit. A new partition's streams do
    not exist yet when its first opener is fenced, so its KV entry is created with ``put_kv_if_absent``: the
    resumed opener then finds the new leader's meta stream, whose epoch fences it, instead of replacing it.
    """

    _FENCE_RETRIES = 3

    def __init__(
        self,
        channel: ActiveControllerChannel,
        node_id: int,
        node_epoch: Callable[[], int],
        wait_unfenced: Callable[[NodeIdentity], Awaitable[bool]] | None = None,
    ) -> None:
        self._channel = channel
        self._node_id = node_id
        self._node_epoch = node_epoch
        self._wait_unfenced = wait_unfenced

    def _self(self) -> NodeIdentity:
        """The identity read-only calls carry (mutations carry the caller's own NodeIdentity)."""
        return NodeIdentity(self._node_id, self._node_epoch())

    async def _call(self, request: StreamRequest, what: str, *, stream_id: int = -1) -> Any:
        attempt = 0
        while True:
            try:
                return await self._channel.stream(request, what, stream_id=stream_id)
            except NodeFencedError as exc:
                attempt += 1
                if not request.MUTATES or self._wait_unfenced is None or attempt > self._FENCE_RETRIES:
                    raise
                logger.info("node %d: %s refused while fenced (%s); waiting for the fence to lift",
                            request.node.node_id, what, exc)
                if not await self._wait_unfenced(request.node):
                    raise

    async def create_stream(self, node: NodeIdentity, tags: Sequence[tuple[str, str]] = ()) -> int:
        result: int = await self._call(CreateStream(node, tuple(tags)), "create a stream")
        return result

    async def open_stream(self, node: NodeIdentity, stream_id: int, epoch: int) -> OpenStreamResult:
        result: OpenStreamResult = await self._call(
            OpenStream(node, stream_id, epoch), f"open stream {stream_id} at epoch {epoch}", stream_id=stream_id
        )
        return result

    async def close_stream(self, node: NodeIdentity, stream_id: int, epoch: int) -> None:
        await self._call(CloseStream(node, stream_id, epoch), f"close stream {stream_id}",
                                   stream_id=stream_id)

    async def close_streams(self, node: NodeIdentity, closes: Sequence[StreamClose]) -> None:
        await self._call(CloseStreams(node, tuple(closes)),
                         f"close streams {', '.join(str(c.stream_id) for c in closes)}")

    async def trim_stream(self, node: NodeIdentity, stream_id: int, epoch: int, new_start_offset: int) -> None:
        await self._call(TrimStream(node, stream_id, epoch, new_start_offset),
                                   f"trim stream {stream_id} to {new_start_offset}", stream_id=stream_id)

    async def delete_stream(self, node: NodeIdentity, stream_id: int, epoch: int) -> None:
        await self._call(DeleteStream(node, stream_id, epoch), f"delete stream {stream_id}",
                                   stream_id=stream_id)

    async def get_streams(self, stream_ids: Sequence[int]) -> list[StreamMetadataRecord]:
        result = await self._call(GetStreams(self._self(), tuple(stream_ids)), "read streams")
        return list(result or ())

    async def get_opening_streams(self, node: NodeIdentity) -> list[OpeningStream]:
        result = await self._call(GetOpeningStreams(node), f"list streams opened by node {node.node_id}")
        return list(result or ())

    async def prepare_objects(self, node: NodeIdentity, count: int, ttl_ms: int) -> int:
        result: int = await self._call(PrepareObjects(node, count, ttl_ms), f"prepare {count} objects")
        return result

    async def commit_stream_set_object(self, request: CommitStreamSetObjectRequest) -> None:
        await self._call(CommitStreamSetObject(request.node, request),
                                   f"commit stream-set object {request.object_id}")

    async def commit_stream_set_objects(self, requests: Sequence[CommitStreamSetObjectRequest]) -> None:
        if requests:
            ids = f"{requests[0].object_id}..{requests[-1].object_id}"
            await self._call(CommitStreamSetObjects(requests[0].node, tuple(requests)),
                             f"commit {len(requests)} stream-set objects {ids}")

    async def commit_stream_object(self, request: CommitStreamObjectRequest) -> None:
        await self._call(CommitStreamObject(request.node, request),
                                   f"commit stream object {request.object_id}")

    async def get_objects(
        self, stream_id: int, start_offset: int, end_offset: int, limit: int
    ) -> list[S3ObjectMetadata]:
        result = await self._call(
            GetObjects(self._self(), stream_id, start_offset, end_offset, limit),
            f"find objects of stream {stream_id} [{start_offset}, {end_offset})", stream_id=stream_id,
        )
        return list(result or ())

    async def get_stream_set_objects(self, node_id: int) -> list[S3ObjectMetadata]:
        result = await self._call(GetStreamSetObjects(self._self(), node_id),
                                            f"list stream-set objects of node {node_id}")
        return list(result or ())

    async def get_stream_objects(self, stream_id: int) -> list[S3ObjectMetadata]:
        result = await self._call(GetStreamObjects(self._self(), stream_id),
                                            f"list stream objects of stream {stream_id}", stream_id=stream_id)
        return list(result or ())

    async def sweep_objects(self, now_ms: int) -> list[int]:
        result = await self._call(SweepObjects(self._self(), now_ms), "sweep expired objects")
        return list(result or ())

    async def remove_objects(self, object_ids: Sequence[int]) -> None:
        await self._call(RemoveObjects(self._self(), tuple(object_ids)),
                                   f"remove {len(object_ids)} objects")

    async def get_kv(self, key: str) -> bytes | None:
        result: bytes | None = await self._call(GetKV(self._self(), key), f"read KV {key}")
        return result

    async def put_kv(self, key: str, value: bytes) -> None:
        await self._call(PutKV(self._self(), key, value), f"write KV {key}")

    async def put_kv_if_absent(self, key: str, value: bytes) -> bytes:
        result: bytes = await self._call(PutKVIfAbsent(self._self(), key, value), f"create KV {key}")
        return result

    async def delete_kv(self, key: str) -> None:
        await self._call(DeleteKV(self._self(), key), f"delete KV {key}")
