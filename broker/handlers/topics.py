"""CreateTopics (key 19) v2-7, DeleteTopics (key 20) v1-6 and CreatePartitions (key 37) v0-3.

Validation of names, counts, replication factors, assignments and configs is the controller's. The checks about the
request itself (duplicates, contradictory fields) and the translation of every version are ``controller.admin_wire``'s,
shared with the controller listener; this module asks the broker's controller client and turns a failure to ask into
per-topic errors."""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from controller import admin_wire
from controller.api import CreateTopicResult
from controller.errors import error_code_for, error_message_for

logger = logging.getLogger(__name__)


async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    ask = admin_wire.read_create_topics(request, ctx.client_id)
    created: list[CreateTopicResult] = []
    if ask.topics:
        try:
            created = await ctx.node.controller.create_topics(ask.topics, ask.validate_only)
        except Exception as exc:
            code, message = error_code_for(exc), error_message_for(exc)
            logger.error("create_topics %s failed: %s", [t.name for t in ask.topics], message, exc_info=exc)
            created = admin_wire.create_topics_refused(ask.topics, code, message)
    return admin_wire.create_topics_response(ctx.response_class, ask, created)


async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    ask = admin_wire.read_delete_topics(request)
    deleted = await ctx.node.controller.delete_topics(ask.names, ask.ids) if ask.names or ask.ids else []
    return admin_wire.delete_topics_response(ctx.response_class, ask, deleted)


async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    ask = admin_wire.read_create_partitions(request)
    answers: list[tuple[str, ErrorCode, str | None]] = []
    for topic in ask.topics:
        if topic.refused is not None:
            code, message = topic.refused
        else:
            try:
                code, message = await ctx.node.controller.create_partitions(
                    topic.topic, topic.count, topic.assignments, ask.validate_only
                )
            except Exception as exc:
                code, message = error_code_for(exc), error_message_for(exc)
                logger.error("create_partitions for topic %s failed: %s", topic.topic, message, exc_info=exc)
        answers.append((topic.topic, code, message))
    return admin_wire.create_partitions_response(ctx.response_class, answers)
