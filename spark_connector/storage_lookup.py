"""Planning the direct path on the driver: where each partition's log stream is and which objects hold a range.

The driver knows only the bootstrap servers. A broker's DescribeQuorum answer names the controller voters
(``metadata.remote.discovery.quorum_voters``, what ``fjord metadata shell --bootstrap`` does; an embedded single node
names its own read-only CONTROLLER listener, ``controller.embedded_listener``), and the active controller answers
Fjord's read-only stream RPCs (GetKV, GetStreams, GetObjects) through the same ``RemoteStreamMetadata`` a broker
uses. Per partition: the KV entry ``<namespace>/<topicId>/<partition>`` names the
meta stream; its uploaded records (read from the bucket, as the executors will) name the log stream, and for a
compacted partition the cleaned stream and the cleaner offset; GetObjects says which committed objects hold
``[start, end)`` of them (``direct_plan.cover_slices`` splits the range). A ``read_committed`` read also reads the
uploaded entries of the partition's txn stream (its aborted transactions; see ``direct_plan.committed_view``).

The LOG entry read is the newest uploaded one, which may lag the broker's: a cleaner round that switched streams
since is not seen, and the older cleaned stream and cleaner offset are read instead (the records a consumer saw
before that round), until their objects are deleted, from where the executor reads through the broker.

A partition the direct path cannot serve keeps its plain :class:`OffsetRange`, which the executor reads through the
broker: one whose KV entry or LOG entry is not uploaded yet. Everything here is asked once per planned batch.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from metadata.kv_keys import partition_kv_key
from metadata.remote.channel import ActiveControllerChannel
from metadata.remote.discovery import QuorumDiscoveryError, quorum_voters
from metadata.remote.stream_metadata import RemoteStreamMetadata
from spark_connector.direct_plan import (
    DirectRange,
    ObjectSlice,
    PartitionStreams,
    committed_view,
    cover_slices,
    partition_streams,
)
from spark_connector.offsets import OffsetRange
from storage.config import StorageConfig, parse_bucket_url
from storage.errors import StorageError
from storage.metadata.api import S3ObjectMetadata
from storage.namespace import namespace_for
from storage.objects.reader import ObjectReader
from storage.objectstore.factory import open_object_store
from wire.aborted_txns import AbortedTxnEntry, TxnIndexFormatError, decode_entry

__all__ = ["StorageLookupError", "locate_ranges"]

logger = logging.getLogger(__name__)

CLIENT_ID = "fjord-spark-source"
REQUEST_TIMEOUT_S = 10.0
RETRY_BUDGET_S = 30.0
#: Objects asked of GetObjects per call; a long range asks again from where the answer ended.
OBJECTS_PER_CALL = 1000
_META_READ_BYTES = 1 << 20


class StorageLookupError(RuntimeError):
    """The controllers could not say where a partition's data is (unreachable quorum, unreadable meta stream)."""


@dataclass(frozen=True)
class ClusterFacts:
    """What the Kafka side of the cluster said, for the storage side: its id and each topic's id."""

    bootstrap: Sequence[tuple[str, int]]
    cluster_id: str
    topic_ids: Mapping[str, uuid.UUID]


def locate_ranges(
    facts: ClusterFacts, object_store: str, ranges: Sequence[OffsetRange], *, read_committed: bool = False
) -> list[OffsetRange | DirectRange]:
    """Each range as a :class:`DirectRange` where its partition's log stream is found, else unchanged; with
    ``read_committed``, each with its :class:`CommittedView` from the partition's txn stream."""
    try:
        return asyncio.run(_locate(facts, object_store, ranges, read_committed))
    # ValueError: a meta stream record or a controller answer that does not decode.
    except (QuorumDiscoveryError, StorageError, ValueError, OSError, TimeoutError) as exc:
        raise StorageLookupError(
            f"could not locate the uploaded data of the cluster at "
            f"{','.join(f'{h}:{p}' for h, p in facts.bootstrap)}: {exc}"
        ) from exc


