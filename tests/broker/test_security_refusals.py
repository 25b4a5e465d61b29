"""Security settings Fjord does not implement stop ``fjord server start`` with one line naming the key.

The issue's new user: a node given a SASL_SSL listener, ``sasl.enabled.mechanisms`` and keystore settings started
without a word and served that listener as plaintext. Every such setting (SASL, ACLs, quotas, ssl.* keys Fjord does
not read, a CONTROLLER listener that is not PLAINTEXT) must now end the start: exit status 1, one line, no
traceback, and never the value (a JAAS config or a password) on the terminal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from broker_support import default_overrides, server_command
from test_server_cli import assert_one_line_error, run_to_exit

SECRET = "s3cr3t-never-printed"


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        # the configuration: a SASL_SSL listener with its keystore and mechanisms
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
            },
            "listener.security.protocol.map: listener SASL_SSL is SASL_SSL",
        ),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:0,CLIENTS://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,CLIENTS:SASL_PLAINTEXT",
            },
            "listener CLIENTS is SASL_PLAINTEXT",
        ),
        ({"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"}, "sasl.enabled.mechanisms"),
        ({"sasl.mechanism.inter.broker.protocol": "PLAIN"}, "sasl.mechanism.inter.broker.protocol"),
        (
            {"listener.name.sasl_ssl.plain.sasl.jaas.config": f'PlainLoginModule required password="{SECRET}";'},
            "listener.name.sasl_ssl.plain.sasl.jaas.config",
        ),
        ({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}, "authorizer.class.name"),
        ({"super.users": "User:admin"}, "super.users"),
        ({"quota.window.num": "11"}, "quota.window.num"),
        ({"client.quota.callback.class": "com.example.Quotas"}, "client.quota.callback.class"),
        ({"ssl.keystore.password": SECRET}, "ssl.keystore.password"),
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
        ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type"),
        ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
        ({"security.inter.broker.protocol": "SSL"}, "security.inter.broker.protocol"),
        (
            {"listener.security.protocol.map": "CONTROLLER:SSL,PLAINTEXT:PLAINTEXT"},
            "listener.security.protocol.map: controller listener CONTROLLER is SSL",
        ),
        (
            {
                "listeners": "PLAINTEXT://127.0.0.1:0,WEIRD://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,WEIRD:KERBEROS",
            },
            "unknown security protocol KERBEROS",
        ),
        ({"listener.name.plaintext.ssl.keystore.location": "/nowhere"}, "listener.name.plaintext.ssl.keystore"),
    ],
)
def test_unimplemented_security_setting_stops_the_start(
    overrides: dict[str, str], fragment: str, tmp_path: Path
) -> None:
    settings = default_overrides(tmp_path)
    settings.update(overrides)
    result = run_to_exit(server_command(None, settings))
    assert_one_line_error(result, fragment)
    assert SECRET not in result.stderr + result.stdout


def test_an_ssl_listener_without_a_keystore_stops_the_start(tmp_path: Path) -> None:
    settings = default_overrides(tmp_path)
    settings["listeners"] = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0"
    assert_one_line_error(run_to_exit(server_command(None, settings)), "ssl.keystore.location", "listener SSL")
