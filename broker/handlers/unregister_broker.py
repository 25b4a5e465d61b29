"""UnregisterBroker (key 64) v0: what ``kafka-cluster.sh unregister --id N`` (Admin.unregisterBroker) sends.

The controller decides (``controller.decisions.controlled_shutdown.unregister``): an unknown id is
BROKER_ID_NOT_REGISTERED as in Kafka, a broker that is still alive or whose WAL a failover still replays is refused with
a message saying why. A broker of a cluster forwards the request to the active controller; a failure to reach it is an
error code in the answer, never a dropped connection.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, cluster
from metadata.acl.binding import AclOperation
from metadata.errors import error_code_for, error_message_for

logger = logging.getLogger(__name__)


async def handle_unregister_broker(ctx: RequestContext, request: Any) -> Any:
    broker_id = int(request.broker_id)
    try:
        await ctx.broker.controller.unregister_broker(broker_id)
    except Exception as exc:
        code = error_code_for(exc)
        if code is ErrorCode.unknown_server_error:
            logger.error("unregistering broker %d failed", broker_id, exc_info=exc)
        return ctx.build(throttle_time=0, error_code=code, error_message=error_message_for(exc))
    return ctx.build(throttle_time=0, error_code=ErrorCode.none, error_message=None)


#: CLUSTER ALTER, as Kafka checks; a refusal refuses the whole request.
authorize_unregister_broker: Final[Guard] = cluster(AclOperation.ALTER)
