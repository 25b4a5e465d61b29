"""The ACL checks of every API, by api key, next to ``broker.handlers.table``: the one place to read which
operation on which resource each request needs (Kafka's KafkaApis checks), and what a refusal answers.

A guard wraps the API's handler when ``authorizer.class.name`` is set (``broker.authorization``):

- a request about one resource (a group's JoinGroup, a transactional id's EndTxn, the cluster's
  AlterPartitionReassignments) is refused whole with Kafka's code, the handler never runs, nothing changes;
- a request about many (Produce's topics, DeleteGroups' groups) is split: the refused items are answered with
  TOPIC/GROUP/..._AUTHORIZATION_FAILED, the handler serves a copy of the request holding only the allowed ones,
  and the two answers are merged, as Kafka answers per item. When nothing is allowed the handler is not called
  (an empty list means "all" to some APIs).

Metadata (hiding topics, auto-creation) and the authorized-operations fields are checked in their handlers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

from broker.handlers.context import Handler, RequestContext
from metadata.acl.binding import CLUSTER_NAME, AclOperation, ResourceType
from metadata.admin import topic_wire
from wire import schema

Guard = Callable[[RequestContext, Any, Handler], Awaitable[Any]]

_READ, _WRITE, _DESCRIBE = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
_TOPIC, _GROUP, _CLUSTER, _TXN = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
_TOPIC_DENIED = ErrorCode.topic_authorization_failed
_GROUP_DENIED = ErrorCode.group_authorization_failed
_CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
_TXN_DENIED = ErrorCode.transactional_id_authorization_failed
#: ConfigResource types (DescribeConfigs and the AlterConfigs): 2 topic, 4 broker, 8 broker logger.
_CONFIG_TOPIC = 2


async def serve(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """Answers ``request`` through ``handler`` with the API's ACL checks applied (none when authorization is off)."""
    guard = GUARDS.get(ctx.api_key)
    if guard is None or not ctx.authorizer.enabled:
        return await handler(ctx, request)
    return await guard(ctx, request, handler)


# ------------------------------------------------------------------------------------------- building blocks


def _refused_whole(ctx: RequestContext, code: ErrorCode) -> Any:
    fields: dict[str, object] = {"error_code": code}
    if schema.has_field(ctx.response_class, "error_message"):
        fields["error_message"] = f"{ctx.principal} is not authorized: {code.name}"
    return ctx.build(**fields)


def _whole(resource: ResourceType, op: AclOperation, name: Callable[[Any], str], code: ErrorCode) -> Guard:
    """A request about one resource: refused whole (top-level error code) unless ``op`` is allowed on it."""

    async def guard(ctx: RequestContext, request: Any, handler: Handler) -> Any:
        if not ctx.allowed(op, resource, name(request)):
            return _refused_whole(ctx, code)
        return await handler(ctx, request)

    return guard


def _cluster(op: AclOperation) -> Guard:
    return _whole(_CLUSTER, op, lambda _r: CLUSTER_NAME, _CLUSTER_DENIED)


async def _split(
    ctx: RequestContext,
    request: Any,
    handler: Handler,
    fields: tuple[str, str],
    *,
    denial: Callable[[Any], ErrorCode | None],
    refused: Callable[[type[Any], Any, ErrorCode], Any],
) -> Any:
    """``fields``: (request list, response list). ``denial(item)``: the code refusing a request item, or None;
    ``refused(response class, item, code)``: the response entry answering a refused item."""
    request_field, response_field = fields
    items: Sequence[Any] = getattr(request, request_field) or ()
    allowed: list[Any] = []
    denied: list[tuple[Any, ErrorCode]] = []
    for item in items:
        code = denial(item)
        if code is None:
            allowed.append(item)
        else:
            denied.append((item, code))
    if not denied:
        return await handler(ctx, request)
    answered = tuple(refused(ctx.response_class, item, code) for item, code in denied)
    if not allowed:
        if getattr(request, "acks", None) == 0:
            return None  # Produce acks=0: no response at all
        return ctx.build(**{response_field: answered})
    response = await handler(ctx, dataclasses.replace(request, **{request_field: tuple(allowed)}))
    if response is None:
        return None
    return dataclasses.replace(response, **{response_field: tuple(getattr(response, response_field)) + answered})


