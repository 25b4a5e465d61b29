"""The per-API ACL guards (each beside its handler, listed in ``broker.handlers.table``), in process: a request
naming an allowed and a refused item reaches its handler with the allowed one only, the refused one is answered
with Kafka's code in a response that encodes, and a request about one resource is refused whole without calling
the handler.

The principal is ``User:ANONYMOUS`` (no SASL), allowed exactly what the bindings below say."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode

from broker.authorization import BrokerAuthorizer
from broker.handlers.context import RequestContext
from broker.handlers.describe_producers import handle_describe_producers
from broker.handlers.table import serve_authorized
from broker.services import BrokerServices
from controller.decisions.acls import binding_record
from metadata.acl.binding import ANONYMOUS, AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from metadata.cluster_records import PartitionRecord, TopicRecord
from metadata.image import MetadataImage
from settings.security import STANDARD_AUTHORIZER
from wire import codec, schema

ALLOWED_ID, REFUSED_ID = uuid.uuid4(), uuid.uuid4()


def _acl(kind: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(kind, name, PatternType.LITERAL, ANONYMOUS, "*", op, PermissionType.ALLOW)


BINDINGS = [
    _acl(ResourceType.TOPIC, "allowed", AclOperation.ALL),
    _acl(ResourceType.TOPIC, "refused", AclOperation.DESCRIBE),  # an ACL on it, none granting what is asked
    _acl(ResourceType.GROUP, "allowed-group", AclOperation.ALL),
    _acl(ResourceType.TRANSACTIONAL_ID, "allowed-txn", AclOperation.ALL),
]
IMAGE = MetadataImage("c").apply(
    [
        *(binding_record(str(i), b) for i, b in enumerate(BINDINGS)),
        TopicRecord("allowed", str(ALLOWED_ID)),
        PartitionRecord(str(ALLOWED_ID), 0, (0,), (0,), 0, 0),
        TopicRecord("refused", str(REFUSED_ID)),
        PartitionRecord(str(REFUSED_ID), 0, (0,), (0,), 0, 0),
    ],
    9,
)


@dataclass
class _Controller:
    image: MetadataImage = IMAGE


@dataclass
class _Node:
    controller: _Controller = field(default_factory=_Controller)


@dataclass
class _Handler:
    """Records what it was asked and answers with the response's defaults (empty lists)."""

    asked: list[Any] = field(default_factory=list)

    async def __call__(self, ctx: RequestContext, request: Any) -> Any:
        self.asked.append(request)
        return ctx.build()


def _context(api_key: int, version: int, image: MetadataImage = IMAGE) -> RequestContext:
    config = {"authorizer.class.name": STANDARD_AUTHORIZER}
    return RequestContext(
        api_key=api_key,
        api_version=version,
        correlation_id=7,
        client_id="acl-table",
        client_host="127.0.0.1",
        broker=cast(BrokerServices, _Node()),
        authorizer=BrokerAuthorizer(config.get, lambda: image.acls),
    )


async def _serve(api_key: int, version: int, image: MetadataImage = IMAGE, **fields: Any) -> tuple[Any, _Handler]:
    ctx = _context(api_key, version, image)
    request = schema.build(codec.request_class(api_key, version), **fields)
    handler = _Handler()
    response = await serve_authorized(ctx, request, handler)
    codec.encode_response(7, response)  # a refusal must be a well-formed answer
    return response, handler


def _nested(api_key: int, version: int, path: str, **fields: Any) -> Any:
    cls = codec.request_class(api_key, version)
    *outer, last = path.split(".")
    for name in outer:
        cls = schema.field_entity(cls, name)
    return schema.build_nested(cls, last, **fields)


def _errors(entry: Any, partitions: str = "partitions", code: str = "error_code") -> set[ErrorCode]:
    return {getattr(p, code) for p in getattr(entry, partitions)}


