"""AlterPartitionReassignments (key 45) v0: what ``kafka-reassign-partitions.sh --execute`` and admin clients send.

The controller validates and moves the partitions (``controller.decisions.reassignment``, DESIGN §9); brokers of a
cluster forward the request to the active controller, which reads and answers it through the same translation
(``metadata.admin.topic_wire``). A failure to reach the controller is reported on every partition of the request, never
as a dropped connection.
"""

from __future__ import annotations

from typing import Any, Final

from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, cluster
from metadata.acl.binding import AclOperation
from metadata.admin import requests as admin_requests
from metadata.admin import topic_wire


async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    asked = topic_wire.read_alter_partition_reassignments(request)
    return await admin_requests.alter_partition_reassignments(
        ctx.response_class, asked, admin_requests.always(ctx.broker.controller)
    )


#: CLUSTER ALTER, as Kafka checks; a refusal refuses the whole request.
authorize_alter_partition_reassignments: Final[Guard] = cluster(AclOperation.ALTER)
