"""CreateTopics (key 19) v2-7, DeleteTopics (key 20) v1-6 and CreatePartitions (key 37) v0-3.

Validation of names, counts, replication factors, assignments and configs is the controller's; this module checks
only what is about the request itself (duplicates, contradictory fields) and translates results per version.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from broker.handlers.registry import RequestContext, handler
from controller.api import CreateTopicResult, NewTopic
from controller.config import ConfigEntry
from controller.errors import error_code_for, error_message_for
from wire import codec

logger = logging.getLogger(__name__)


def _config_entries(result_cls: type[Any], configs: list[ConfigEntry]) -> tuple[Any, ...]:
    return tuple(
        codec.build_nested(
            result_cls,
            "configs",
            name=entry.name,
            value=None if entry.is_sensitive else entry.value,
            read_only=entry.read_only,
            config_source=int(entry.source),
            is_sensitive=entry.is_sensitive,
        )
        for entry in configs
    )


def _create_result(result_cls: type[Any], result: CreateTopicResult) -> Any:
    ok = result.error == ErrorCode.none
    return codec.build(
        result_cls,
        name=result.name,
        topic_id=result.topic_id or uuid_zero,
        error_code=result.error,
        error_message=result.message,
        num_partitions=result.num_partitions if ok else -1,
        replication_factor=result.replication_factor if ok else -1,
        configs=_config_entries(result_cls, result.configs) if ok and codec.has_field(result_cls, "configs") else None,
    )


@handler(api_key=19)
async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    result_cls = codec.field_entity(ctx.response_class, "topics")
    counts = Counter(topic.name for topic in request.topics)
    results: dict[str, CreateTopicResult] = {}
    to_create: list[NewTopic] = []
    for topic in request.topics:
        if counts[topic.name] > 1:
            results[topic.name] = CreateTopicResult(
                topic.name, None, ErrorCode.invalid_request,
                f"Create topics request from client {ctx.client_id!r} contains topic {topic.name!r} more than once",
            )
            continue
        if topic.assignments and (topic.num_partitions != -1 or topic.replication_factor != -1):
            results[topic.name] = CreateTopicResult(
                topic.name, None, ErrorCode.invalid_request,
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used "
                "at the same time.",
            )
            continue
        to_create.append(
            NewTopic(
                name=topic.name,
                num_partitions=topic.num_partitions,
                replication_factor=topic.replication_factor,
                assignments={a.partition_index: tuple(a.broker_ids) for a in topic.assignments} or None,
                configs={c.name: c.value for c in topic.configs if c.value is not None},
            )
        )
    if to_create:
        try:
            created = await ctx.node.controller.create_topics(to_create, bool(request.validate_only))
        except Exception as exc:
            code, message = error_code_for(exc), error_message_for(exc)
            logger.error("create_topics %s failed: %s", [t.name for t in to_create], message, exc_info=exc)
            created = [CreateTopicResult(t.name, None, code, message) for t in to_create]
        for result in created:
            results[result.name] = result
    ordered = [results[name] for name in dict.fromkeys(t.name for t in request.topics)]
    return ctx.build(throttle_time=0, topics=tuple(_create_result(result_cls, r) for r in ordered))


@handler(api_key=20)
async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    result_cls = codec.field_entity(ctx.response_class, "responses")
    names: list[str] = []
    ids: list[uuid.UUID] = []
    invalid: list[Any] = []
    if hasattr(request, "topics"):  # v6: by name or by id
        for state in request.topics:
            has_id = state.topic_id is not None and state.topic_id != uuid_zero
            if state.name is not None and has_id:
                invalid.append(codec.build(result_cls, name=state.name, topic_id=state.topic_id,
                                           error_code=ErrorCode.invalid_request,
                                           error_message="topic name and topic id cannot both be given"))
            elif has_id:
                ids.append(state.topic_id)
            elif state.name is not None:
                names.append(state.name)
            else:
                invalid.append(codec.build(result_cls, name=None, topic_id=uuid_zero,
                                           error_code=ErrorCode.invalid_request,
                                           error_message="neither topic name nor topic id given"))
    else:
        names.extend(request.topic_names)
    responses: list[Any] = list(invalid)
    if names or ids:
        results = await ctx.node.controller.delete_topics(names, ids)
        for r in results:
            responses.append(
                codec.build(result_cls, name=r.name, topic_id=r.topic_id or uuid_zero, error_code=r.error,
                            error_message=r.message)
            )
    return ctx.build(throttle_time=0, responses=tuple(responses))


@handler(api_key=37)
async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    result_cls = codec.field_entity(ctx.response_class, "results")
    counts = Counter(topic.name for topic in request.topics)
    results: list[Any] = []
    for topic in request.topics:
        if counts[topic.name] > 1:
            code: ErrorCode = ErrorCode.invalid_request
            message: str | None = f"duplicate topic {topic.name!r} in the request"
        else:
            assignments = [tuple(a.broker_ids) for a in topic.assignments] if topic.assignments is not None else None
            try:
                code, message = await ctx.node.controller.create_partitions(
                    topic.name, topic.count, assignments, bool(request.validate_only)
                )
            except Exception as exc:
                code, message = error_code_for(exc), error_message_for(exc)
                logger.error("create_partitions for topic %s failed: %s", topic.name, message, exc_info=exc)
        results.append(codec.build(result_cls, name=topic.name, error_code=code, error_message=message))
    return ctx.build(throttle_time=0, results=tuple(results))
