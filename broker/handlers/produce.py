"""Produce (key 0) v3-13.

Partitions of one request are appended concurrently, and a connection's appends to one partition start in the
order its requests arrived (append_order.py); the response is sent once every append is durable
(acks=1 and acks=all alike: the WAL write is the only replication a partition has) or the request timeout
passes. acks=0 gets no response at all. Transactional batches need the request's transactional id (the partition
checks it, with the producer's open transaction there). A transactional batch for a partition where its producer
has no open transaction yet is first verified with the transaction coordinator (KIP-890 part 1): unless the
partition was added to the ongoing transaction (AddPartitionsToTxn), it is refused with INVALID_TXN_STATE and
nothing is appended, so no transaction can be left hanging on a partition its coordinator does not know of.
From v11 such a refusal is TRANSACTION_ABORTABLE (KIP-890: the client aborts and goes on). From v12 (KIP-890
part 2, transactions v2) the coordinator adds the partition to the transaction instead, as Kafka's
AddPartitionsToTxnManager does: the client sends no AddPartitionsToTxn; a busy coordinator is asked again and, if it
stays busy, answered CONCURRENT_TRANSACTIONS (before v12: the retriable NOT_ENOUGH_REPLICAS); with
``transaction.version`` below 2 finalized such a batch is refused with UNSUPPORTED_VERSION, as Kafka 4 refuses it.
v13 names topics by id (resolved in the metadata image; an unknown id is UNKNOWN_TOPIC_ID). From v10 a partition
refused with NOT_LEADER_OR_FOLLOWER names its current leader and the response the leader's endpoint (KIP-951), so a
producer re-sends to the partition's new leader at once after a move instead of first refreshing its metadata.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import TXN_DENIED, partitions_entry, split, topics_denied
from broker.handlers.leader_hints import LeaderHints
from broker.partition.access import leader_log
from broker.partition.partition_log import AppendResult, PartitionLog
from metadata.acl.binding import AclOperation, ResourceType
from metadata.errors import error_code_for, error_code_logged, error_message_for
from wire import schema
from wire.api_versions import TRANSACTION_VERSION
from wire.compression import Compression
from wire.dispatch import ConnectionClosing
from wire.errors import KafkaError
from wire.log_text import untrusted
from wire.record_batch import InvalidBatchError, parse_header

logger = logging.getLogger(__name__)

_MIN_TIMEOUT_MS = 1000
#: The first Produce version that may carry zstd batches (KIP-110); before it Kafka answers
#: UNSUPPORTED_COMPRESSION_TYPE.
_ZSTD_VERSION = 7
#: How long a refusal of a partition being moved waits for its target's election, so that it can name the new leader
#: (KIP-951) instead of none, when the target cannot be named ahead (``metadata.move_leader``: no target may lead).
_MOVE_WAIT_S = 1.0
#: The longest a produce for a partition moving to this broker waits for the move's election (the controller's
#: ``partition.reassignment.election.timeout.ms`` ends a move whose source is stuck; this bounds the rest).
_MOVE_HOLD_MAX_S = 30.0


async def _append_one(
    ctx: RequestContext,
    topic: str,
    partition: int,
    records: bytes | None,
    acks: int,
    *,
    transactional_id: str | None,
    timeout_s: float,
) -> AppendResult | BaseException:
    try:
        if records is None or len(records) == 0:
            raise KafkaError(ErrorCode.invalid_record, f"{topic}-{partition}: produce request without records")
        data = bytes(records)
        if ctx.api_version < _ZSTD_VERSION and _compression(data) is Compression.ZSTD:
            raise KafkaError(
                ErrorCode.unsupported_compression_type, f"{topic}-{partition}: zstd needs Produce v{_ZSTD_VERSION}+"
            )
        # Taken before the first suspension: tasks first run in the order they were created (arrival order).
        turn = ctx.connection.appends.take((topic, partition))
        result = await turn.start(
            _verified_leader_log(ctx, topic, partition, data, transactional_id, timeout_s=timeout_s),
            lambda verified: verified[0].append(
                data, required_acks=acks, transactional_id=transactional_id, verified_markers=verified[1]
            ),
        )
    except KafkaError as exc:
        if exc.code is ErrorCode.invalid_txn_state and ctx.api_version >= 11:
            # KIP-890: from v11 a refused transactional batch (the coordinator's verification, or its transaction
            # ended while it waited) is TRANSACTION_ABORTABLE: the client aborts and goes on.
            return KafkaError(ErrorCode.transaction_abortable, str(exc))
        return exc
    except Exception as exc:
        error_code_logged(exc, logger, "produce to %s-%d failed (%s)", topic, partition, ctx.describe())
        return exc
    # Counted once the append succeeded, outside the try: a metrics fault must not turn it into an error reply.
    ctx.traffic.produced(topic, partition, len(data), result.last_offset - result.base_offset + 1)
    return result


def _compression(data: bytes) -> Compression | None:
    """The first batch's codec; None when it cannot be read (the append answers with the precise error)."""
    try:
        return parse_header(data).compression
    except (InvalidBatchError, ValueError):
        return None


