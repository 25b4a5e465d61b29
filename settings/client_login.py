"""This node's own SASL login as a client of a SASL listener: the inter-broker listener
(``settings.inter_broker``) and the quorum's CONTROLLER listener (``settings.controller_sasl``).

Kafka reads both the same way, so they share one reading here: a key (``sasl.mechanism.inter.broker.protocol``,
``sasl.mechanism.controller.protocol``) picks the mechanism, whose default GSSAPI Fjord does not implement, and the
node's user is the ``username``/``password`` of ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (else
``sasl.jaas.config``). ``what`` names the listener's role in every message ("inter-broker", "controller").

Every error is a ConfigError naming the key to fix, never a password.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from settings.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE
from settings.security import ListenerSasl, jaas_entry
from storage.config import ConfigError
from wire.sasl.client import CLIENT_MECHANISMS, SaslCredentials


def client_mechanism(key: str, values: Mapping[str, Any], listener: str, protocol: str, *, what: str, who: str) -> str:
    """The mechanism ``key`` gives for this node's connections to the ``what`` ``listener`` (a SASL ``protocol``);
    ConfigError for GSSAPI (Kafka's default) or any other one Fjord's client does not speak. ``who``: who
    authenticates to whom, as the message says it ("brokers authenticate to each other")."""
    mechanism = (str(values.get(key) or "").strip() or "GSSAPI").upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise ConfigError(
            f"{key}: the {what} listener {listener} is {protocol}, so {who} with {', '.join(CLIENT_MECHANISMS)}; "
            f"{mechanism} is not implemented (Kafka's default is GSSAPI: set this key)"
        )
    return mechanism


def require_enabled(key: str, mechanism: str, listener: str, served: ListenerSasl, *, what: str) -> None:
    """ConfigError when the listener this node serves does not enable the mechanism it logs in to it with: every
    node of the cluster serves the same listener, so its peers would refuse it."""
    if mechanism not in served.mechanisms:
        raise ConfigError(
            f"{key}: {mechanism} is not enabled on the {what} listener {listener} "
            f"(enabled: {', '.join(served.mechanisms)})"
        )


def client_credentials(
    listener: str, mechanism: str, props: Mapping[str, str], values: Mapping[str, Any], *, what: str
) -> SaslCredentials:
    """This node's own SASL login on the ``what`` ``listener``: username and password of its JAAS config;
    ConfigError naming the key."""
    who = "broker" if what == "inter-broker" else "node"
    found = jaas_entry(listener, mechanism, props, values)
    if found is None:
        module = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
        raise ConfigError(
            f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config: the {what} listener "
            f'{listener} uses SASL {mechanism}, so this {who} needs its own user as username="..." '
            f'password="..." of {module}'
        )
    name, entry = found
    credentials = entry.login(mechanism)
    if credentials is None:
        raise ConfigError(
            f"{name}: the {what} listener {listener} uses SASL {mechanism}, so this JAAS config "
            f"needs this {who}'s own username and password options"
        )
    return credentials