async def test_produce_serves_the_writable_topic_and_refuses_the_other() -> None:
    def topic(name: str) -> Any:
        return _nested(
            0,
            9,
            "topic_data",
            name=name,
            partition_data=(_nested(0, 9, "topic_data.partition_data", index=0, records=None),),
        )

    response, handler = await _serve(0, 9, acks=-1, timeout=1000, topic_data=(topic("allowed"), topic("refused")))
    assert [t.name for t in handler.asked[0].topic_data] == ["allowed"]
    (refused,) = response.responses
    assert refused.name == "refused"
    assert _errors(refused, "partition_responses") == {ErrorCode.topic_authorization_failed}


async def test_a_transactional_produce_needs_the_transactional_id() -> None:
    topic = _nested(
        0,
        9,
        "topic_data",
        name="allowed",
        partition_data=(_nested(0, 9, "topic_data.partition_data", index=0, records=None),),
    )
    response, handler = await _serve(0, 9, transactional_id="other-txn", acks=-1, timeout=1000, topic_data=(topic,))
    assert handler.asked == []
    assert _errors(response.responses[0], "partition_responses") == {ErrorCode.transactional_id_authorization_failed}


async def test_list_offsets_and_delete_records_refuse_per_topic() -> None:
    def offsets_topic(name: str) -> Any:
        return _nested(
            2, 8, "topics", name=name, partitions=(_nested(2, 8, "topics.partitions", partition_index=0, timestamp=-1),)
        )

    response, handler = await _serve(2, 8, replica_id=-1, topics=(offsets_topic("allowed"), offsets_topic("nope")))
    assert [t.name for t in handler.asked[0].topics] == ["allowed"]
    assert _errors(response.topics[0]) == {ErrorCode.topic_authorization_failed}

    def records_topic(name: str) -> Any:
        return _nested(
            21, 2, "topics", name=name, partitions=(_nested(21, 2, "topics.partitions", partition_index=0, offset=1),)
        )

    response, handler = await _serve(21, 2, timeout=1000, topics=(records_topic("refused"),))
    assert handler.asked == []
    assert [(t.name, _errors(t)) for t in response.topics] == [("refused", {ErrorCode.topic_authorization_failed})]


async def test_delete_topics_by_id_names_the_refused_topic() -> None:
    topics = (
        _nested(20, 6, "topics", name=None, topic_id=REFUSED_ID),
        _nested(20, 6, "topics", name=None, topic_id=ALLOWED_ID),
    )
    response, handler = await _serve(20, 6, timeout_ms=1000, topics=topics)
    assert [t.topic_id for t in handler.asked[0].topics] == [ALLOWED_ID]
    assert [(r.name, r.error_code) for r in response.responses] == [("refused", ErrorCode.topic_authorization_failed)]


async def test_describe_configs_refuses_topics_groups_and_the_cluster_separately() -> None:
    resources = (
        _nested(32, 4, "resources", resource_type=2, resource_name="refused", configuration_keys=None),
        _nested(32, 4, "resources", resource_type=4, resource_name="0", configuration_keys=None),
        _nested(32, 4, "resources", resource_type=2, resource_name="allowed", configuration_keys=None),
        _nested(32, 4, "resources", resource_type=32, resource_name="other-group", configuration_keys=None),
        _nested(32, 4, "resources", resource_type=32, resource_name="allowed-group", configuration_keys=None),
    )
    response, handler = await _serve(32, 4, resources=resources)
    assert [r.resource_name for r in handler.asked[0].resources] == ["allowed", "allowed-group"]
    assert [(r.resource_name, r.error_code) for r in response.results] == [
        ("refused", ErrorCode.topic_authorization_failed),
        ("0", ErrorCode.cluster_authorization_failed),
        ("other-group", ErrorCode.group_authorization_failed),
    ]


@pytest.mark.parametrize(
    ("api_key", "version", "fields", "response_list"),
    [
        (42, 2, {"groups_names": ("allowed-group", "other-group")}, "results"),
        (15, 5, {"groups": ("allowed-group", "other-group")}, "groups"),
    ],
)
async def test_group_apis_refuse_per_group(
    api_key: int, version: int, fields: dict[str, Any], response_list: str
) -> None:
    response, handler = await _serve(api_key, version, **fields)
    request_list = next(iter(fields))
    assert getattr(handler.asked[0], request_list) == ("allowed-group",)
    assert [(g.group_id, g.error_code) for g in getattr(response, response_list)] == [
        ("other-group", ErrorCode.group_authorization_failed)
    ]


