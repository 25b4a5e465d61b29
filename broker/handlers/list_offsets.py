"""ListOffsets (key 2) v1-11: earliest (-2), latest (-1), max timestamp (-3, v7+), the tiered-storage lookups
earliest-local (-4, v8+), latest-tiered (-5, v9+) and earliest-pending-upload (-6, v11+), and offset by timestamp.

Each special timestamp needs the version that introduced it, else the partition answers UNSUPPORTED_VERSION, as
Kafka's ReplicaManager checks; so does a negative timestamp no version knows. Fjord has no tiered storage in Kafka's
sense (its object storage *is* the log), so -4/-5/-6 are answered as Kafka answers them for a topic without
``remote.storage.enable``: -4 is the log start offset, -5 and -6 find nothing (offset -1). v10's ``timeout`` bounds a
lookup by timestamp (the one that may read stored batches): past it the partition answers REQUEST_TIMED_OUT, as Kafka
does for a remote lookup.

With isolation level 1 (read_committed, v2+) the latest offset is the last stable offset and lookups by timestamp
find only records below it, as Kafka answers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import partitions_entry, split, topics_denied
from broker.handlers.per_partition import side_by_side
from broker.partition.access import leader_log
from broker.partition.partition_log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from metadata.acl.binding import AclOperation
from metadata.errors import error_code_logged
from wire import schema
from wire.errors import KafkaError

logger = logging.getLogger(__name__)


READ_COMMITTED = 1
#: The first ListOffsets version that may ask for each special timestamp (Kafka's per-sentinel minimum).
_SINCE_VERSION = {
    EARLIEST_TIMESTAMP: 0,
    LATEST_TIMESTAMP: 0,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP: 11,
}


async def _lookup(
    ctx: RequestContext,
    part_cls: type[Any],
    topic: str,
    p: Any,
    duplicate: bool,
    *,
    read_committed: bool,
    timeout_ms: int,
) -> Any:
    index = p.partition_index
    try:
        if duplicate:
            raise KafkaError(ErrorCode.invalid_request, f"{topic}-{index} appears more than once")
        if p.timestamp < 0:
            since = _SINCE_VERSION.get(p.timestamp)
            if since is None:
                raise KafkaError(ErrorCode.unsupported_version, f"unknown list-offsets timestamp {p.timestamp}")
            if ctx.api_version < since:
                raise KafkaError(
                    ErrorCode.unsupported_version, f"timestamp {p.timestamp} needs ListOffsets v{since}+"
                )
        log = await leader_log(ctx.broker.partitions, topic, index, getattr(p, "current_leader_epoch", -1))
        lookup = log.offset_for_timestamp(p.timestamp, read_committed=read_committed)
        if timeout_ms > 0 and p.timestamp >= 0:
            # Shielded: a lookup given up on still finishes (it may be loading the partition's time index).
            try:
                found = await asyncio.wait_for(asyncio.shield(lookup), timeout_ms / 1000)
            except TimeoutError:
                raise KafkaError(
                    ErrorCode.request_timed_out, f"lookup by timestamp not done within {timeout_ms} ms"
                ) from None
        else:
            found = await lookup
        offset, timestamp, epoch = (found.offset, found.timestamp, found.leader_epoch) if found else (-1, -1, -1)
        return schema.build(
            part_cls,
            partition_index=index,
            error_code=ErrorCode.none,
            timestamp=timestamp,
            offset=offset,
            leader_epoch=epoch,
        )
    except Exception as exc:
        code = error_code_logged(exc, logger, "list offsets of %s-%d failed (%s)", topic, index, ctx.describe())
        return schema.build(part_cls, partition_index=index, error_code=code, timestamp=-1, offset=-1, leader_epoch=-1)


async def handle_list_offsets(ctx: RequestContext, request: Any) -> Any:
    topic_cls = schema.field_entity(ctx.response_class, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    # v10+: how long a lookup by timestamp may take (0: not bounded, as before v10).
    timeout_ms = schema.millis(getattr(request, "timeout", 0))
    lookups: list[tuple[str, Any, bool]] = []
    for topic in request.topics:
        seen: dict[int, int] = {}
        for p in topic.partitions:
            seen[p.partition_index] = seen.get(p.partition_index, 0) + 1
        lookups.extend((topic.name, p, seen[p.partition_index] > 1) for p in topic.partitions)

    def lookup(item: tuple[str, Any, bool]) -> Awaitable[Any]:
        name, p, duplicate = item
        return _lookup(ctx, part_cls, name, p, duplicate, read_committed=read_committed, timeout_ms=timeout_ms)

    # A few at a time: a lookup at a move's target may wait for the election (``broker.handlers.per_partition``).
    answers = iter(await side_by_side(lookup, lookups))
    topics = tuple(
        schema.build(topic_cls, name=topic.name, partitions=tuple(next(answers) for _ in topic.partitions))
        for topic in request.topics
    )
    return ctx.build(throttle_time=0, topics=topics)


async def authorize_list_offsets(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """TOPIC DESCRIBE on each topic, as Kafka checks."""
    refused = partitions_entry("topics", "partitions", "partition_index", timestamp=-1, offset=-1)
    return await split(
        ctx, request, handler, ("topics", "topics"), denial=topics_denied(ctx, AclOperation.DESCRIBE), refused=refused
    )
