"""UpdateFeatures (key 57) v0-2: ``kafka-features.sh upgrade/downgrade`` and Admin.updateFeatures.

The finalized feature levels are metadata: the request goes to the controller (``controller.decisions.features``
decides, as Kafka's FeatureControlManager), which a broker of a cluster forwards to, as KRaft brokers do. What a
client reads back (DescribeFeatures) is ApiVersions' finalized features.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import CLUSTER_DENIED
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from metadata.admin import feature_wire
from metadata.admin import requests as admin_requests
from metadata.admin.requests import always


async def handle_update_features(ctx: RequestContext, request: Any) -> Any:
    return await admin_requests.update_features(ctx.response_class, request, ctx.api_version,
                                                always(ctx.broker.controller))


async def authorize_update_features(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """CLUSTER ALTER, as Kafka checks; a refusal is the top-level CLUSTER_AUTHORIZATION_FAILED alone."""
    if ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    message = f"{ctx.principal} is not authorized: {CLUSTER_DENIED.name}"
    return feature_wire.update_features_refusal(ctx.response_class, ErrorCode(CLUSTER_DENIED), message)
