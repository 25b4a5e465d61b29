"""DescribeCluster (key 60) v0-2: the live brokers on the client's listener, cluster id and controller; v2 can ask for
the fenced brokers too (``include_fenced_brokers``, KIP-1073: how ``kafka-cluster.sh`` and the admin client see a
broker that registered but is fenced), each broker flagged ``is_fenced``, as Kafka lists them."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.metadata import client_controller_id, live_endpoint
from wire import schema

ENDPOINT_TYPE_BROKERS = 1
ENDPOINT_TYPE_CONTROLLERS = 2


async def handle_describe_cluster(ctx: RequestContext, request: Any) -> Any:
    image = ctx.broker.controller.image
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_TYPE_BROKERS)
    if endpoint_type != ENDPOINT_TYPE_BROKERS:
        # Kafka's AuthHelper.computeDescribeClusterResponse: the controllers are a known type this listener does not
        # serve (MISMATCHED_ENDPOINT_TYPE, which the admin client reports as such), any other byte is a type Kafka
        # does not know (UNSUPPORTED_ENDPOINT_TYPE). Either answer carries the code and message alone. (Kafka's
        # INVALID_REQUEST for v0 cannot happen: v0 has no endpoint type, which is then the brokers.)
        if endpoint_type == ENDPOINT_TYPE_CONTROLLERS:
            return ctx.build(
                error_code=ErrorCode.mismatched_endpoint_type,
                error_message="The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
                "CONTROLLER",
            )
        return ctx.build(
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message=f"Unsupported endpoint type {endpoint_type}",
        )
    with_fenced = bool(getattr(request, "include_fenced_brokers", False))
    registered = [b for _, b in sorted(image.brokers.items())] if with_fenced else image.live_brokers()
    brokers = []
    for broker in registered:
        endpoint = live_endpoint(broker, ctx.listener_name)
        if endpoint is not None:
            brokers.append(
                schema.build_nested(ctx.response_class, "brokers", broker_id=broker.node_id, host=endpoint[0],
                                   port=endpoint[1], rack=broker.rack, is_fenced=broker.fenced)
            )
    return ctx.build(
        throttle_time=0,
        error_code=ErrorCode.none,
        endpoint_type=ENDPOINT_TYPE_BROKERS,
        cluster_id=image.cluster_id,
        controller_id=client_controller_id(image, ctx.broker.node_id),
        brokers=tuple(brokers),
        cluster_authorized_operations=ctx.cluster_authorized_operations(request.include_cluster_authorized_operations),
    )