async def _verified_leader_log(
    ctx: RequestContext, topic: str, partition: int, data: bytes, transactional_id: str | None, *, timeout_s: float
) -> tuple[PartitionLog, int | None]:
    """The partition's log, and for a transactional batch the producer's markers applied there when its
    transaction was found open (or added at its coordinator): the append refuses the batch if a marker came since
    (``broker.partition.partition_log.produce``)."""
    # A partition moving here waits for its election (its source told the producer to come here before letting go,
    # KIP-951) and its open for up to half the request's timeout in all: the other half is the append's, so a record
    # is not appended after its producer was told it timed out.
    hold = min(timeout_s / 2, _MOVE_HOLD_MAX_S)
    log = await leader_log(ctx.broker.partitions, topic, partition, move_wait=hold, within=hold)
    if transactional_id is None:
        return log, None
    try:
        header = parse_header(data)
    except InvalidBatchError:
        return log, None  # the append validates the batch and answers with the precise error
    if not header.is_transactional or header.is_control:
        return log, None
    if log.has_ongoing_txn(header.producer_id, header.producer_epoch):
        return log, log.markers_applied(header.producer_id)
    add = ctx.api_version >= 12
    if add and ctx.broker.controller.image.feature_level(TRANSACTION_VERSION.name) < 2:
        # A transactions v2 produce on a cluster at transaction.version 1: refused as Kafka 4 refuses it (the
        # client should have capped its Produce version at 11 and added the partition itself).
        error = ErrorCode.unsupported_version
    else:
        error = await ctx.broker.transactions.verify_produce(
            transactional_id, header.producer_id, header.producer_epoch, (topic, partition), add=add,
            retry_concurrent=add,
        )
    if error is not ErrorCode.none:
        logger.info(
            "refusing transactional produce to %s-%d by '%s' (producer %d epoch %d): %s (%s)",
            untrusted(topic),
            partition,
            untrusted(transactional_id),
            header.producer_id,
            header.producer_epoch,
            error.name,
            ctx.describe(),
        )
        raise KafkaError(
            error,
            f"{topic}-{partition} is not in the ongoing transaction of transactional id {transactional_id!r}",
        )
    # Counted once verified: the coordinator may have waited for the markers of the producer's previous
    # transaction, which end that one, not this.
    return log, log.markers_applied(header.producer_id)


def _partition_response(
    cls: type[Any], index: int, outcome: AppendResult | BaseException, leader: Callable[[], Any] | None
) -> Any:
    if isinstance(outcome, AppendResult):
        append_time = (
            datetime.datetime.fromtimestamp(outcome.log_append_time_ms / 1000, tz=datetime.UTC)
            if outcome.log_append_time_ms >= 0
            else None
        )
        return schema.build(
            cls,
            index=index,
            error_code=ErrorCode.none,
            base_offset=outcome.base_offset,
            log_append_time=append_time,
            log_start_offset=outcome.log_start_offset,
        )
    code = error_code_for(outcome)
    # KIP-951, as Kafka's KafkaApis fills it from v10: a partition this broker does not lead names its leader.
    hint = {"current_leader": leader()} if code is ErrorCode.not_leader_or_follower and leader is not None else {}
    return schema.build(
        cls,
        index=index,
        error_code=code,
        base_offset=-1,
        log_append_time=None,
        log_start_offset=-1,
        error_message=error_message_for(outcome),
        **hint,
    )


