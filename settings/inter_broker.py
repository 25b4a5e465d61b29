"""How this broker connects to the other brokers: the inter-broker listener, its TLS and its SASL client settings.

Brokers talk to each other for transactions (WriteTxnMarkers, AddPartitionsToTxn ``verify_only``) on the listener
Kafka's keys name: ``inter.broker.listener.name``, or else the listener named after
``security.inter.broker.protocol`` (Kafka forbids setting both); with neither, Fjord takes the first PLAINTEXT
broker listener (else the first broker listener), as it always has. The listener must be one of this node's own
broker listeners (every broker of a cluster serves the same listener names), so its protocol and its ``ssl.*``
settings are this node's:

- SSL / SASL_SSL: the node connects with the listener's ``ssl.*`` keys read as client settings (truststore for
  the peer's certificate, ``ssl.endpoint.identification.algorithm`` for its host name, keystore as the client
  certificate), as ``controller_client_context`` does for the CONTROLLER listener.
- SASL_PLAINTEXT / SASL_SSL: ``sasl.mechanism.inter.broker.protocol`` picks the mechanism (Kafka's default is
  GSSAPI, which Fjord does not implement: it must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, and enabled on the
  listener), and the node's own user is the ``username``/``password`` of
  ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (else ``sasl.jaas.config``), as Kafka's brokers read
  their client login (``settings.client_login``, as for the CONTROLLER listener). The peers then see
  this node as ``User:<username>``, which needs CLUSTER_ACTION when ACLs are on: as in Kafka, that user is
  normally in ``super.users``.

Every error is a ConfigError naming the key to fix, never a password.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from settings.client_login import client_credentials, client_mechanism, require_enabled
from settings.security import SASL_PROTOCOLS, TLS_PROTOCOLS, ListenerSasl, ListenerTls
from storage.config import ConfigError
from wire.sasl.client import SaslCredentials
from wire.tls import ClientTls

MECHANISM_KEY = "sasl.mechanism.inter.broker.protocol"
PROTOCOL_KEY = "security.inter.broker.protocol"
LISTENER_KEY = "inter.broker.listener.name"


@dataclass(frozen=True, slots=True)
class InterBrokerSettings:
    """The listener brokers reach each other on and what this node needs to connect to it."""

    listener: str
    protocol: str
    tls: ListenerTls | None = None
    sasl: SaslCredentials | None = None

    def client_context(self) -> ssl.SSLContext | None:
        """The TLS context of this node's connections to its peers (None: the listener does not speak TLS)."""
        return self.tls.client_context() if self.tls is not None else None

    def client_tls(self) -> ClientTls | None:
        """What those connections connect with, reloaded when the certificate files change
        (:meth:`ListenerTls.client_tls`); None: the listener does not speak TLS."""
        return self.tls.client_tls() if self.tls is not None else None


def inter_broker_listener(
    props: Mapping[str, str], broker_listeners: Sequence[str], protocols: Mapping[str, str]
) -> str | None:
    """The inter-broker listener's name as Kafka's keys give it (None: no broker listener at all)."""
    named = (props.get(LISTENER_KEY) or "").strip()
    by_protocol = (props.get(PROTOCOL_KEY) or "").strip()
    if named and by_protocol:
        raise ConfigError(f"{PROTOCOL_KEY}: only one of {LISTENER_KEY} and {PROTOCOL_KEY} may be set")
    if named or by_protocol:
        name = (named or by_protocol).upper()
        if name not in broker_listeners:
            key = LISTENER_KEY if named else PROTOCOL_KEY
            raise ConfigError(
                f"{key}: the inter-broker listener {name} is not one of this broker's listeners "
                f"({', '.join(broker_listeners) or 'none'})"
            )
        return name
    for name in broker_listeners:
        if protocols.get(name, "PLAINTEXT") == "PLAINTEXT":
            return name
    return broker_listeners[0] if broker_listeners else None


def inter_broker_settings(
    props: Mapping[str, str],
    values: Mapping[str, Any],
    broker_listeners: Sequence[str],
    protocols: Mapping[str, str],
    *,
    tls: Mapping[str, ListenerTls],
    sasl: Mapping[str, ListenerSasl],
) -> InterBrokerSettings | None:
    """Resolves the inter-broker listener and this node's client settings for it; ConfigError naming the key."""
    listener = inter_broker_listener(props, broker_listeners, protocols)
    if listener is None:
        return None
    protocol = protocols.get(listener, "PLAINTEXT")
    if protocol not in SASL_PROTOCOLS:
        return InterBrokerSettings(listener, protocol, tls.get(listener) if protocol in TLS_PROTOCOLS else None)
    what = "inter-broker"
    mechanism = client_mechanism(
        MECHANISM_KEY, values, listener, protocol, what=what, who="brokers authenticate to each other"
    )
    # Every SASL broker listener has its settings, the inter-broker one among them.
    require_enabled(MECHANISM_KEY, mechanism, listener, sasl[listener], what=what)
    return InterBrokerSettings(
        listener,
        protocol,
        tls.get(listener) if protocol in TLS_PROTOCOLS else None,
        client_credentials(listener, mechanism, props, values, what=what),
    )