def _topic_name(ctx: RequestContext, item: Any, field: str = "name") -> str | None:
    """A request topic's name, from its name or (newer versions) its id; None for an unknown id (the handler
    answers UNKNOWN_TOPIC_ID)."""
    name = getattr(item, field, None)
    if name:
        return str(name)
    topic_id = getattr(item, "topic_id", None)
    if topic_id is None or topic_id == uuid_zero:
        return None
    topic = ctx.node.controller.image.topics_by_id.get(topic_id)
    return None if topic is None else topic.name


def _topics_denied(ctx: RequestContext, op: AclOperation, field: str = "name") -> Callable[[Any], ErrorCode | None]:
    def denial(item: Any) -> ErrorCode | None:
        name = _topic_name(ctx, item, field)
        return None if name is None or ctx.allowed(op, _TOPIC, name) else _TOPIC_DENIED

    return denial


def _partitions_entry(
    topic_list: str,
    partition_list: str,
    index_field: str,
    *,
    code_field: str = "error_code",
    topic_field: str = "name",
    item_partitions: str = "partitions",
    item_index: str | None = "partition_index",
    **extra: object,
) -> Callable[[type[Any], Any, ErrorCode], Any]:
    """The response entry of a refused topic: every partition the request named, with the code."""

    def refused(response_cls: type[Any], item: Any, code: ErrorCode) -> Any:
        topic_cls = schema.field_entity(response_cls, topic_list)
        partitions = tuple(
            schema.build_nested(
                topic_cls,
                partition_list,
                **{index_field: p if item_index is None else getattr(p, item_index), code_field: code},
                **extra,
            )
            for p in getattr(item, item_partitions)
        )
        return schema.build(
            topic_cls,
            **{
                topic_field: getattr(item, topic_field, None) or getattr(item, "name", ""),
                "topic_id": getattr(item, "topic_id", uuid_zero),
                partition_list: partitions,
            },
        )

    return refused


# ------------------------------------------------------------------------------------------- the guards


