"""The CONTROLLER listener over TLS (``listener.security.protocol.map`` CONTROLLER:SSL): voters elect a leader
over it, a broker's controller client follows the metadata log and registers over it, each with its own
certificate (``ssl.client.auth=required``), and a connection without TLS is refused. With an authorizer, only
callers whose certificate maps to a super user are served. Two voters and the broker's client run in this
process."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

import pytest

from controller.config.server import ServerConfig
from controller.metadata_records import Endpoint
from controller.remote.client import RemoteControllerClient
from controller.rpc import messages as m
from controller.rpc.connection import ConnectionClosedError, ControllerConnection
from storage.metadata.api import NodeIdentity
from tests.quorum_fixtures import active_voter, broker_config, quorum_configs, running_voters
from tests.tls_certs import CertificateAuthority
from wire import codec
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
            client = await RemoteControllerClient.start(
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
                    await plain.request(codec.build(codec.request_class(18, 0)), timeout=5)
            finally:
                await plain.close()
        finally:
            if client is not None:
                await client.close()


async def test_with_an_authorizer_only_super_users_certificates_are_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A certificate the CA signed is not enough once ACLs are on: the CONTROLLER listener names its caller by the
    certificate, mapped with that listener's ``ssl.principal.mapping.rules``, and serves super users only, as
    Kafka's controller asks CLUSTER_ACTION. The nodes (certificates of CN=localhost, ``User:localhost``) elect and
    register; the operator reads the whole metadata; mallory, from the same CA, gets her connection closed, on a
    stream RPC as on a Kafka request, with one log line naming her principal, her address and the listener."""
    ca = CertificateAuthority(tmp_path / "certs")
    secured = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "listener.name.controller.ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/",
        "super.users": "User:localhost;User:operator",
    }
    configs = quorum_configs(tmp_path, 2, extra=lambda i: {**_tls(ca, f"controller-{i}"), **secured})
    async with running_voters(configs) as started:
        await active_voter(started)
        client = await RemoteControllerClient.start(
            broker_config(tmp_path, configs, _tls(ca, "broker-5")), catch_up_timeout_s=20
        )
        try:
            assert await client.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9092)], None) > 0
        finally:
            await client.close()

        port = configs[0].voters[0].port
        dump = m.DescribeMetadata(NodeIdentity(-1, -1))
        describe = codec.build(codec.request_class(m.DESCRIBE_QUORUM, 0))
        operator = ControllerConnection("127.0.0.1", port, ssl_context=_client_tls(ca, "operator"))
        await operator.connect()
        try:
            response = await operator.stream_request(dump, timeout=5)
            assert response.error_code == m.RpcError.NONE and response.result is not None
            await operator.request(describe, timeout=5)
        finally:
            await operator.close()

        mallory = _client_tls(ca, "mallory")
        with caplog.at_level(logging.WARNING, logger="wire.listener"):
            for ask in ("stream", "kafka"):
                connection = ControllerConnection("127.0.0.1", port, ssl_context=mallory)
                await connection.connect()
                try:
                    # ApiVersions comes before the check, as in Kafka; then the connection closes.
                    await connection.request(codec.build(codec.request_class(m.API_VERSIONS, 0)), timeout=5)
                    with pytest.raises(ConnectionClosedError):
                        if ask == "stream":
                            await connection.stream_request(dump, timeout=5)
                        else:
                            await connection.request(describe, timeout=5)
                finally:
                    await connection.close()
        refusals = [r.getMessage() for r in caplog.records if "User:mallory" in r.getMessage()]
        assert len(refusals) == 2, refusals
        assert all("127.0.0.1" in line and "listener CONTROLLER" in line for line in refusals), refusals


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
