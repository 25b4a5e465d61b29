"""The inter-broker listener and this broker's client settings for it (settings.inter_broker), from Kafka's
keys, without a broker: which listener, its TLS client context, the SASL mechanism and the broker's own user from
the listener's JAAS config, and the one-line errors (naming the key, never a password) for what cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest

from settings.server import ServerConfig
from storage.config import ConfigError
from testkit.tls_certs import CertificateAuthority

SECRET = "broker-secret-never-printed"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


@pytest.fixture
def base(tmp_path: Path) -> dict[str, str]:
    ca = CertificateAuthority(tmp_path / "certs")
    return {
        "ssl.keystore.location": str(ca.issue("node", server=True).keystore_path),
        "ssl.truststore.location": str(ca.cert_path),
        "process.roles": "broker",
        "node.id": "100",
        "controller.quorum.voters": "0@127.0.0.1:9093",
        "listeners": "PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9094,SASL_SSL://127.0.0.1:9095",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,"
        "SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": f'{PLAIN} required user_broker="{SECRET}";',
        "listener.name.sasl_ssl.plain.sasl.jaas.config": f'{PLAIN} required user_broker="{SECRET}";',
        "log.dirs": str(tmp_path / "data"),
    }


def test_without_the_keys_the_first_plaintext_listener_is_used(base: dict[str, str]) -> None:
    settings = ServerConfig.from_properties(base).inter_broker
    assert settings is not None
    assert (settings.listener, settings.protocol, settings.sasl, settings.client_context()) == (
        "PLAINTEXT",
        "PLAINTEXT",
        None,
        None,
    )


def test_a_sasl_ssl_listener_named_by_security_inter_broker_protocol(base: dict[str, str]) -> None:
    props = {
        **base,
        "security.inter.broker.protocol": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": f'{SCRAM} required username="broker" '
        f'password="{SECRET}";',
    }
    settings = ServerConfig.from_properties(props).inter_broker
    assert settings is not None and settings.sasl is not None
    assert (settings.listener, settings.protocol) == ("SASL_SSL", "SASL_SSL")
    assert (settings.sasl.mechanism, settings.sasl.user, settings.sasl.password) == ("SCRAM-SHA-512", "broker", SECRET)
    context = settings.client_context()
    assert context is not None and context.check_hostname  # ssl.endpoint.identification.algorithm=https (default)
    assert SECRET not in repr(settings)


def test_plain_credentials_from_the_global_jaas_config(base: dict[str, str]) -> None:
    props = {
        **base,
        "inter.broker.listener.name": "internal",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.jaas.config": f'{PLAIN} required username="broker" password="{SECRET}" user_broker="{SECRET}";',
    }
    del props["listener.name.internal.plain.sasl.jaas.config"]
    settings = ServerConfig.from_properties(props).inter_broker
    assert settings is not None and settings.sasl is not None
    assert (settings.listener, settings.protocol, settings.sasl.user) == ("INTERNAL", "SASL_PLAINTEXT", "broker")
    assert settings.client_context() is None


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (
            {"inter.broker.listener.name": "INTERNAL", "security.inter.broker.protocol": "SASL_PLAINTEXT"},
            "security.inter.broker.protocol: only one of inter.broker.listener.name and",
        ),
        (
            {"inter.broker.listener.name": "ELSEWHERE"},
            "inter.broker.listener.name: the inter-broker listener ELSEWHERE",
        ),
        ({"security.inter.broker.protocol": "KERBEROS"}, "security.inter.broker.protocol: unknown security protocol"),
        ({"inter.broker.listener.name": "INTERNAL"}, "sasl.mechanism.inter.broker.protocol: the inter-broker"),
        (
            {"inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"},
            "sasl.mechanism.inter.broker.protocol: SCRAM-SHA-256 is not enabled on the inter-broker listener INTERNAL",
        ),
        (
            {"inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "PLAIN"},
            "listener.name.internal.plain.sasl.jaas.config: the inter-broker listener INTERNAL uses SASL PLAIN, so "
            "this JAAS config needs this broker's own username and password",
        ),
        (
            {
                "inter.broker.listener.name": "INTERNAL",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.internal.scram-sha-512.sasl.jaas.config": f'{PLAIN} required password="{SECRET}";',
            },
            "listener.name.internal.scram-sha-512.sasl.jaas.config: the login module for SCRAM-SHA-512 must be",
        ),
        (
            {"inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
            "listener.name.internal.scram-sha-512.sasl.jaas.config: the inter-broker listener INTERNAL uses SASL "
            "SCRAM-SHA-512, so this broker needs its own user",
        ),
    ],
)
def test_what_cannot_connect_stops_the_start(base: dict[str, str], extra: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError) as failure:
        ServerConfig.from_properties({**base, **extra})
    assert fragment in str(failure.value)
    assert SECRET not in str(failure.value)
