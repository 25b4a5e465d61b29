"""AlterPartitionReassignments (key 45) v0: what ``kafka-reassign-partitions.sh --execute`` and admin clients send.

The controller validates and moves the partitions (``controller.reassignment``, DESIGN §9); brokers of a cluster
forward the request to the active controller, which reads and answers it through the same translation
(``controller.admin_wire``). A failure to reach the controller is reported on every partition of the request, never
as a dropped connection.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.handlers.context import RequestContext
from controller import admin_wire
from controller.errors import error_code_for, error_message_for

logger = logging.getLogger(__name__)


async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    asked = admin_wire.read_alter_partition_reassignments(request)
    try:
        results = await ctx.node.controller.alter_partition_reassignments(asked)
    except Exception as exc:
        code, message = error_code_for(exc), error_message_for(exc)
        logger.error("reassigning %d partitions failed: %s", len(asked), message, exc_info=exc)
        results = admin_wire.reassignments_refused(asked, code, message)
    return admin_wire.alter_partition_reassignments_response(ctx.response_class, results)
