"""ListConfigResources (key 74) v0-1: the config resources a client can describe (``kafka-client-metrics.sh
--list``, ``kafka-configs.sh --describe --entity-type client-metrics``).

v0 (Kafka 3.7's ListClientMetricsResources) lists the client-metrics subscriptions; v1 (KIP-1142) lists the types
the request names (none named: every type served), as Kafka 4.1+ does: topics, brokers, broker loggers (one per
broker), client-metrics subscriptions and groups with dynamic configs.
A type outside those is UNSUPPORTED_VERSION, as Kafka answers. CLUSTER DESCRIBE_CONFIGS is required, as in Kafka.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, cluster
from metadata.acl.binding import AclOperation
from metadata.controller_api import ConfigResource
from wire import schema

_V1_TYPES: Final = (ConfigResource.TOPIC, ConfigResource.BROKER, ConfigResource.BROKER_LOGGER,
                    ConfigResource.CLIENT_METRICS, ConfigResource.GROUP)


async def handle_list_config_resources(ctx: RequestContext, request: Any) -> Any:
    supported = _V1_TYPES if ctx.api_version >= 1 else (ConfigResource.CLIENT_METRICS,)
    asked = tuple(int(t) for t in getattr(request, "resource_types", ()) or ()) or supported
    if any(t not in supported for t in asked):
        return ctx.build(throttle_time=0, error_code=ErrorCode.unsupported_version, config_resources=())
    image = ctx.broker.controller.image
    found: list[tuple[str, int]] = []
    if ConfigResource.CLIENT_METRICS in asked:
        found.extend((name, ConfigResource.CLIENT_METRICS) for name in sorted(image.client_metrics))
    brokers = [str(node_id) for node_id in sorted(image.brokers)]
    if ConfigResource.BROKER_LOGGER in asked:
        found.extend((name, ConfigResource.BROKER_LOGGER) for name in brokers)
    if ConfigResource.BROKER in asked:
        found.extend((name, ConfigResource.BROKER) for name in brokers)
    if ConfigResource.TOPIC in asked:
        found.extend((name, ConfigResource.TOPIC) for name in sorted(image.topics_by_name))
    if ConfigResource.GROUP in asked:
        found.extend((name, ConfigResource.GROUP) for name in sorted(image.group_configs))
    fields: dict[str, Any] = {}
    return ctx.build(throttle_time=0, error_code=ErrorCode.none, config_resources=tuple(
        schema.build_nested(ctx.response_class, "config_resources", resource_name=name,
                           **({"resource_type": kind} if ctx.api_version >= 1 else fields))
        for name, kind in found
    ))


authorize_list_config_resources: Final[Guard] = cluster(AclOperation.DESCRIBE_CONFIGS)
