"""ListPartitionReassignments (key 46) v0: the reassignments in flight (``kafka-reassign-partitions.sh --verify``
and ``--list``), answered from this broker's metadata image.

As Kafka reports them: ``replicas`` is the target followed by the brokers the partition moves away from,
``adding_replicas`` the target and ``removing_replicas`` the source (DESIGN §9: one replica, moved without a copy).
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from broker.handlers.context import RequestContext
from broker.handlers.guards import Guard, cluster
from metadata.acl.binding import AclOperation
from metadata.image import partitions_being_reassigned
from wire import schema


async def handle_list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    image = ctx.broker.controller.image
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for topic in request.topics:
            wanted.setdefault(topic.name, set()).update(int(p) for p in topic.partition_indexes)
    topic_cls = schema.field_entity(ctx.response_class, "topics")
    by_topic: dict[str, list[Any]] = {}
    for name, partition in partitions_being_reassigned(image):
        if wanted is not None and partition.partition not in wanted.get(name, ()):
            continue
        adding = tuple(r for r in partition.replicas if r not in partition.removing_replicas)
        removing = tuple(r for r in partition.removing_replicas if r not in partition.replicas)
        by_topic.setdefault(name, []).append(
            schema.build_nested(topic_cls, "partitions", partition_index=partition.partition,
                               replicas=partition.replicas + removing, adding_replicas=adding,
                               removing_replicas=removing)
        )
    topics = tuple(schema.build(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
    return ctx.build(throttle_time=0, error_code=ErrorCode.none, error_message=None, topics=topics)


#: CLUSTER DESCRIBE, as Kafka checks; a refusal refuses the whole request.
authorize_list_partition_reassignments: Final[Guard] = cluster(AclOperation.DESCRIBE)
