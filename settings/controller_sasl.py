"""SASL on the quorum's CONTROLLER listener: what voters serve there and how every node logs in to it.

With ``CONTROLLER:SASL_PLAINTEXT`` or ``CONTROLLER:SASL_SSL`` in ``listener.security.protocol.map`` (Kafka's keys,
as Kafka reads them for KRaft):

- ``sasl.mechanism.controller.protocol`` picks the mechanism of every node's own controller connections (voter to
  voter for Raft, broker to quorum). Kafka's default is GSSAPI, which Fjord does not implement: it must be PLAIN,
  SCRAM-SHA-256 or SCRAM-SHA-512, and on a voter enabled on the listener
  (``listener.name.<controller>.sasl.enabled.mechanisms``, else ``sasl.enabled.mechanisms``).
- The node's own user is the ``username``/``password`` of ``listener.name.<controller>.<mech>.sasl.jaas.config``
  (else ``sasl.jaas.config``), read as the inter-broker login is (``settings.client_login``).
- A voter serves the listener as a client listener serves SASL (``settings.security.listener_sasl``):
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

from settings.client_login import client_credentials, client_mechanism, require_enabled
from settings.security import SASL_PROTOCOLS, ListenerSasl, listener_sasl
from wire.sasl.client import SaslCredentials

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
    what = "controller"
    mechanism = client_mechanism(
        MECHANISM_KEY, values, listener, protocols[listener], what=what, who="nodes authenticate to the quorum"
    )
    served = listener_sasl(listener, props, values) if serves else None
    if served is not None:
        require_enabled(MECHANISM_KEY, mechanism, listener, served, what=what)
    credentials = client_credentials(listener, mechanism, props, values, what=what)
    return ControllerSasl(listener, credentials, served)
