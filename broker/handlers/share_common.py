"""What ShareFetch (key 78) and ShareAcknowledge (key 79) share: reading the acknowledgements a request carries,
checking them as Kafka's ``KafkaApis.validateAcknowledgementBatches`` does, applying them to the share partitions,
where a moved partition's leader went (``CurrentLeader`` and ``NodeEndpoints``), and the GROUP READ guard.

Kafka's order, which both handlers follow: the ``share.version`` feature (UNSUPPORTED_VERSION), READ on the group
(GROUP_AUTHORIZATION_FAILED, the whole request), the member id (INVALID_REQUEST: empty or longer than a UUID's 36
characters), the share session's epoch (top-level errors), then per partition: an unknown topic id
(UNKNOWN_TOPIC_ID), malformed acknowledgement batches (INVALID_REQUEST: first offset after last, a batch starting
before the previous one ended, no types, a types list not one per offset, an unknown type, RENEW without
``IsRenewAck``), READ on the topic (TOPIC_AUTHORIZATION_FAILED), an unknown partition (UNKNOWN_TOPIC_OR_PARTITION),
then the share partition's own answer. A refused partition changes nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import GROUP_DENIED, refused_whole
from broker.handlers.metadata import live_endpoint
from broker.share.share_partition import AckBatch
from broker.share_session_cache import PartitionKey
from broker.share_sessions import ShareSessions
from metadata.acl.binding import AclOperation, ResourceType
from metadata.errors import error_code_logged
from metadata.move_leader import client_leader
from wire import schema

logger = logging.getLogger(__name__)

#: Kafka's ``isMemberIdValid``: a member id is at most a UUID's printed length.
MAX_MEMBER_ID_LENGTH = 36
#: AcknowledgeType RENEW (KIP-1222, ShareFetch / ShareAcknowledge v2): extends the records' locks.
RENEW = 4
_LEADER_MOVED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})

#: A node's (host, port, rack) on the request's listener, by node id: the responses' ``NodeEndpoints``.
Endpoints = dict[int, tuple[str, int, str | None]]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One partition's answer: a Kafka error code and, when there is one, its message."""

    code: ErrorCode
    message: str | None = None


NONE = Outcome(ErrorCode.none)


def member_id_valid(member_id: str | None) -> bool:
    return bool(member_id) and len(member_id or "") <= MAX_MEMBER_ID_LENGTH


def sessions_of(ctx: RequestContext) -> ShareSessions:
    return ctx.broker.share_sessions


def partition_key(ctx: RequestContext, topic_id: uuid.UUID | None, partition: int) -> PartitionKey:
    """The request's (topic id, partition) with the topic's name, None when the id is unknown here."""
    tid = topic_id if topic_id is not None else uuid.UUID(int=0)
    topic = ctx.broker.controller.image.topics_by_id.get(tid)
    return tid, (topic.name if topic is not None else None), partition


def requested_acks(
    ctx: RequestContext, topics: Iterable[Any]
) -> tuple[dict[PartitionKey, list[AckBatch]], dict[PartitionKey, Outcome]]:
    """The acknowledgement batches a request carries, by partition (partitions named without any are left out
    of a ShareFetch's acknowledgements), and the partitions of unknown topic ids, answered UNKNOWN_TOPIC_ID."""
    acks: dict[PartitionKey, list[AckBatch]] = {}
    erroneous: dict[PartitionKey, Outcome] = {}
    for topic in topics:
        for p in topic.partitions:
            key = partition_key(ctx, topic.topic_id, p.partition_index)
            if key[1] is None:
                erroneous[key] = Outcome(ErrorCode.unknown_topic_id)
                continue
            acks[key] = [
                AckBatch(int(b.first_offset), int(b.last_offset), tuple(int(t) for t in b.acknowledge_types))
                for b in p.acknowledgement_batches
            ]
    return acks, erroneous


def batches_error(batches: Sequence[AckBatch], *, renew_supported: bool, is_renew: bool) -> str | None:
    """Why a partition's acknowledgement batches are malformed (Kafka answers INVALID_REQUEST), None if sound."""
    max_type = RENEW if renew_supported else RENEW - 1
    previous_end = -1
    for batch in batches:
        if batch.first_offset > batch.last_offset:
            return f"batch {batch.first_offset}-{batch.last_offset}: first offset after last offset"
        if batch.first_offset < previous_end:
            return f"batch {batch.first_offset}-{batch.last_offset} overlaps or precedes the previous batch"
        if not batch.types:
            return f"batch {batch.first_offset}-{batch.last_offset} has no acknowledge type"
        if len(batch.types) > 1 and batch.last_offset - batch.first_offset != len(batch.types) - 1:
            return f"batch {batch.first_offset}-{batch.last_offset}: {len(batch.types)} types, not one per offset"
        if any(t < 0 or t > max_type for t in batch.types):
            return f"batch {batch.first_offset}-{batch.last_offset}: unknown acknowledge type"
        if RENEW in batch.types and not is_renew:
            return f"batch {batch.first_offset}-{batch.last_offset}: RENEW without IsRenewAck"
        previous_end = batch.last_offset
    return None


def readable_topics(ctx: RequestContext, keys: Iterable[PartitionKey]) -> set[str]:
    """The topics among ``keys`` the principal may READ (all of them without an authorizer)."""
    names = {name for _, name, _ in keys if name is not None}
    return {name for name in names if ctx.allowed(AclOperation.READ, ResourceType.TOPIC, name)}


