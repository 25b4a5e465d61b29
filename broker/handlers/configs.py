"""DescribeConfigs (key 32) v1-4, AlterConfigs (key 33) v0-2 and IncrementalAlterConfigs (key 44) v0-1, for topic,
broker, client-metrics (KIP-714) and group resources, and (DescribeConfigs, IncrementalAlterConfigs) this broker's
loggers.

Which keys exist, their types, defaults, synonyms and sources are ``settings``'s; changes are validated
and applied by the controller. The alter requests are read and answered through ``metadata.admin.config_wire`` (shared
with the controller listener); what stays here is the broker's own part: a broker resource must name this broker,
and a BROKER_LOGGER resource is this process's loggers (``broker.logger_levels``), changed here and never sent to
the controller (not persisted, as in Kafka).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import CLUSTER_DENIED, GROUP_DENIED, TOPIC_DENIED, Guard, split
from broker.logger_levels import LoggerConfigError, alter_loggers, describe_loggers
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from metadata.admin import config_wire
from metadata.admin import requests as admin_requests
from metadata.admin.config_wire import ResourceRefused
from metadata.controller_api import ConfigResource
from metadata.errors import ControllerError
from metadata.topic_names import validate_topic_name
from settings.client_metrics import describe_subscription
from settings.describe import ConfigEntry, describe_broker_configs, describe_topic_configs
from settings.group_configs import describe_group_configs
from wire import schema
from wire.log_text import untrusted

RESOURCE_TOPIC = ConfigResource.TOPIC
RESOURCE_BROKER = ConfigResource.BROKER
RESOURCE_BROKER_LOGGER = ConfigResource.BROKER_LOGGER
RESOURCE_CLIENT_METRICS = ConfigResource.CLIENT_METRICS
RESOURCE_GROUP = ConfigResource.GROUP

logger = logging.getLogger(__name__)


def _check_logger_resource(ctx: RequestContext, name: str) -> None:
    """A BROKER_LOGGER resource names the broker whose loggers it is (read as a broker resource name is, so "01"
    is broker 1); only that broker answers for them, and there is no cluster-wide default ("")."""
    config_wire.check_broker_resource(name, ctx.broker.node_id, cluster_default=False)


def _check_broker_name(ctx: RequestContext, name: str) -> bool:
    """True for the cluster-wide default resource (""); raises for a broker other than this one, which a client
    must ask directly (as Kafka's admin clients do)."""
    return config_wire.check_broker_resource(name, ctx.broker.node_id)


def _entries(ctx: RequestContext, resource_type: int, name: str, keys: tuple[str, ...] | None) -> list[ConfigEntry]:
    image = ctx.broker.controller.image
    node_dynamic: Mapping[str, str] = image.node_configs.get(ctx.broker.node_id, {})
    if resource_type == RESOURCE_TOPIC:
        validate_topic_name(name)  # before the lookup, as Kafka's ConfigHelper checks: "bad/name" is no unknown topic
        topic = image.topics_by_name.get(name)
        if topic is None:
            raise ResourceRefused(ErrorCode.unknown_topic_or_partition, f"Topic {name!r} does not exist.")
        return describe_topic_configs(ctx.broker.config, image.broker_configs, topic.configs, keys, node_dynamic)
    if resource_type == RESOURCE_BROKER:
        cluster_default = _check_broker_name(ctx, name)
        return describe_broker_configs(
            ctx.broker.config, image.broker_configs, node_dynamic, keys, cluster_default=cluster_default
        )
    if resource_type == RESOURCE_BROKER_LOGGER:
        _check_logger_resource(ctx, name)
        return describe_loggers(keys)
    if resource_type == RESOURCE_CLIENT_METRICS:
        if not name:
            raise ResourceRefused(ErrorCode.invalid_request, "Client metrics subscription name must not be empty")
        return describe_subscription(image.client_metrics.get(name, {}), keys)
    if resource_type == RESOURCE_GROUP:
        if not name:
            raise ResourceRefused(ErrorCode.invalid_request, "Group name must not be empty")
        return describe_group_configs(image.group_configs.get(name, {}), ctx.broker.config.value, keys)
    raise ResourceRefused(ErrorCode.invalid_request, f"Unsupported resource type {resource_type}")


def _describe_result(ctx: RequestContext, result_cls: type[Any], resource: Any, request: Any) -> Any:
    entry_cls = schema.field_entity(result_cls, "configs")
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    include_documentation = bool(getattr(request, "include_documentation", False))
    # Kafka's ConfigHelper reads an empty list of keys as a null one: every key of the resource.
    keys = tuple(resource.configuration_keys) if resource.configuration_keys else None
    try:
        entries = _entries(ctx, resource.resource_type, resource.resource_name, keys)
    except (ResourceRefused, ControllerError) as exc:
        return schema.build(result_cls, error_code=exc.code, error_message=str(exc),
                           resource_type=resource.resource_type, resource_name=resource.resource_name)
    configs = []
    for entry in entries:
        synonyms = ()
        if include_synonyms:
            synonyms = tuple(
                schema.build_nested(entry_cls, "synonyms", name=s.name, value=None if entry.is_sensitive else s.value,
                                   source=int(s.source))
                for s in entry.synonyms
            )
        configs.append(
            schema.build(
                entry_cls,
                name=entry.name,
                value=None if entry.is_sensitive else entry.value,
                read_only=entry.read_only,
                config_source=int(entry.source),
                is_sensitive=entry.is_sensitive,
                synonyms=synonyms,
                config_type=int(entry.config_type),
                documentation=entry.documentation if include_documentation else None,
            )
        )
    return schema.build(result_cls, error_code=ErrorCode.none, error_message=None,
                       resource_type=resource.resource_type, resource_name=resource.resource_name,
                       configs=tuple(configs))


async def handle_describe_configs(ctx: RequestContext, request: Any) -> Any:
    result_cls = schema.field_entity(ctx.response_class, "results")
    results = tuple(_describe_result(ctx, result_cls, resource, request) for resource in request.resources)
    return ctx.build(throttle_time=0, results=results)


async def handle_alter_configs(ctx: RequestContext, request: Any) -> Any:
    return await admin_requests.alter_configs(
        ctx.response_class, config_wire.read_alter_configs(request), admin_requests.always(ctx.broker.controller),
        broker_id=ctx.broker.node_id,
    )


def _alter_loggers(ctx: RequestContext, item: config_wire.ConfigAlteration, validate_only: bool) -> config_wire.Outcome:
    try:
        _check_logger_resource(ctx, item.resource.name)
        applied = alter_loggers(item.changes, item.incremental_ops or {}, validate_only=validate_only)
    except (ResourceRefused, LoggerConfigError) as exc:
        return exc.code, str(exc)
    for name, level in applied:
        logger.info("broker %d: logger %s %s (%s)", ctx.broker.node_id, untrusted(name),
                    f"set to {level}" if level is not None else "unset, inheriting its parent's level",
                    ctx.describe())
    return ErrorCode.none, None


async def handle_incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
    ask = config_wire.read_incremental_alter_configs(request)
    # Logger resources are answered here, so the controller is never asked about them.
    ask = dataclasses.replace(ask, resources=tuple(
        dataclasses.replace(item, refused=_alter_loggers(ctx, item, ask.validate_only))
        if item.resource.type == RESOURCE_BROKER_LOGGER and item.refused is None else item
        for item in ask.resources
    ))
    return await admin_requests.alter_configs(ctx.response_class, ask, admin_requests.always(ctx.broker.controller),
                                              broker_id=ctx.broker.node_id)


def _authorize_resources(op: AclOperation, response_field: str) -> Guard:
    """``op`` on each resource, as Kafka checks: on the topic for a topic resource, on the group for a group one,
    on the cluster for a broker, broker-logger or client-metrics one."""

    async def guard(ctx: RequestContext, request: Any, handler: Handler) -> Any:
        def denial(resource: Any) -> ErrorCode | None:
            if int(resource.resource_type) == RESOURCE_TOPIC:
                return None if ctx.allowed(op, ResourceType.TOPIC, resource.resource_name) else TOPIC_DENIED
            if int(resource.resource_type) == RESOURCE_GROUP:
                return None if ctx.allowed(op, ResourceType.GROUP, resource.resource_name) else GROUP_DENIED
            return None if ctx.allowed(op, ResourceType.CLUSTER, CLUSTER_NAME) else CLUSTER_DENIED

        def refused(response_cls: type[Any], resource: Any, code: ErrorCode) -> Any:
            return schema.build_nested(
                response_cls,
                response_field,
                error_code=code,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )

        return await split(ctx, request, handler, ("resources", response_field), denial=denial, refused=refused)

    return guard


authorize_describe_configs: Final[Guard] = _authorize_resources(AclOperation.DESCRIBE_CONFIGS, "results")
authorize_alter_configs: Final[Guard] = _authorize_resources(AclOperation.ALTER_CONFIGS, "responses")
authorize_incremental_alter_configs: Final[Guard] = _authorize_resources(AclOperation.ALTER_CONFIGS, "responses")
