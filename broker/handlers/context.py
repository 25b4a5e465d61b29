"""What a handler receives with each request: the :class:`RequestContext`, and the :class:`ConnectionState` of the
connection the request arrived on.

A handler is ``async def f(ctx: RequestContext, request) -> response | None``, listed by api key in
``broker.handlers.table``. It receives the decoded kio request entity of the client's version and returns the kio
response entity of the same version (``ctx.build`` makes one with every unspecified field defaulted), or None to
send nothing (Produce with acks=0).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from broker import authorized_operations
from broker.authorization import BrokerAuthorizer
from broker.handlers.append_order import AppendOrder
from broker.handlers.commit_order import PendingCommits
from broker.metrics import TopicTraffic
from broker.quotas.enforcer import RequestCharge
from broker.services import BrokerServices
from metadata.acl.binding import ANONYMOUS, CLUSTER_NAME, AclOperation, ResourceType
from metadata.admin.requests import MutationQuota
from wire import codec, schema
from wire.api_versions import VersionRange
from wire.log_text import untrusted
from wire.sasl.session import SaslSession

Handler = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass(slots=True, eq=False, weakref_slot=True)
class ConnectionState:
    """What the broker keeps for one client connection, for as long as it is open.

    Kafka applies a connection's requests in order; the listener runs them concurrently, so the few orderings
    clients rely on are restored per connection here: Produce appends to a partition in arrival order, and an
    OffsetFetch sees the OffsetCommits sent before it. The listener makes one per connection
    (``RequestDispatcher.connection_state``) and drops it when the connection closes, so nothing keyed by client
    address outlives its connection. It can be weakly referenced: a share session ends when its connection's
    state goes (``broker.share_sessions``)."""

    appends: AppendOrder = field(default_factory=AppendOrder)
    commits: PendingCommits = field(default_factory=PendingCommits)
    #: On a SASL listener: the connection's authentication (made by the dispatcher at its first request).
    sasl: SaslSession | None = None
    #: On an SSL listener, of a client that presented a certificate: ``User:<name>`` mapped from its subject DN by
    #: ``ssl.principal.mapping.rules`` (set by the dispatcher at the first request).
    tls_principal: str | None = None
    #: KIP-511: the client software name and version its ApiVersions v3+ named (what KIP-714 subscriptions match).
    client_software: tuple[str, str] | None = None

    @property
    def principal(self) -> str | None:
        """``User:<name>`` of an authenticated SASL connection, else of its client certificate (on SASL_SSL the
        SASL principal wins, as in Kafka), else None."""
        return self.sasl.principal if self.sasl is not None else self.tls_principal


@dataclass(slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    broker: BrokerServices
    #: Name of the listener the connection arrived on; Metadata answers with that listener's endpoints.
    listener_name: str = "PLAINTEXT"
    client_port: int = 0
    #: The connection's own state; a context built outside a connection gets a fresh one (no ordering to keep).
    connection: ConnectionState = field(default_factory=ConnectionState)
    #: The API versions the dispatcher serves, for ApiVersions to advertise: handed in rather than imported,
    #: since the handler table that defines them lists the ApiVersions handler itself.
    api_versions: Mapping[int, VersionRange] = field(default_factory=lambda: MappingProxyType({}))
    #: The broker's authorizer (``broker.authorization``); a context built outside the dispatcher allows everything.
    authorizer: BrokerAuthorizer = field(default_factory=BrokerAuthorizer.disabled)
    #: The broker's per-topic traffic counters (``broker.metrics``); a context built outside a broker counts into none.
    traffic: TopicTraffic = field(default_factory=TopicTraffic.disabled)
    #: The request's client quotas (``broker.quotas.enforcer``), set by the dispatcher; None while the cluster has none.
    quota_charge: RequestCharge | None = None

    @property
    def principal(self) -> str:
        """Who sent the request, for ACLs: the SASL or certificate principal, else ``User:ANONYMOUS`` (Kafka's)."""
        return self.connection.principal or ANONYMOUS

    def allowed(self, op: AclOperation, resource: ResourceType, name: str, *, log_denial: bool = True) -> bool:
        """Whether this request's principal may do ``op`` on the resource; a denial is counted and logged."""
        return self.authorizer.allowed(self.principal, self.client_host, self.listener_name, op, resource=resource,
                                       name=name, log_denial=log_denial)

    def authorized_operations(self, requested: object, resource: ResourceType, name: str, supported: int) -> int:
        """The KIP-430 field for the resource: ``supported``'s operations this principal may do (when asked)."""
        return authorized_operations.reported_for(requested, self.authorizer, self.principal, self.client_host,
                                                  resource=resource, name=name, supported=supported)

    def cluster_authorized_operations(self, requested: object) -> int:
        """The KIP-430 field for the cluster (DescribeCluster, Metadata v8-10), as Kafka fills it: 0 for a principal
        that may not DESCRIBE the cluster (a counted denial), so that what else it may do there is not disclosed."""
        if requested and not self.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return 0
        return self.authorized_operations(requested, ResourceType.CLUSTER, CLUSTER_NAME, authorized_operations.CLUSTER)

    def mutation_quota(self, strict_since: int) -> MutationQuota | None:
        """The client's controller mutation quota for this admin request (KIP-599), strict from API version
        ``strict_since`` on (Kafka's ``strictSinceVersion``); None when no quota applies."""
        if self.quota_charge is None:
            return None
        return self.quota_charge.mutations(self.api_version >= strict_since)

    @property
    def response_class(self) -> type[Any]:
        return codec.response_class(self.api_key, self.api_version)

    def build(self, response_cls: type[Any] | None = None, /, **fields: object) -> Any:
        """A response entity (by default this request's response class) with unspecified fields defaulted."""
        return schema.build(response_cls if response_cls is not None else self.response_class, **fields)

    def describe(self) -> str:
        """For logs: who sent what (the client id and principal escaped and capped: the client chose them)."""
        principal = self.connection.principal
        return (
            f"api_key={self.api_key} v{self.api_version} correlation_id={self.correlation_id} "
            f"client='{untrusted(self.client_id)}'@{self.client_host}:{self.client_port}"
            + (f" principal={untrusted(principal)}" if principal is not None else "")
        )
