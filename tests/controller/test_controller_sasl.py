"""The CONTROLLER listener over SASL (``listener.security.protocol.map`` CONTROLLER:SASL_PLAINTEXT or SASL_SSL,
``sasl.mechanism.controller.protocol=PLAIN``): two voters elect a leader over it, a broker's controller client
follows the metadata log and registers over it, each logging in as its own JAAS user; a connection that does not
authenticate is closed at its first request, a wrong password is refused and logged without the password, and a
client re-authenticates before the session lifetime (``connections.max.reauth.ms``) ends. The voters and the
broker's client run in this process."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from controller.config.server import ServerConfig
from controller.metadata_records import Endpoint
from controller.quorum import QuorumController
from controller.remote.client import RemoteControllerClient
from controller.rpc import messages as m
from controller.rpc.connection import ConnectionClosedError, ControllerConnection
from tests.ports import free_ports
from tests.quorum_fixtures import active_voter
from tests.tls_certs import CertificateAuthority
from wire import codec
from wire.client import SaslAuthenticationFailed
from wire.sasl.client import SaslCredentials

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SECRET = "controller-secret-never-logged"
WRONG = "wrong-password-never-logged"
REAUTH_MS = 60_000


def _sasl(protocol: str, user: str, ca: CertificateAuthority | None, name: str) -> dict[str, str]:
    props = {
        "listener.security.protocol.map": f"CONTROLLER:{protocol},PLAINTEXT:PLAINTEXT",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": (
            f'{PLAIN} required username="{user}" password="{SECRET}" user_controller="{SECRET}" user_broker="{SECRET}";'
        ),
        "connections.max.reauth.ms": str(REAUTH_MS),
    }
    if ca is not None:
        props["ssl.keystore.location"] = str(ca.issue(name, server=True).keystore_path)
        props["ssl.truststore.location"] = str(ca.cert_path)
    return props


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
async def test_voters_and_a_broker_authenticate_on_the_controller_listener(
    protocol: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = CertificateAuthority(tmp_path / "certs") if protocol == "SASL_SSL" else None
    ports = free_ports(2)
    voters = ",".join(f"{i}@127.0.0.1:{port}" for i, port in enumerate(ports))
    configs = [
        ServerConfig.from_properties(
            {
                "process.roles": "controller",
                "node.id": str(i),
                "controller.quorum.voters": voters,
                "listeners": f"CONTROLLER://127.0.0.1:{port}",
                "controller.listener.names": "CONTROLLER",
                "log.dirs": str(tmp_path / f"c{i}"),
                "controller.quorum.election.timeout.ms": "200",
                "controller.quorum.fetch.timeout.ms": "400",
                "controller.quorum.request.timeout.ms": "500",
                **_sasl(protocol, "controller", ca, f"controller-{i}"),
            }
        )
        for i, port in enumerate(ports)
    ]
    started = list(await asyncio.gather(*(QuorumController.start(config) for config in configs)))
    client: RemoteControllerClient | None = None
    try:
        active = await active_voter(started)
        broker = ServerConfig.from_properties(
            {
                "process.roles": "broker",
                "node.id": "5",
                "controller.quorum.voters": voters,
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "controller.listener.names": "CONTROLLER",
                "log.dirs": str(tmp_path / "broker"),
                "s3.data.buckets": f"0@file://{tmp_path / 'objects'}",
                **_sasl(protocol, "broker", ca, "broker-5"),
            }
        )
        client = await RemoteControllerClient.start(broker, catch_up_timeout_s=20)
        assert client.image.cluster_id == active.cluster_id
        epoch = await client.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9092)], None)
        assert epoch > 0

        port = ports[0]
        tls = broker.controller_client_tls()
        describe = codec.build(codec.request_class(m.DESCRIBE_QUORUM, 0))

        # Without SASL, ApiVersions is answered (clients ask it first) but nothing else: the connection closes.
        anonymous = ControllerConnection("127.0.0.1", port, ssl_context=tls)
        await anonymous.connect()
        try:
            versions = await anonymous.request(codec.build(codec.request_class(m.API_VERSIONS, 0)), timeout=5)
            assert {k.api_key for k in versions.api_keys} >= {m.SASL_HANDSHAKE, m.SASL_AUTHENTICATE}
            with pytest.raises(ConnectionClosedError):
                await anonymous.request(describe, timeout=5)
        finally:
            await anonymous.close()

        # A wrong password is refused, and the voter's log names the user but never a password.
        caplog.set_level(logging.WARNING)
        wrong = ControllerConnection("127.0.0.1", port, ssl_context=tls, sasl=SaslCredentials("PLAIN", "broker", WRONG))
        try:
            with pytest.raises(SaslAuthenticationFailed, match="user broker"):
                await wrong.connect()
        finally:
            await wrong.close()
        assert any(
            "SASL authentication failed" in r.getMessage() and "'broker'" in r.getMessage() for r in caplog.records
        )
        assert WRONG not in caplog.text and SECRET not in caplog.text

        # The server set a session lifetime: past 85-95% of it the next request re-authenticates first, and a
        # connection idle past its end is closed rather than used.
        clock = _Clock()
        login = broker.controller_client_sasl()
        assert login is not None
        renewing = ControllerConnection("127.0.0.1", port, ssl_context=tls, sasl=login, clock=clock)
        await renewing.connect()
        try:
            await renewing.request(describe, timeout=5)
            assert renewing.authentications == 1
            clock.now += REAUTH_MS / 1000 * 0.96
            await renewing.request(describe, timeout=5)
            assert renewing.authentications == 2
            clock.now += REAUTH_MS / 1000 * 1.01
            with pytest.raises(ConnectionClosedError, match="SASL session ended"):
                await renewing.request(describe, timeout=5)
        finally:
            await renewing.close()
    finally:
        if client is not None:
            await client.close()
        for quorum in started:
            await quorum.stop(resign=False)


async def test_with_an_authorizer_only_super_users_are_served(tmp_path: Path) -> None:
    """With ACLs on, authenticating is not enough: a SASL CONTROLLER listener serves only super users (the nodes'
    own controller users), so a client user who can log in there (alice) reaches none of the quorum's requests."""
    [port] = free_ports(1)
    jaas = (
        f'{PLAIN} required username="controller" password="{SECRET}" user_controller="{SECRET}" '
        f'user_alice="{SECRET}";'
    )
    config = ServerConfig.from_properties(
        {
            "process.roles": "controller",
            "node.id": "0",
            "controller.quorum.voters": f"0@127.0.0.1:{port}",
            "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(tmp_path / "c0"),
            "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": jaas,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:controller",
        }
    )
    voter = await QuorumController.start(config)
    try:
        await active_voter([voter])
        describe = codec.build(codec.request_class(m.DESCRIBE_QUORUM, 0))
        for user, served in (("controller", True), ("alice", False)):
            connection = ControllerConnection("127.0.0.1", port, sasl=SaslCredentials("PLAIN", user, SECRET))
            await connection.connect()
            try:
                if served:
                    await connection.request(describe, timeout=5)
                else:
                    with pytest.raises(ConnectionClosedError):
                        await connection.request(describe, timeout=5)
            finally:
                await connection.close()
    finally:
        await voter.stop(resign=False)
