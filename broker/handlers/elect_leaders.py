"""ElectLeaders (key 43) v0-2: what ``kafka-leader-election.sh`` and admin clients' ``elect_leaders`` send.

The controller decides (``controller.decisions.leadership.elect``: preferred, or unclean, which in Fjord loses nothing
since every replica reads the same shared storage); a broker of a cluster forwards the request to the active controller,
which answers it through the same translation (``metadata.admin.topic_wire``). The CLUSTER ALTER check is
``authorize_elect_leaders``, below.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import CLUSTER_DENIED
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from metadata.admin import requests as admin_requests
from metadata.admin import topic_wire
from wire import schema


async def handle_elect_leaders(ctx: RequestContext, request: Any) -> Any:
    ask = topic_wire.read_elect_leaders(request)
    return await admin_requests.elect_leaders(ctx.response_class, ask, admin_requests.always(ctx.broker.controller))


async def authorize_elect_leaders(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """CLUSTER ALTER, as Kafka checks. Kafka refuses every partition asked (none when all were asked) and sets the
    top-level code (v1+)."""
    if ctx.allowed(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    ask = topic_wire.read_elect_leaders(request)
    message = f"{ctx.principal} is not authorized: {CLUSTER_DENIED.name}"
    response = topic_wire.elect_leaders_response(
        ctx.response_class, topic_wire.elect_leaders_refused(ask, CLUSTER_DENIED, message)
    )
    if schema.has_field(ctx.response_class, "error_code"):
        response = dataclasses.replace(response, error_code=CLUSTER_DENIED)
    return response
