"""AlterConfigs and IncrementalAlterConfigs — the controller's config decisions, sans-I/O.

A request is turned into the full set of dynamic configs the resource would have (the incremental operations
applied to what it has now), each value is validated and normalized with its key's definition
(``settings.keys``), and only the keys whose value changes become ``ConfigRecord``s: the controller
appends them, and an unchanged request writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.cluster_records import ConfigRecord
from metadata.controller_api import ConfigResource, IncrementalOp
from metadata.errors import ControllerError
from metadata.image import MetadataImage
from metadata.topic_names import validate_topic_name
from settings.client_metrics import CLIENT_METRICS_KEYS, ClientMetricsConfigError, validate_subscription
from settings.config_key import ConfigKey, ConfigType, ConfigValueError
from settings.config_resources import RESOURCE_BROKER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP, RESOURCE_TOPIC
from settings.connection_limits import per_ip_refusal
from settings.describe import check_topic_values
from settings.group_configs import GROUP_CONFIG_KEYS, validate_group_configs
from settings.keys import config_key, validate_broker_config, validate_topic_config
from settings.server import ServerConfig

#: The code of a broker value refused (unknown or static key, bad value, a pair that locks clients out): Kafka's broker
#: checks broker values itself and refuses them with InvalidRequestException (ConfigAdminManager's
#: validateBrokerConfigChange; KAFKA-13609 keeps that code for compatibility), where a topic's are INVALID_CONFIG.
_BROKER_VALUE_REFUSED = ErrorCode.invalid_request

#: A node with no properties file: the catalogue's defaults, for callers that judge without a node's settings.
_CATALOGUE_DEFAULTS = ServerConfig()


def plan_alter_configs(
    image: MetadataImage,
    resource: ConfigResource,
    changes: Mapping[str, str | None],
    incremental_ops: Mapping[str, int] | None,
    config: ServerConfig = _CATALOGUE_DEFAULTS,
) -> list[ConfigRecord]:
    """The records that give ``resource`` the configs the request asks for (``incremental_ops`` None: AlterConfigs,
    whose ``changes`` replace every dynamic key); ControllerError with the code the client sees when refused.
    ``config``: the controller node's settings, as Kafka's controller judges against its own: a group's configs must
    stay within its bounds, and a topic's values are checked together with the broker values they fall back to."""
    if resource.type == RESOURCE_TOPIC:
        # The name is judged before the topic is looked up, as Kafka's ControllerConfigurationValidator does.
        if not resource.name:
            raise ControllerError(ErrorCode.invalid_request, "Default topic resources are not allowed.")
        validate_topic_name(resource.name)
        topic = image.topics_by_name.get(resource.name)
        if topic is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition, f"Topic {resource.name} does not exist")
        current: Mapping[str, str] = topic.configs
    elif resource.type == RESOURCE_BROKER:
        if resource.name != "":
            try:
                node_id = int(resource.name)
            except ValueError:
                raise ControllerError(
                    ErrorCode.invalid_request, f"Broker id must be an integer, got {resource.name!r}"
                ) from None
            current = image.node_configs.get(node_id, {})
        else:
            current = image.broker_configs
    elif resource.type == RESOURCE_CLIENT_METRICS:
        return _plan_client_metrics(image, resource, changes, incremental_ops)
    elif resource.type == RESOURCE_GROUP:
        return _plan_group(image, resource, changes, incremental_ops, config.value)
    else:
        raise ControllerError(ErrorCode.invalid_request, f"Unsupported config resource type {resource.type}")
    wanted = _apply_config_ops(resource, current, changes, incremental_ops)
    validated: dict[str, str] = {}
    for key, value in wanted.items():
        try:
            if resource.type == RESOURCE_TOPIC:
                validated[key] = validate_topic_config(key, value)
            else:
                validated[key] = validate_broker_config(key, value)
        except ConfigValueError as exc:
            code = ErrorCode.invalid_config if resource.type == RESOURCE_TOPIC else _BROKER_VALUE_REFUSED
            raise ControllerError(code, str(exc)) from None
    if resource.type == RESOURCE_TOPIC:
        try:
            check_topic_values(config, image.broker_configs, validated)
        except ConfigValueError as exc:
            raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
    if resource.type == RESOURCE_BROKER:
        _check_broker_values(validated if resource.name == "" else {**image.broker_configs, **validated})
    records: list[ConfigRecord] = []
    for key in sorted(set(current) | set(validated)):
        new = validated.get(key)
        if current.get(key) != new:
            records.append(ConfigRecord(resource.type, resource.name, key, new))
    return records


