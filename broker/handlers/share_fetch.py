"""ShareFetch (key 78) v1-2 (KIP-932): a share consumer's fetch, which acquires records under a time-limited lock
instead of reading from an offset, and carries the acknowledgements of records fetched before.

One request, in Kafka's order (``KafkaApis.handleShareFetchRequest``): the top-level checks of
``broker.handlers.share_common``; v2's ``IsRenewAck`` (KIP-1222) requires MaxBytes, MinBytes, MaxRecords and
MaxWaitMs all 0 (else INVALID_REQUEST) and fetches nothing, so renewed locks are not spent waiting; the share
session's epoch (``broker.share_session_cache``: top-level SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH,
INVALID_REQUEST for acknowledgements while opening; a full cache answers SHARE_SESSION_LIMIT_REACHED after
MaxWaitMs, as Kafka delays it); then the piggy-backed acknowledgements, each partition's outcome in its
``AcknowledgeErrorCode``; then the acquisition across the session's partitions. The acknowledgements change the
records' states first (the acquisition sees the window they freed) and their durable write is issued at once; once
the WAL's writer has taken it up, the acquisition, the read and the building of the response run while it is in
flight, and the response leaves only once it is durable, so it never reports records acknowledged that a crash
could bring back.

Acquisition: the partitions in turn (rotated by the session epoch, as Kafka's round robin, so a busy first
partition does not starve the rest), each asked for what remains of the request's ``MaxRecords`` and ``MaxBytes``
(at most the broker's ``fetch.max.bytes``); the share partition decides how its record batches align with those
limits. The request answers once it holds ``MinBytes`` (at most MaxBytes) of records, a partition errs, MaxRecords
or MaxBytes is reached, or ``MaxWaitMs`` passes, or, once it holds records, half their lock duration (they are
locked from their acquisition); until then it waits for a change to the share partitions (an append, a release, a
lock time-out) and acquires again, keeping what it acquired. The response's
``AcquisitionLockTimeoutMs`` is the group's record lock duration; a partition answering NOT_LEADER_OR_FOLLOWER
names the leader (``CurrentLeader``, ``NodeEndpoints``). Epoch -1 fetches nothing: the acknowledgements are
applied, then the session closes and the member's remaining records are released.

``ShareAcquireMode`` (v2; v1 has none and is batch-optimized, the field's default, which is what librdkafka 2.16
sends): batch-optimized acquires whole record batches, so the batch that reaches MaxRecords is completed and a
fetch may return more than MaxRecords (the ranges cut at batch boundaries every ``BatchSize`` records), as Kafka's
SharePartition does; record-limit (1) never acquires more than MaxRecords, even inside a batch. Another value is
INVALID_REQUEST. Whole batches also mean fewer round trips, each paying for its acknowledgements' durable write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.share_common import (
    NONE,
    Endpoints,
    Outcome,
    Started,
    by_topic,
    current_leader,
    member_id_valid,
    node_endpoints,
    partition_key,
    partition_known,
    readable_topics,
    requested_acks,
    sessions_of,
    settle,
    start_acknowledgements,
    top_level_error,
)
from broker.share.share_partition import AcquiredRange
from broker.share_session_cache import FINAL_EPOCH, PartitionKey, ShareFetchContext
from broker.share_sessions import ShareSessions
from metadata.errors import error_code_logged
from wire import schema
from wire.codec import EncodedResponse, SplicedRecords
from wire.errors import KafkaError

logger = logging.getLogger(__name__)

_MAX_INT32 = 0x7FFFFFFF


@dataclass(slots=True)
class _Acquired:
    """One partition's part of the response: what it acquired over the request's passes, or its error."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    #: The record batches of every fetch that acquired something, views of the stored batches: the response writes
    #: them by reference (``SplicedRecords``), never joined.
    records: list[memoryview] = field(default_factory=list)
    ranges: list[AcquiredRange] = field(default_factory=list)


