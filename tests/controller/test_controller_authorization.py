"""The CONTROLLER listener's authorization decision (``controller.rpc.authorization``), without a listener: the
right each request asks, the voter's initial load (Kafka's StandardAuthorizer refuses non-super users until it has
loaded the ACLs), and a client certificate that names no principal. The wire-level behaviour (error responses,
closed connections) is in test_controller_tls.py and test_controller_sasl.py."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from controller.acl.authorizer import AuthorizerSettings
from controller.acl.binding import CLUSTER_NAME, AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from controller.rpc import messages as m
from controller.rpc.authorization import (
    CertificateConnection,
    ControllerAuthorizer,
    kafka_operation,
    stream_operation,
)
from wire.listener import ConnectionClosing, Peer
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
    heartbeat = kafka_operation(m.BROKER_HEARTBEAT)
    refusal = _authorizer(OPEN, {}, ready=False).refusal(PEER, heartbeat, "BrokerHeartbeat", "a heartbeat")
    assert refusal is not None and "User:ANONYMOUS" in refusal and "not loaded" in refusal
    node = AuthorizerSettings(super_users=frozenset({"User:ANONYMOUS"}), allow_everyone_if_no_acl_found=True)
    assert _authorizer(node, {}, ready=False).refusal(PEER, heartbeat, "BrokerHeartbeat", "a heartbeat") is None
    assert _authorizer(OPEN, {}, ready=True).refusal(PEER, heartbeat, "BrokerHeartbeat", "a heartbeat") is None


def test_cluster_action_reaches_what_nodes_send_and_no_admin_api() -> None:
    """A principal granted CLUSTER_ACTION (not a super user) passes Raft, registration, heartbeats, producer ids
    and the stream RPCs, but not an admin API (CreateAcls asks ALTER: it cannot grant itself more), DescribeQuorum
    (DESCRIBE), the admin APIs Kafka decides per topic, or DescribeMetadata (super users only)."""
    metrics = ServerMetrics()
    worker = _authorizer(AuthorizerSettings(), _grant("User:ANONYMOUS", AclOperation.CLUSTER_ACTION), metrics=metrics)
    for key in (m.VOTE, m.FETCH, m.BROKER_REGISTRATION, m.BROKER_HEARTBEAT, m.ALLOCATE_PRODUCER_IDS):
        assert worker.refusal(PEER, kafka_operation(key), str(key), "request") is None, key
    worker.check_stream(PEER, m.GetStreams, "GetStreams")
    for key in (
        m.CREATE_ACLS,
        m.DELETE_ACLS,
        m.CREATE_TOPICS,
        m.ALTER_USER_SCRAM_CREDENTIALS,
        m.DESCRIBE_QUORUM,
        m.CREATE_PARTITIONS,
        m.INCREMENTAL_ALTER_CONFIGS,
        m.ALTER_CLIENT_QUOTAS,
        m.UNREGISTER_BROKER,
    ):
        refusal = worker.refusal(PEER, kafka_operation(key), str(key), "request")
        assert refusal is not None and "User:ANONYMOUS" in refusal, key
    with pytest.raises(ConnectionClosing, match="User:ANONYMOUS is not a super user"):
        worker.check_stream(PEER, m.DescribeMetadata, "DescribeMetadata")
    denied = metrics.registry.get_sample_value(
        "fjord_broker_authorization_denials_total",
        {"listener": "CONTROLLER", "resource_type": "CLUSTER", "operation": "ALTER"},
    )
    assert denied == 4  # CreateAcls, DeleteAcls, AlterUserScramCredentials, UnregisterBroker

    assert kafka_operation(m.DESCRIBE_QUORUM) is AclOperation.DESCRIBE
    assert kafka_operation(m.CREATE_PARTITIONS) is None and stream_operation(m.DescribeMetadata) is None
    admin = _authorizer(AuthorizerSettings(), _grant("User:ANONYMOUS", AclOperation.ALTER))
    assert admin.refusal(PEER, kafka_operation(m.CREATE_ACLS), "CreateAcls", "CreateAcls") is None  # as in Kafka


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
