"""Finding and opening the streams a partition is made of (DESIGN.md §4), before anything is read from them.

The controller KV entry ``<namespace>/<topicId>/<partition>`` names the meta stream (created on first open); the
meta stream's ``LOG`` entry names the log and time streams (created on first open too), the txn stream once the
partition has seen an aborted transaction, and, with compaction, the cleaned stream. Every stream is opened with
the partition's leader epoch, so an older leader can no longer make data visible; the share stream
(``streamMap["shr"]``) once a share group has touched the partition. Streams that interrupted or
replaced cleaner rounds left behind (LOG's ``doomed`` list) are deleted here, and a crash between a round's
switch and its trim of the log stream is finished.

This module only opens streams; what they hold is restored by :mod:`.recovery`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from kio.schema.errors import ErrorCode

from broker.partition.meta_stream import KEY_LOG, MetaFormatError, MetaStream, decode_entry
from broker.partition.partition_log.phases import Phases
from metadata.kv_keys import partition_kv_key
from metadata.stream_tags import partition_stream_tags
from storage import errors as storage_errors
from storage.metadata.api import StreamMetadata
from storage.stream_api import CommittedRecords, Stream, StreamClient
from storage.stream_record_batch import StreamRecordBatch
from wire.errors import KafkaError

logger = logging.getLogger(__name__)

_OPEN_RETRIES = 50
_OPEN_RETRY_DELAY = 0.1


@dataclass(frozen=True, slots=True)
class OpenedStreams:
    """The open streams of one partition and the two meta entries that name them."""

    kv_key: str
    meta: MetaStream
    log: Stream
    time_stream: Stream
    #: The LOG meta entry as JSON (``streamMap``, ``cleaned``, ``co``, ``cb``, ``th``, ``doomed``).
    log_info: dict[str, Any]
    cleaned: Stream | None
    #: The aborted-transaction index; None until the partition's first abort creates it.
    txn_stream: Stream | None = None
    #: The share groups' state (broker/share/); None until a share group first touches the partition.
    share_stream: Stream | None = None


async def open_stream(streams: StreamClient, stream_id: int, epoch: int, where: str) -> Stream:
    """Opens a stream, waiting while its previous owner is still closing it (reassignment, crash recovery, a WAL
    failover's replay). The wait is logged when it starts and when it ends, not at every retry: a failover keeps
    every partition of the dead broker waiting for seconds."""
    started = time.monotonic()
    for attempt in range(_OPEN_RETRIES):
        try:
            stream = await streams.open_stream(stream_id, epoch)
        except storage_errors.StreamNotClosedError as exc:
            if attempt == _OPEN_RETRIES - 1:
                raise
            if attempt == 0:
                logger.info("stream %d of %s is still open elsewhere; retrying every %.0f ms: %s", stream_id, where,
                            _OPEN_RETRY_DELAY * 1000, exc)
            await asyncio.sleep(_OPEN_RETRY_DELAY)
            continue
        if attempt:
            logger.info("stream %d of %s opened after waiting %.3f s for its previous owner to close it", stream_id,
                        where, time.monotonic() - started)
        return stream
    raise AssertionError("unreachable")


async def read_meta_id(kv: StreamMetadata, namespace: str, topic_id: uuid.UUID, partition: int) -> int | None:
    """The partition's meta stream id from its KV entry (None: not created yet, or not eight bytes, which
    :func:`open_streams` reports). The entry never changes once written, so it may be read ahead of the open."""
    raw = await kv.get_kv(partition_kv_key(namespace, topic_id, partition))
    return struct.unpack(">q", raw)[0] if raw is not None and len(raw) == 8 else None


#: The LOG entry's ``streamMap`` roles a partition keeps for good once created: a move's target opens them on what
#: it read of the meta stream while it opened that (:func:`open_streams`). The cleaned stream is replaced by each
#: cleaner round, so it is not one.
_LASTING_ROLES = ("log", "tim", "txn", "shr")
#: A move's target reads the meta stream whole with its open: the source's close trimmed it to its closing entries.
_MOVED_META_BYTES = 1 << 20


def _lasting_stream_ids(batches: Sequence[StreamRecordBatch]) -> dict[str, int]:
    """The streams of :data:`_LASTING_ROLES` the last LOG entry among a meta stream's ``batches`` names (``{}``:
    none, or entries that do not parse: the replay names the damage)."""
    log_entry: bytes | None = None
    for batch in batches:
        try:
            key, value = decode_entry(batch.payload)
        except MetaFormatError:
            return {}
        if key == KEY_LOG:
            log_entry = value
    if log_entry is None:
        return {}
    try:
        found = _by_role(json.loads(log_entry)["streamMap"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
    return {role: stream_id for role, stream_id in found.items() if stream_id >= 0}


def _by_role(stream_map: dict[str, Any]) -> dict[str, int]:
    """The LOG entry's ``streamMap`` as stream ids by role of :data:`_LASTING_ROLES` (-1: none yet)."""
    return {role: int(stream_map.get(role, -1)) for role in _LASTING_ROLES}


