"""AlterPartitionReassignments (key 45) v0-1: what ``kafka-reassign-partitions.sh --execute`` and admin clients send.

v1 (KIP-860) lets a client forbid a move that changes a partition's replication factor
(``allow_replication_factor_change`` false, ``--disallow-replication-factor-change``): such items are refused here
with INVALID_REPLICATION_FACTOR, as Kafka's controller refuses them, and the rest go on.

The controller validates and moves the partitions (``controller.decisions.reassignment``, DESIGN §9); brokers of a
cluster forward the request to the active controller, which reads and answers it through the same translation
(``metadata.admin.topic_wire``). A failure to reach the controller is reported on every partition of the request, never
as a dropped connection.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, cluster
from metadata.acl.binding import AclOperation
from metadata.admin import requests as admin_requests
from metadata.admin import topic_wire
from metadata.controller_api import ReassignmentResult


async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    asked = topic_wire.read_alter_partition_reassignments(request)
    refused: list[ReassignmentResult] = []
    if not getattr(request, "allow_replication_factor_change", True):
        image = ctx.broker.controller.image
        kept = []
        for item in asked:
            current = image.partition(item.topic, item.partition)
            if item.replicas is not None and current is not None and len(item.replicas) != len(current.replicas):
                message = (
                    f"The replication factor is changed from {len(current.replicas)} to {len(item.replicas)} "
                    "but allowReplicationFactorChange is false."
                )
                refused.append(
                    ReassignmentResult(item.topic, item.partition, ErrorCode.invalid_replication_factor, message)
                )
            else:
                kept.append(item)
        asked = kept
    return await admin_requests.alter_partition_reassignments(
        ctx.response_class, asked, admin_requests.always(ctx.broker.controller), refused=refused
    )


#: CLUSTER ALTER, as Kafka checks; a refusal refuses the whole request.
authorize_alter_partition_reassignments: Final[Guard] = cluster(AclOperation.ALTER)
