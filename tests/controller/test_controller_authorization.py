"""The CONTROLLER listener's authorization decision (``controller.rpc.authorization``), without a listener: the
right each request asks, the admin APIs decided item by item (``controller.rpc.item_authorization``), the voter's
initial load (Kafka's StandardAuthorizer refuses non-super users until it has loaded the ACLs), and a client
certificate that names no principal. The wire-level behaviour (error responses,
closed connections) is in test_controller_tls.py and test_controller_sasl.py."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping

import pytest
from kio.schema.errors import ErrorCode

from controller.rpc import item_authorization
from controller.rpc.authorization import (
    PER_ITEM_APIS,
    CertificateConnection,
    ControllerAuthorizer,
    kafka_operation,
    stream_operation,
)
from metadata.acl.authorizer import AuthorizerSettings
from metadata.acl.binding import CLUSTER_NAME, AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from metadata.admin.config_wire import ConfigAlteration, ConfigAlterations
from metadata.admin.topic_wire import CreateTopicsAsk, DeleteTopicsAsk, NewPartitions, PartitionsAsk
from metadata.controller_api import ConfigResource, NewTopic
from metadata.image import TopicImage
from metadata.rpc.kafka_apis import (
    ALLOCATE_PRODUCER_IDS,
    ALTER_CLIENT_QUOTAS,
    ALTER_CONFIGS,
    ALTER_USER_SCRAM_CREDENTIALS,
    BROKER_HEARTBEAT,
    BROKER_REGISTRATION,
    CREATE_ACLS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_ACLS,
    DELETE_TOPICS,
    DESCRIBE_QUORUM,
    FETCH,
    INCREMENTAL_ALTER_CONFIGS,
    UNREGISTER_BROKER,
    VOTE,
)
from metadata.rpc.stream_rpcs import DescribeMetadata, GetStreams
from wire.dispatch import ConnectionClosing, Peer
from wire.metrics import ServerMetrics
from wire.tls_principal import parse_rules

#: A caller with neither SASL nor a client certificate: ``User:ANONYMOUS``.
PEER = Peer("127.0.0.1", 40000, "CONTROLLER")
OPEN = AuthorizerSettings(allow_everyone_if_no_acl_found=True)


def _authorizer(
    settings: AuthorizerSettings,
    bindings: Mapping[str, AclBinding],
    *,
    ready: bool = True,
    metrics: ServerMetrics | None = None,
) -> ControllerAuthorizer:
    return ControllerAuthorizer(settings, lambda: bindings, lambda: ready, metrics or ServerMetrics())


def _grant(principal: str, operation: AclOperation) -> dict[str, AclBinding]:
    binding = AclBinding(
        ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, principal, "*", operation, PermissionType.ALLOW
    )
    return {"grant": binding}


def test_a_voter_before_its_initial_load_serves_super_users_only_even_when_everyone_is_allowed() -> None:
    """A restarted voter serves from its snapshot until it has applied what the quorum committed: with
    ``allow.everyone.if.no.acl.found`` and no ACL in that stale image, anyone would pass, so until ``ready()`` only
    super users do (the nodes' own principals must be super users for that reason)."""
    heartbeat = kafka_operation(BROKER_HEARTBEAT)
    refusal = _authorizer(OPEN, {}, ready=False).refusal(PEER, heartbeat, "BrokerHeartbeat", "a heartbeat")
    assert refusal is not None and "User:ANONYMOUS" in refusal and "not loaded" in refusal
    node = AuthorizerSettings(super_users=frozenset({"User:ANONYMOUS"}), allow_everyone_if_no_acl_found=True)
    assert _authorizer(node, {}, ready=False).refusal(PEER, heartbeat, "BrokerHeartbeat", "a heartbeat") is None
    assert _authorizer(OPEN, {}, ready=True).refusal(PEER, heartbeat, "BrokerHeartbeat", "a heartbeat") is None


def test_cluster_action_reaches_what_nodes_send_and_no_admin_api(caplog: pytest.LogCaptureFixture) -> None:
    """A principal granted CLUSTER_ACTION (not a super user) passes Raft, registration, heartbeats, producer ids
    and the stream RPCs, but not an admin API (CreateAcls asks ALTER: it cannot grant itself more), DescribeQuorum
    (DESCRIBE), or DescribeMetadata (super users only). Each refusal is counted; it is logged once per principal
    and request kind."""
    metrics = ServerMetrics()
    worker = _authorizer(AuthorizerSettings(), _grant("User:ANONYMOUS", AclOperation.CLUSTER_ACTION), metrics=metrics)
    for key in (VOTE, FETCH, BROKER_REGISTRATION, BROKER_HEARTBEAT, ALLOCATE_PRODUCER_IDS):
        assert worker.refusal(PEER, kafka_operation(key), str(key), "request") is None, key
    worker.check_stream(PEER, GetStreams, "GetStreams")
    for key in (
        CREATE_ACLS,
        DELETE_ACLS,
        ALTER_USER_SCRAM_CREDENTIALS,
        DESCRIBE_QUORUM,
        ALTER_CLIENT_QUOTAS,
        UNREGISTER_BROKER,
    ):
        refusal = worker.refusal(PEER, kafka_operation(key), str(key), "request")
        assert refusal is not None and "User:ANONYMOUS" in refusal, key
    with caplog.at_level(logging.INFO, logger="controller.rpc.authorization"):
        for _ in range(3):
            assert worker.refusal(PEER, kafka_operation(CREATE_ACLS), "CreateAcls", "CreateAcls") is not None
    logged = [r.getMessage() for r in caplog.records if "refusals of CreateAcls to User:ANONYMOUS" in r.getMessage()]
    assert len(logged) == 1 and "not granted ALTER on the cluster" in logged[0], logged
    with pytest.raises(ConnectionClosing, match="User:ANONYMOUS is not a super user"):
        worker.check_stream(PEER, DescribeMetadata, "DescribeMetadata")
    denied = metrics.registry.get_sample_value(
        "fjord_broker_authorization_denials_total",
        {"listener": "CONTROLLER", "resource_type": "CLUSTER", "operation": "ALTER"},
    )
    assert denied == 7  # CreateAcls (4 times), DeleteAcls, AlterUserScramCredentials, UnregisterBroker

    assert kafka_operation(DESCRIBE_QUORUM) is AclOperation.DESCRIBE
    assert stream_operation(DescribeMetadata) is None
    admin = _authorizer(AuthorizerSettings(), _grant("User:ANONYMOUS", AclOperation.ALTER))
    assert admin.refusal(PEER, kafka_operation(CREATE_ACLS), "CreateAcls", "CreateAcls") is None  # as in Kafka


def test_a_certificate_that_names_no_principal_closes_the_connection_and_counts_as_a_failed_authentication() -> None:
    metrics = ServerMetrics()
    authorizer = ControllerAuthorizer(OPEN, dict, lambda: True, metrics, mapper=parse_rules(None))
    peer = Peer("127.0.0.1", 40001, "CONTROLLER", state=CertificateConnection(), certificate=b"not a certificate")
    with pytest.raises(ConnectionClosing, match="names no principal"):
        authorizer.refusal(peer, AclOperation.CLUSTER_ACTION, "Fetch", "Fetch")
    failures = metrics.registry.get_sample_value(
        "fjord_broker_authentication_failures_total", {"listener": "CONTROLLER", "mechanism": "SSL"}
    )
    assert failures == 1


def _binding(
    principal: str, operation: AclOperation, resource: ResourceType, name: str, pattern: PatternType
) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", operation, PermissionType.ALLOW)


def test_the_admin_apis_kafka_decides_per_item_refuse_only_the_items_not_granted() -> None:
    """As Kafka's ControllerApis: CreateTopics, DeleteTopics and CreatePartitions ask CREATE, DELETE and ALTER on
    each topic (CREATE and DELETE on the cluster grant every topic at once), AlterConfigs ALTER_CONFIGS on the
    topic for a TOPIC resource and on the cluster for BROKER and BROKER_LOGGER ones. A refused item gets
    TOPIC_AUTHORIZATION_FAILED (CLUSTER_AUTHORIZATION_FAILED for a broker resource), counted and logged, and the
    others go on to the controller; a super user's items are not checked, and before the voter's initial load the
    whole request is refused."""
    caller = "User:ANONYMOUS"  # PEER's principal
    grants = [
        _binding(caller, AclOperation.CREATE, ResourceType.TOPIC, "team-", PatternType.PREFIXED),
        _binding(caller, AclOperation.DELETE, ResourceType.TOPIC, "team-a", PatternType.LITERAL),
        _binding(caller, AclOperation.ALTER, ResourceType.TOPIC, "team-a", PatternType.LITERAL),
        _binding(caller, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, "team-a", PatternType.LITERAL),
        _binding(caller, AclOperation.DESCRIBE, ResourceType.TOPIC, "shared", PatternType.LITERAL),
    ]
    bindings = {str(i): b for i, b in enumerate(grants)}
    metrics = ServerMetrics()
    authorizer = _authorizer(AuthorizerSettings(), bindings, metrics=metrics)
    per_item = {CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS}
    assert per_item == PER_ITEM_APIS
    refusal, check = authorizer.item_check(PEER, CREATE_TOPICS, "CreateTopics")
    assert refusal is None and check is not None

    created = item_authorization.create_topics(
        CreateTopicsAsk((NewTopic("team-a"), NewTopic("other")), {}, ("team-a", "other"), False), check
    )
    assert [t.name for t in created.topics] == ["team-a"]
    assert created.refused["other"].error == ErrorCode.topic_authorization_failed

    shared_id, secret_id, unknown_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    topics_by_id = {shared_id: TopicImage("shared", shared_id), secret_id: TopicImage("secret", secret_id)}
    deletions = item_authorization.delete_topics(
        DeleteTopicsAsk(("team-a", "team-b"), (shared_id, secret_id, unknown_id), ()), check, topics_by_id
    )
    assert deletions.names == ("team-a",) and deletions.ids == (unknown_id,)  # the controller answers an unknown id
    assert {(r.name, r.topic_id, r.error) for r in deletions.refused} == {
        ("team-b", None, ErrorCode.topic_authorization_failed),
        ("shared", shared_id, ErrorCode.topic_authorization_failed),  # named: the caller may describe it
        (None, secret_id, ErrorCode.topic_authorization_failed),  # an id does not reveal a name
    }

    partitions = item_authorization.create_partitions(
        PartitionsAsk((NewPartitions("team-a", 3, None), NewPartitions("team-b", 3, None)), False), check
    )
    assert [p.refused and p.refused[0] for p in partitions.topics] == [None, ErrorCode.topic_authorization_failed]

    resources = [
        ConfigResource(ConfigResource.TOPIC, "team-a"),
        ConfigResource(ConfigResource.TOPIC, "team-b"),
        ConfigResource(ConfigResource.BROKER, "1"),
        ConfigResource(ConfigResource.BROKER_LOGGER, "1"),
    ]
    ask = ConfigAlterations(tuple(ConfigAlteration(r, {"retention.ms": "1"}, None) for r in resources), False)
    altered = item_authorization.alter_configs(ask, check)
    assert [a.refused and a.refused[0] for a in altered.resources] == [
        None,
        ErrorCode.topic_authorization_failed,
        ErrorCode.cluster_authorization_failed,
        ErrorCode.cluster_authorization_failed,
    ]
    denied = metrics.registry.get_sample_value(
        "fjord_broker_authorization_denials_total",
        {"listener": "CONTROLLER", "resource_type": "TOPIC", "operation": "DELETE"},
    )
    assert denied == 3  # team-b, shared, secret

    # ALTER_CONFIGS on the cluster grants broker resources; CREATE on the cluster grants every topic.
    on_cluster = [
        _binding(caller, op, ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
        for op in (AclOperation.ALTER_CONFIGS, AclOperation.CREATE)
    ]
    authorizer = _authorizer(AuthorizerSettings(), {str(i): b for i, b in enumerate([*grants, *on_cluster])})
    refusal, check = authorizer.item_check(PEER, ALTER_CONFIGS, "AlterConfigs")
    assert refusal is None and check is not None
    altered = item_authorization.alter_configs(ask, check)
    assert [a.refused and a.refused[0] for a in altered.resources] == [
        None,
        ErrorCode.topic_authorization_failed,
        None,
        None,
    ]
    assert authorizer.item_check(PEER, CREATE_TOPICS, "CreateTopics") == (None, None)
    assert authorizer.item_check(PEER, DELETE_TOPICS, "DeleteTopics")[1] is not None

    super_user = AuthorizerSettings(super_users=frozenset({caller}))
    assert _authorizer(super_user, {}, ready=False).item_check(PEER, ALTER_CONFIGS, "AlterConfigs") == (None, None)
    refusal, check = _authorizer(OPEN, {}, ready=False).item_check(PEER, ALTER_CONFIGS, "AlterConfigs")
    assert refusal is not None and "not loaded" in refusal and check is None