async def test_find_coordinator_refuses_per_key() -> None:
    response, handler = await _serve(10, 4, key_type=1, coordinator_keys=("allowed-txn", "other-txn"))
    assert handler.asked[0].coordinator_keys == ("allowed-txn",)
    assert [(c.key, c.error_code) for c in response.coordinators] == [
        ("other-txn", ErrorCode.transactional_id_authorization_failed)
    ]


@pytest.mark.parametrize(
    ("api_key", "version", "fields", "code"),
    [
        (
            11,
            9,
            {"group_id": "other-group", "member_id": "", "protocol_type": "consumer", "protocols": ()},
            ErrorCode.group_authorization_failed,
        ),
        (
            26,
            3,
            {"transactional_id": "other-txn", "producer_id": 1, "producer_epoch": 0, "committed": True},
            ErrorCode.transactional_id_authorization_failed,
        ),
        (22, 4, {"transactional_id": None, "transaction_timeout": 1000}, ErrorCode.none),  # WRITE on "allowed" suffices
        (
            22,
            4,
            {"transactional_id": "other-txn", "transaction_timeout": 1000},
            ErrorCode.transactional_id_authorization_failed,
        ),
        (45, 0, {"timeout_ms": 1000, "topics": ()}, ErrorCode.cluster_authorization_failed),
        (50, 0, {"users": None}, ErrorCode.cluster_authorization_failed),
        (57, 0, {"feature_updates": ()}, ErrorCode.cluster_authorization_failed),  # UpdateFeatures: CLUSTER ALTER
        (57, 2, {"feature_updates": ()}, ErrorCode.cluster_authorization_failed),
    ],
)
async def test_requests_about_one_resource_are_refused_whole(
    api_key: int, version: int, fields: dict[str, Any], code: ErrorCode
) -> None:
    response, handler = await _serve(api_key, version, **fields)
    assert response.error_code == code
    assert len(handler.asked) == (1 if code is ErrorCode.none else 0)


async def test_update_features_refuses_every_feature_without_cluster_alter() -> None:
    update = _nested(57, 1, "feature_updates", feature="transaction.version", max_version_level=1, upgrade_type=2)
    response, handler = await _serve(57, 1, feature_updates=(update,))
    assert handler.asked == []
    # One top-level error and no rows, as Kafka's UpdateFeaturesResponse.createWithErrors answers it.
    assert (response.error_code, list(response.results)) == (ErrorCode.cluster_authorization_failed, [])


async def test_write_txn_markers_need_cluster_alter_or_cluster_action() -> None:
    """Kafka (KIP-1037) lets an admin with CLUSTER ALTER write markers (``kafka-transactions.sh abort``), as well as
    a broker with CLUSTER_ACTION; neither refuses every partition."""
    marker = _nested(
        27,
        1,
        "markers",
        producer_id=3,
        producer_epoch=0,
        transaction_result=True,
        coordinator_epoch=0,
        topics=(_nested(27, 1, "markers.topics", name="allowed", partition_indexes=(0,)),),
    )
    response, handler = await _serve(27, 1, markers=(marker,))
    assert handler.asked == []
    assert _errors(response.markers[0].topics[0]) == {ErrorCode.cluster_authorization_failed}
    for op in (AclOperation.ALTER, AclOperation.CLUSTER_ACTION):
        granted = IMAGE.apply([binding_record("cluster", _acl(ResourceType.CLUSTER, "kafka-cluster", op))], 10)
        response, handler = await _serve(27, 1, granted, markers=(marker,))
        assert len(handler.asked) == 1, op


