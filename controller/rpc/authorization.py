"""Who calls the CONTROLLER listener, and what each caller may ask of it, once an authorizer is configured.

The caller's principal is the one every Kafka listener names: the SASL principal on a SASL listener; else, on an
SSL listener, the client certificate's subject DN mapped by that listener's ``ssl.principal.mapping.rules``
(KIP-371, ``wire.certificate_auth``, the mapping the broker's listeners use too); else ``User:ANONYMOUS``.

Each request asks one right, decided by StandardAuthorizer's rules (``metadata.acl.authorizer``) against the
voter's own metadata image, as Kafka's ControllerApis asks it of each API (:func:`kafka_operation`,
:func:`stream_operation`):

- CLUSTER_ACTION on the cluster: Raft (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot), broker
  registration and heartbeats, producer id blocks, and Fjord's stream RPCs (node-to-controller calls of the same
  kind);
- DESCRIBE on the cluster: DescribeQuorum; ALTER on the cluster: DescribeCluster (Kafka's controller asks that
  much, as its list of controllers is for operators), UnregisterBroker, ElectLeaders, AlterPartitionReassignments,
  AlterUserScramCredentials, CreateAcls and DeleteAcls; ALTER_CONFIGS on the cluster: AlterClientQuotas;
- a super user only: DescribeMetadata, Fjord's dump of the whole metadata with SCRAM credentials and ACLs (Kafka has
  no such API).

CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs and IncrementalAlterConfigs are decided item by item, as
Kafka's controller does (:meth:`ControllerAuthorizer.item_check`, the rights in ``controller.rpc.item_authorization``):
CREATE or DELETE on the cluster grants every topic of CreateTopics or DeleteTopics at once; otherwise each topic
asks its own right and a refused one is answered TOPIC_AUTHORIZATION_FAILED (a BROKER or BROKER_LOGGER config
resource asks ALTER_CONFIGS on the cluster, refused CLUSTER_AUTHORIZATION_FAILED) while the others proceed. A topic
CreateTopics creates is answered with its settings only if the caller may DESCRIBE_CONFIGS it (asked quietly,
:meth:`ControllerAuthorizer.quiet_check`: it refuses nothing).

So a principal granted CLUSTER_ACTION reaches what a node needs and no admin API: it cannot CreateAcls and grant
itself more. A super user passes everything; anyone else needs an ACL granting the right, or
``allow.everyone.if.no.acl.found`` with no ACL on the cluster resource.

As Kafka's StandardAuthorizer, a voter refuses every non-super user until its initial load is complete
(``ready()``: the voter has applied the metadata up to the commit offset it learned from the quorum), since a
restarted voter serves from its snapshot until then and could otherwise grant what a newer ACL denies. That is
also why the nodes' own principals (the voters' and brokers' SASL users or certificates, or ``User:ANONYMOUS`` on
a PLAINTEXT CONTROLLER listener) must be super users, not merely granted CLUSTER_ACTION: after a full restart no
voter is ready until a leader is elected, and the election itself needs Vote requests to pass.

A refused Kafka request is answered CLUSTER_AUTHORIZATION_FAILED (the connection stays open, as in Kafka); a
refused stream RPC, which has no error field a node would read as a refusal, has its connection closed
(``ConnectionClosing``; the listener logs one line naming the peer and listener, the message names the principal),
as does a certificate no rule maps (counted as a failed SSL authentication). Refusals are counted
(``fjord_broker_authorization_denials``, operation ``SUPER_USER`` where only a super user may) and logged once per
principal and request kind, a refused item once per principal, operation and resource (``metadata.acl.denials``,
as the broker's listeners do). ApiVersions and the SASL exchange come before the check (the dispatcher decides
which requests those are).

The check needs the request's header only, and comes before its body is decoded: a refused request is answered
from its header, so a caller without the right cannot make the controller decode a body (a huge or deeply nested
one, say) it may not send. The admin APIs answer each item of a refused request, which needs the body; it is read
only up to the size a client may send before authenticating (:func:`refused_request`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Final

from controller.rpc.item_authorization import Allowed
from controller.rpc.sasl import SaslGate
from metadata.acl.authorizer import Authorizer, AuthorizerSettings
from metadata.acl.binding import ANONYMOUS, CLUSTER_NAME, AclBinding, AclOperation, ResourceType
from metadata.acl.denials import DenialLog
from metadata.rpc.kafka_apis import (
    ADD_RAFT_VOTER,
    ALLOCATE_PRODUCER_IDS,
    ALTER_CLIENT_QUOTAS,
    ALTER_CONFIGS,
    ALTER_PARTITION_REASSIGNMENTS,
    ALTER_USER_SCRAM_CREDENTIALS,
    BEGIN_QUORUM_EPOCH,
    BROKER_HEARTBEAT,
    BROKER_REGISTRATION,
    CREATE_ACLS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_ACLS,
    DELETE_TOPICS,
    DESCRIBE_CLUSTER,
    DESCRIBE_QUORUM,
    ELECT_LEADERS,
    END_QUORUM_EPOCH,
    FETCH,
    FETCH_SNAPSHOT,
    INCREMENTAL_ALTER_CONFIGS,
    REMOVE_RAFT_VOTER,
    UNREGISTER_BROKER,
    UPDATE_FEATURES,
    UPDATE_RAFT_VOTER,
    VOTE,
)
from metadata.rpc.stream_rpcs import DescribeMetadata, StreamRequest
from wire import codec
from wire.api_versions import api_name
from wire.certificate_auth import connection_principal
from wire.dispatch import ConnectionClosing, Peer
from wire.log_text import LOG_TEXT_MAX, untrusted
from wire.metrics import ServerMetrics
from wire.sasl import MAX_TOKEN_BYTES
from wire.tls_principal import PrincipalMapper

logger = logging.getLogger(__name__)

#: What Kafka's controller asks on the cluster resource for each API it serves here; absent: super users only.
_KAFKA_OPERATIONS: Final[Mapping[int, AclOperation]] = {
    VOTE: AclOperation.CLUSTER_ACTION,
    BEGIN_QUORUM_EPOCH: AclOperation.CLUSTER_ACTION,
    END_QUORUM_EPOCH: AclOperation.CLUSTER_ACTION,
    FETCH: AclOperation.CLUSTER_ACTION,
    FETCH_SNAPSHOT: AclOperation.CLUSTER_ACTION,
    BROKER_REGISTRATION: AclOperation.CLUSTER_ACTION,
    BROKER_HEARTBEAT: AclOperation.CLUSTER_ACTION,
    ALLOCATE_PRODUCER_IDS: AclOperation.CLUSTER_ACTION,
    DESCRIBE_QUORUM: AclOperation.DESCRIBE,
    DESCRIBE_CLUSTER: AclOperation.ALTER,
    UNREGISTER_BROKER: AclOperation.ALTER,
    ELECT_LEADERS: AclOperation.ALTER,
    ALTER_PARTITION_REASSIGNMENTS: AclOperation.ALTER,
    ALTER_USER_SCRAM_CREDENTIALS: AclOperation.ALTER,
    CREATE_ACLS: AclOperation.ALTER,
    DELETE_ACLS: AclOperation.ALTER,
    ALTER_CLIENT_QUOTAS: AclOperation.ALTER_CONFIGS,
    UPDATE_FEATURES: AclOperation.ALTER,
    ADD_RAFT_VOTER: AclOperation.ALTER,
    REMOVE_RAFT_VOTER: AclOperation.ALTER,
    UPDATE_RAFT_VOTER: AclOperation.CLUSTER_ACTION,  # a voter announcing its own listener, as Kafka checks it
}
#: The admin APIs decided item by item (``controller.rpc.item_authorization``), with the right on the cluster that
#: grants every item at once (None: none does).
_PER_ITEM: Final[Mapping[int, AclOperation | None]] = {
    CREATE_TOPICS: AclOperation.CREATE,
    DELETE_TOPICS: AclOperation.DELETE,
    CREATE_PARTITIONS: None,
    ALTER_CONFIGS: None,
    INCREMENTAL_ALTER_CONFIGS: None,
}
PER_ITEM_APIS: Final = frozenset(_PER_ITEM)


def kafka_operation(api_key: int) -> AclOperation | None:
    """The right a Kafka request asks on the cluster; None: only a super user may send it (or, for
    :data:`PER_ITEM_APIS`, it is decided item by item instead)."""
    return _KAFKA_OPERATIONS.get(api_key)


def stream_operation(request: type[StreamRequest]) -> AclOperation | None:
    """The right a stream RPC asks on the cluster; None (DescribeMetadata, the whole metadata): super users only."""
    return None if request is DescribeMetadata else AclOperation.CLUSTER_ACTION


def refused_request(frame: bytes, header: codec.RequestHeader, refusal: str) -> codec.DecodedRequest:
    """The body of an admin request whose caller is refused: Kafka answers each of its items (topic, partition,
    binding, user) CLUSTER_AUTHORIZATION_FAILED, so the body is read, but only when it is no larger than what a
    client may send before it has authenticated (Kafka's ``sasl.server.max.receive.size``): a caller with no right
    does not get a 100 MB body decoded into objects many times its size. A larger one closes the connection, with
    the refusal (naming the principal) as the reason logged. Every other refused request is answered from its
    header alone (the dispatcher never reads its body)."""
    if len(frame) > MAX_TOKEN_BYTES:
        raise ConnectionClosing(f"{refusal}; its {len(frame)}-byte body is not read (a refused caller's request is "
                                f"answered item by item up to {MAX_TOKEN_BYTES} bytes)")
    return codec.decode_request(frame, header)


class CertificateConnection:
    """One SSL connection's principal, mapped from its client certificate at its first checked request (once: the
    certificate cannot change on a connection, and Raft's Fetch requests arrive often)."""

    __slots__ = ("principal",)

    def __init__(self) -> None:
        self.principal: str | None = None


class ControllerAuthorizer:
    """The CONTROLLER listener's check of each request's caller. ``bindings()`` returns the ACL bindings of the
    voter's current metadata image (read at each check); ``ready()`` whether the voter has completed its initial
    load (until then only super users pass); ``mapper``: the listener's ``ssl.principal.mapping.rules`` when it
    serves TLS; ``sasl``: its SASL gate when it is SASL_PLAINTEXT or SASL_SSL."""

    def __init__(
        self,
        settings: AuthorizerSettings,
        bindings: Callable[[], Mapping[str, AclBinding]],
        ready: Callable[[], bool],
        metrics: ServerMetrics,
        *,
        mapper: PrincipalMapper | None = None,
        sasl: SaslGate | None = None,
    ) -> None:
        self._authorizer = Authorizer(settings)
        self._bindings = bindings
        self._ready = ready
        self._metrics = metrics
        self._mapper = mapper
        self._sasl = sasl
        self._denials = DenialLog(metrics.authorization_denials, logger)

    def principal(self, peer: Peer) -> str:
        """The caller's principal; ConnectionClosing (an SSL authentication failure, counted) when its client
        certificate names none."""
        if self._sasl is not None:
            session = self._sasl.session(peer)
            return session.principal if session is not None and session.principal else ANONYMOUS
        if peer.certificate is None or self._mapper is None:
            return ANONYMOUS
        state = peer.state
        if isinstance(state, CertificateConnection) and state.principal is not None:
            return state.principal
        principal = connection_principal(peer, peer.certificate, self._mapper, self._metrics)
        if isinstance(state, CertificateConnection):
            state.principal = principal
        return principal

    def refusal(self, peer: Peer, operation: AclOperation | None, kind: str, what: str) -> str | None:
        """None when the caller may send the request; else why not, naming the principal (counted, and logged once
        per principal and ``kind``, the request's name). ``operation``: the right it asks on the cluster, None for
        super users only; ``what``: the request, for the message."""
        principal = self.principal(peer)
        if principal in self._authorizer.settings.super_users:
            return None
        if operation is None:
            reason = f"{principal} is not a super user, and only super users may send {kind} to a controller"
        elif not self._ready():
            reason = self._not_ready(principal)
        elif self._authorizer.authorize(
            self._bindings(), principal, peer.host, operation, resource=ResourceType.CLUSTER, name=CLUSTER_NAME
        ):
            return None
        else:
            reason = f"{principal} is not a super user and is not granted {operation.name} on the cluster"
        return self._refused(
            peer,
            principal,
            operation.name if operation is not None else "SUPER_USER",
            kind,
            f"{what} from {peer} is refused: {reason}",
        )

    def item_check(self, peer: Peer, api_key: int, what: str) -> tuple[str | None, Allowed | None]:
        """For one of :data:`PER_ITEM_APIS`: (a refusal of the whole request, naming the principal, or None; the
        check of each item, or None when every item may proceed). Every item proceeds for a super user, and for
        a caller granted the right on the cluster that covers them all; until the voter has loaded the metadata
        the whole request is refused (as :meth:`refusal`); otherwise each item asks its right (refusals counted
        and logged once per principal, operation and resource)."""
        principal = self.principal(peer)
        settings = self._authorizer.settings
        if principal in settings.super_users:
            return None, None
        kind = api_name(api_key)
        if not self._ready():
            return self._refused(
                peer, principal, "SUPER_USER", kind, f"{what} from {peer} is refused: {self._not_ready(principal)}"
            ), None
        covering = _PER_ITEM[api_key]
        if covering is not None and self._authorizer.authorize(
            self._bindings(), principal, peer.host, covering, resource=ResourceType.CLUSTER, name=CLUSTER_NAME
        ):
            return None, None

        def allowed(operation: AclOperation, resource: ResourceType, name: str) -> bool:
            if self._authorizer.authorize(
                self._bindings(), principal, peer.host, operation, resource=resource, name=name
            ):
                return True
            self._denials.operation_denied(principal, peer.host, peer.listener, operation, resource=resource, name=name)
            return False

        return None, allowed

    def quiet_check(self, peer: Peer) -> Allowed | None:
        """The caller's right on one resource where lacking it leaves something out of an answer rather than
        refusing an item, so neither counted nor logged: CreateTopics shows a created topic's settings only to a
        caller with DESCRIBE_CONFIGS on it, which Kafka's controller asks of every topic (even when CREATE on the
        cluster granted them all). None for a super user, who may do everything."""
        principal = self.principal(peer)
        if principal in self._authorizer.settings.super_users:
            return None

        def allowed(operation: AclOperation, resource: ResourceType, name: str) -> bool:
            return self._authorizer.authorize(
                self._bindings(), principal, peer.host, operation, resource=resource, name=name
            )

        return allowed

    @staticmethod
    def _not_ready(principal: str) -> str:
        return (
            f"{principal} is not a super user, and this controller has not loaded the metadata (ACLs "
            "among it) up to the quorum's commit offset yet; only super users are served until it has"
        )

    def _refused(self, peer: Peer, principal: str, operation: str, kind: str, message: str) -> str:
        """Counts and logs (once per principal and request kind) a refusal on the cluster resource."""
        self._denials.denied(
            (principal, kind),
            listener=peer.listener,
            resource_type=ResourceType.CLUSTER.name,
            operation=operation,
            message="%s; further refusals of %s to %s are counted, not logged",
            args=(untrusted(message, 4 * LOG_TEXT_MAX), kind, untrusted(principal)),
        )
        return message

    def check_stream(self, peer: Peer, request: type[StreamRequest], what: str) -> None:
        """ConnectionClosing naming the principal unless the caller may send this stream RPC."""
        refusal = self.refusal(peer, stream_operation(request), request.__name__, what)
        if refusal is not None:
            raise ConnectionClosing(refusal)
