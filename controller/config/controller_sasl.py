"""SASL on the quorum's CONTROLLER listener: what voters serve there and how every node logs in to it.

With ``CONTROLLER:SASL_PLAINTEXT`` or ``CONTROLLER:SASL_SSL`` in ``listener.security.protocol.map`` (Kafka's keys,
as Kafka reads them for KRaft):

- ``sasl.mechanism.controller.protocol`` picks the mechanism of every node's own controller connections (voter to
  voter for Raft, broker to quorum). Kafka's default is GSSAPI, which Fjord does not implement: it must be PLAIN,
  SCRAM-SHA-256 or SCRAM-SHA-512, and on a voter enabled on the listener
  (``listener.name.<controller>.sasl.enabled.mechanisms``, else ``sasl.enabled.mechanisms``).
- The node's own user is the ``username``/``password`` of ``listener.name.<controller>.<mech>.sasl.jaas.config``
  (else ``sasl.jaas.config``), read by the same helper as the inter-broker login.
- A voter serves the listener as a client listener serves SASL (``controller.config.security.listener_sasl``):
  PLAIN users are the JAAS config's ``user_<name>`` entries, SCRAM credentials the quorum's own metadata.

The bootstrap problem is Kafka's too: SCRAM credentials are metadata records, so a fresh quorum has none. Kafka
seeds them with ``kafka-storage format --add-scram``; Fjord's ``--add-scram`` (a broker's option) and
AlterUserScramCredentials both go through a running quorum, so voters logging in to each other with SCRAM could
not even elect. PLAIN users come from the configuration and work from the first start: use PLAIN on the
CONTROLLER listener, or switch to SCRAM once its users exist in the metadata.

Every error is a ConfigError naming the key to fix, never a password.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controller.config.inter_broker import client_credentials
from controller.config.security import SASL_PROTOCOLS, ListenerSasl, listener_sasl
from storage.config import ConfigError
from wire.sasl.client import CLIENT_MECHANISMS, SaslCredentials

MECHANISM_KEY = "sasl.mechanism.controller.protocol"


@dataclass(frozen=True, slots=True)
class ControllerSasl:
    """The CONTROLLER listener's SASL: this node's own login, and what it serves when it is a voter."""

    listener: str
    credentials: SaslCredentials
    #: The mechanisms and PLAIN users a voter serves; None on a broker-only node (it only connects).
    served: ListenerSasl | None = None


def controller_sasl(
    listener: str | None,
    protocols: Mapping[str, str],
    props: Mapping[str, str],
    values: Mapping[str, Any],
    *,
    serves: bool,
) -> ControllerSasl | None:
    """The SASL settings of the quorum's CONTROLLER ``listener`` (None: it is not SASL); ``serves``: this node is a
    voter serving it. ConfigError naming the key at fault."""
    if listener is None or protocols.get(listener) not in SASL_PROTOCOLS:
        return None
    protocol = protocols[listener]
    mechanism = (str(values.get(MECHANISM_KEY) or "").strip() or "GSSAPI").upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise ConfigError(
            f"{MECHANISM_KEY}: the controller listener {listener} is {protocol}, so nodes authenticate to the "
            f"quorum with {', '.join(CLIENT_MECHANISMS)}; {mechanism} is not implemented (Kafka's default is "
            "GSSAPI: set this key)"
        )
    served = listener_sasl(listener, props, values) if serves else None
    if served is not None and mechanism not in served.mechanisms:
        raise ConfigError(
            f"{MECHANISM_KEY}: {mechanism} is not enabled on the controller listener {listener} "
            f"(enabled: {', '.join(served.mechanisms)})"
        )
    credentials = client_credentials(listener, mechanism, props, values, what="controller")
    return ControllerSasl(listener, credentials, served)
