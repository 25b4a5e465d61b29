"""Who calls the CONTROLLER listener, and whether it may, once an authorizer is configured.

Kafka's controller asks CLUSTER_ACTION on the cluster of the nodes that call it (Raft's Vote, BeginQuorumEpoch and
Fetch, broker registration and heartbeats, producer id blocks), through its StandardAuthorizer, where a super user may
do everything. The caller's principal there is the one every Kafka listener names: the SASL principal on a SASL
listener; else, on an SSL listener, the client certificate's subject DN mapped by that listener's
``ssl.principal.mapping.rules`` (KIP-371, ``wire.tls_principal``, the mapping the broker's listeners use too); else
``User:ANONYMOUS``. That is why Kafka's documentation tells a cluster with a PLAINTEXT CONTROLLER listener and an
authorizer to make ``User:ANONYMOUS`` a super user, and a TLS quorum to make its nodes' certificate principals super
users.

Fjord's own stream RPCs are node-to-controller calls of the same kind, and DescribeMetadata hands out the whole
metadata (SCRAM credentials and ACLs among it), so one right covers every request on the listener (Fjord's brokers
send DescribeQuorum and DescribeCluster there themselves): CLUSTER_ACTION on the cluster resource, decided by
StandardAuthorizer's rules (``controller.acl.authorizer``) against the voter's own metadata image. A super user
passes; anyone else needs an ACL granting it, or ``allow.everyone.if.no.acl.found`` with no ACL on the cluster
resource, as in Kafka. Kafka also refuses every non-super user until its authorizer has loaded the metadata; here
a voter decides from what it has replayed.

A refused caller, or a certificate no rule maps, has its connection closed (``ConnectionClosing``; the listener logs
one line naming the peer and listener, and the message names the principal). ApiVersions and the SASL exchange come
before the check (the dispatcher decides which requests those are).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from controller.acl.authorizer import Authorizer, AuthorizerSettings
from controller.acl.binding import CLUSTER_NAME, AclBinding, AclOperation, ResourceType
from controller.rpc.sasl import SaslGate
from wire.listener import ConnectionClosing, Peer
from wire.tls_principal import PrincipalMapper, certificate_principal

#: The principal of a connection that neither authenticated with SASL nor presented a client certificate.
ANONYMOUS: Final = "User:ANONYMOUS"


class CertificateConnection:
    """One SSL connection's principal, mapped from its client certificate at its first checked request (once: the
    certificate cannot change on a connection, and Raft's Fetch requests arrive often)."""

    __slots__ = ("principal",)

    def __init__(self) -> None:
        self.principal: str | None = None


class ControllerAuthorizer:
    """The CONTROLLER listener's check of each request's caller. ``bindings()`` returns the ACL bindings of the
    voter's current metadata image (read at each check); ``mapper``: the listener's ``ssl.principal.mapping.rules``
    when it serves TLS; ``sasl``: its SASL gate when it is SASL_PLAINTEXT or SASL_SSL."""

    def __init__(
        self,
        settings: AuthorizerSettings,
        bindings: Callable[[], Mapping[str, AclBinding]],
        *,
        mapper: PrincipalMapper | None = None,
        sasl: SaslGate | None = None,
    ) -> None:
        self._authorizer = Authorizer(settings)
        self._bindings = bindings
        self._mapper = mapper
        self._sasl = sasl

    def principal(self, peer: Peer, what: str) -> str:
        """The caller's principal; ConnectionClosing when its client certificate names none (``what``: the request,
        for the message)."""
        if self._sasl is not None:
            session = self._sasl.session(peer)
            return session.principal if session is not None and session.principal else ANONYMOUS
        if peer.certificate is None or self._mapper is None:
            return ANONYMOUS
        state = peer.state
        if isinstance(state, CertificateConnection) and state.principal is not None:
            return state.principal
        try:
            principal = certificate_principal(peer.certificate, self._mapper)
        except ValueError as exc:  # PrincipalMappingError, or a certificate that cannot be read
            raise ConnectionClosing(
                f"{what} from {peer} is refused: its client certificate names no principal: {exc}"
            ) from None
        if isinstance(state, CertificateConnection):
            state.principal = principal
        return principal

    def check(self, peer: Peer, what: str) -> None:
        """ConnectionClosing naming the principal unless the caller may CLUSTER_ACTION on the cluster."""
        principal = self.principal(peer, what)
        if self._authorizer.authorize(
            self._bindings(),
            principal,
            peer.host,
            AclOperation.CLUSTER_ACTION,
            resource=ResourceType.CLUSTER,
            name=CLUSTER_NAME,
        ):
            return
        raise ConnectionClosing(
            f"{what} from {peer} is refused: {principal} is not a super user and is not granted CLUSTER_ACTION on "
            "the cluster, which the CONTROLLER listener asks of every caller when an authorizer is configured"
        )
