"""``--command-config FILE`` of Fjord's operator tools: the Kafka client properties Kafka's own tools take there, read
into what :class:`wire.client.ClientConnection` connects with.

An operator of a secured cluster already has this file for ``kafka-configs.sh`` or ``kafka-reassign-partitions.sh``
(``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.location``, ...), so Fjord's tools
read the same one. Only the keys Fjord can honour are accepted; any other key is refused naming it, rather than
ignored (a truststore password, say, would mean a JKS file Fjord cannot read). Certificates are PEM, as for the
node's own ``ssl.*`` keys. Passwords never appear in a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from settings.jaas import JaasError, parse_jaas
from storage.config import ConfigError, read_properties
from wire.sasl.client import CLIENT_MECHANISMS, SaslCredentials
from wire.tls import ClientTls, TlsError, TlsSettings, client_context

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.jaas.config",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
    }
)


class ClientConfigError(ValueError):
    """The file cannot be used; the message names the file and the key (never a secret)."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How a tool's connections authenticate: TLS (None: plaintext) and SASL (None: none)."""

    tls: ClientTls | None = None
    sasl: SaslCredentials | None = None


def load_client_config(path: str | None) -> ClientSecurity:
    """The security of ``path`` (a properties file); no file: PLAINTEXT, as Kafka's tools without one."""
    if path is None:
        return ClientSecurity()
    try:
        props = read_properties(Path(path))
    except ConfigError as exc:
        raise ClientConfigError(f"--command-config {path}: {exc}") from None
    return client_security(props, where=path)


def client_security(props: dict[str, str], *, where: str) -> ClientSecurity:
    def fail(key: str, problem: str) -> ClientConfigError:
        return ClientConfigError(f"{where}: {key}: {problem}")

    for key in props:
        if key not in KEYS:
            raise fail(key, f"not a setting Fjord's tools use (they read {', '.join(sorted(KEYS))})")
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise fail("security.protocol", f"unknown protocol {protocol!r} (one of {', '.join(PROTOCOLS)})")
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        if props.get(key, "PEM").strip().upper() != "PEM":
            raise fail(key, "only PEM files can be read")
    tls: ClientTls | None = None
    if protocol in ("SSL", "SASL_SSL"):
        settings = TlsSettings(
            keystore_location=props.get("ssl.keystore.location"),
            key_password=props.get("ssl.key.password"),
            truststore_location=props.get("ssl.truststore.location"),
            check_hostname=props.get("ssl.endpoint.identification.algorithm", "https").strip().lower() == "https",
        )
        try:
            tls = client_context(settings)
        except TlsError as exc:
            raise fail(f"ssl.{exc.setting.replace('_', '.')}", str(exc)) from None
    sasl: SaslCredentials | None = None
    if protocol.startswith("SASL_"):
        mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in CLIENT_MECHANISMS:
            raise fail("sasl.mechanism", f"{mechanism} is not implemented (one of {', '.join(CLIENT_MECHANISMS)})")
        if "sasl.jaas.config" not in props:
            raise fail("sasl.jaas.config", f"missing: {protocol} needs the user's username and password")
        try:
            entry = parse_jaas(props["sasl.jaas.config"])
        except JaasError as exc:
            raise fail("sasl.jaas.config", str(exc)) from None
        sasl = entry.login(mechanism)
        if sasl is None:
            raise fail("sasl.jaas.config", 'needs username="..." and password="..."')
        if mechanism == "PLAIN" and entry.options.get("tokenauth", "").lower() == "true":
            raise fail("sasl.jaas.config", "tokenauth=true (a delegation token) logs in with SCRAM, not PLAIN")
    return ClientSecurity(tls, sasl)
