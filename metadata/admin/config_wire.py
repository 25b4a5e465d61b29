"""Config changes on the wire, both ways: Kafka entities of AlterConfigs (33) and IncrementalAlterConfigs (44) to
and from the ``metadata.controller_api`` dataclasses, with the per-item answer every admin translation uses.

Reading a request answers the items that are wrong in themselves (an unknown operation or resource type) here, so
they are never sent on. Whether a broker resource names the right broker depends on who answers, so
:func:`check_broker_resource` takes that node's id from its caller.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from kio.schema.errors import ErrorCode

from metadata.controller_api import ConfigResource, IncrementalOp
from wire import codec, schema

# The API keys, here rather than from metadata.rpc.kafka_apis: that package serves this module, not the reverse.
_ALTER_CONFIGS = 33
_INCREMENTAL_ALTER_CONFIGS = 44

#: The versions the remote client forwards in (the newest each side of the controller listener serves).
_ALTER_CONFIGS_VERSION = 2
_INCREMENTAL_ALTER_CONFIGS_VERSION = 1

_OPS = {IncrementalOp.SET, IncrementalOp.DELETE, IncrementalOp.APPEND, IncrementalOp.SUBTRACT}
_KNOWN_RESOURCE_TYPES = {
    ConfigResource.TOPIC, ConfigResource.BROKER, ConfigResource.CLIENT_METRICS, ConfigResource.GROUP,
}
#: IncrementalAlterConfigs also changes BROKER_LOGGER: answered by the broker named, never by the controller.
_INCREMENTAL_RESOURCE_TYPES = {*_KNOWN_RESOURCE_TYPES, ConfigResource.BROKER_LOGGER}

#: A per-item answer: the error code and message.
Outcome: TypeAlias = tuple[ErrorCode, str | None]


class ResourceRefused(Exception):
    """One topic or resource refused by a request-level check; answered with ``code`` and the message, the
    controller is not asked."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------- AlterConfigs (33), IncrementalAlterConfigs (44)


@dataclass(frozen=True, slots=True)
class ConfigAlteration:
    """One resource of an (Incremental)AlterConfigs request: ``incremental_ops`` None for legacy AlterConfigs (the
    set replaces the resource's dynamic config); ``refused`` is the request-level check's answer, or the broker's own
    answer for a resource it serves itself (BROKER_LOGGER): either way the controller is not asked."""

    resource: ConfigResource
    changes: Mapping[str, str | None]
    incremental_ops: Mapping[str, int] | None
    refused: Outcome | None = None


@dataclass(frozen=True, slots=True)
class ConfigAlterations:
    resources: tuple[ConfigAlteration, ...]
    validate_only: bool


def _unsupported_type(resource: ConfigResource, known: set[int] = _KNOWN_RESOURCE_TYPES) -> Outcome | None:
    if resource.type in known:
        return None
    return ErrorCode.invalid_request, f"Unsupported resource type {resource.type}"


def _repeated_resources(entries: Sequence[Any]) -> set[tuple[int, str]]:
    """The resources a request names more than once: Kafka refuses every copy (each would replace or edit what the
    other writes) before anything else is checked (ConfigAdminManager's preprocess)."""
    counts = Counter((int(e.resource_type), e.resource_name) for e in entries)
    return {resource for resource, n in counts.items() if n > 1}


_REPEATED: Outcome = ErrorCode.invalid_request, "Each resource must appear at most once."


def _null_values(names: Sequence[str]) -> Outcome | None:
    """Kafka's broker refuses a config without a value before anything else is asked (ConfigAdminManager's
    preprocess): legacy AlterConfigs would silently delete the key, and SET, APPEND and SUBTRACT have nothing to
    apply. Only an incremental DELETE may leave the value out."""
    if not names:
        return None
    return ErrorCode.invalid_request, f"Null value not supported for : {', '.join(names)}"


def read_alter_configs(request: Any) -> ConfigAlterations:
    """Legacy AlterConfigs replaces the whole resource config and, as Kafka does, folds repeated keys into one map
    where the last value wins (clients that re-send described configs plus a change rely on it)."""
    alterations = []
    repeated = _repeated_resources(request.resources)
    for entry in request.resources:
        resource = ConfigResource(int(entry.resource_type), entry.resource_name)
        changes = {c.name: c.value for c in entry.configs}
        refused = (
            _REPEATED if (resource.type, resource.name) in repeated
            else _null_values([c.name for c in entry.configs if c.value is None]) or _unsupported_type(resource)
        )
        alterations.append(ConfigAlteration(resource, changes, None, refused))
    return ConfigAlterations(tuple(alterations), bool(request.validate_only))


