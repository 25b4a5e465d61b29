"""DescribeConfigs (key 32) v1-4, AlterConfigs (key 33) v0-2 and IncrementalAlterConfigs (key 44) v0-1, for topic
and broker resources.

Which keys exist, their types, defaults, synonyms and sources are ``controller.config``'s; changes are validated
and applied by the controller. This module maps resources and versions to and from the wire.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.registry import RequestContext, handler
from controller.api import ConfigResource, IncrementalOp
from controller.config import ConfigEntry, describe_broker_configs, describe_topic_configs
from controller.errors import error_code_logged, error_message_for
from wire import codec

logger = logging.getLogger(__name__)

RESOURCE_TOPIC = ConfigResource.TOPIC
RESOURCE_BROKER = ConfigResource.BROKER
_OPS = {IncrementalOp.SET, IncrementalOp.DELETE, IncrementalOp.APPEND, IncrementalOp.SUBTRACT}


class _ResourceError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _check_broker_name(ctx: RequestContext, name: str) -> bool:
    """True for the cluster-wide default resource (""); raises for a broker other than this one, which a client
    must ask directly (as Kafka's admin clients do)."""
    if name == "":
        return True
    try:
        node_id = int(name)
    except ValueError:
        raise _ResourceError(ErrorCode.invalid_request, f"broker resource name {name!r} is not a broker id") from None
    if node_id != ctx.node.node_id:
        raise _ResourceError(
            ErrorCode.invalid_request, f"Unexpected broker id, expected {ctx.node.node_id} or empty string, "
            f"but received {name}"
        )
    return False


def _entries(ctx: RequestContext, resource_type: int, name: str, keys: tuple[str, ...] | None) -> list[ConfigEntry]:
    image = ctx.node.controller.image
    node_dynamic: Mapping[str, str] = image.node_configs.get(ctx.node.node_id, {})
    if resource_type == RESOURCE_TOPIC:
        topic = image.topics_by_name.get(name)
        if topic is None:
            raise _ResourceError(ErrorCode.unknown_topic_or_partition, f"Topic {name!r} does not exist.")
        return describe_topic_configs(ctx.node.config, image.broker_configs, topic.configs, keys, node_dynamic)
    if resource_type == RESOURCE_BROKER:
        cluster_default = _check_broker_name(ctx, name)
        return describe_broker_configs(
            ctx.node.config, image.broker_configs, node_dynamic, keys, cluster_default=cluster_default
        )
    raise _ResourceError(ErrorCode.invalid_request, f"Unsupported resource type {resource_type}")


def _describe_result(ctx: RequestContext, result_cls: type[Any], resource: Any, request: Any) -> Any:
    entry_cls = codec.field_entity(result_cls, "configs")
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    keys = tuple(resource.configuration_keys) if resource.configuration_keys is not None else None
    try:
        entries = _entries(ctx, resource.resource_type, resource.resource_name, keys)
    except _ResourceError as exc:
        return codec.build(result_cls, error_code=exc.code, error_message=str(exc),
                           resource_type=resource.resource_type, resource_name=resource.resource_name)
    configs = []
    for entry in entries:
        synonyms = ()
        if include_synonyms:
            synonyms = tuple(
                codec.build_nested(entry_cls, "synonyms", name=s.name, value=None if entry.is_sensitive else s.value,
                                   source=int(s.source))
                for s in entry.synonyms
            )
        configs.append(
            codec.build(
                entry_cls,
                name=entry.name,
                value=None if entry.is_sensitive else entry.value,
                read_only=entry.read_only,
                config_source=int(entry.source),
                is_sensitive=entry.is_sensitive,
                synonyms=synonyms,
                config_type=int(entry.config_type),
                documentation=None,  # no per-key documentation text is kept; the field is nullable
            )
        )
    return codec.build(result_cls, error_code=ErrorCode.none, error_message=None,
                       resource_type=resource.resource_type, resource_name=resource.resource_name,
                       configs=tuple(configs))


@handler(api_key=32)
async def handle_describe_configs(ctx: RequestContext, request: Any) -> Any:
    result_cls = codec.field_entity(ctx.response_class, "results")
    results = tuple(_describe_result(ctx, result_cls, resource, request) for resource in request.resources)
    return ctx.build(throttle_time=0, results=results)


async def _alter_one(
    ctx: RequestContext,
    resource: Any,
    changes: dict[str, str | None],
    ops: dict[str, int] | None,
    validate_only: bool,
) -> tuple[ErrorCode, str | None]:
    kind, name = int(resource.resource_type), resource.resource_name
    if kind == RESOURCE_BROKER:
        _check_broker_name(ctx, name)
    elif kind != RESOURCE_TOPIC:
        return ErrorCode.invalid_request, f"Unsupported resource type {kind}"
    try:
        return await ctx.node.controller.alter_configs(
            ConfigResource(kind, name), changes, incremental_ops=ops, validate_only=validate_only
        )
    except Exception as exc:
        code = error_code_logged(exc, logger, "altering configs of resource type %d %r failed", kind, name)
        return code, error_message_for(exc)


def _alter_response(response_cls: type[Any], resource: Any, code: ErrorCode, message: str | None) -> Any:
    return codec.build_nested(response_cls, "responses", error_code=code, error_message=message,
                              resource_type=resource.resource_type, resource_name=resource.resource_name)


@handler(api_key=33)
async def handle_alter_configs(ctx: RequestContext, request: Any) -> Any:
    responses = []
    message: str | None
    for resource in request.resources:
        # Legacy AlterConfigs replaces the whole resource config and, as Kafka does, folds repeated keys into one
        # map where the last value wins (clients that re-send described configs plus a change rely on it).
        # Only IncrementalAlterConfigs rejects duplicate keys.
        try:
            code, message = await _alter_one(
                ctx, resource, {c.name: c.value for c in resource.configs}, None, bool(request.validate_only)
            )
        except _ResourceError as exc:
            code, message = exc.code, str(exc)
        responses.append(_alter_response(ctx.response_class, resource, code, message))
    return ctx.build(throttle_time=0, responses=tuple(responses))


@handler(api_key=44)
async def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    responses = []
    message: str | None
    for resource in request.resources:
        duplicates = [k for k, n in Counter(c.name for c in resource.configs).items() if n > 1]
        bad_ops = sorted({int(c.config_operation) for c in resource.configs} - _OPS)
        if duplicates:
            code, message = ErrorCode.invalid_request, f"Error due to duplicate config keys {sorted(duplicates)}"
        elif bad_ops:
            code, message = ErrorCode.invalid_request, f"Unknown alter config operation(s) {bad_ops}"
        else:
            changes = {c.name: c.value for c in resource.configs}
            ops = {c.name: int(c.config_operation) for c in resource.configs}
            try:
                code, message = await _alter_one(ctx, resource, changes, ops, bool(request.validate_only))
            except _ResourceError as exc:
                code, message = exc.code, str(exc)
        responses.append(_alter_response(ctx.response_class, resource, code, message))
    return ctx.build(throttle_time=0, responses=tuple(responses))
