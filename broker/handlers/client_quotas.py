"""DescribeClientQuotas (key 48) and AlterClientQuotas (49) v0-1: client quotas, as ``kafka-configs.sh
--entity-type users/clients`` and the admin clients manage them (KIP-546).

Alterations go to the controller (``metadata.admin.requests``, forwarded to the active controller in a quorum),
which validates them and keeps the quotas as metadata records; descriptions are read from this broker's metadata
image, as a KRaft broker answers from its metadata cache. The CLUSTER checks (DESCRIBE_CONFIGS to describe,
ALTER_CONFIGS to alter, as Kafka's) are the ``authorize_*`` guards below; enforcement is ``broker.quotas``'.
"""

from __future__ import annotations

from typing import Any, Final

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import CLUSTER_DENIED, Guard, cluster
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from metadata.admin import quota_wire
from metadata.admin import requests as admin_requests
from metadata.admin.requests import always
from metadata.client_quotas import QuotaRequestError, quota_filter
from wire import schema


async def handle_alter_client_quotas(ctx: RequestContext, request: Any) -> Any:
    return await admin_requests.alter_client_quotas(ctx.response_class, request, always(ctx.broker.controller))


async def handle_describe_client_quotas(ctx: RequestContext, request: Any) -> Any:
    components, strict = quota_wire.read_describe_client_quotas(request)
    try:
        wanted = quota_filter(components, strict)
    except QuotaRequestError as exc:
        return quota_wire.describe_client_quotas_response(ctx.response_class, {}, exc.code, str(exc))
    quotas = ctx.broker.controller.image.client_quotas
    matched = {entity: values for entity, values in quotas.items() if wanted.matches(entity)}
    return quota_wire.describe_client_quotas_response(ctx.response_class, matched)


#: CLUSTER DESCRIBE_CONFIGS, as Kafka checks.
authorize_describe_client_quotas: Final[Guard] = cluster(AclOperation.DESCRIBE_CONFIGS)


async def authorize_alter_client_quotas(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """CLUSTER ALTER_CONFIGS, as Kafka checks; a refusal answers every entry the request names."""
    if ctx.allowed(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    entry_cls = schema.field_entity(ctx.response_class, "entries")
    return ctx.build(
        entries=tuple(
            schema.build(
                entry_cls,
                error_code=CLUSTER_DENIED,
                error_message=f"{ctx.principal} is not authorized: {CLUSTER_DENIED.name}",
                entity=tuple(
                    schema.build_nested(entry_cls, "entity", entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ),
            )
            for entry in request.entries
        )
    )
