"""Naming an SSL connection by its client certificate, or refusing it: one rule for every listener.

Kafka names a connection on an SSL listener (without SASL) by its client certificate's subject DN, mapped by that
listener's ``ssl.principal.mapping.rules`` (KIP-371, ``wire.tls_principal``), and refuses a connection whose DN no
rule maps: an authentication failure, like a wrong SASL password. The broker's listeners and the CONTROLLER listener
both call :func:`connection_principal` at a connection's first checked request and remember the answer on the
connection (the certificate cannot change on it), so the refusal and its count
(``fjord_broker_authentication_failures``, mechanism ``SSL``) are the same on both.
"""

from __future__ import annotations

from wire.dispatch import ConnectionClosing, Peer
from wire.metrics import ServerMetrics
from wire.tls_principal import PrincipalMapper, certificate_principal


def connection_principal(peer: Peer, certificate: bytes, mapper: PrincipalMapper, metrics: ServerMetrics) -> str:
    """``User:<name>`` of the connection's DER client certificate; ConnectionClosing (counted as an SSL
    authentication failure on the peer's listener) when it names no principal."""
    try:
        return certificate_principal(certificate, mapper)
    except ValueError as exc:  # PrincipalMappingError, or a certificate that cannot be read
        metrics.authentication_failures.labels(listener=peer.listener, mechanism="SSL").inc()
        raise ConnectionClosing(f"the client certificate of {peer} names no principal: {exc}") from None