@dataclass(slots=True)
class _Limits:
    max_bytes: int
    min_bytes: int
    max_records: int
    deadline: float
    #: Batch-optimized acquisition (ShareAcquireMode 0) and its BatchSize.
    whole_batches: bool = True
    batch_size: int = 0
    #: The group's record lock duration: records acquired while the request waits for MinBytes are locked from
    #: then, so the wait after the first acquisition is cut to half of it (``_Acquisition.run``).
    lock_s: float = float("inf")


#: ShareFetch v2's ShareAcquireMode values (Kafka's ShareAcquireMode ids).
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1


async def handle_share_fetch(ctx: RequestContext, request: Any) -> Any:
    sessions = sessions_of(ctx)
    if not sessions.enabled():
        return top_level_error(ctx, ErrorCode.unsupported_version)
    group_id, member_id = request.group_id or "", request.member_id or ""
    if not member_id_valid(member_id):
        return top_level_error(ctx, ErrorCode.invalid_request)
    max_wait_ms = max(schema.millis(request.max_wait), 0)
    is_renew = ctx.api_version >= 2 and bool(request.is_renew_ack)
    if is_renew and (request.max_bytes or request.min_bytes or request.max_records or max_wait_ms):
        return top_level_error(ctx, ErrorCode.invalid_request)
    mode = request.share_acquire_mode if ctx.api_version >= 2 else BATCH_OPTIMIZED
    if mode not in (BATCH_OPTIMIZED, RECORD_LIMIT):
        return top_level_error(ctx, ErrorCode.invalid_request)
    requested = [partition_key(ctx, t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    forgotten = [partition_key(ctx, t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]
    acknowledging = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    epoch = request.share_session_epoch
    try:
        context = sessions.cache.new_context(
            group_id,
            member_id,
            epoch,
            requested,
            forgotten,
            acknowledging=acknowledging,
            connection=sessions.connection_key(ctx.connection),
        )
    except KafkaError as exc:
        logger.debug("share session error for %s: %s", ctx.describe(), exc)
        if exc.code == ErrorCode.share_session_limit_reached:
            await asyncio.sleep(max_wait_ms / 1000)
        return top_level_error(ctx, exc.code)
    readable = readable_topics(ctx, [*context.partitions, *requested])
    acks: dict[PartitionKey, Outcome] = {}
    started: dict[PartitionKey, Started] = {}
    fetching = not is_renew and bool(context.partitions)
    if acknowledging:
        batches, acks = requested_acks(ctx, request.topics)
        started = await start_acknowledgements(ctx, group_id, member_id, batches, readable, is_renew=is_renew)
        if fetching:
            await _writes_under_way(sessions, group_id, started)
    acquired: dict[PartitionKey, _Acquired] = {}
    if fetching:
        max_bytes = min(request.max_bytes if request.max_bytes > 0 else _MAX_INT32, ctx.broker.config.fetch_max_bytes)
        limits = _Limits(max_bytes, min(request.min_bytes, max_bytes), request.max_records,
                         time.monotonic() + max_wait_ms / 1000, mode == BATCH_OPTIMIZED, request.batch_size,
                         sessions.record_lock_duration_ms(group_id) / 1000)
        acquired = await _Acquisition(ctx, sessions, group_id, member_id, limits).run(context, readable)
    included = _included(context, acquired, acks.keys() | started.keys())
    lock_ms = sessions.record_lock_duration_ms(group_id)
    # The answer is built while the acknowledgements' writes are still in flight, as if they all become durable
    # (built again in the rare case one does not), and nothing leaves before they are durable: an acknowledged
    # record never comes back after a crash.
    expected = {**acks, **{key: s if isinstance(s, Outcome) else NONE for key, s in started.items()}}
    response = _response(ctx, included, expected, lock_ms)
    outcomes = {**acks, **await settle(ctx, started)}
    if not sessions.cache.still_current(context):
        return top_level_error(ctx, ErrorCode.invalid_share_session_epoch)
    if outcomes != expected:
        response = _response(ctx, included, outcomes, lock_ms)
    for key, part in included:
        ctx.traffic.fetched(key[1] or "", key[2], sum(len(r) for r in part.records), _count(part.ranges))
    if epoch == FINAL_EPOCH:
        await sessions.close(group_id, member_id)
    return response


async def _writes_under_way(sessions: ShareSessions, group_id: str, started: dict[PartitionKey, Started]) -> None:
    """Waits until the acknowledgements' durable writes are being written (``SharePartition.writes_begun``), so
    they run while the records are acquired and read and the answer is built: the WAL's writer thread cannot take
    a write up while this request holds the event loop (and the GIL), so without this wait the write began only
    once all that was done. Only a matter of overlap: the acknowledgements were applied before, and are awaited
    before the answer."""
    for key, value in started.items():
        if not isinstance(value, Outcome):
            share_partition = await sessions.partitions.get(group_id, key[0], key[2])
            await share_partition.writes_begun()  # one node-wide WAL: the first wait covers the others
            return


@dataclass(slots=True)
class _Acquisition:
    """One request's acquisition across its partitions, over as many passes as its long poll takes."""

    ctx: RequestContext
    sessions: ShareSessions
    group_id: str
    member_id: str
    limits: _Limits
    results: dict[PartitionKey, _Acquired] = field(default_factory=dict)
    order: list[PartitionKey] = field(default_factory=list)
    #: Bytes and records acquired so far, over every partition and pass.
    total: int = 0
    count: int = 0

    async def run(self, context: ShareFetchContext, readable: set[str]) -> dict[PartitionKey, _Acquired]:
        for key in context.partitions:
            if key[1] is None:
                self.results[key] = _Acquired(ErrorCode.unknown_topic_id)
            elif key[1] not in readable:
                self.results[key] = _Acquired(ErrorCode.topic_authorization_failed)
            elif not partition_known(self.ctx, key):
                self.results[key] = _Acquired(ErrorCode.unknown_topic_or_partition)
            else:
                self.order.append(key)
        if not self.order or self.limits.max_records <= 0 or self.limits.max_bytes <= 0:
            return self.results
        turn = context.epoch % len(self.order) if context.epoch > 0 else 0
        self.order = self.order[turn:] + self.order[:turn]
        for key in self.order:
            self.results[key] = _Acquired()
        await self._load()
        limits = self.limits
        while True:
            # Asked for before the pass, so a change during it wakes the wait below.
            awaitable = self.sessions.partitions.wait_for_change()
            change = asyncio.ensure_future(awaitable)
            try:
                await self._pass()
                errors = any(self.results[k].error != ErrorCode.none for k in self.order)
                if self.count and limits.deadline - time.monotonic() > limits.lock_s / 2:
                    # Records are held, locked from their acquisition: waiting on for MinBytes must not let their
                    # locks run out before the answer (another member would get them while this one is sent them),
                    # nor leave the consumer only a sliver of the lock duration the answer announces.
                    limits.deadline = time.monotonic() + limits.lock_s / 2
                remaining = limits.deadline - time.monotonic()
                if (self.total >= limits.min_bytes or errors or remaining <= 0 or self.count >= limits.max_records
                        or self.total >= limits.max_bytes):
                    return self.results
                await asyncio.wait([change], timeout=remaining)
                if time.monotonic() >= limits.deadline:
                    # A last pass at the deadline, as Kafka's delayed share fetch completes with what is there.
                    await self._pass()
                    return self.results
            finally:
                if not change.done():
                    change.cancel()  # the partitions drop cancelled waiters, so idle long-polls leave nothing behind

    async def _load(self) -> None:
        """Loads the share partitions not in memory yet, all at once: a first load replays the partition's share
        stream from storage, and after a restart a session's first fetch meets every partition unloaded (one
        after the other, 100 partitions took 0.6 s). Errors are left to the pass, which asks again."""
        partitions = self.sessions.partitions
        missing = [k for k in self.order if not partitions.is_loaded(self.group_id, k[0], k[2])]
        if len(missing) > 1:
            await asyncio.gather(*(partitions.get(self.group_id, k[0], k[2]) for k in missing),
                                 return_exceptions=True)

    async def _pass(self) -> None:
        """One acquisition over the partitions, within what remains of the request's limits."""
        for key in self.order:
            part = self.results[key]
            if part.error != ErrorCode.none:
                continue
            max_records, max_bytes = self.limits.max_records - self.count, self.limits.max_bytes - self.total
            if max_records <= 0 or max_bytes <= 0:
                return
            topic_id, name, partition = key
            try:
                share_partition = await self.sessions.partitions.get(self.group_id, topic_id, partition)
                fetched = await share_partition.fetch(self.member_id, max_bytes, max_records,
                                                      self.sessions.clock_ms(),
                                                      whole_batches=self.limits.whole_batches,
                                                      batch_size=self.limits.batch_size)
            except Exception as exc:
                part.error = error_code_logged(exc, logger, "share fetch from %s-%d failed (%s)", name, partition,
                                               self.ctx.describe())
                part.message = str(exc)
                continue
            if fetched.error:
                part.error = ErrorCode(fetched.error)
                continue
            if fetched.acquired:
                part.records.extend(fetched.records)
                part.ranges.extend(fetched.acquired)
                self.total += sum(len(r) for r in fetched.records)
                self.count += _count(fetched.acquired)


def _count(ranges: list[AcquiredRange]) -> int:
    return sum(r.last_offset - r.first_offset + 1 for r in ranges)


def _included(
    context: ShareFetchContext, acquired: dict[PartitionKey, _Acquired], acknowledged: Collection[PartitionKey]
) -> list[tuple[PartitionKey, _Acquired]]:
    """The fetched partitions the response carries: those the session context includes (decided once: it remembers
    what it sent) and those answering acknowledgements."""
    return [
        (key, part) for key, part in acquired.items()
        if context.include(key, has_records=bool(part.records), error=part.error) or key in acknowledged
    ]


def _response(
    ctx: RequestContext,
    included: list[tuple[PartitionKey, _Acquired]],
    outcomes: dict[PartitionKey, Outcome],
    lock_duration_ms: int,
) -> Any:
    """The response, encoded already (``codec.EncodedResponse``) unless a client quota charges it: a quota sets its
    throttle time in it once the request is done."""
    response = _response_entity(ctx, included, outcomes, lock_duration_ms)
    return response if ctx.quota_charge is not None else EncodedResponse(response)


def _response_entity(
    ctx: RequestContext,
    included: list[tuple[PartitionKey, _Acquired]],
    outcomes: dict[PartitionKey, Outcome],
    lock_duration_ms: int,
) -> Any:
    resp_cls = ctx.response_class
    topic_cls = schema.field_entity(resp_cls, "responses")
    part_cls = schema.field_entity(topic_cls, "partitions")
    range_cls = schema.field_entity(part_cls, "acquired_records")
    endpoints: Endpoints = {}
    entries: list[tuple[PartitionKey, Any]] = []
    acks = dict(outcomes)
    for key, part in included:
        ack = acks.pop(key, None)
        records = SplicedRecords(part.records)
        entries.append((key, schema.build(
            part_cls,
            partition_index=key[2],
            error_code=part.error,
            error_message=part.message,
            acknowledge_error_code=ack.code if ack is not None else ErrorCode.none,
            acknowledge_error_message=ack.message if ack is not None else None,
            records=records,
            acquired_records=tuple(
                schema.build(range_cls, first_offset=r.first_offset, last_offset=r.last_offset,
                             delivery_count=r.delivery_count)
                for r in part.ranges
            ),
            **current_leader(ctx, part_cls, key, part.error, endpoints),
        )))
    for key, ack in acks.items():
        entries.append((key, schema.build(
            part_cls,
            partition_index=key[2],
            error_code=ErrorCode.none,
            acknowledge_error_code=ack.code,
            acknowledge_error_message=ack.message,
            records=b"",
        )))
    return ctx.build(
        throttle_time=0,
        error_code=ErrorCode.none,
        acquisition_lock_timeout=lock_duration_ms,
        responses=tuple(
            schema.build(topic_cls, topic_id=topic_id, partitions=tuple(parts))
            for topic_id, parts in by_topic(entries).items()
        ),
        node_endpoints=node_endpoints(resp_cls, endpoints),
    )
