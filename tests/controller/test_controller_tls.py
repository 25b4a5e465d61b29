"""The CONTROLLER listener over TLS (``listener.security.protocol.map`` CONTROLLER:SSL): voters elect a leader
over it, a broker's controller client follows the metadata log and registers over it, each with its own
certificate (``ssl.client.auth=required``), and a connection without TLS is refused. Two voters and the broker's
client run in this process."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.config.server import ServerConfig
from controller.metadata_records import Endpoint
from controller.remote.client import RemoteControllerClient
from controller.rpc.connection import ConnectionClosedError, ControllerConnection
from tests.quorum_fixtures import active_voter, broker_config, quorum_configs, running_voters
from tests.tls_certs import CertificateAuthority
from wire import codec


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
