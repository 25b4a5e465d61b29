"""A node's security settings: what Fjord serves (TLS and SASL on client listeners) and what stops it at start.

Fjord serves PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL client listeners, SASL with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512, and ACLs with Kafka's StandardAuthorizer (``authorizer.class.name``, ``super.users``,
``allow.everyone.if.no.acl.found``; :data:`STANDARD_AUTHORIZER`), and client quotas (set with AlterClientQuotas;
the only quota keys read are :data:`QUOTA_KEYS`). Other authorizers, other quota keys, other SASL mechanisms
(GSSAPI, OAUTHBEARER) are not implemented; a setting
for them must never be ignored silently (a "SASL_SSL" listener served as plaintext is worse than no listener),
so :func:`refusal` names every such key and :class:`~settings.server.ServerConfig` stops the node with
one line naming it. Messages name keys, never
values: a ``sasl.jaas.config`` or a key password must not reach a terminal or a log. Two such keys accept the one
value that is what Fjord does, Kafka's default: ``sasl.server.max.receive.size=524288`` (the limit on what an
unauthenticated peer may send, :data:`wire.sasl.MAX_TOKEN_BYTES`) and ``principal.builder.class`` set to
:data:`DEFAULT_PRINCIPAL_BUILDER` (a SASL user, else a mapped certificate, else ANONYMOUS).

SASL settings are Kafka's: ``sasl.enabled.mechanisms`` (default GSSAPI, which Fjord refuses, so a SASL listener
needs it set, as with Kafka when GSSAPI is not configured) and the PLAIN users of a JAAS config,
``listener.name.<name>.plain.sasl.jaas.config`` or ``sasl.jaas.config``, each overridable per listener;
:func:`listener_sasl` resolves them into a :class:`ListenerSasl`. SCRAM credentials are not configuration: they are
metadata records (AlterUserScramCredentials). How a broker connects to the others (the inter-broker listener,
``sasl.mechanism.inter.broker.protocol`` and its own JAAS user) is :mod:`settings.inter_broker`'s.

TLS settings are Kafka's ``ssl.*`` keys of the catalogue (:mod:`settings.keys`), each overridable per
listener as ``listener.name.<name>.ssl.*`` (``ssl.protocol``, the JVM's SSLContext name, takes Kafka's TLSv1.2, TLSv1.3
and TLS and changes nothing: as on Kafka's listeners, the versions are ``ssl.enabled.protocols``');
:func:`listener_tls` resolves them for one listener into the plain
:class:`~wire.tls.TlsSettings` that :mod:`wire.tls` turns into an :class:`ssl.SSLContext`, the parsed
``ssl.principal.mapping.rules`` (:mod:`wire.tls_principal`; bad rules stop the node naming the key) and how often
the listener's files are checked for new certificates (``ssl.reload.interval.ms``, :mod:`wire.tls_reload`). The
CONTROLLER listener may be SSL too (``listener.security.protocol.map`` CONTROLLER:SSL): voters serve it with its
``ssl.*`` keys, and every node connects to it with the same keys read as client settings (its truststore checks
the controller's certificate and host name, its keystore is the client certificate), as Kafka reads
``listener.name.controller.ssl.*`` for a node's own controller connections. It may be SASL_PLAINTEXT or SASL_SSL
too: :mod:`settings.controller_sasl`.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from settings.config_key import ConfigValueError
from settings.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, JaasEntry, JaasError, parse_jaas
from settings.keys import BROKER_KEYS
from storage.config import ConfigError
from wire.sasl import MAX_TOKEN_BYTES
from wire.tls import ClientTls, TlsError, TlsSettings, client_context, server_context
from wire.tls_principal import PrincipalMapper, PrincipalRulesError, parse_rules
from wire.tls_reload import ReloadingClientContext

#: The security protocols Kafka knows; Fjord's client listeners serve all four.
KNOWN_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Listeners of these protocols speak TLS, and of these SASL.
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
#: The SASL mechanisms Fjord serves, and the sasl.* keys it reads (every other one is refused).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_KEYS = frozenset(
    (
        "sasl.enabled.mechanisms",
        "sasl.jaas.config",
        "sasl.mechanism.inter.broker.protocol",
        "sasl.mechanism.controller.protocol",
    )
)
#: The per-listener SASL keys Fjord reads, after ``listener.name.<name>.``.
_LISTENER_SASL_KEYS = frozenset(
    ("sasl.enabled.mechanisms", *(f"{mechanism.lower()}.sasl.jaas.config" for mechanism in SASL_MECHANISMS))
)
#: The ssl.* keys Fjord reads (every other ssl.* key is refused).
SSL_KEYS = frozenset(name for name in BROKER_KEYS if name.startswith("ssl."))
LISTENER_PREFIX = "listener.name."

_SASL = (f"not implemented (Fjord's SASL serves {', '.join(SASL_MECHANISMS)} and reads "
         f"{', '.join(sorted(SASL_KEYS))} and listener.name.<name>.{{sasl.enabled.mechanisms,"
         f"<mechanism>.sasl.jaas.config}})")
#: The one authorizer Fjord implements (ACLs in controller metadata, ``metadata.acl``), as Kafka operators name it.
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_AUTHORIZER = f"only {STANDARD_AUTHORIZER} is implemented (or leave it empty: no authorization)"
#: Kafka's default principal builder, which is what Fjord does (SASL user, else mapped certificate, else ANONYMOUS).
DEFAULT_PRINCIPAL_BUILDER = "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"
_PRINCIPAL_BUILDER = (
    f"custom principal builders are not implemented (only {DEFAULT_PRINCIPAL_BUILDER}, Kafka's default)"
)
#: sasl.server.max.receive.size: the one value accepted is the limit Fjord enforces, Kafka's default.
_SASL_MAX_RECEIVE = "sasl.server.max.receive.size"
_SASL_MAX_RECEIVE_REASON = f"not configurable: an unauthenticated SASL peer may send at most {MAX_TOKEN_BYTES} bytes"
_QUOTA = ("only client quotas are implemented (set with AlterClientQuotas, kafka-configs.sh); of the quota keys "
          "Fjord reads quota.window.num and quota.window.size.seconds")
#: The quota keys Fjord reads (``broker.quotas``); every other one (replication quotas, quota callbacks, the
#: long-removed ``quota.producer.default``) stops the node.
QUOTA_KEYS = frozenset({"quota.window.num", "quota.window.size.seconds"})
_SSL = f"not implemented (Fjord's TLS reads {', '.join(sorted(SSL_KEYS))})"
#: TlsSettings field -> the ssl.* key that sets it.
_FIELD_KEYS = {
    "keystore_location": "ssl.keystore.location",
    "keystore_key": "ssl.keystore.key",
    "keystore_certificate_chain": "ssl.keystore.certificate.chain",
    "key_password": "ssl.key.password",
    "truststore_location": "ssl.truststore.location",
    "truststore_certificates": "ssl.truststore.certificates",
    "client_auth": "ssl.client.auth",
    "enabled_protocols": "ssl.enabled.protocols",
    "cipher_suites": "ssl.cipher.suites",
    "check_hostname": "ssl.endpoint.identification.algorithm",
}


def refusal(name: str, value: str) -> str | None:
    """Why the key ``name`` stops the node (a security feature Fjord does not implement), or None."""
    lower = name.lower()
    if lower.startswith(LISTENER_PREFIX):
        split = listener_prefixed(lower)
        if split is None:
            return None
        rest = split[1]
        if rest.startswith("sasl.") or ".sasl." in rest:  # listener.name.x.plain.sasl.jaas.config
            return None if rest in _LISTENER_SASL_KEYS else _SASL
        return refusal(rest, value)
    if lower == _SASL_MAX_RECEIVE:
        return None if value.strip() == str(MAX_TOKEN_BYTES) else _SASL_MAX_RECEIVE_REASON
    if lower.startswith("sasl.") and lower not in SASL_KEYS:
        return _SASL
    if lower.startswith("ssl.") and lower not in SSL_KEYS:
        return _SSL
    if lower == "authorizer.class.name" and value.strip() not in ("", STANDARD_AUTHORIZER):
        return _AUTHORIZER
    if lower == "principal.builder.class" and value.strip() not in ("", DEFAULT_PRINCIPAL_BUILDER):
        return _PRINCIPAL_BUILDER
    if "quota" in lower.split(".") and lower not in QUOTA_KEYS:
        return _QUOTA
    if lower == "security.inter.broker.protocol" and value.strip().upper() not in KNOWN_PROTOCOLS:
        return f"unknown security protocol (one of {', '.join(KNOWN_PROTOCOLS)})"
    return None


def refuse_unimplemented(props: Mapping[str, str]) -> None:
    """ConfigError naming the first key (in file order) of a security feature Fjord does not implement."""
    for name, value in props.items():
        reason = refusal(name, value)
        if reason is not None:
            raise ConfigError(f"{name}: {reason}")


def listener_prefixed(name: str) -> tuple[str, str] | None:
    """(listener name upper-cased, the rest) of a ``listener.name.<listener>.<rest>`` key, else None: the one split
    of Kafka's per-listener keys (SSL, SASL, connection quotas)."""
    if not name.lower().startswith(LISTENER_PREFIX):
        return None
    listener, dot, rest = name[len(LISTENER_PREFIX):].partition(".")
    return (listener.upper(), rest) if dot and listener and rest else None


