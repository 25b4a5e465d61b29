"""SASL on the CONTROLLER listener from Kafka's keys, without a quorum (settings.controller_sasl): the
mechanism (``sasl.mechanism.controller.protocol``), what a voter serves and the node's own login from the
listener's JAAS config, and the one-line errors (naming the key, never a password) for what cannot work."""

from __future__ import annotations

from pathlib import Path

import pytest

from settings.server import ServerConfig
from storage.config import ConfigError

SECRET = "controller-secret-never-printed"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _props(tmp_path: Path, roles: str = "controller") -> dict[str, str]:
    listeners = "CONTROLLER://127.0.0.1:9093" if roles == "controller" else "PLAINTEXT://127.0.0.1:9092"
    return {
        "process.roles": roles,
        "node.id": "0" if roles == "controller" else "5",
        "controller.quorum.voters": "0@127.0.0.1:9093",
        "listeners": listeners,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(tmp_path),
    }


def _plain(username: str | None = "controller", users: str = f'user_controller="{SECRET}"') -> str:
    login = f'username="{username}" password="{SECRET}" ' if username is not None else ""
    return f"{PLAIN} required {login}{users};"


def test_a_voter_serves_plain_users_and_logs_in_as_its_own(tmp_path: Path) -> None:
    props = {
        **_props(tmp_path),
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.controller.plain.sasl.jaas.config": _plain(users=f'user_controller="{SECRET}" user_b="x"'),
    }
    settings = ServerConfig.from_properties(props).controller_sasl
    assert settings is not None and settings.served is not None
    assert (settings.listener, settings.credentials.mechanism, settings.credentials.user) == (
        "CONTROLLER",
        "PLAIN",
        "controller",
    )
    assert settings.served.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    assert dict(settings.served.plain_users) == {"controller": SECRET, "b": "x"}
    assert SECRET not in repr(settings)


def test_a_broker_only_node_logs_in_with_scram_and_serves_nothing(tmp_path: Path) -> None:
    props = {
        **_props(tmp_path, roles="broker"),
        "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
        "listener.name.controller.scram-sha-512.sasl.jaas.config": f'{SCRAM} required username="b5" '
        f'password="{SECRET}";',
    }
    config = ServerConfig.from_properties(props)
    login = config.controller_client_sasl()
    assert login is not None and (login.mechanism, login.user, login.password) == ("SCRAM-SHA-512", "b5", SECRET)
    assert config.controller_sasl is not None and config.controller_sasl.served is None
    assert config.controller_client_tls() is None  # SASL_PLAINTEXT: no TLS


def test_a_plaintext_controller_listener_has_no_sasl(tmp_path: Path) -> None:
    props = {**_props(tmp_path), "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"}
    config = ServerConfig.from_properties(props)
    assert config.controller_sasl is None and config.controller_client_sasl() is None


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        # Kafka's default mechanism is GSSAPI, which Fjord does not implement.
        (
            {"listener.name.controller.sasl.enabled.mechanisms": "PLAIN"},
            "sasl.mechanism.controller.protocol: the controller listener CONTROLLER is SASL_PLAINTEXT, so nodes "
            "authenticate to the quorum with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; GSSAPI is not implemented",
        ),
        (
            {"sasl.mechanism.controller.protocol": "OAUTHBEARER", "sasl.enabled.mechanisms": "PLAIN"},
            "sasl.mechanism.controller.protocol: .* OAUTHBEARER is not implemented",
        ),
        (
            {
                "sasl.mechanism.controller.protocol": "SCRAM-SHA-256",
                "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
                "listener.name.controller.plain.sasl.jaas.config": _plain(),
            },
            "sasl.mechanism.controller.protocol: SCRAM-SHA-256 is not enabled on the controller listener CONTROLLER "
            r"\(enabled: PLAIN\)",
        ),
        (
            {"sasl.mechanism.controller.protocol": "SCRAM-SHA-256", "sasl.enabled.mechanisms": "SCRAM-SHA-256"},
            "listener.name.controller.scram-sha-256.sasl.jaas.config: the controller listener CONTROLLER uses SASL "
            "SCRAM-SHA-256, so this node needs its own user",
        ),
        (
            {
                "sasl.mechanism.controller.protocol": "PLAIN",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.controller.plain.sasl.jaas.config": _plain(username=None),
            },
            "listener.name.controller.plain.sasl.jaas.config: the controller listener CONTROLLER uses SASL PLAIN, so "
            "this JAAS config needs this node's own username and password",
        ),
        (  # a voter serving PLAIN needs users to check the others' logins against
            {
                "sasl.mechanism.controller.protocol": "PLAIN",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.controller.plain.sasl.jaas.config": _plain(users=""),
            },
            "listener.name.controller.plain.sasl.jaas.config: no user_<name>",
        ),
    ],
)
def test_what_cannot_work_stops_the_load_naming_the_key(extra: dict[str, str], fragment: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="^" + fragment) as failure:
        ServerConfig.from_properties({**_props(tmp_path), **extra})
    assert "\n" not in str(failure.value) and SECRET not in str(failure.value)
