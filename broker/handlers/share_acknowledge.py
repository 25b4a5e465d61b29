"""ShareAcknowledge (key 79) v1-2 (KIP-932): a share consumer's acknowledgements sent without fetching (explicit
acknowledgement, ``commitSync``, and the last ones before it closes).

In Kafka's order (``KafkaApis.handleShareAcknowledgeRequest``): the top-level checks of
``broker.handlers.share_common``; the share session's epoch (it must exist: SHARE_SESSION_NOT_FOUND; epoch 0 is
INVALID_SHARE_SESSION_EPOCH since acknowledging cannot open a session; n must be the session's and moves it on;
-1 closes it after the acknowledgements, releasing what the member still holds); then each partition's
acknowledgements, checked and applied as ``share_common.acknowledge`` does, its outcome the partition's error
code. v2 adds RENEW acknowledgements (``IsRenewAck``, KIP-1222) and the response's ``AcquisitionLockTimeoutMs``.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.share_common import (
    Endpoints,
    acknowledge,
    by_topic,
    current_leader,
    member_id_valid,
    node_endpoints,
    readable_topics,
    requested_acks,
    sessions_of,
    top_level_error,
)
from broker.share_session_cache import FINAL_EPOCH
from wire import schema
from wire.errors import KafkaError

logger = logging.getLogger(__name__)


async def handle_share_acknowledge(ctx: RequestContext, request: Any) -> Any:
    sessions = sessions_of(ctx)
    if not sessions.enabled():
        return top_level_error(ctx, ErrorCode.unsupported_version)
    group_id, member_id = request.group_id or "", request.member_id or ""
    if not member_id_valid(member_id):
        return top_level_error(ctx, ErrorCode.invalid_request)
    epoch = request.share_session_epoch
    try:
        sessions.cache.acknowledge_update(group_id, member_id, epoch)
    except KafkaError as exc:
        logger.debug("share session error for %s: %s", ctx.describe(), exc)
        return top_level_error(ctx, exc.code)
    batches, outcomes = requested_acks(ctx, request.topics)
    is_renew = ctx.api_version >= 2 and bool(request.is_renew_ack)
    readable = readable_topics(ctx, batches)
    outcomes.update(await acknowledge(ctx, group_id, member_id, batches, readable, is_renew=is_renew))
    if epoch == FINAL_EPOCH:
        await sessions.close(group_id, member_id)
    resp_cls = ctx.response_class
    topic_cls = schema.field_entity(resp_cls, "responses")
    part_cls = schema.field_entity(topic_cls, "partitions")
    endpoints: Endpoints = {}
    entries = [
        (key, schema.build(
            part_cls,
            partition_index=key[2],
            error_code=outcome.code,
            error_message=outcome.message,
            **current_leader(ctx, part_cls, key, outcome.code, endpoints),
        ))
        for key, outcome in outcomes.items()
    ]
    return ctx.build(
        throttle_time=0,
        error_code=ErrorCode.none,
        acquisition_lock_timeout=sessions.record_lock_duration_ms(group_id),
        responses=tuple(
            schema.build(topic_cls, topic_id=topic_id, partitions=tuple(parts))
            for topic_id, parts in by_topic(entries).items()
        ),
        node_endpoints=node_endpoints(resp_cls, endpoints),
    )