def listener_override(name: str) -> tuple[str, str] | None:
    """(listener name, ssl key) of a ``listener.name.<name>.ssl.*`` key Fjord reads, else None."""
    split = listener_prefixed(name)
    return split if split is not None and split[1] in SSL_KEYS else None


def sasl_listener_override(name: str) -> tuple[str, str] | None:
    """(listener name, key) of a ``listener.name.<name>.`` SASL key Fjord reads, else None."""
    split = listener_prefixed(name)
    return (split[0], split[1].lower()) if split is not None and split[1].lower() in _LISTENER_SASL_KEYS else None


def check_listener_protocols(
    listener_names: tuple[str, ...], protocols: Mapping[str, str], controller_names: tuple[str, ...]
) -> None:
    """Every listener's protocol is known and served, controller listeners (this node's or the quorum's it talks
    to) included: SASL there is ``settings.controller_sasl``'s."""
    key = "listener.security.protocol.map"
    for name in listener_names:
        protocol = protocols[name]
        if protocol not in KNOWN_PROTOCOLS:
            raise ConfigError(f"{key}: listener {name} has unknown security protocol {protocol} "
                              f"(one of {', '.join(KNOWN_PROTOCOLS)})")
    for name in controller_names:
        if protocols.get(name, "PLAINTEXT") not in KNOWN_PROTOCOLS:
            raise ConfigError(f"{key}: controller listener {name} has unknown security protocol {protocols[name]} "
                              f"(one of {', '.join(KNOWN_PROTOCOLS)})")