async def _open_named(
    reading: asyncio.Future[CommittedRecords] | None, open_one: Callable[[int], Awaitable[Stream | None]]
) -> dict[str, Stream]:
    """Opens the streams the LOG entry ``reading`` finds names for good, by role (``{}``: no read, or it failed:
    they are opened after the replay)."""
    if reading is None:
        return {}
    try:
        read = await asyncio.shield(reading)
    except Exception:
        return {}
    ids = _lasting_stream_ids(read.batches)
    results = await asyncio.gather(*(open_one(i) for i in ids.values()), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return {role: cast("Stream", stream) for role, stream in zip(ids, results, strict=True)}


def _retrieved(future: asyncio.Future[CommittedRecords]) -> None:
    """A read whose open failed is not awaited: its error must not be logged as never retrieved."""
    if not future.cancelled():
        future.exception()


async def _read_whole(
    reading: asyncio.Future[CommittedRecords] | None, stream: Stream, where: str
) -> Sequence[StreamRecordBatch] | None:
    """The batches ``reading`` read of the meta stream, if they are all of it as this open found it (None: the
    replay reads the stream itself). A committed offset's records never change, so the same range read before the
    open was answered holds the same entries; a range that differs (a previous owner that had not closed yet) does
    not count."""
    if reading is None:
        return None
    try:
        read = await reading
    except Exception as exc:  # the replay reads the stream itself, and reports what fails
        logger.debug("reading meta stream %d of %s with its open failed: %s", stream.stream_id, where, exc)
        return None
    if read.complete and (read.start_offset, read.end_offset) == (stream.start_offset, stream.next_offset):
        return read.batches
    return None


async def delete_doomed(streams: StreamClient, stream_ids: list[int], epoch: int, where: str) -> list[int]:
    """Deletes streams a cleaner round left behind (an interrupted round's output, or a replaced cleaned stream
    whose deletion did not finish); one already gone is fine. Returns the ids that could not be deleted yet."""
    left: list[int] = []
    for stream_id in stream_ids:
        try:
            await streams.delete_stream(stream_id, epoch)
            logger.info("deleted stream %d of %s left by an earlier cleaner round", stream_id, where)
        except storage_errors.StreamNotFoundError:
            pass
        except storage_errors.StorageError as exc:
            logger.warning("stream %d of %s left by a cleaner round is not deletable yet: %s", stream_id, where, exc)
            left.append(stream_id)
    return left


async def open_streams(
    *,
    streams: StreamClient,
    kv: StreamMetadata,
    namespace: str,
    topic: str,
    partition: int,
    topic_id: uuid.UUID,
    leader_epoch: int,
    opened: list[Stream],
    meta_id: int | None = None,
    marks: Phases | None = None,
) -> OpenedStreams:
    """Opens (creating on first open) the meta, log, time, txn, share and cleaned streams of ``topic``-``partition``.

    ``meta_id``: the meta stream's id when the caller read the KV entry ahead (a reassignment's target does, while
    the source still closes: :func:`read_meta_id`). Such an open, the move's target's after the election, reads the
    meta stream's committed records while the meta stream is being opened (its source closed it, trimmed to its
    closing entries, before the election): the streams the LOG entry there names for good are opened as soon as the
    read is back, rather than after the replay, a controller round trip (a Raft commit) less for the moved
    partition's producer to wait for, and the replay takes what was read if it is the whole stream as the open found
    it. The LOG entry the replay finds must name the streams opened so (else the open fails). Each stream is added
    to ``opened`` as soon as it is open, so the caller can close them all when this or what follows it fails: the
    next attempt (or another node) must be able to open them."""
    where = f"{topic}-{partition}"
    moved = meta_id is not None
    marks = marks or Phases()
    key = partition_kv_key(namespace, topic_id, partition)
    raw = struct.pack(">q", meta_id) if meta_id is not None else await kv.get_kv(key)
    marks.mark("kv")
    if raw is None:
        # Created only if still absent: a broker that lost the partition while opening it (fenced, then let back
        # in) and its new leader may both get here; they must end up on one meta stream, whose epochs then order
        # them, instead of each writing its own streams and the loser's acknowledged records becoming unreadable.
        created = await streams.create_stream(partition_stream_tags(topic, topic_id, partition, "meta"))
        raw = await kv.put_kv_if_absent(key, struct.pack(">q", created))
        (meta_id,) = struct.unpack(">q", raw)
        if meta_id == created:
            logger.info("created meta stream %d for %s (kv %s)", meta_id, where, key)
        else:
            logger.info("%s got meta stream %d from another opener meanwhile; stream %d stays unused", where,
                        meta_id, created)
    else:
        if len(raw) != 8:
            raise KafkaError(ErrorCode.kafka_storage_error, f"kv entry {key} of {where} is {len(raw)} bytes")
        (meta_id,) = struct.unpack(">q", raw)

    async def open_one(stream_id: int) -> Stream | None:
        if stream_id < 0:
            return None
        stream = await open_stream(streams, stream_id, leader_epoch, where)
        opened.append(stream)
        return stream

    # A move's target opens the meta stream and, as soon as the meta stream's records are read, the others.
    reading = asyncio.ensure_future(streams.read_committed(meta_id, _MOVED_META_BYTES)) if moved else None
    if reading is not None:
        reading.add_done_callback(_retrieved)
    first = await asyncio.gather(open_one(meta_id), _open_named(reading, open_one), return_exceptions=True)
    for result in first:
        if isinstance(result, BaseException):
            if reading is not None:
                reading.cancel()
            raise result
    meta_stream = cast("Stream", first[0])
    early = cast("dict[str, Stream]", first[1])
    marks.mark("meta open")  # a move's: with the streams opened on its read, so "data open" is then about nothing
    meta = MetaStream(meta_stream, where)
    await meta.replay(await _read_whole(reading, meta_stream, where))
    marks.mark("meta replay")
    log_entry = meta.get(KEY_LOG)
    if log_entry is None:
        log_id = await streams.create_stream(partition_stream_tags(topic, topic_id, partition, "log"))
        time_id = await streams.create_stream(partition_stream_tags(topic, topic_id, partition, "time"))
        log_info: dict[str, Any] = {"streamMap": {"log": log_id, "tim": time_id, "txn": -1, "shr": -1}}
        await meta.put({KEY_LOG: json.dumps(log_info).encode()})
    else:
        log_info = json.loads(log_entry)
    stream_map = log_info["streamMap"]
    ids = _by_role(stream_map)
    for role, stream in early.items():
        if ids[role] != stream.stream_id:
            raise KafkaError(ErrorCode.kafka_storage_error,
                             f"{where}: stream {stream.stream_id} was opened as its {role} stream from the meta "
                             f"stream read with its open, but its LOG entry names stream {ids[role]}")

    async def reuse_or_open(role: str) -> Stream | None:
        return early[role] if role in early else await open_one(ids[role])

    found = await asyncio.gather(*(reuse_or_open(role) for role in _LASTING_ROLES), return_exceptions=True)
    marks.mark("data open")
    for result in found:
        if isinstance(result, BaseException):
            raise result
    log, time_stream, txn_stream, share_stream = cast("list[Stream | None]", found)
    if log is None or time_stream is None:
        raise AssertionError("the log and time streams always exist")
    doomed = log_info.get("doomed")
    if isinstance(doomed, list) and doomed:
        log_info["doomed"] = await delete_doomed(streams, [int(x) for x in doomed], leader_epoch, where)
        await meta.put({KEY_LOG: json.dumps(log_info).encode()})
    cleaned: Stream | None = None
    cleaned_id = int(log_info.get("cleaned", -1))
    if cleaned_id >= 0:
        cleaned = await open_stream(streams, cleaned_id, leader_epoch, where)
        opened.append(cleaned)
        cleaner_offset = int(log_info.get("co", 0))
        if log.start_offset < cleaner_offset:
            # A crash between a round's switch and its trim: the prefix now lives in the cleaned stream.
            await log.trim(min(cleaner_offset, log.next_offset))
    return OpenedStreams(key, meta, log, time_stream, log_info, cleaned, txn_stream, share_stream)
