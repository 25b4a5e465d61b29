"""``--command-config`` of Fjord's operator tools (``node.client_config``): a Kafka tool's client properties become
the TLS context and SASL user of the tool's connections; what Fjord cannot honour is refused naming the key, and no
message holds the password. (Connecting with it: tests/cluster/test_cluster_secured.py drains a broker of a secured
cluster with one.)"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from node.client_config import ClientConfigError, client_security, load_client_config
from testkit.tls_certs import CertificateAuthority

SECRET = "tool-pass-never-printed"
JAAS = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="ops" password="{SECRET}";'


def test_no_file_is_plaintext() -> None:
    security = load_client_config(None)
    assert security.tls is None and security.sasl is None


def test_sasl_ssl_gives_a_context_checking_the_server_and_the_user(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.jaas.config={JAAS}\nssl.truststore.location={ca.cert_path}\n"
    )
    security = load_client_config(str(config))
    assert isinstance(security.tls, ssl.SSLContext) and security.tls.check_hostname
    assert security.sasl is not None
    assert (security.sasl.mechanism, security.sasl.user, security.sasl.password) == ("SCRAM-SHA-512", "ops", SECRET)
    assert SECRET not in repr(security)
    assert not security.sasl.token


def test_a_token_login_is_kafkas_tokenauth_option(tmp_path: Path) -> None:
    config = tmp_path / "token.properties"
    jaas = JAAS.replace(";", ' tokenauth="true";')
    config.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config={jaas}\n")
    security = load_client_config(str(config))
    assert security.sasl is not None and security.sasl.token
    assert security.sasl.client().first().decode().endswith(",tokenauth=true")


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"ssl.truststore.password": SECRET}, "ssl.truststore.password"),
        ({"security.protocol": "SASL_SSH"}, "security.protocol"),
        ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "ssl.truststore.type"),
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": JAAS}, "sasl.mechanism"),  # GSSAPI default
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="ops";'},
            "sasl.jaas.config",
        ),
        (  # an empty password, refused as in a node's own JAAS login (settings.jaas JaasEntry.login)
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.jaas.config": JAAS.replace(SECRET, ""),
            },
            "sasl.jaas.config",
        ),
        ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.pem"}, "ssl.truststore.location"),
        (  # a delegation token logs in with SCRAM only
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
             "sasl.jaas.config": JAAS.replace(";", ' tokenauth="true";')},
            "sasl.jaas.config",
        ),
    ],
)
def test_what_cannot_be_used_is_refused_naming_the_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(ClientConfigError) as refused:
        client_security(props, where="ops.properties")
    message = str(refused.value)
    assert message.startswith(f"ops.properties: {key}: ") and SECRET not in message


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ClientConfigError, match=r"--command-config .*missing\.properties"):
        load_client_config(str(tmp_path / "missing.properties"))