@dataclass(frozen=True, slots=True)
class ListenerTls:
    """One SSL listener's TLS settings, with the key each came from (the listener's override or the global key),
    so that an error names the key the operator has to fix."""

    listener: str
    settings: TlsSettings
    keys: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: ``ssl.principal.mapping.rules``: the principal of a client certificate (KIP-371).
    principal_mapper: PrincipalMapper = field(default_factory=lambda: parse_rules(None))
    #: ``ssl.reload.interval.ms``: how often the key and CA files are checked for changes (0: never).
    reload_interval_ms: int = 0

    def context(self) -> ssl.SSLContext:
        """The listener's server context; ConfigError naming the key at fault (never its value)."""
        try:
            return server_context(self.settings)
        except TlsError as exc:
            raise self._error(exc) from None

    def client_context(self) -> ssl.SSLContext:
        """The context of this node's own connections to the listener (the CONTROLLER listener of the quorum, or
        the inter-broker listener of its peers): the same keys, read as Kafka reads a node's client settings;
        ConfigError naming the key at fault."""
        try:
            return client_context(self.settings)
        except TlsError as exc:
            raise self._error(exc) from None

    def client_tls(self) -> ClientTls:
        """What this node's own connections to the listener connect with: with ``ssl.reload.interval.ms`` set, a
        callable that rebuilds :meth:`client_context` when the watched files changed, so a renewed certificate
        reaches the next (re)connection as it reaches the listener's new connections; else the one context."""
        files = self.watched_files()
        if self.reload_interval_ms > 0 and files:
            return ReloadingClientContext(f"connections to listener {self.listener}", files, self.client_context)
        return self.client_context()

    def _error(self, exc: TlsError) -> ConfigError:
        key = self.keys.get(exc.setting, _FIELD_KEYS.get(exc.setting, "ssl"))
        return ConfigError(f"{key}: {exc} (listener {self.listener})")

    def watched_files(self) -> tuple[str, ...]:
        """The files the listener's TLS is read from (its keystore and truststore locations), to reload on change."""
        return tuple(path for path in (self.settings.keystore_location, self.settings.truststore_location) if path)