def read_incremental_alter_configs(request: Any) -> ConfigAlterations:
    """Unlike legacy AlterConfigs, a key named twice in one resource is refused, as is an unknown operation."""
    alterations = []
    repeated = _repeated_resources(request.resources)
    for entry in request.resources:
        resource = ConfigResource(int(entry.resource_type), entry.resource_name)
        duplicates = [k for k, n in Counter(c.name for c in entry.configs).items() if n > 1]
        bad_ops = sorted({int(c.config_operation) for c in entry.configs} - _OPS)
        nulls = [c.name for c in entry.configs if c.value is None and int(c.config_operation) != IncrementalOp.DELETE]
        refused: Outcome | None
        if (resource.type, resource.name) in repeated:
            refused = _REPEATED
        elif duplicates:
            refused = ErrorCode.invalid_request, f"Error due to duplicate config keys {sorted(duplicates)}"
        elif nulls:
            refused = _null_values(nulls)
        elif bad_ops:
            refused = ErrorCode.invalid_request, f"Unknown alter config operation(s) {bad_ops}"
        else:
            refused = _unsupported_type(resource, _INCREMENTAL_RESOURCE_TYPES)
        changes = {c.name: c.value for c in entry.configs}
        ops = {c.name: int(c.config_operation) for c in entry.configs}
        alterations.append(ConfigAlteration(resource, changes, ops, refused))
    return ConfigAlterations(tuple(alterations), bool(request.validate_only))


def check_broker_resource(name: str, node_id: int, *, cluster_default: bool = True) -> bool:
    """True for the cluster-wide default resource (""); ResourceRefused for a name that is not ``node_id``: a
    broker's own configs are asked of that broker (as Kafka's admin clients do). ``cluster_default`` False: a
    resource with no such default (BROKER_LOGGER), where "" is refused too. A name is read as a number, so "01"
    names broker 1."""
    if name == "":
        if cluster_default:
            return True
        raise ResourceRefused(ErrorCode.invalid_request, "Broker id must not be empty")
    try:
        named = int(name)
    except ValueError:
        raise ResourceRefused(ErrorCode.invalid_request, f"broker resource name {name!r} is not a broker id") from None
    if named != node_id:
        raise ResourceRefused(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {node_id}{' or empty string,' if cluster_default else ''} but received "
            f"{name}",
        )
    return False


def alter_configs_response(
    response_cls: type[Any], answers: Sequence[tuple[ConfigResource, ErrorCode, str | None]]
) -> Any:
    """``answers``: (resource, code, message) per resource of the request, in its order."""
    return schema.build(response_cls, throttle_time=0, responses=tuple(
        schema.build_nested(response_cls, "responses", error_code=code, error_message=message,
                           resource_type=resource.type, resource_name=resource.name)
        for resource, code, message in answers
    ))


def alter_configs_request(
    resource: ConfigResource,
    changes: Mapping[str, str | None],
    incremental_ops: Mapping[str, int] | None,
    validate_only: bool,
) -> Any:
    """AlterConfigs when ``incremental_ops`` is None, else IncrementalAlterConfigs, for one resource."""
    if incremental_ops is None:
        cls = codec.request_class(_ALTER_CONFIGS, _ALTER_CONFIGS_VERSION)
        configs = tuple(
            schema.build_nested(schema.field_entity(cls, "resources"), "configs", name=k, value=v)
            for k, v in changes.items()
        )
    else:
        cls = codec.request_class(_INCREMENTAL_ALTER_CONFIGS, _INCREMENTAL_ALTER_CONFIGS_VERSION)
        configs = tuple(
            schema.build_nested(schema.field_entity(cls, "resources"), "configs", name=k,
                               config_operation=incremental_ops.get(k, 0), value=v)
            for k, v in changes.items()
        )
    entry = schema.build_nested(cls, "resources", resource_type=resource.type, resource_name=resource.name,
                               configs=configs)
    return schema.build(cls, resources=(entry,), validate_only=validate_only)


def read_alter_configs_response(response: Any) -> Outcome:
    """The answer for the one resource :func:`alter_configs_request` asks about."""
    result = response.responses[0]
    return ErrorCode(int(result.error_code)), result.error_message