async def test_offset_fetch_hides_or_refuses_topics_the_principal_may_not_describe() -> None:
    response_cls = codec.response_class(9, 8)
    group_cls = schema.field_entity(response_cls, "groups")
    topic_cls = schema.field_entity(group_cls, "topics")

    def committed(*names: str) -> Any:
        return schema.build(
            response_cls,
            groups=(
                schema.build(
                    group_cls,
                    group_id="allowed-group",
                    topics=tuple(
                        schema.build(
                            topic_cls,
                            name=name,
                            partitions=(
                                schema.build_nested(
                                    topic_cls, "partitions", partition_index=0, committed_offset=5, metadata=""
                                ),
                            ),
                        )
                        for name in names
                    ),
                ),
            ),
        )

    async def offsets(_ctx: RequestContext, _request: Any) -> Any:
        return committed("allowed", "hidden")

    every_topic = _nested(9, 8, "groups", group_id="allowed-group", topics=None)
    answered = await serve_authorized(
        _context(9, 8), schema.build(codec.request_class(9, 8), groups=(every_topic,)), offsets
    )
    assert [t.name for t in answered.groups[0].topics] == ["allowed"]

    named = _nested(
        9,
        8,
        "groups",
        group_id="allowed-group",
        topics=(
            _nested(9, 8, "groups.topics", name="allowed", partition_indexes=(0,)),
            _nested(9, 8, "groups.topics", name="hidden", partition_indexes=(0,)),
        ),
    )
    answered = await serve_authorized(_context(9, 8), schema.build(codec.request_class(9, 8), groups=(named,)), offsets)
    codec.encode_response(7, answered)
    assert [(t.name, _errors(t)) for t in answered.groups[0].topics] == [
        ("allowed", {ErrorCode.none}),
        ("hidden", {ErrorCode.topic_authorization_failed}),
    ]


async def test_offset_delete_needs_group_delete_then_topic_read() -> None:
    def topic(name: str) -> Any:
        return _nested(47, 0, "topics", name=name, partitions=(_nested(47, 0, "topics.partitions", partition_index=0),))

    response, handler = await _serve(47, 0, group_id="other-group", topics=(topic("allowed"),))
    assert handler.asked == [] and response.error_code == ErrorCode.group_authorization_failed
    response, handler = await _serve(47, 0, group_id="allowed-group", topics=(topic("allowed"), topic("refused")))
    assert [t.name for t in handler.asked[0].topics] == ["allowed"]
    assert [(t.name, _errors(t)) for t in response.topics] == [("refused", {ErrorCode.topic_authorization_failed})]


async def test_share_group_state_apis_need_cluster_action() -> None:
    """InitializeShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary are between brokers only."""
    for api_key, version, fields in ((83, 0, {"state_epoch": 0, "start_offset": 5}), (86, 0, {}), (87, 1, {})):
        part = _nested(api_key, version, "topics.partitions", partition=0, **fields)
        topic = _nested(api_key, version, "topics", topic_id=ALLOWED_ID, partitions=(part,))
        response, handler = await _serve(api_key, version, group_id="allowed-group", topics=(topic,))
        assert handler.asked == []
        assert _errors(response.results[0]) == {ErrorCode.cluster_authorization_failed}, api_key