def partition_known(ctx: RequestContext, key: PartitionKey) -> bool:
    _, name, partition = key
    return name is not None and ctx.broker.controller.image.partition(name, partition) is not None


#: One partition's acknowledgements once started: refused at once (its outcome), or their durable write in flight
#: (the awaitable's Kafka error code, 0 when durable).
Started = Outcome | Awaitable[int]


async def start_acknowledgements(
    ctx: RequestContext,
    group_id: str,
    member_id: str,
    acks: Mapping[PartitionKey, list[AckBatch]],
    readable: set[str],
    *,
    is_renew: bool,
) -> dict[PartitionKey, Started]:
    """Checks and applies each partition's acknowledgements and issues their durable writes, all of them before
    any is awaited (:func:`settle` awaits them): the partitions' writes are in flight together, and a ShareFetch
    acquires while they are."""
    sessions = sessions_of(ctx)
    started: dict[PartitionKey, Started] = {}
    for key, batches in acks.items():
        _, name, partition = key
        malformed = batches_error(batches, renew_supported=ctx.api_version >= 2, is_renew=is_renew)
        if malformed is not None:
            started[key] = Outcome(ErrorCode.invalid_request, malformed)
        elif name not in readable:
            started[key] = Outcome(ErrorCode.topic_authorization_failed)
        elif not partition_known(ctx, key):
            started[key] = Outcome(ErrorCode.unknown_topic_or_partition)
        elif not batches:
            started[key] = NONE
        else:
            try:
                share_partition = await sessions.partitions.get(group_id, key[0], partition)
                started[key] = share_partition.start_acknowledge(member_id, batches, sessions.clock_ms())
            except Exception as exc:
                started[key] = _failed(ctx, key, exc)
    return started


async def settle(ctx: RequestContext, started: Mapping[PartitionKey, Started]) -> dict[PartitionKey, Outcome]:
    """Every partition's outcome once its acknowledgements are durable (or refused)."""
    outcomes: dict[PartitionKey, Outcome] = {}
    for key, value in started.items():
        if isinstance(value, Outcome):
            outcomes[key] = value
            continue
        try:
            code = await value
            outcomes[key] = NONE if code == 0 else Outcome(ErrorCode(code))
        except Exception as exc:
            outcomes[key] = _failed(ctx, key, exc)
    return outcomes


async def acknowledge(
    ctx: RequestContext,
    group_id: str,
    member_id: str,
    acks: Mapping[PartitionKey, list[AckBatch]],
    readable: set[str],
    *,
    is_renew: bool,
) -> dict[PartitionKey, Outcome]:
    """Checks and applies each partition's acknowledgements; every partition gets its outcome once durable."""
    return await settle(ctx, await start_acknowledgements(ctx, group_id, member_id, acks, readable, is_renew=is_renew))


def _failed(ctx: RequestContext, key: PartitionKey, exc: Exception) -> Outcome:
    code = error_code_logged(exc, logger, "share acknowledge on %s-%d failed (%s)", key[1], key[2], ctx.describe())
    return Outcome(code, str(exc))


def current_leader(
    ctx: RequestContext, part_cls: type[Any], key: PartitionKey, error: ErrorCode, endpoints: Endpoints
) -> dict[str, object]:
    """``CurrentLeader`` for a partition answering NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH (-1/-1 when no
    leader is known), adding the leader's endpoint on this listener to ``endpoints`` when it is alive."""
    if error not in _LEADER_MOVED:
        return {}
    _, name, partition = key
    image = ctx.broker.controller.image
    found = image.partition(name, partition) if name is not None else None
    # A moving partition's target at its coming epoch, as every other answer names it (``metadata.move_leader``).
    leader, epoch = client_leader(image, found) if found is not None else (-1, -1)
    broker = image.brokers.get(leader)
    if broker is not None and not broker.fenced:
        endpoint = live_endpoint(broker, ctx.listener_name)
        if endpoint is not None:
            endpoints[leader] = (endpoint[0], endpoint[1], broker.rack)
    return {"current_leader": schema.build_nested(part_cls, "current_leader", leader_id=leader, leader_epoch=epoch)}


def node_endpoints(resp_cls: type[Any], endpoints: Endpoints) -> tuple[Any, ...]:
    return tuple(
        schema.build_nested(resp_cls, "node_endpoints", node_id=node_id, host=host, port=port, rack=rack)
        for node_id, (host, port, rack) in sorted(endpoints.items())
    )


def by_topic(entries: Iterable[tuple[PartitionKey, Any]]) -> dict[uuid.UUID, list[Any]]:
    """Response partitions grouped by topic id, in first-seen order."""
    grouped: dict[uuid.UUID, list[Any]] = {}
    for key, entry in entries:
        grouped.setdefault(key[0], []).append(entry)
    return grouped


def top_level_error(ctx: RequestContext, code: ErrorCode) -> Any:
    """Kafka's ``getErrorResponse`` of both APIs: the code, no partitions, no lock time-out."""
    return ctx.build(throttle_time=0, error_code=code, acquisition_lock_timeout=0, responses=(), node_endpoints=())


async def authorize_share_group(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """ShareFetch, ShareAcknowledge: READ on the group, else GROUP_AUTHORIZATION_FAILED for the whole request
    (after the ``share.version`` check, as Kafka); READ on each topic is checked per partition in the handlers,
    over the share session's partitions as well as the request's."""
    if sessions_of(ctx).enabled() and not ctx.allowed(AclOperation.READ, ResourceType.GROUP, request.group_id or ""):
        return refused_whole(ctx, GROUP_DENIED)
    return await handler(ctx, request)