def listener_tls(listener: str, props: Mapping[str, str], values: Mapping[str, Any]) -> ListenerTls:
    """Resolves the ssl.* settings of ``listener``: ``listener.name.<listener>.ssl.*`` first, then ``ssl.*``.
    Kafka spells the listener lower-case in these keys; any case is accepted."""
    overrides: dict[str, tuple[str, str]] = {}  # ssl key -> (the override's name, its text)
    for name, given in props.items():
        parsed = listener_override(name)
        if parsed is not None and parsed[0] == listener:
            overrides[parsed[1]] = (name, given)
    chosen: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in SSL_KEYS:
        if key in overrides:
            name, given = overrides[key]
            try:
                chosen[key] = replace(BROKER_KEYS[key], name=name).parse(given)
            except ConfigValueError as exc:
                raise ConfigError(str(exc)) from None
            sources[key] = name
        else:
            chosen[key] = values[key]
            sources[key] = key

    def text(key: str) -> str | None:
        value = chosen[key]
        return None if value is None or not str(value).strip() else str(value)

    settings = TlsSettings(
        keystore_location=text("ssl.keystore.location"),
        keystore_key=text("ssl.keystore.key"),
        keystore_certificate_chain=text("ssl.keystore.certificate.chain"),
        key_password=chosen["ssl.key.password"] or None,
        truststore_location=text("ssl.truststore.location"),
        truststore_certificates=text("ssl.truststore.certificates"),
        client_auth=str(chosen["ssl.client.auth"]),
        enabled_protocols=tuple(chosen["ssl.enabled.protocols"]),
        cipher_suites=tuple(chosen["ssl.cipher.suites"]),
        check_hostname=str(chosen["ssl.endpoint.identification.algorithm"]).lower() == "https",
    )
    keys = {setting: sources[key] for setting, key in _FIELD_KEYS.items()}
    try:
        mapper = parse_rules(text("ssl.principal.mapping.rules"))
    except PrincipalRulesError as exc:
        raise ConfigError(f"{sources['ssl.principal.mapping.rules']}: {exc} (listener {listener})") from None
    return ListenerTls(listener, settings, MappingProxyType(keys), mapper, int(chosen["ssl.reload.interval.ms"]))


@dataclass(frozen=True, slots=True)
class ListenerSasl:
    """One SASL listener's mechanisms and PLAIN users (from its JAAS config), with the key each came from."""

    listener: str
    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)