async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    acks = request.acks
    topic_cls = schema.field_entity(ctx.response_class, "responses")
    part_cls = schema.field_entity(topic_cls, "partition_responses")
    keys: list[tuple[Any, str | None, int]] = []  # (topic name, or id from v13; name if known; partition)
    jobs: list[Any] = []
    refusal: KafkaError | None = None
    if acks not in (0, 1, -1):
        refusal = KafkaError(ErrorCode.invalid_required_acks, f"acks must be 0, 1 or -1 (all), not {acks}")
    # The timeout bounds the wait for durability; a WAL write always takes a moment, so a zero or tiny timeout
    # (which in Kafka would still succeed on a single-replica partition) is raised to a small floor.
    timeout_s = max(schema.millis(request.timeout), _MIN_TIMEOUT_MS) / 1000
    deadline = asyncio.get_running_loop().time() + timeout_s
    topics_by_id = ctx.broker.controller.image.topics_by_id
    for topic in request.topic_data:
        name = getattr(topic, "name", None)
        topic_id = getattr(topic, "topic_id", None)
        if name is None:  # v13: by id
            found = topics_by_id.get(topic_id) if topic_id is not None else None
            name = found.name if found is not None else None
        for part in topic.partition_data:
            keys.append((topic_id if topic_id is not None else name, name, part.index))
            if refusal is not None:
                jobs.append(asyncio.sleep(0, refusal))
            elif name is None:
                jobs.append(asyncio.sleep(0, KafkaError(ErrorCode.unknown_topic_id, f"topic id {topic_id} is unknown")))
            else:
                jobs.append(
                    _append_one(ctx, name, part.index, part.records, acks, transactional_id=request.transactional_id,
                                timeout_s=timeout_s)
                )
    tasks = [asyncio.ensure_future(job) for job in jobs]
    outcomes: list[AppendResult | BaseException] = []
    if tasks:
        done, pending = await asyncio.wait(tasks, timeout=timeout_s if acks != 0 else None)
        for task in pending:
            # The append goes on (it will be durable, or fail and close the partition); only the answer is late.
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
        for task in tasks:
            if task in done:
                outcomes.append(task.result())
            else:
                outcomes.append(KafkaError(ErrorCode.request_timed_out, "append not durable within the timeout"))
    if acks == 0:
        failed = [(key, outcome) for key, outcome in zip(keys, outcomes, strict=True)
                  if not isinstance(outcome, AppendResult)]
        if failed:
            (_, first_name, first_index), first_error = failed[0]
            # No response to carry the error: Kafka closes the connection, so the producer refreshes its metadata
            # (a partition moved away) instead of sending into the void until its metadata expires.
            raise ConnectionClosing(
                f"acks=0 produce from {ctx.describe()} failed on {len(failed)} partition(s), e.g. "
                f"{untrusted(first_name or '')}-{first_index}: {error_code_for(first_error).name.upper()}; closing the "
                "connection, as Kafka"
            )
        return None
    with_hints = schema.has_field(part_cls, "current_leader")
    if with_hints:
        # Within the request's timeout: the answer must not come later than the client stops waiting for it.
        remaining = deadline - asyncio.get_running_loop().time()
        await _await_moves(ctx, keys, outcomes, max(min(_MOVE_WAIT_S, remaining), 0.0))
    hints = LeaderHints(ctx.broker.controller.image, ctx.listener_name)
    by_topic: dict[Any, list[Any]] = {}
    for (topic_key, name, index), outcome in zip(keys, outcomes, strict=True):
        leader = (
            functools.partial(hints.current_leader_field, part_cls, name, index)
            if with_hints and name is not None
            else None
        )
        by_topic.setdefault(topic_key, []).append(_partition_response(part_cls, index, outcome, leader))
    responses = tuple(
        schema.build(topic_cls, name=key, topic_id=key, partition_responses=tuple(parts))
        for key, parts in by_topic.items()
    )
    return ctx.build(responses=responses, throttle_time=0, node_endpoints=hints.node_endpoints(ctx.response_class))


async def _await_moves(
    ctx: RequestContext, keys: list[tuple[Any, str | None, int]], outcomes: list[Any], timeout: float
) -> None:
    """Refusals of partitions being moved wait (up to ``timeout``) for the move's target to be elected, so the
    answer names it and the producer goes there at once; other partitions of the request wait with them."""
    moving = [
        ctx.broker.partitions.wait_for_election(name, index, timeout)
        for (_, name, index), outcome in zip(keys, outcomes, strict=True)
        if name is not None and not isinstance(outcome, AppendResult)
        and error_code_for(outcome) is ErrorCode.not_leader_or_follower
    ]
    if moving:
        await asyncio.gather(*moving)


async def authorize_produce(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """TOPIC WRITE on each topic, as Kafka checks; a transactional request without TRANSACTIONAL_ID WRITE has every
    topic refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    refused = partitions_entry(
        "responses",
        "partition_responses",
        "index",
        item_partitions="partition_data",
        item_index="index",
        base_offset=-1,
    )
    transactional_id = getattr(request, "transactional_id", None)
    if transactional_id is not None and not ctx.allowed(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
    ):
        return await split(
            ctx, request, handler, ("topic_data", "responses"), denial=lambda _t: TXN_DENIED, refused=refused
        )
    return await split(
        ctx,
        request,
        handler,
        ("topic_data", "responses"),
        denial=topics_denied(ctx, AclOperation.WRITE),
        refused=refused,
    )
