"""The CONTROLLER listener over SASL (``listener.security.protocol.map`` CONTROLLER:SASL_PLAINTEXT or SASL_SSL,
``sasl.mechanism.controller.protocol=PLAIN``): two voters elect a leader over it, a broker's controller client
follows the metadata log and registers over it, each logging in as its own JAAS user; a connection that does not
authenticate is closed at its first request, a wrong password is refused and logged without the password, and a
client re-authenticates before the session lifetime (``connections.max.reauth.ms``) ends; a re-authentication that
fails closes the connection with a warning naming the node and mechanism. The voters and the broker's client run in
this process."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from metadata.remote.client import RemoteControllerClient
from metadata.rpc.connection import ConnectionClosedError, ControllerConnection
from metadata.rpc.error_codes import RpcError
from metadata.rpc.kafka_apis import API_VERSIONS, DESCRIBE_QUORUM, SASL_AUTHENTICATE, SASL_HANDSHAKE
from metadata.rpc.stream_rpcs import GetKV
from node.controller_handle import start_quorum_client
from settings.endpoint import Endpoint
from storage.metadata.api import NodeIdentity
from testkit.tls_certs import CertificateAuthority
from tests.quorum_fixtures import active_voter, broker_config, quorum_configs, running_voters
from wire import codec, schema
from wire.client import SaslAuthenticationFailed
from wire.sasl.client import SaslCredentials

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SECRET = "controller-secret-never-logged"
WRONG = "wrong-password-never-logged"
REAUTH_MS = 60_000


def _sasl(
    protocol: str,
    user: str,
    ca: CertificateAuthority | None = None,
    name: str = "",
    users: tuple[str, ...] = ("controller", "broker"),
) -> dict[str, str]:
    """A node's CONTROLLER listener settings: SASL PLAIN logging in as ``user``, serving ``users`` (all with the
    password SECRET), with ``ca``'s certificate for ``name`` on SASL_SSL."""
    served = " ".join(f'user_{served}="{SECRET}"' for served in users)
    props = {
        "listener.security.protocol.map": f"CONTROLLER:{protocol},PLAINTEXT:PLAINTEXT",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": (
            f'{PLAIN} required username="{user}" password="{SECRET}" {served};'
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
    configs = quorum_configs(tmp_path, 2, extra=lambda i: _sasl(protocol, "controller", ca, f"controller-{i}"))
    client: RemoteControllerClient | None = None
    async with running_voters(configs) as started:
        try:
            active = await active_voter(started)
            broker = broker_config(tmp_path, configs, _sasl(protocol, "broker", ca, "broker-5"))
            client = await start_quorum_client(broker, catch_up_timeout_s=20)
            assert client.image.cluster_id == active.cluster_id
            epoch = await client.register_broker(5, [Endpoint("PLAINTEXT", "127.0.0.1", 9092)], None)
            assert epoch > 0

            port = configs[0].voters[0].port
            tls = broker.controller_client_tls()
            describe = schema.build(codec.request_class(DESCRIBE_QUORUM, 0))

            # Without SASL, ApiVersions is answered (clients ask it first) but nothing else: the connection closes.
            anonymous = ControllerConnection("127.0.0.1", port, ssl_context=tls)
            await anonymous.connect()
            try:
                versions = await anonymous.request(schema.build(codec.request_class(API_VERSIONS, 0)), timeout=5)
                assert {k.api_key for k in versions.api_keys} >= {SASL_HANDSHAKE, SASL_AUTHENTICATE}
                with pytest.raises(ConnectionClosedError):
                    await anonymous.request(describe, timeout=5)
            finally:
                await anonymous.close()

            # A wrong password is refused, and the voter's log names the user but never a password.
            caplog.set_level(logging.WARNING)
            wrong = ControllerConnection(
                "127.0.0.1", port, ssl_context=tls, sasl=SaslCredentials("PLAIN", "broker", WRONG)
            )
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


@pytest.mark.parametrize("failure", ["refused", "unanswered"])
async def test_a_failed_reauthentication_closes_the_connection(
    failure: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A re-authentication the voter refuses (the node's password is no longer its user's) or does not answer
    within the request's timeout closes the connection, with one warning naming the node and the mechanism (never
    the password): the exchange is half done, so the connection is not used again, and ``connected`` turning false
    is what makes the Raft transport and the controller channel open a new one. A new connection with the right
    login is served."""
    configs = quorum_configs(tmp_path, 1, extra=lambda _: _sasl("SASL_PLAINTEXT", "controller"))
    async with running_voters(configs) as started:
        await active_voter(started)
        port = configs[0].voters[0].port
        describe = schema.build(codec.request_class(DESCRIBE_QUORUM, 0))
        login = SaslCredentials("PLAIN", "broker", SECRET)
        clock = _Clock()
        connection = ControllerConnection("127.0.0.1", port, sasl=login, clock=clock, node_id=0)
        await connection.connect()
        caplog.set_level(logging.WARNING, logger="metadata.rpc.connection")
        try:
            await connection.request(describe, timeout=5)
            clock.now += REAUTH_MS / 1000 * 0.96  # the next request re-authenticates first
            timeout = 5.0
            if failure == "refused":
                connection.sasl = SaslCredentials("PLAIN", "broker", WRONG)
            else:
                # Expires before the voter (in this event loop) can read the SaslHandshake, let alone answer it.
                timeout = 1e-6
            with pytest.raises(ConnectionClosedError, match=r"node 0 at .*\(PLAIN, user broker\)"):
                await connection.request(describe, timeout=timeout)
            assert not connection.connected
            async with asyncio.timeout(5):  # not a hang: a closed connection refuses at once
                with pytest.raises(ConnectionClosedError):
                    await connection.request(describe, timeout=5)
        finally:
            await connection.close()
        [warning] = [r.getMessage() for r in caplog.records if r.name == "metadata.rpc.connection"]
        assert "SASL re-authentication failed" in warning and "node 0 at" in warning and "PLAIN" in warning
        assert WRONG not in caplog.text and SECRET not in caplog.text

        fresh = ControllerConnection("127.0.0.1", port, sasl=login, node_id=0)
        await fresh.connect()
        try:
            await fresh.request(describe, timeout=5)
        finally:
            await fresh.close()


async def test_with_an_authorizer_authenticating_is_not_enough(tmp_path: Path) -> None:
    """With ACLs on, authenticating is not enough: a client user who can log in on a SASL CONTROLLER listener (alice,
    granted nothing) is answered CLUSTER_AUTHORIZATION_FAILED on DescribeQuorum (Kafka asks DESCRIBE on the cluster)
    on a connection that stays open, and has her connection closed on a stream RPC; the nodes' own controller user,
    a super user, is served."""
    secured = {
        **_sasl("SASL_PLAINTEXT", "controller", users=("controller", "alice")),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:controller",
    }
    configs = quorum_configs(tmp_path, 1, extra=lambda _: secured)
    async with running_voters(configs) as started:
        await active_voter(started)
        port = configs[0].voters[0].port
        describe = schema.build(codec.request_class(DESCRIBE_QUORUM, 0))
        for user, served in (("controller", True), ("alice", False)):
            connection = ControllerConnection("127.0.0.1", port, sasl=SaslCredentials("PLAIN", user, SECRET))
            await connection.connect()
            try:
                expected = ErrorCode.none if served else ErrorCode.cluster_authorization_failed
                for _ in range(2):  # the connection stays usable after a refusal
                    assert (await connection.request(describe, timeout=5)).error_code == expected
                kv = GetKV(NodeIdentity(-1, -1), "any")
                if served:
                    assert (await connection.stream_request(kv, timeout=5)).error_code == RpcError.NONE
                else:
                    with pytest.raises(ConnectionClosedError):
                        await connection.stream_request(kv, timeout=5)
            finally:
                await connection.close()
