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

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from broker.handlers.context import Handler, RequestContext
from broker.handlers.guards import TOPIC_DENIED, split, topic_name, topics_denied
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from metadata.admin import requests as admin_requests
from metadata.admin import topic_wire
from wire import schema

#: The first versions whose clients retry THROTTLING_QUOTA_EXCEEDED (KIP-599).
_STRICT_CREATE_TOPICS: Final = 6
_STRICT_DELETE_TOPICS: Final = 5
_STRICT_CREATE_PARTITIONS: Final = 3


async def handle_create_topics(ctx: RequestContext, request: Any) -> Any:
    ask = topic_wire.read_create_topics(request, ctx.client_id)

    def describable(name: str) -> bool:
        # As Kafka's controller asks: not a refusal (the topic is created), so not logged as one.
        return ctx.allowed(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name, log_denial=False)

    return await admin_requests.create_topics(
        ctx.response_class,
        ask,
        admin_requests.always(ctx.broker.controller),
        ctx.mutation_quota(_STRICT_CREATE_TOPICS),
        default_partitions=ctx.broker.config.num_partitions,
        describable=describable,
    )


async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    ask = topic_wire.read_delete_topics(request)
    return await admin_requests.delete_topics(
        ctx.response_class, ask, admin_requests.always(ctx.broker.controller), ctx.mutation_quota(_STRICT_DELETE_TOPICS)
    )


async def handle_create_partitions(ctx: RequestContext, request: Any) -> Any:
    ask = topic_wire.read_create_partitions(request)
    return await admin_requests.create_partitions(
        ctx.response_class,
        ask,
        admin_requests.always(ctx.broker.controller),
        ctx.mutation_quota(_STRICT_CREATE_PARTITIONS),
    )


async def authorize_create_topics(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """CLUSTER CREATE allows every topic; without it, TOPIC CREATE on each topic, as Kafka checks."""
    if ctx.allowed(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False):
        return await handler(ctx, request)

    def refused(response_cls: type[Any], topic: Any, code: ErrorCode) -> Any:
        return schema.build_nested(
            response_cls,
            "topics",
            name=topic.name,
            error_code=code,
            error_message=f"{ctx.principal} may not create topic {topic.name}",
            num_partitions=-1,
            replication_factor=-1,
            configs=None,
        )

    return await split(
        ctx, request, handler, ("topics", "topics"), denial=topics_denied(ctx, AclOperation.CREATE), refused=refused
    )


async def authorize_delete_topics(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """TOPIC DELETE on each topic (v6+: named or by id), as Kafka checks. A topic asked by id is answered with its
    name only when the caller may DESCRIBE it (else a null name, as Kafka's controller answers): a refusal must not
    tell a caller the names of topics it cannot see."""
    if ctx.api_version >= 6:

        def refused(response_cls: type[Any], topic: Any, code: ErrorCode) -> Any:
            return schema.build_nested(
                response_cls,
                "responses",
                name=topic.name or _describable_name(ctx, topic),
                topic_id=topic.topic_id or uuid_zero,
                error_code=code,
            )

        return await split(
            ctx,
            request,
            handler,
            ("topics", "responses"),
            denial=topics_denied(ctx, AclOperation.DELETE),
            refused=refused,
        )

    def refused_name(response_cls: type[Any], name: str, code: ErrorCode) -> Any:
        return schema.build_nested(response_cls, "responses", name=name, error_code=code)

    return await split(
        ctx,
        request,
        handler,
        ("topic_names", "responses"),
        denial=lambda n: None if ctx.allowed(AclOperation.DELETE, ResourceType.TOPIC, n) else TOPIC_DENIED,
        refused=refused_name,
    )


def _describable_name(ctx: RequestContext, topic: Any) -> str | None:
    """The name of a topic asked by id, if the caller may DESCRIBE it; None otherwise."""
    name = topic_name(ctx, topic)
    if name is None or not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denial=False):
        return None
    return name


async def authorize_create_partitions(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """TOPIC ALTER on each topic, as Kafka checks."""

    def refused(response_cls: type[Any], topic: Any, code: ErrorCode) -> Any:
        return schema.build_nested(response_cls, "results", name=topic.name, error_code=code)

    return await split(
        ctx, request, handler, ("topics", "results"), denial=topics_denied(ctx, AclOperation.ALTER), refused=refused
    )