async def test_describe_share_group_offsets_refuses_per_group_and_per_topic() -> None:
    def group(group_id: str, *topics: str) -> Any:
        return _nested(90, 1, "groups", group_id=group_id, topics=tuple(
            _nested(90, 1, "groups.topics", topic_name=t, partitions=(0,)) for t in topics
        ))

    # "refused" grants DESCRIBE, which is what describing needs; "unlisted" has no ACL
    response, handler = await _serve(90, 1, groups=(group("other-group", "allowed"),
                                                    group("allowed-group", "allowed", "refused", "unlisted")))
    [asked] = handler.asked
    assert [(g.group_id, [t.topic_name for t in g.topics]) for g in asked.groups] == [
        ("allowed-group", ["allowed", "refused"])
    ]
    refused = {g.group_id: g for g in response.groups}
    assert refused["other-group"].error_code == ErrorCode.group_authorization_failed

    async def served(ctx: RequestContext, request: Any) -> Any:  # each allowed group answered, without topics
        return ctx.build(groups=tuple(schema.build_nested(ctx.response_class, "groups", group_id=g.group_id)
                                      for g in request.groups))

    ctx = _context(90, 1)
    request = schema.build(codec.request_class(90, 1), groups=(group("allowed-group", "allowed", "unlisted"),))
    [answer] = (await serve_authorized(ctx, request, served)).groups
    assert [(t.topic_name, _errors(t)) for t in answer.topics] == [("unlisted", {ErrorCode.topic_authorization_failed})]

    async def every_topic(ctx: RequestContext, request: Any) -> Any:  # the group's state is on both topics
        group_cls = schema.field_entity(ctx.response_class, "groups")
        topics = tuple(schema.build_nested(group_cls, "topics", topic_name=t) for t in ("allowed", "unlisted"))
        return ctx.build(groups=(schema.build(group_cls, group_id="allowed-group", topics=topics),))

    request = schema.build(codec.request_class(90, 1), groups=(_nested(90, 1, "groups", group_id="allowed-group",
                                                                       topics=None),))
    [answer] = (await serve_authorized(_context(90, 1), request, every_topic)).groups
    assert [t.topic_name for t in answer.topics] == ["allowed"]  # a topic it may not describe is left out


async def test_alter_share_group_offsets_needs_group_read_then_topic_read() -> None:
    def topic(name: str) -> Any:
        part = _nested(91, 0, "topics.partitions", partition_index=0, start_offset=1)
        return _nested(91, 0, "topics", topic_name=name, partitions=(part,))

    response, handler = await _serve(91, 0, group_id="other-group", topics=(topic("allowed"),))
    assert handler.asked == [] and response.error_code == ErrorCode.group_authorization_failed
    response, handler = await _serve(91, 0, group_id="allowed-group", topics=(topic("allowed"), topic("refused")))
    assert [t.topic_name for t in handler.asked[0].topics] == ["allowed"]
    assert [(t.topic_name, _errors(t)) for t in response.responses] == [
        ("refused", {ErrorCode.topic_authorization_failed})
    ]


async def test_delete_share_group_offsets_needs_group_delete_then_topic_read() -> None:
    def topic(name: str) -> Any:
        return _nested(92, 0, "topics", topic_name=name)

    response, handler = await _serve(92, 0, group_id="other-group", topics=(topic("allowed"),))
    assert handler.asked == [] and response.error_code == ErrorCode.group_authorization_failed
    response, handler = await _serve(92, 0, group_id="allowed-group", topics=(topic("allowed"), topic("refused")))
    assert [t.topic_name for t in handler.asked[0].topics] == ["allowed"]
    assert [(t.topic_name, t.error_code) for t in response.responses] == [
        ("refused", ErrorCode.topic_authorization_failed)
    ]


@pytest.mark.parametrize(("api_key", "version"), [(69, 1), (77, 1)])
async def test_describing_a_group_assigned_an_undescribable_topic_names_none(api_key: int, version: int) -> None:
    """ConsumerGroupDescribe and ShareGroupDescribe: a group one of whose members is assigned a topic the caller
    may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED without its members, as Kafka answers."""

    def described(topic: str) -> Any:
        response_cls = codec.response_class(api_key, version)
        group_cls = schema.field_entity(response_cls, "groups")
        member_cls = schema.field_entity(group_cls, "members")
        assignment_cls = schema.field_entity(member_cls, "assignment")
        assignment = schema.build(assignment_cls, topic_partitions=(
            schema.build_nested(assignment_cls, "topic_partitions", topic_id=uuid.uuid4(), topic_name=topic,
                                partitions=(0,)),))
        member = schema.build(member_cls, member_id="m", assignment=assignment, target_assignment=assignment)
        group = schema.build(group_cls, group_id="allowed-group", members=(member,))
        return schema.build(response_cls, groups=(group,))

    for topic, hidden in (("allowed", False), ("no-acl-names-it", True)):
        async def handler(_ctx: RequestContext, _request: Any, topic: str = topic) -> Any:
            return described(topic)

        ctx = _context(api_key, version)
        request = schema.build(codec.request_class(api_key, version), group_ids=("allowed-group",))
        response = await serve_authorized(ctx, request, handler)
        codec.encode_response(7, response)
        (group,) = response.groups
        if hidden:
            assert (group.error_code, group.members) == (ErrorCode.topic_authorization_failed, ())
        else:
            assert group.error_code == ErrorCode.none and len(group.members) == 1


