"""Planning the direct path on the driver: where each partition's log stream is and which objects hold a range.

The driver knows only the bootstrap servers. A broker's DescribeQuorum answer names the controller voters
(``controller.shell_sources.quorum_voters``, what ``fjord metadata shell --bootstrap`` does), and the active
controller answers Fjord's read-only stream RPCs (GetKV, GetStreams, GetObjects) through the same
``RemoteStreamMetadata`` a broker uses. Per partition: the KV entry ``<namespace>/<topicId>/<partition>`` names the
meta stream; its uploaded records (read from the bucket, as the executors will) name the log stream; GetObjects says
which committed objects hold ``[start, end)`` of it (``direct_plan.cover`` splits the range).

A partition the direct path cannot serve keeps its plain :class:`OffsetRange`, which the executor reads through the
broker: one whose KV entry or LOG entry is not uploaded yet, or whose topic is compacted once the cleaner has run
(reading the cleaned stream is the broker's job here). Everything here is asked once per planned batch.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controller.kv_keys import partition_kv_key
from controller.remote.channel import ActiveControllerChannel
from controller.remote.stream_metadata import RemoteStreamMetadata
from controller.shell_sources import MetadataSourceError, quorum_voters
from spark_connector.direct_plan import DirectRange, cover, log_stream_id
from spark_connector.offsets import OffsetRange
from storage.config import StorageConfig, parse_bucket_url
from storage.errors import StorageError
from storage.namespace import namespace_for
from storage.objects.reader import ObjectReader
from storage.objectstore.factory import open_object_store

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
    facts: ClusterFacts, object_store: str, ranges: Sequence[OffsetRange]
) -> list[OffsetRange | DirectRange]:
    """Each range as a :class:`DirectRange` where its partition's log stream is found, else unchanged."""
    try:
        return asyncio.run(_locate(facts, object_store, ranges))
    # ValueError: a meta stream record or a controller answer that does not decode.
    except (MetadataSourceError, StorageError, ValueError, OSError, TimeoutError) as exc:
        raise StorageLookupError(
            f"could not locate the uploaded data of the cluster at "
            f"{','.join(f'{h}:{p}' for h, p in facts.bootstrap)}: {exc}"
        ) from exc


async def _locate(
    facts: ClusterFacts, object_store: str, ranges: Sequence[OffsetRange]
) -> list[OffsetRange | DirectRange]:
    try:
        voters = await quorum_voters(list(facts.bootstrap), REQUEST_TIMEOUT_S, client_id=CLIENT_ID)
    except MetadataSourceError as exc:
        raise StorageLookupError(
            f"{exc}; reading directly needs a controller quorum reachable over the network (a cluster; a single "
            "combined node keeps its metadata in process): use fjord.read=broker or auto"
        ) from exc
    channel = ActiveControllerChannel(
        voters, client_id=CLIENT_ID, request_timeout_s=REQUEST_TIMEOUT_S, retry_budget_s=RETRY_BUDGET_S
    )
    store = open_object_store(parse_bucket_url(object_store, "fjord.object.store"), StorageConfig())
    namespace = namespace_for(facts.cluster_id)
    try:
        metadata = RemoteStreamMetadata(channel, node_id=-1, node_epoch=lambda: -1)
        reader = ObjectReader(store, namespace)
        streams: dict[tuple[str, int], int | None] = {}
        out: list[OffsetRange | DirectRange] = []
        for offsets in ranges:
            tp = (offsets.topic, offsets.partition)
            if tp not in streams:
                streams[tp] = await _log_stream(metadata, reader, namespace, facts.topic_ids[offsets.topic], tp)
            stream_id = streams[tp]
            if stream_id is None or offsets.size <= 0:
                out.append(offsets)
                continue
            objects = []
            cursor = offsets.start
            while cursor < offsets.end:
                found = await metadata.get_objects(stream_id, cursor, offsets.end, OBJECTS_PER_CALL)
                ends = [r.end_offset for obj in found for r in obj.ranges if r.stream_id == stream_id]
                if not ends or max(ends) <= cursor:
                    break
                objects.extend(found)
                cursor = max(ends)
            out.append(cover(offsets, stream_id, namespace, objects))
        return out
    finally:
        await channel.close()
        await store.close()


async def _log_stream(
    metadata: RemoteStreamMetadata, reader: ObjectReader, namespace: str, topic_id: uuid.UUID, tp: tuple[str, int]
) -> int | None:
    """The partition's log stream id, or None when the direct path cannot read it (see the module docstring)."""
    where = f"{tp[0]}-{tp[1]}"
    raw = await metadata.get_kv(partition_kv_key(namespace, topic_id, tp[1]))
    if raw is None or len(raw) != 8:
        logger.info("%s: no meta stream known to the controller yet; reading it through the broker", where)
        return None
    (meta_id,) = struct.unpack(">q", raw)
    found = await metadata.get_streams([meta_id])
    if not found:
        return None
    meta = found[0]
    payloads: list[bytes] = []
    cursor = meta.start_offset
    while cursor < meta.end_offset:
        objects = await metadata.get_objects(meta_id, cursor, meta.end_offset, OBJECTS_PER_CALL)
        if not objects:
            break
        for obj in objects:
            for part in obj.ranges:
                if part.stream_id != meta_id or part.end_offset <= cursor:
                    continue
                while cursor < part.end_offset:
                    batches = await reader.read_range(
                        obj.object_id, meta_id, cursor, part.end_offset, _META_READ_BYTES, obj.object_size
                    )
                    if not batches:
                        break
                    payloads.extend(b.payload for b in batches if b.base_offset >= cursor)
                    cursor = batches[-1].last_offset
                cursor = max(cursor, part.end_offset)
    streams = log_stream_id(payloads, where)
    if streams is None:
        logger.info("%s: its LOG entry is not uploaded yet; reading it through the broker", where)
        return None
    log_id, cleaned_id = streams
    if cleaned_id >= 0:
        logger.info("%s: compacted (cleaned stream %d); reading it through the broker", where, cleaned_id)
        return None
    return log_id
