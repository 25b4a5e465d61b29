"""The CONTROLLER listener over TLS (``listener.security.protocol.map`` CONTROLLER:SSL): voters elect a leader
over it, a broker's controller client follows the metadata log and registers over it, each with its own
certificate (``ssl.client.auth=required``), and a connection without TLS is refused. With an authorizer, each
request asks its caller, named by the certificate, the right Kafka's controller asks. Two voters and the broker's
client run in this process."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from metadata.acl.binding import CLUSTER_NAME, AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from metadata.remote.client import RemoteControllerClient
from metadata.rpc.connection import ConnectionClosedError, ControllerConnection
from metadata.rpc.error_codes import RpcError
from metadata.rpc.kafka_apis import API_VERSIONS, BROKER_HEARTBEAT, CREATE_ACLS, CREATE_TOPICS, DESCRIBE_QUORUM
from metadata.rpc.stream_rpcs import DescribeBrokerLoad, DescribeMetadata, GetKV
from node.controller_handle import start_quorum_client
from settings.endpoint import Endpoint
from settings.server import ServerConfig
from storage.metadata.api import NodeIdentity
from testkit.tls_certs import CertificateAuthority
from testkit.waiting import eventually_async
from tests.quorum_fixtures import active_voter, broker_config, quorum_configs, running_voters
from wire import codec, schema
from wire.tls import TlsSettings, client_context


def _tls(ca: CertificateAuthority, name: str) -> dict[str, str]:
    identity = ca.issue(name, server=True)
    return {
        "listener.security.protocol.map": "CONTROLLER:SSL,PLAINTEXT:PLAINTEXT",
        "ssl.keystore.location": str(identity.keystore_path),
        "ssl.truststore.location": str(ca.cert_path),
        "ssl.client.auth": "required",
    }


async def test_voters_and_a_broker_speak_tls_on_the_controller_listener(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "certs")
    configs = quorum_configs(tmp_path, 2, extra=lambda i: _tls(ca, f"controller-{i}"))
    client: RemoteControllerClient | None = None
    async with running_voters(configs) as started:
        try:
            active = await active_voter(started)
            client = await start_quorum_client(
                broker_config(tmp_path, configs, _tls(ca, "broker-5")), catch_up_timeout_s=20
            )
            assert client.image.cluster_id == active.cluster_id
            epoch = await client.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9092)], None)
            assert epoch > 0

            # A connection without TLS gets no answer: the listener closes it at its first bytes.
            plain = ControllerConnection("127.0.0.1", configs[0].voters[0].port)
            await plain.connect()
            try:
                with pytest.raises((ConnectionClosedError, TimeoutError)):
                    await plain.request(schema.build(codec.request_class(18, 0)), timeout=5)
            finally:
                await plain.close()
        finally:
            if client is not None:
                await client.close()


async def test_with_an_authorizer_each_request_asks_its_right_of_the_certificate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A certificate the CA signed is not enough once ACLs are on: the CONTROLLER listener names its caller by the
    certificate, mapped with that listener's ``ssl.principal.mapping.rules``, and asks each request the right Kafka's
    controller asks. The nodes (certificates of CN=localhost, ``User:localhost``, super users) elect and register;
    the operator (a super user) reads the whole metadata. Worker, granted CLUSTER_ACTION and CREATE on topics
    ``worker-*`` only, heartbeats and reads stream metadata but gets CLUSTER_AUTHORIZATION_FAILED on CreateAcls and
    DescribeQuorum (DESCRIBE) and TOPIC_AUTHORIZATION_FAILED on a topic of another name in CreateTopics (its own
    topic is created, and answered without its settings: no DESCRIBE_CONFIGS on it), on a connection that stays
    open, and cannot read the whole metadata.
    Mallory, from the same CA and granted nothing, is answered CLUSTER_AUTHORIZATION_FAILED on a Kafka request and
    has her connection closed on a stream RPC, with one log line naming her principal, her address and the
    listener."""
    ca = CertificateAuthority(tmp_path / "certs")
    secured = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "listener.name.controller.ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/",
        "super.users": "User:localhost;User:operator",
    }
    configs = quorum_configs(tmp_path, 2, extra=lambda i: {**_tls(ca, f"controller-{i}"), **secured})
    async with running_voters(configs) as started:
        active = await active_voter(started)
        client = await start_quorum_client(
            broker_config(tmp_path, configs, _tls(ca, "broker-5")), catch_up_timeout_s=20
        )
        # Broker 5 registers and heartbeats (unfenced) while the worker creates topics on it by assignment.
        epoch = await client.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9092)], None)
        try:
            assert epoch > 0 and await client.wait_unfenced(NodeIdentity(5, epoch))
            grant = AclBinding(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, "User:worker", "*",
                               AclOperation.CLUSTER_ACTION, PermissionType.ALLOW)
            own_topics = AclBinding(ResourceType.TOPIC, "worker-", PatternType.PREFIXED, "User:worker", "*",
                                    AclOperation.CREATE, PermissionType.ALLOW)
            await active.controller.create_acls([grant, own_topics])
            # Both voters serve the grant once they have it (the follower, once it has caught up with the leader).
            await eventually_async(
                lambda: all(q.metadata_loaded() and grant in q.image.acls.values() for q in started),
                timeout=10, what="both voters loaded the grant",
            )

            # the active voter's: CreateTopics is answered there (another voter answers NOT_CONTROLLER)
            port = next(v.port for v in configs[0].voters if v.node_id == active.node_id)
            dump = DescribeMetadata(NodeIdentity(-1, -1))
            describe = schema.build(codec.request_class(DESCRIBE_QUORUM, 0))
            operator = ControllerConnection("127.0.0.1", port, ssl_context=_client_tls(ca, "operator"))
            await operator.connect()
            try:
                response = await operator.stream_request(dump, timeout=5)
                assert response.error_code == RpcError.NONE and response.result is not None
                described = await operator.request(describe, timeout=5)
                assert described.error_code != ErrorCode.cluster_authorization_failed
            finally:
                await operator.close()

            refused = ErrorCode.cluster_authorization_failed
            worker = ControllerConnection("127.0.0.1", port, ssl_context=_client_tls(ca, "worker"))
            await worker.connect()
            try:
                heartbeat = schema.build(codec.request_class(BROKER_HEARTBEAT, 1), broker_id=7, broker_epoch=1,
                                        current_metadata_offset=0)
                assert (await worker.request(heartbeat, timeout=5)).error_code != refused  # not registered, not refused
                loads = await worker.stream_request(DescribeBrokerLoad(NodeIdentity(-1, -1)), timeout=5)
                assert loads.error_code in (RpcError.NONE, RpcError.NOT_CONTROLLER)
                create_acls = schema.build(
                    codec.request_class(CREATE_ACLS, 3),
                    creations=(schema.build_nested(
                        codec.request_class(CREATE_ACLS, 3), "creations", resource_type=ResourceType.CLUSTER,
                        resource_name=CLUSTER_NAME, resource_pattern_type=PatternType.LITERAL, principal="User:worker",
                        host="*", operation=AclOperation.ALL, permission_type=PermissionType.ALLOW,
                    ),),
                )
                assert [r.error_code for r in (await worker.request(create_acls, timeout=5)).results] == [refused]
                topic_cls = schema.field_entity(codec.request_class(CREATE_TOPICS, 7), "topics")
                # on broker 5 by an assignment (the placement of these bare nodes would find no broker)
                on_broker_5 = (schema.build_nested(topic_cls, "assignments", partition_index=0, broker_ids=(5,)),)
                create_topics = schema.build(
                    codec.request_class(CREATE_TOPICS, 7),
                    topics=tuple(schema.build_nested(codec.request_class(CREATE_TOPICS, 7), "topics", name=name,
                                                    num_partitions=-1, replication_factor=-1, assignments=on_broker_5)
                                 for name in ("grabbed", "worker-own")),
                    timeout=5000,
                )
                results = {t.name: t for t in (await worker.request(create_topics, timeout=5)).topics}
                assert {name: t.error_code for name, t in results.items()} == {
                    "grabbed": ErrorCode.topic_authorization_failed, "worker-own": ErrorCode.none}
                own = results["worker-own"]  # created without DESCRIBE_CONFIGS on it: no settings shown, as in Kafka
                assert (own.topic_config_error_code, own.num_partitions, own.replication_factor, own.configs) == (
                    ErrorCode.topic_authorization_failed, -1, -1, ())
                assert (await worker.request(describe, timeout=5)).error_code == refused
                assert (await worker.request(heartbeat, timeout=5)).error_code != refused  # still open, still served
                with pytest.raises(ConnectionClosedError):
                    await worker.stream_request(dump, timeout=5)
            finally:
                await worker.close()
            assert not any(b.principal == "User:worker" and b.operation is AclOperation.ALL
                           for b in active.image.acls.values())
            assert "grabbed" not in active.image.topics_by_name

            mallory = ControllerConnection("127.0.0.1", port, ssl_context=_client_tls(ca, "mallory"))
            with caplog.at_level(logging.WARNING, logger="wire.listener"):
                await mallory.connect()
                try:
                    # ApiVersions comes before the check, as in Kafka.
                    await mallory.request(schema.build(codec.request_class(API_VERSIONS, 0)), timeout=5)
                    assert (await mallory.request(describe, timeout=5)).error_code == refused
                    with pytest.raises(ConnectionClosedError):
                        await mallory.stream_request(GetKV(NodeIdentity(-1, -1), "any"), timeout=5)
                finally:
                    await mallory.close()
            closed = [r.getMessage() for r in caplog.records
                      if r.name == "wire.listener" and "User:mallory" in r.getMessage()]
            assert len(closed) == 1, closed
            assert "127.0.0.1" in closed[0] and "listener CONTROLLER" in closed[0], closed
        finally:
            await client.close()


def _client_tls(ca: CertificateAuthority, name: str) -> ssl.SSLContext:
    """A client's TLS context with a certificate of CN=``name`` from ``ca``."""
    identity = ca.issue(name, server=False)
    return client_context(
        TlsSettings(keystore_location=str(identity.keystore_path), truststore_location=str(ca.cert_path))
    )


@pytest.mark.parametrize(("algorithm", "checked"), [(None, True), ("https", True), ("", False)])
def test_controller_connections_check_the_host_name_as_kafka(
    algorithm: str | None, checked: bool, tmp_path: Path
) -> None:
    """``ssl.endpoint.identification.algorithm``: https (Kafka's default) checks the controller's host name."""
    props = {
        "process.roles": "broker",
        "node.id": "5",
        "controller.quorum.voters": "0@127.0.0.1:9093",
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(tmp_path / "broker"),
        **_tls(CertificateAuthority(tmp_path / "certs"), "broker-5"),
    }
    if algorithm is not None:
        props["ssl.endpoint.identification.algorithm"] = algorithm
    context = ServerConfig.from_properties(props).controller_client_context()
    assert context is not None and context.check_hostname is checked
    assert (
        ServerConfig.from_properties(
            {**props, "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"}
        ).controller_client_context()
        is None
    )