async def test_describe_transactions_leaves_out_topics_the_caller_may_not_describe() -> None:
    """A described transaction names only the topics the caller may DESCRIBE, as Kafka's
    handleDescribeTransactionsRequest removes the others."""

    async def described(ctx: RequestContext, request: Any) -> Any:
        state_cls = schema.field_entity(ctx.response_class, "transaction_states")
        topics = tuple(schema.build_nested(state_cls, "topics", topic=t, partitions=(0,))
                       for t in ("allowed", "refused", "unlisted"))
        return ctx.build(transaction_states=tuple(
            schema.build(state_cls, transactional_id=t, transaction_state="Ongoing", topics=topics)
            for t in request.transactional_ids))

    request = schema.build(codec.request_class(65, 0), transactional_ids=("allowed-txn", "other-txn"))
    response = await serve_authorized(_context(65, 0), request, described)
    codec.encode_response(7, response)
    assert [(s.transactional_id, s.error_code, [t.topic for t in s.topics]) for s in response.transaction_states] == [
        ("allowed-txn", ErrorCode.none, ["allowed", "refused"]),  # "refused" grants DESCRIBE
        ("other-txn", ErrorCode.transactional_id_authorization_failed, []),
    ]
    refused = response.transaction_states[1]
    assert (refused.producer_id, refused.producer_epoch, refused.transaction_state) == (0, 0, "")  # the defaults


async def test_add_partitions_to_txn_refuses_only_the_unwritable_topic() -> None:
    """AddPartitionsToTxn v3: a refused topic's partitions are TOPIC_AUTHORIZATION_FAILED, a partition that does not
    exist UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED (nothing added), as Kafka answers; without
    the transactional id every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""

    def request(transactional_id: str) -> dict[str, Any]:
        topics = (_nested(24, 3, "v3_and_below_topics", name="allowed", partitions=(0, 5)),
                  _nested(24, 3, "v3_and_below_topics", name="refused", partitions=(0,)))
        return {"v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": 1,
                "v3_and_below_producer_epoch": 0, "v3_and_below_topics": topics}

    def results(response: Any) -> dict[tuple[str, int], ErrorCode]:
        return {(t.name, p.partition_index): p.partition_error_code
                for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}

    response, handler = await _serve(24, 3, **request("allowed-txn"))
    assert handler.asked == []
    assert results(response) == {
        ("allowed", 0): ErrorCode.operation_not_attempted,
        ("allowed", 5): ErrorCode.unknown_topic_or_partition,
        ("refused", 0): ErrorCode.topic_authorization_failed,
    }
    response, handler = await _serve(24, 3, **request("other-txn"))
    assert handler.asked == []
    assert set(results(response).values()) == {ErrorCode.transactional_id_authorization_failed}



async def test_describe_producers_judges_a_topic_name_before_its_acls() -> None:
    """A name no topic can have is INVALID_TOPIC_EXCEPTION, with Kafka's message, whatever the ACLs say, as Kafka's
    handleDescribeProducersRequest runs Topic.validate before authorizing; a legal name without READ is refused."""
    topics = tuple(_nested(61, 0, "topics", name=name, partition_indexes=(0,)) for name in ("bad/name", "unlisted"))
    request = schema.build(codec.request_class(61, 0), topics=topics)
    response = await serve_authorized(_context(61, 0), request, handle_describe_producers)
    codec.encode_response(7, response)
    answers = {t.name: t.partitions for t in response.topics}
    [illegal] = answers["bad/name"]
    assert illegal.error_code == ErrorCode.invalid_topic_exception
    assert illegal.error_message is not None and "bad/name" in illegal.error_message
    assert {p.error_code for p in answers["unlisted"]} == {ErrorCode.topic_authorization_failed}