async def _locate(
    facts: ClusterFacts, object_store: str, ranges: Sequence[OffsetRange], read_committed: bool
) -> list[OffsetRange | DirectRange]:
    try:
        voters = await quorum_voters(list(facts.bootstrap), REQUEST_TIMEOUT_S, client_id=CLIENT_ID)
    except QuorumDiscoveryError as exc:
        raise StorageLookupError(
            f"{exc}; reading directly needs the controllers reachable over the network (a cluster, or a single "
            "combined node with a CONTROLLER listener): use fjord.read=broker or auto"
        ) from exc
    channel = ActiveControllerChannel(
        voters, client_id=CLIENT_ID, request_timeout_s=REQUEST_TIMEOUT_S, retry_budget_s=RETRY_BUDGET_S
    )
    key = "fjord.object.store"
    store = open_object_store(parse_bucket_url(object_store, key), StorageConfig(), key)
    namespace = namespace_for(facts.cluster_id)
    try:
        metadata = RemoteStreamMetadata(channel, node_id=-1, node_epoch=lambda: -1)
        reader = ObjectReader(store, namespace)
        streams: dict[tuple[str, int], PartitionStreams | None] = {}
        aborted: dict[tuple[str, int], list[AbortedTxnEntry]] = {}
        out: list[OffsetRange | DirectRange] = []
        for offsets in ranges:
            tp = (offsets.topic, offsets.partition)
            if tp not in streams:
                streams[tp] = await _partition_streams(metadata, reader, namespace, facts.topic_ids[offsets.topic], tp)
                found_streams = streams[tp]
                if read_committed and found_streams is not None:
                    aborted[tp] = await _aborted_entries(metadata, reader, found_streams, f"{tp[0]}-{tp[1]}")
            partition = streams[tp]
            if partition is None or offsets.size <= 0:
                out.append(offsets)
                continue
            slices: tuple[ObjectSlice, ...] = ()
            for stream_id, start, end in partition.pieces(offsets):
                covered = cover_slices(start, end, stream_id, await _objects(metadata, stream_id, start, end))
                slices += covered
                if (covered[-1].end if covered else start) < end:
                    break
            planned = DirectRange(offsets, namespace, slices)
            if read_committed:
                planned = replace(planned, committed=committed_view(offsets, aborted[tp]))
            out.append(planned)
        return out
    finally:
        await channel.close()
        await store.close()


async def _objects(metadata: RemoteStreamMetadata, stream_id: int, start: int, end: int) -> list[S3ObjectMetadata]:
    """The committed objects holding ``[start, end)`` of a stream, asked in pages from where each answer ended."""
    objects: list[S3ObjectMetadata] = []
    cursor = start
    while cursor < end:
        found = await metadata.get_objects(stream_id, cursor, end, OBJECTS_PER_CALL)
        ends = [r.end_offset for obj in found for r in obj.ranges if r.stream_id == stream_id]
        if not ends or max(ends) <= cursor:
            break
        objects.extend(found)
        cursor = max(ends)
    return objects


async def _partition_streams(
    metadata: RemoteStreamMetadata, reader: ObjectReader, namespace: str, topic_id: uuid.UUID, tp: tuple[str, int]
) -> PartitionStreams | None:
    """The partition's stream ids, or None when the direct path cannot read it (see the module docstring)."""
    where = f"{tp[0]}-{tp[1]}"
    raw = await metadata.get_kv(partition_kv_key(namespace, topic_id, tp[1]))
    if raw is None or len(raw) != 8:
        logger.info("%s: no meta stream known to the controller yet; reading it through the broker", where)
        return None
    (meta_id,) = struct.unpack(">q", raw)
    streams = partition_streams(await _uploaded_records(metadata, reader, meta_id), where)
    if streams is None:
        logger.info("%s: its LOG entry is not uploaded yet; reading it through the broker", where)
        return None
    return streams


async def _aborted_entries(
    metadata: RemoteStreamMetadata, reader: ObjectReader, streams: PartitionStreams, where: str
) -> list[AbortedTxnEntry]:
    """The uploaded entries of the partition's txn stream, in marker order (none when it has no txn stream)."""
    if streams.txn < 0:
        return []
    try:
        return [decode_entry(p) for p in await _uploaded_records(metadata, reader, streams.txn)]
    except TxnIndexFormatError as exc:
        raise StorageLookupError(f"txn stream {streams.txn} of {where}: {exc}") from exc


async def _uploaded_records(metadata: RemoteStreamMetadata, reader: ObjectReader, stream_id: int) -> list[bytes]:
    """The payloads of a (small) stream's records that committed objects hold, in offset order: a prefix of the
    stream, as a gap ends it (the txn stream's entries are only complete up to the last one returned)."""
    found = await metadata.get_streams([stream_id])
    if not found:
        return []
    stream = found[0]
    payloads: list[bytes] = []
    cursor = stream.start_offset
    while cursor < stream.end_offset:
        objects = await metadata.get_objects(stream_id, cursor, stream.end_offset, OBJECTS_PER_CALL)
        if not objects:
            break
        for obj in objects:
            for part in obj.ranges:
                if part.stream_id != stream_id or part.end_offset <= cursor:
                    continue
                if part.start_offset > cursor:
                    return payloads
                while cursor < part.end_offset:
                    batches = await reader.read_range(
                        obj.object_id, stream_id, cursor, part.end_offset, _META_READ_BYTES, obj.object_size
                    )
                    if not batches:
                        return payloads
                    payloads.extend(b.payload for b in batches if b.base_offset >= cursor)
                    cursor = batches[-1].last_offset
                cursor = max(cursor, part.end_offset)
    return payloads