def _listener_value(listener: str, key: str, props: Mapping[str, str]) -> tuple[str, str] | None:
    """(the key's name as given, its text) of ``listener.name.<listener>.<key>`` in any case, else None."""
    for name, given in props.items():
        parsed = sasl_listener_override(name)
        if parsed == (listener, key):
            return name, given
    return None


def jaas_entry(
    listener: str, mechanism: str, props: Mapping[str, str], values: Mapping[str, Any]
) -> tuple[str, JaasEntry] | None:
    """(the key it came from, the parsed entry) of the JAAS config for ``mechanism`` on ``listener``:
    ``listener.name.<listener>.<mechanism>.sasl.jaas.config``, else ``sasl.jaas.config`` when it names the
    mechanism's login module (the global config serves the mechanism whose module it names); None: neither.
    One reading for the listener's own users (:func:`listener_sasl`) and this node's inter-broker login, so both
    take the same key. ConfigError naming the key for a malformed config or a wrong login module."""
    module = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    given = _listener_value(listener, f"{mechanism.lower()}.sasl.jaas.config", props)
    if given is None and values.get("sasl.jaas.config"):
        given = "sasl.jaas.config", str(values["sasl.jaas.config"])
    if given is None:
        return None
    name, text = given
    try:
        entry = parse_jaas(text)
    except JaasError as exc:
        raise ConfigError(f"{name}: malformed JAAS config: {exc}") from None
    if entry.login_module not in (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE):
        raise ConfigError(f"{name}: the login module must be {PLAIN_LOGIN_MODULE} or {SCRAM_LOGIN_MODULE}")
    if entry.login_module != module:
        if name == "sasl.jaas.config":
            return None
        raise ConfigError(f"{name}: the login module for {mechanism} must be {module}")
    return name, entry


def listener_sasl(listener: str, props: Mapping[str, str], values: Mapping[str, Any]) -> ListenerSasl:
    """Resolves the SASL settings of ``listener``: ``listener.name.<listener>.*`` first, then the global keys.
    ConfigError naming the key for a mechanism Fjord does not serve (GSSAPI is Kafka's default), a PLAIN listener
    without users, or a malformed JAAS config (never its text)."""
    given = _listener_value(listener, "sasl.enabled.mechanisms", props)
    if given is not None:
        key = given[0]
        mechanisms = [item.strip() for item in given[1].split(",") if item.strip()]
    else:
        key = "sasl.enabled.mechanisms"
        mechanisms = list(values[key])
    if not mechanisms:
        raise ConfigError(f"{key}: no SASL mechanism enabled for listener {listener}")
    for mechanism in mechanisms:
        if mechanism.upper() not in SASL_MECHANISMS:
            raise ConfigError(f"{key}: mechanism {mechanism} is not implemented on listener {listener} "
                              f"(Fjord serves {', '.join(SASL_MECHANISMS)}; Kafka's default is GSSAPI)")
    enabled = tuple(dict.fromkeys(m.upper() for m in mechanisms))
    users: dict[str, str] = {}
    # Every JAAS config given is parsed, for an enabled mechanism or not: a malformed one never passes unnoticed.
    for mechanism in SASL_MECHANISMS:
        found = jaas_entry(listener, mechanism, props, values)
        if found is None:
            continue
        name, entry = found
        if mechanism == "PLAIN" and mechanism in enabled:
            users = entry.users()
            if not users:
                raise ConfigError(f"{name}: no user_<name>=\"<password>\" option, so no user can authenticate with "
                                  f"PLAIN on listener {listener}")
    if "PLAIN" in enabled and not users:
        raise ConfigError(f"listener.name.{listener.lower()}.plain.sasl.jaas.config: listener {listener} enables "
                          f"PLAIN but no JAAS config ({PLAIN_LOGIN_MODULE} with user_<name> options) gives its users")
    return ListenerSasl(listener, enabled, MappingProxyType(users))
