"""CreateTopics (key 19) v2-7, DeleteTopics (key 20) v1-6 and CreatePartitions (key 37) v0-3.

Validation of names, counts, replication factors, assignments and configs is the controller's. The checks about the
request itself (duplicates, contradictory fields) and the translation of every version are
``metadata.admin.topic_wire``'s; asking the controller item by item and reporting failures per topic is
``metadata.admin.requests``'s. Both are shared with the controller listener, which answers the same requests when a
broker forwards them.

Each is charged to the client's controller mutation quota (KIP-599) there too; the versions from which the quota is
strict (refusing with THROTTLING_QUOTA_EXCEEDED rather than only throttling) are Kafka's.
"""

from __future__ import annotations

from typing import Any, Final

from broker.handlers.context import RequestContext
from metadata.admin import requests as admin_requests
from metadata.admin import topic_wire

#: The first versions whose clients retry THROTTLING_QUOTA_EXCEEDED (KIP-599).
_STRICT_CREATE_TOPICS: Final = 6
_STRICT_DELETE_TOPICS: Final = 5
_STRICT_CREATE_PARTITIONS: Final = 3


async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    ask = topic_wire.read_create_topics(request, ctx.client_id)
    return await admin_requests.create_topics(
        ctx.response_class,
        ask,
        admin_requests.always(ctx.node.controller),
        ctx.mutation_quota(_STRICT_CREATE_TOPICS),
        default_partitions=ctx.node.config.num_partitions,
    )


async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    ask = topic_wire.read_delete_topics(request)
    return await admin_requests.delete_topics(
        ctx.response_class, ask, admin_requests.always(ctx.node.controller), ctx.mutation_quota(_STRICT_DELETE_TOPICS)
    )


async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    ask = topic_wire.read_create_partitions(request)
    return await admin_requests.create_partitions(
        ctx.response_class,
        ask,
        admin_requests.always(ctx.node.controller),
        ctx.mutation_quota(_STRICT_CREATE_PARTITIONS),
    )