async def _produce(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    refused = _partitions_entry(
        "responses",
        "partition_responses",
        "index",
        item_partitions="partition_data",
        item_index="index",
        base_offset=-1,
    )
    transactional_id = getattr(request, "transactional_id", None)
    if transactional_id is not None and not ctx.allowed(_WRITE, _TXN, transactional_id):
        return await _split(
            ctx, request, handler, ("topic_data", "responses"), denial=lambda _t: _TXN_DENIED, refused=refused
        )
    return await _split(
        ctx, request, handler, ("topic_data", "responses"), denial=_topics_denied(ctx, _WRITE), refused=refused
    )


async def _fetch(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    refused = _partitions_entry(
        "responses",
        "partitions",
        "partition_index",
        topic_field="topic",
        item_index="partition",
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        records=b"",
    )
    response = await _split(
        ctx, request, handler, ("topics", "responses"), denial=_topics_denied(ctx, _READ, "topic"), refused=refused
    )
    return _without_unreadable(ctx, response)


def _without_unreadable(ctx: RequestContext, response: Any) -> Any:
    """A fetch session (KIP-227) serves partitions its request does not name: each answered topic is checked again,
    so a READ revoked while a consumer's session lives stops the records at once, as Kafka re-checks every fetch."""
    check = _topics_denied(ctx, _READ, "topic")
    codes = [
        None if topic.partitions and all(p.error_code == _TOPIC_DENIED for p in topic.partitions) else check(topic)
        for topic in response.responses
    ]
    if all(code is None for code in codes):
        return response
    topic_cls = schema.field_entity(type(response), "responses")

    def refused(topic: Any, code: ErrorCode) -> Any:
        return dataclasses.replace(
            topic,
            partitions=tuple(
                schema.build_nested(
                    topic_cls,
                    "partitions",
                    partition_index=p.partition_index,
                    error_code=code,
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    records=b"",
                )
                for p in topic.partitions
            ),
        )

    return dataclasses.replace(
        response,
        responses=tuple(
            t if code is None else refused(t, code) for t, code in zip(response.responses, codes, strict=True)
        ),
    )


async def _list_offsets(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    refused = _partitions_entry("topics", "partitions", "partition_index", timestamp=-1, offset=-1)
    return await _split(
        ctx, request, handler, ("topics", "topics"), denial=_topics_denied(ctx, _DESCRIBE), refused=refused
    )


async def _offset_for_leader_epoch(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    refused = _partitions_entry(
        "topics", "partitions", "partition", topic_field="topic", item_index="partition", end_offset=-1, leader_epoch=-1
    )
    return await _split(
        ctx, request, handler, ("topics", "topics"), denial=_topics_denied(ctx, _DESCRIBE, "topic"), refused=refused
    )


async def _delete_records(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    refused = _partitions_entry("topics", "partitions", "partition_index", low_watermark=-1)
    return await _split(
        ctx, request, handler, ("topics", "topics"), denial=_topics_denied(ctx, AclOperation.DELETE), refused=refused
    )


async def _offset_commit(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    refused = _partitions_entry("topics", "partitions", "partition_index")
    if not ctx.allowed(_READ, _GROUP, request.group_id):
        return ctx.build(topics=tuple(refused(ctx.response_class, t, _GROUP_DENIED) for t in request.topics))
    return await _split(ctx, request, handler, ("topics", "topics"), denial=_topics_denied(ctx, _READ), refused=refused)


async def _txn_offset_commit(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    refused = _partitions_entry("topics", "partitions", "partition_index")
    for resource, name, code in (
        (_TXN, request.transactional_id, _TXN_DENIED),
        (_GROUP, request.group_id, _GROUP_DENIED),
    ):
        op = _WRITE if resource is _TXN else _READ
        if not ctx.allowed(op, resource, name):
            return ctx.build(topics=tuple(refused(ctx.response_class, t, code) for t in request.topics))
    return await _split(ctx, request, handler, ("topics", "topics"), denial=_topics_denied(ctx, _READ), refused=refused)


def _describable(ctx: RequestContext, topics: Sequence[Any], named: bool) -> tuple[Any, ...]:
    """OffsetFetch's answered topics as Kafka shows them: a topic the principal may not DESCRIBE is left out of an
    every-topic answer, and answered TOPIC_AUTHORIZATION_FAILED when the request named it."""
    out = []
    for topic in topics:
        if ctx.allowed(_DESCRIBE, _TOPIC, topic.name, log_denial=named):
            out.append(topic)
        elif named:
            topic_cls = type(topic)
            out.append(
                dataclasses.replace(
                    topic,
                    partitions=tuple(
                        schema.build_nested(
                            topic_cls,
                            "partitions",
                            partition_index=p.partition_index,
                            committed_offset=-1,
                            metadata="",
                            error_code=_TOPIC_DENIED,
                        )
                        for p in topic.partitions
                    ),
                )
            )
    return tuple(out)


async def _offset_fetch(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    if ctx.api_version >= 8:

        def refused_group(response_cls: type[Any], group: Any, code: ErrorCode) -> Any:
            return schema.build_nested(response_cls, "groups", group_id=group.group_id, error_code=code)

        response = await _split(
            ctx,
            request,
            handler,
            ("groups", "groups"),
            denial=lambda g: None if ctx.allowed(_DESCRIBE, _GROUP, g.group_id) else _GROUP_DENIED,
            refused=refused_group,
        )
        named = {g.group_id: g.topics is not None for g in request.groups}
        return dataclasses.replace(
            response,
            groups=tuple(
                dataclasses.replace(g, topics=_describable(ctx, g.topics, named.get(g.group_id, False)))
                for g in response.groups
            ),
        )
    if ctx.allowed(_DESCRIBE, _GROUP, request.group_id):
        response = await handler(ctx, request)
        return dataclasses.replace(response, topics=_describable(ctx, response.topics, request.topics is not None))
    if ctx.api_version >= 2:
        return ctx.build(error_code=_GROUP_DENIED)
    topic_cls = schema.field_entity(ctx.response_class, "topics")
    return ctx.build(
        topics=tuple(
            schema.build(
                topic_cls,
                name=t.name,
                partitions=tuple(
                    schema.build_nested(
                        topic_cls,
                        "partitions",
                        partition_index=p,
                        committed_offset=-1,
                        metadata="",
                        error_code=_GROUP_DENIED,
                    )
                    for p in t.partition_indexes
                ),
            )
            for t in request.topics or ()
        )
    )


async def _offset_delete(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    if not ctx.allowed(AclOperation.DELETE, _GROUP, request.group_id):
        return _refused_whole(ctx, _GROUP_DENIED)
    refused = _partitions_entry("topics", "partitions", "partition_index")
    return await _split(ctx, request, handler, ("topics", "topics"), denial=_topics_denied(ctx, _READ), refused=refused)


def _groups(op: AclOperation, response_field: str) -> Callable[[str], Guard]:
    def make(request_field: str) -> Guard:
        async def guard(ctx: RequestContext, request: Any, handler: Handler) -> Any:
            def refused(response_cls: type[Any], group: str, code: ErrorCode) -> Any:
                return schema.build_nested(response_cls, response_field, group_id=group, error_code=code)

            return await _split(
                ctx,
                request,
                handler,
                (request_field, response_field),
                denial=lambda g: None if ctx.allowed(op, _GROUP, g) else _GROUP_DENIED,
                refused=refused,
            )

        return guard

    return make


async def _list_groups(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """Kafka lists only the groups the principal may describe (no error for the others)."""
    response = await handler(ctx, request)
    if ctx.allowed(_DESCRIBE, _CLUSTER, CLUSTER_NAME, log_denial=False):
        return response
    return dataclasses.replace(
        response,
        groups=tuple(g for g in response.groups if ctx.allowed(_DESCRIBE, _GROUP, g.group_id, log_denial=False)),
    )


async def _list_transactions(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """Kafka lists only the transactional ids the principal may describe (no error for the others)."""
    response = await handler(ctx, request)
    return dataclasses.replace(
        response,
        transaction_states=tuple(
            t for t in response.transaction_states if ctx.allowed(_DESCRIBE, _TXN, t.transactional_id, log_denial=False)
        ),
    )


async def _create_topics(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    if ctx.allowed(AclOperation.CREATE, _CLUSTER, CLUSTER_NAME, log_denial=False):
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

    return await _split(
        ctx, request, handler, ("topics", "topics"), denial=_topics_denied(ctx, AclOperation.CREATE), refused=refused
    )


async def _delete_topics(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    if ctx.api_version >= 6:

        def refused(response_cls: type[Any], topic: Any, code: ErrorCode) -> Any:
            return schema.build_nested(
                response_cls,
                "responses",
                name=_topic_name(ctx, topic) or topic.name,
                topic_id=topic.topic_id or uuid_zero,
                error_code=code,
            )

        return await _split(
            ctx,
            request,
            handler,
            ("topics", "responses"),
            denial=_topics_denied(ctx, AclOperation.DELETE),
            refused=refused,
        )

    def refused_name(response_cls: type[Any], name: str, code: ErrorCode) -> Any:
        return schema.build_nested(response_cls, "responses", name=name, error_code=code)

    return await _split(
        ctx,
        request,
        handler,
        ("topic_names", "responses"),
        denial=lambda n: None if ctx.allowed(AclOperation.DELETE, _TOPIC, n) else _TOPIC_DENIED,
        refused=refused_name,
    )


async def _create_partitions(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    def refused(response_cls: type[Any], topic: Any, code: ErrorCode) -> Any:
        return schema.build_nested(response_cls, "results", name=topic.name, error_code=code)

    return await _split(
        ctx, request, handler, ("topics", "results"), denial=_topics_denied(ctx, AclOperation.ALTER), refused=refused
    )


def _configs(op: AclOperation, response_field: str) -> Guard:
    async def guard(ctx: RequestContext, request: Any, handler: Handler) -> Any:
        def denial(resource: Any) -> ErrorCode | None:
            if int(resource.resource_type) == _CONFIG_TOPIC:
                return None if ctx.allowed(op, _TOPIC, resource.resource_name) else _TOPIC_DENIED
            return None if ctx.allowed(op, _CLUSTER, CLUSTER_NAME) else _CLUSTER_DENIED

        def refused(response_cls: type[Any], resource: Any, code: ErrorCode) -> Any:
            return schema.build_nested(
                response_cls,
                response_field,
                error_code=code,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )

        return await _split(ctx, request, handler, ("resources", response_field), denial=denial, refused=refused)

    return guard


async def _init_producer_id(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    transactional_id = request.transactional_id
    if transactional_id is not None:
        if not ctx.allowed(_WRITE, _TXN, transactional_id):
            return _refused_whole(ctx, _TXN_DENIED)
    elif not (
        ctx.allowed(AclOperation.IDEMPOTENT_WRITE, _CLUSTER, CLUSTER_NAME, log_denial=False)
        or ctx.authorizer.allowed_on_some(ctx.principal, ctx.client_host, _WRITE, _TOPIC)
    ):
        ctx.allowed(AclOperation.IDEMPOTENT_WRITE, _CLUSTER, CLUSTER_NAME)  # counted and logged
        return _refused_whole(ctx, _CLUSTER_DENIED)
    return await handler(ctx, request)


async def _add_offsets_to_txn(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    if not ctx.allowed(_WRITE, _TXN, request.transactional_id):
        return _refused_whole(ctx, _TXN_DENIED)
    if not ctx.allowed(_READ, _GROUP, request.group_id):
        return _refused_whole(ctx, _GROUP_DENIED)
    return await handler(ctx, request)


async def _add_partitions_to_txn(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    if ctx.api_version >= 4:  # the brokers' own verification (KIP-890): CLUSTER_ACTION, as Kafka checks
        if ctx.allowed(AclOperation.CLUSTER_ACTION, _CLUSTER, CLUSTER_NAME):
            return await handler(ctx, request)
        return _refused_whole(ctx, _CLUSTER_DENIED)
    topics = request.v3_and_below_topics
    code = None if ctx.allowed(_WRITE, _TXN, request.v3_and_below_transactional_id) else _TXN_DENIED
    if code is None:
        denied = [t.name for t in topics if not ctx.allowed(_WRITE, _TOPIC, t.name)]
        if not denied:
            return await handler(ctx, request)
        code = _TOPIC_DENIED
    topic_cls = schema.field_entity(ctx.response_class, "results_by_topic_v3_and_below")
    return ctx.build(
        results_by_topic_v3_and_below=tuple(
            schema.build(
                topic_cls,
                name=t.name,
                results_by_partition=tuple(
                    schema.build_nested(topic_cls, "results_by_partition", partition_index=p, partition_error_code=code)
                    for p in t.partitions
                ),
            )
            for t in topics
        )
    )


async def _write_txn_markers(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    if ctx.allowed(AclOperation.CLUSTER_ACTION, _CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    marker_cls = schema.field_entity(ctx.response_class, "markers")
    topic_cls = schema.field_entity(marker_cls, "topics")
    return ctx.build(
        markers=tuple(
            schema.build(
                marker_cls,
                producer_id=m.producer_id,
                topics=tuple(
                    schema.build(
                        topic_cls,
                        name=t.name,
                        partitions=tuple(
                            schema.build_nested(topic_cls, "partitions", partition_index=p, error_code=_CLUSTER_DENIED)
                            for p in t.partition_indexes
                        ),
                    )
                    for t in m.topics
                ),
            )
            for m in request.markers
        )
    )


async def _find_coordinator(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    kind = _TXN if int(request.key_type) == 1 else _GROUP
    code = _TXN_DENIED if kind is _TXN else _GROUP_DENIED
    if ctx.api_version < 4:
        return await _whole(kind, _DESCRIBE, lambda r: r.key, code)(ctx, request, handler)

    def refused(response_cls: type[Any], key: str, denied: ErrorCode) -> Any:
        return schema.build_nested(
            response_cls, "coordinators", key=key, node_id=-1, host="", port=-1, error_code=denied
        )

    return await _split(
        ctx,
        request,
        handler,
        ("coordinator_keys", "coordinators"),
        denial=lambda key: None if ctx.allowed(_DESCRIBE, kind, key) else code,
        refused=refused,
    )


async def _describe_transactions(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    def refused(response_cls: type[Any], transactional_id: str, code: ErrorCode) -> Any:
        return schema.build_nested(
            response_cls,
            "transaction_states",
            transactional_id=transactional_id,
            error_code=code,
            producer_id=-1,
            producer_epoch=-1,
        )

    return await _split(
        ctx,
        request,
        handler,
        ("transactional_ids", "transaction_states"),
        denial=lambda t: None if ctx.allowed(_DESCRIBE, _TXN, t) else _TXN_DENIED,
        refused=refused,
    )


async def _describe_producers(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    refused = _partitions_entry(
        "topics", "partitions", "partition_index", item_partitions="partition_indexes", item_index=None
    )
    return await _split(ctx, request, handler, ("topics", "topics"), denial=_topics_denied(ctx, _READ), refused=refused)


async def _alter_user_scram_credentials(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    if ctx.allowed(AclOperation.ALTER, _CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    users = dict.fromkeys([*(d.name for d in request.deletions), *(u.name for u in request.upsertions)])
    return ctx.build(
        results=tuple(
            schema.build_nested(ctx.response_class, "results", user=user, error_code=_CLUSTER_DENIED) for user in users
        )
    )


async def _alter_client_quotas(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    if ctx.allowed(AclOperation.ALTER_CONFIGS, _CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    entry_cls = schema.field_entity(ctx.response_class, "entries")
    return ctx.build(
        entries=tuple(
            schema.build(
                entry_cls,
                error_code=_CLUSTER_DENIED,
                error_message=f"{ctx.principal} is not authorized: {_CLUSTER_DENIED.name}",
                entity=tuple(
                    schema.build_nested(entry_cls, "entity", entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ),
            )
            for entry in request.entries
        )
    )


async def _create_acls(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    if ctx.allowed(AclOperation.ALTER, _CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    return ctx.build(
        results=tuple(
            schema.build_nested(ctx.response_class, "results", error_code=_CLUSTER_DENIED) for _ in request.creations
        )
    )


async def _delete_acls(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    if ctx.allowed(AclOperation.ALTER, _CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    return ctx.build(
        filter_results=tuple(
            schema.build_nested(ctx.response_class, "filter_results", error_code=_CLUSTER_DENIED, matching_acls=())
            for _ in request.filters
        )
    )


async def _elect_leaders(ctx: RequestContext, request: Any, handler: Handler) -> Any:
    """Kafka refuses every partition asked (none when all were asked) and sets the top-level code (v1+)."""
    if ctx.allowed(AclOperation.ALTER, _CLUSTER, CLUSTER_NAME):
        return await handler(ctx, request)
    ask = topic_wire.read_elect_leaders(request)
    message = f"{ctx.principal} is not authorized: {_CLUSTER_DENIED.name}"
    response = topic_wire.elect_leaders_response(
        ctx.response_class, topic_wire.elect_leaders_refused(ask, _CLUSTER_DENIED, message)
    )
    if schema.has_field(ctx.response_class, "error_code"):
        response = dataclasses.replace(response, error_code=_CLUSTER_DENIED)
    return response


def _group_id(request: Any) -> str:
    return str(request.group_id)


GUARDS: Final[Mapping[int, Guard]] = MappingProxyType(
    {
        0: _produce,  # Produce: TOPIC WRITE; TRANSACTIONAL_ID WRITE when transactional
        1: _fetch,  # Fetch: TOPIC READ (no follower fetches: Fjord brokers do not replicate)
        2: _list_offsets,  # ListOffsets: TOPIC DESCRIBE
        8: _offset_commit,  # OffsetCommit: GROUP READ, then TOPIC READ
        9: _offset_fetch,  # OffsetFetch: GROUP DESCRIBE
        10: _find_coordinator,  # FindCoordinator: GROUP / TRANSACTIONAL_ID DESCRIBE
        11: _whole(_GROUP, _READ, _group_id, _GROUP_DENIED),  # JoinGroup
        12: _whole(_GROUP, _READ, _group_id, _GROUP_DENIED),  # Heartbeat
        13: _whole(_GROUP, _READ, _group_id, _GROUP_DENIED),  # LeaveGroup
        14: _whole(_GROUP, _READ, _group_id, _GROUP_DENIED),  # SyncGroup
        15: _groups(_DESCRIBE, "groups")("groups"),  # DescribeGroups: GROUP DESCRIBE
        16: _list_groups,  # ListGroups: only the groups the principal may DESCRIBE (or CLUSTER DESCRIBE)
        19: _create_topics,  # CreateTopics: CLUSTER CREATE or TOPIC CREATE
        20: _delete_topics,  # DeleteTopics: TOPIC DELETE
        21: _delete_records,  # DeleteRecords: TOPIC DELETE
        22: _init_producer_id,  # InitProducerId: TRANSACTIONAL_ID WRITE, or IDEMPOTENT_WRITE
        23: _offset_for_leader_epoch,  # OffsetForLeaderEpoch: TOPIC DESCRIBE
        24: _add_partitions_to_txn,  # AddPartitionsToTxn: TRANSACTIONAL_ID WRITE and TOPIC WRITE
        25: _add_offsets_to_txn,  # AddOffsetsToTxn: TRANSACTIONAL_ID WRITE and GROUP READ
        26: _whole(_TXN, _WRITE, lambda r: r.transactional_id, _TXN_DENIED),  # EndTxn
        27: _write_txn_markers,  # WriteTxnMarkers: CLUSTER CLUSTER_ACTION
        28: _txn_offset_commit,  # TxnOffsetCommit: TRANSACTIONAL_ID WRITE, GROUP READ, TOPIC READ
        29: _cluster(_DESCRIBE),  # DescribeAcls
        30: _create_acls,  # CreateAcls: CLUSTER ALTER
        31: _delete_acls,  # DeleteAcls: CLUSTER ALTER
        32: _configs(AclOperation.DESCRIBE_CONFIGS, "results"),  # DescribeConfigs
        33: _configs(AclOperation.ALTER_CONFIGS, "responses"),  # AlterConfigs
        35: _cluster(_DESCRIBE),  # DescribeLogDirs
        37: _create_partitions,  # CreatePartitions: TOPIC ALTER
        42: _groups(AclOperation.DELETE, "results")("groups_names"),  # DeleteGroups: GROUP DELETE
        43: _elect_leaders,  # ElectLeaders: CLUSTER ALTER
        44: _configs(AclOperation.ALTER_CONFIGS, "responses"),  # IncrementalAlterConfigs
        45: _cluster(AclOperation.ALTER),  # AlterPartitionReassignments
        46: _cluster(_DESCRIBE),  # ListPartitionReassignments
        47: _offset_delete,  # OffsetDelete: GROUP DELETE, then TOPIC READ
        48: _cluster(AclOperation.DESCRIBE_CONFIGS),  # DescribeClientQuotas
        49: _alter_client_quotas,  # AlterClientQuotas: CLUSTER ALTER_CONFIGS
        50: _cluster(_DESCRIBE),  # DescribeUserScramCredentials
        51: _alter_user_scram_credentials,  # AlterUserScramCredentials: CLUSTER ALTER
        55: _cluster(_DESCRIBE),  # DescribeQuorum
        61: _describe_producers,  # DescribeProducers: TOPIC READ
        64: _cluster(AclOperation.ALTER),  # UnregisterBroker
        65: _describe_transactions,  # DescribeTransactions: TRANSACTIONAL_ID DESCRIBE
        66: _list_transactions,  # ListTransactions: only the ids the principal may DESCRIBE
    }
)
