"""Fetch (key 1) v4-18 for consumers: long poll, byte limits, incremental sessions (KIP-227), topic ids (v13+), and
where leadership went for a partition that moved (KIP-951, v16+: ``current_leader`` and the leaders' ``node_endpoints``,
so the client retries at the new leader without a Metadata round trip first). v17's ``replica_directory_id`` and
v18's ``high_watermark`` are tagged fields only a follower sends; Fjord brokers do not replicate, so a consumer's fetch
never carries them and they are read as Kafka reads them from a consumer: not at all.

A fetch answers at once when it has ``min_bytes`` of data, an error, or ``max_wait_ms`` is zero; otherwise it
waits until an append to one of its partitions (``PartitionLog.wait_for_data``) or the deadline, then reads
again. Byte limits follow Kafka: each partition returns at most ``partition_max_bytes`` and the response at most
``max_bytes``, except that the first batch of the response is always returned whole so a consumer can never be
stuck behind a batch larger than its limits. read_committed (isolation level 1) returns data only below the last
stable offset, with the aborted transactions of the returned range; its long poll wakes on appends too, since a
transaction marker is what moves the LSO. Both levels report the LSO, as Kafka does.

TOPIC READ is checked here, on every partition a fetch serves, once per topic and request (Kafka's
``filterByAuthorized``), not by a guard that would take the refused topics out of the request: a refused partition
stays in its fetch session (KIP-227) and is answered TOPIC_AUTHORIZATION_FAILED again at each incremental fetch,
as Kafka's session keeps it, so the consumer keeps being told, and once READ is granted it is served without the
consumer naming it again. A refused partition is answered without being read, so, as in Kafka, it neither ends a
fetch's long poll nor (when nothing else may be read) holds it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from broker.fetch_session import (
    FetchContext,
    PartitionKey,
    PartitionOutcome,
    PartitionRequest,
    SessionPartition,
)
from broker.handlers.context import RequestContext
from broker.handlers.guards import TOPIC_DENIED
from broker.handlers.leader_hints import LeaderHints
from broker.partition.access import leader_log
from broker.partition.partition_log import PartitionLog
from broker.partition.txn_index import AbortedTxn
from metadata.acl.binding import AclOperation, ResourceType
from metadata.errors import error_code_logged
from wire import schema
from wire.errors import KafkaError

logger = logging.getLogger(__name__)

READ_COMMITTED = 1


@dataclass(slots=True)
class _Result:
    key: PartitionKey
    #: The topic's name as read (from Fetch v13 looked up by the key's topic id at each read; "" when unknown).
    name: str
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    log: PartitionLog | None = None
    fetch_offset: int = 0
    last_stable_offset: int = -1
    aborted: tuple[AbortedTxn, ...] = ()
    record_count: int = 0

    def outcome(self) -> PartitionOutcome:
        return PartitionOutcome(
            self.key,
            self.error,
            self.high_watermark,
            self.log_start_offset,
            self.last_stable_offset,
            len(self.records) > 0,
        )


def _requested(ctx: RequestContext, request: Any) -> tuple[list[PartitionRequest], list[PartitionKey]]:
    by_id = ctx.api_version >= 13

    def topic_key(topic: Any) -> tuple[object, str]:
        # From v13 by id alone: the name is looked up when the partition is read (``broker.fetch_session``).
        return (topic.topic_id, "") if by_id else (uuid_zero, topic.topic)

    requested = [
        PartitionRequest(
            (*topic_key(t), p.partition),
            p.fetch_offset,
            p.partition_max_bytes,
            getattr(p, "current_leader_epoch", -1),
        )
        for t in request.topics
        for p in t.partitions
    ]
    forgotten: list[PartitionKey] = []
    for t in getattr(request, "forgotten_topics_data", ()):
        tid, name = topic_key(t)
        forgotten.extend((tid, name, p) for p in t.partitions)
    return requested, forgotten


#: Whether the request's principal may READ the named topic (asked once per topic and request).
Readable = Callable[[str], bool]


def _readable(ctx: RequestContext) -> Readable:
    # Always True without an authorizer (``BrokerAuthorizer.allowed``).
    return functools.cache(lambda name: ctx.allowed(AclOperation.READ, ResourceType.TOPIC, name))


async def _read_partition(
    ctx: RequestContext,
    key: PartitionKey,
    state: SessionPartition,
    max_bytes: int,
    *,
    min_one: bool,
    read_committed: bool,
    readable: Readable,
) -> _Result:
    topic_id, name, partition = key
    if isinstance(topic_id, uuid.UUID) and topic_id != uuid_zero:
        topic = ctx.broker.controller.image.topics_by_id.get(topic_id)
        name = topic.name if topic is not None else ""
    try:
        if not name:
            raise KafkaError(ErrorCode.unknown_topic_id, f"topic id {topic_id} is unknown")
        if not readable(name):
            # Kafka's order: an unknown topic id first, then READ, before the partition is looked for.
            return _Result(key, name, TOPIC_DENIED, fetch_offset=state.fetch_offset)
        log = await leader_log(ctx.broker.partitions, name, partition, state.current_leader_epoch, move_wait=0.0)
        read = await log.read(state.fetch_offset, max_bytes, min_one=min_one, read_committed=read_committed)
        return _Result(
            key,
            name,
            ErrorCode.none,
            read.high_watermark,
            read.log_start_offset,
            read.records,
            log,
            state.fetch_offset,
            read.last_stable_offset,
            read.aborted_transactions,
            read.record_count,
        )
    except Exception as exc:
        code = error_code_logged(exc, logger, "fetch from %s-%d failed (%s)", name, partition, ctx.describe())
        log_start = hw = lso = -1
        if code == ErrorCode.offset_out_of_range:
            found = ctx.broker.partitions.get(name, partition)
            if found is not None:
                hw, log_start, lso = found.high_watermark, found.log_start_offset, found.last_stable_offset
        return _Result(key, name, code, hw, log_start, fetch_offset=state.fetch_offset, last_stable_offset=lso)


async def _read_all(
    ctx: RequestContext, fetch: FetchContext, response_max_bytes: int, read_committed: bool, readable: Readable
) -> list[_Result]:
    """One pass over the partitions, in order, honouring the response byte budget."""
    results: list[_Result] = []
    remaining = response_max_bytes
    for key, state in fetch.partitions:
        limit = max(min(state.max_bytes, remaining), 0)
        result = await _read_partition(
            ctx,
            key,
            state,
            limit,
            min_one=remaining == response_max_bytes,
            read_committed=read_committed,
            readable=readable,
        )
        remaining -= len(result.records)
        results.append(result)
    return results


async def _wait_for_any(results: list[_Result], timeout: float) -> None:
    # Wait for data beyond what this pass already saw, so a partial result does not spin.
    watched = [
        (r.log, max(r.high_watermark, r.fetch_offset))
        for r in results
        if r.log is not None and r.error == ErrorCode.none
    ]
    if not watched:
        await asyncio.sleep(timeout)
        return
    if len(watched) == 1:
        # The usual tail reader: the partition's own long poll, with no task or asyncio.wait around it.
        log, offset = watched[0]
        await log.wait_for_data(offset, timeout)
        return
    waiters = [asyncio.ensure_future(log.wait_for_data(offset, timeout)) for log, offset in watched]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


_LEADER_MOVED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})
#: The first version whose response carries ``node_endpoints``; from it on Kafka fills ``current_leader`` for every
#: partition answering one of :data:`_LEADER_MOVED` (KafkaApis' ``versionId >= 16``).
_NODE_ENDPOINTS_VERSION = 16


def _current_leader(ctx: RequestContext, part_cls: type[Any], r: _Result, hints: LeaderHints) -> dict[str, object]:
    """Where the partition's leadership is now, for the errors that mean the client's view is stale. From v16 on
    as Kafka fills it: always for those errors (-1/-1 when the partition is unknown); v12-15 carry the tagged field
    too, filled only when a leader is known."""
    name, partition = r.name, r.key[2]
    if r.error not in _LEADER_MOVED or not schema.has_field(part_cls, "current_leader"):
        return {}
    if ctx.api_version < _NODE_ENDPOINTS_VERSION:
        found = ctx.broker.controller.image.partition(name, partition)
        if found is None or found.leader < 0:
            return {}
    return {"current_leader": hints.current_leader_field(part_cls, name, partition)}


def _response(ctx: RequestContext, fetch: FetchContext, results: list[_Result], read_committed: bool) -> Any:
    resp_cls = ctx.response_class
    topic_cls = schema.field_entity(resp_cls, "responses")
    part_cls = schema.field_entity(topic_cls, "partitions")
    aborted_cls = schema.field_entity(part_cls, "aborted_transactions")
    include = set(fetch.filter(r.outcome() for r in results))
    hints = LeaderHints(ctx.broker.controller.image, ctx.listener_name)
    grouped: dict[tuple[object, str], list[Any]] = {}
    for r in results:
        if r.key not in include:
            continue
        topic_id, _, partition = r.key
        ctx.traffic.fetched(r.name, partition, len(r.records), r.record_count)
        grouped.setdefault((topic_id, r.name), []).append(
            schema.build(
                part_cls,
                partition_index=partition,
                error_code=r.error,
                high_watermark=r.high_watermark,
                last_stable_offset=r.last_stable_offset,
                log_start_offset=r.log_start_offset,
                aborted_transactions=(
                    tuple(
                        schema.build(aborted_cls, producer_id=a.producer_id, first_offset=a.first_offset)
                        for a in r.aborted
                    )
                    if read_committed
                    else None
                ),
                preferred_read_replica=-1,
                records=r.records,
                **_current_leader(ctx, part_cls, r, hints),
            )
        )
    responses = tuple(
        schema.build(topic_cls, topic=name, topic_id=topic_id, partitions=tuple(parts))
        for (topic_id, name), parts in grouped.items()
    )
    return ctx.build(
        throttle_time=0,
        error_code=ErrorCode.none,
        session_id=fetch.session_id,
        responses=responses,
        node_endpoints=hints.node_endpoints(resp_cls),
    )


async def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    requested, forgotten = _requested(ctx, request)
    cache = ctx.broker.fetch_sessions
    try:
        fetch = cache.resolve(
            getattr(request, "session_id", 0), getattr(request, "session_epoch", -1), requested, forgotten
        )
    except KafkaError as exc:
        logger.debug("fetch session error for %s: %s", ctx.describe(), exc)
        return ctx.build(throttle_time=0, error_code=exc.code, session_id=0, responses=())
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    # Kafka's bound: the request's max_bytes, at most the broker's fetch.max.bytes.
    max_bytes = min(request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF, ctx.broker.config.fetch_max_bytes)
    # As Kafka: never wait for more than the answer may hold (max_bytes, capped by a consumer_byte_rate quota too).
    min_bytes = min(request.min_bytes, max_bytes)
    deadline = time.monotonic() + max(schema.millis(request.max_wait), 0) / 1000
    readable = _readable(ctx)
    while True:
        results = await _read_all(ctx, fetch, max_bytes, read_committed, readable)
        # Refused partitions are answered, not read: as in Kafka they neither end the long poll nor hold it.
        read = [r for r in results if r.error != TOPIC_DENIED]
        total = sum(len(r.records) for r in read)
        errors = any(r.error != ErrorCode.none for r in read)
        remaining = deadline - time.monotonic()
        if total >= min_bytes or errors or remaining <= 0 or not read:
            if not results and remaining > 0 and fetch.incremental:
                # An incremental session with nothing to fetch still honours max_wait (consumers rely on it).
                await asyncio.sleep(remaining)
            return _response(ctx, fetch, results, read_committed)
        await _wait_for_any(read, remaining)
        if time.monotonic() >= deadline:
            results = await _read_all(ctx, fetch, max_bytes, read_committed, readable)
            return _response(ctx, fetch, results, read_committed)