def _plan_client_metrics(
    image: MetadataImage,
    resource: ConfigResource,
    changes: Mapping[str, str | None],
    incremental_ops: Mapping[str, int] | None,
) -> list[ConfigRecord]:
    """A KIP-714 subscription: created by its first key, gone when its last is deleted; refused as Kafka's
    ``ClientMetricsConfigs.validate`` refuses (INVALID_REQUEST for an empty name, an unknown key or an interval out
    of range; INVALID_CONFIG for a value that does not parse or a malformed ``match``)."""
    current = image.client_metrics.get(resource.name, {})
    try:
        wanted = _apply_config_ops(resource, current, changes, incremental_ops)
        validated = validate_subscription(resource.name, wanted)
    except ClientMetricsConfigError as exc:
        code = ErrorCode.invalid_request if exc.invalid_request else ErrorCode.invalid_config
        raise ControllerError(code, str(exc)) from None
    return [
        ConfigRecord(resource.type, resource.name, key, validated.get(key))
        for key in sorted(set(current) | set(validated))
        if current.get(key) != validated.get(key)
    ]


def _plan_group(
    image: MetadataImage,
    resource: ConfigResource,
    changes: Mapping[str, str | None],
    incremental_ops: Mapping[str, int] | None,
    broker_value: Callable[[str], Any],
) -> list[ConfigRecord]:
    """A group's dynamic configs, refused as Kafka's ``GroupConfig.validate`` refuses them (INVALID_CONFIG naming
    the key: an unknown key, a value outside its type or the broker's bounds, a heartbeat not below the session
    time-out). A group needs no members to have configs, and its configs outlive it, as in Kafka."""
    if not resource.name:
        raise ControllerError(ErrorCode.invalid_request, "Group name must not be empty")
    current = image.group_configs.get(resource.name, {})
    wanted = _apply_config_ops(resource, current, changes, incremental_ops)
    try:
        validated = validate_group_configs(wanted, broker_value)
    except ConfigValueError as exc:
        raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
    return [
        ConfigRecord(resource.type, resource.name, key, validated.get(key))
        for key in sorted(set(current) | set(validated))
        if current.get(key) != validated.get(key)
    ]


def _definition(resource_type: int, key: str) -> ConfigKey | None:
    if resource_type == RESOURCE_GROUP:
        return GROUP_CONFIG_KEYS.get(key)
    if resource_type == RESOURCE_CLIENT_METRICS:
        definition = CLIENT_METRICS_KEYS.get(key)
        if definition is None:
            raise ClientMetricsConfigError(f"Unknown client metrics configuration: {key}", invalid_request=True)
        return definition
    return config_key(resource_type, key)


def _check_broker_values(effective: Mapping[str, str]) -> None:
    """Kafka validates a broker's dynamic configs together, with those they merge with (``validateValues``): a broker
    resource's values over the cluster-wide defaults (which are checked on their own) must not lock every client
    out (``max.connections.per.ip=0`` without overrides). The controller cannot see the brokers' properties files,
    which the dynamic values merge with too, so only a pair set dynamically in full is judged here: a
    ``max.connections.per.ip=0`` that relies on a file's overrides is accepted, as Kafka accepts it, and a broker
    whose merged pair would still lock every client out keeps its file's pair (``connection_limit_settings``)."""
    per_ip = effective.get("max.connections.per.ip")
    overrides = effective.get("max.connections.per.ip.overrides")
    if per_ip is None or overrides is None:
        return
    refused = per_ip_refusal(int(per_ip), overrides)
    if refused is not None:
        raise ControllerError(_BROKER_VALUE_REFUSED, refused)


def _apply_config_ops(
    resource: ConfigResource,
    current: Mapping[str, str],
    changes: Mapping[str, str | None],
    incremental_ops: Mapping[str, int] | None,
) -> dict[str, str]:
    """The full set of dynamic configs after the request (before value validation)."""
    if incremental_ops is None:
        return {k: v for k, v in changes.items() if v is not None}
    wanted = dict(current)
    for key, value in changes.items():
        op = incremental_ops.get(key, IncrementalOp.SET)
        if op == IncrementalOp.SET:
            if value is None:
                raise ControllerError(ErrorCode.invalid_request, f"Null value not supported for SET of {key}")
            wanted[key] = value
        elif op == IncrementalOp.DELETE:
            if _definition(resource.type, key) is None:
                kind = {RESOURCE_TOPIC: "topic", RESOURCE_GROUP: "group"}.get(resource.type, "broker")
                raise ControllerError(ErrorCode.invalid_config, f"Unknown {kind} config name: {key}")
            wanted.pop(key, None)
        elif op in (IncrementalOp.APPEND, IncrementalOp.SUBTRACT):
            definition = _definition(resource.type, key)
            if definition is None or definition.type is not ConfigType.LIST:
                raise ControllerError(
                    ErrorCode.invalid_config,
                    f"Config value {'append' if op == IncrementalOp.APPEND else 'subtract'} is not allowed for "
                    f"config key: {key}",
                )
            base = wanted.get(key, definition.default_text() or "")
            items = [item for item in base.split(",") if item.strip()]
            given = [item.strip() for item in (value or "").split(",") if item.strip()]
            if op == IncrementalOp.APPEND:
                items.extend(item for item in given if item not in items)
            else:
                items = [item for item in items if item not in given]
            wanted[key] = ",".join(items)
        else:
            raise ControllerError(ErrorCode.invalid_request, f"Unknown incremental config operation {op} for {key}")
    return wanted
