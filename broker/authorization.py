"""The broker's authorizer: Kafka's StandardAuthorizer decision (``metadata.acl.authorizer``) applied to a
request's principal, host and listener, with the ACL bindings of the broker's current metadata image.

Off (everything allowed, as before ACLs existed) unless ``authorizer.class.name`` names Kafka's StandardAuthorizer.
A connection that did not authenticate with SASL is ``User:ANONYMOUS``, as Kafka names PLAINTEXT and SSL clients;
so when brokers talk to each other over a PLAINTEXT listener (transaction markers, AddPartitionsToTxn
verification), ``User:ANONYMOUS`` needs the rights Kafka gives a broker's own principal — put it in
``super.users``, or serve the inter-broker listener with SASL and make that user a super user (see README).

Every denial is counted (``fjord_broker_authorization_denials``) and logged once per (principal, operation,
resource) with the host and listener (``metadata.acl.denials``, shared with the CONTROLLER listener), so a client
retrying a forbidden request does not flood the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from metadata.acl.authorizer import Authorizer, AuthorizerSettings, settings_from
from metadata.acl.binding import AclBinding, AclOperation, ResourceType
from metadata.acl.denials import DenialCounter, DenialLog

logger = logging.getLogger(__name__)


class BrokerAuthorizer:
    """``value(key)`` reads the node's typed config (``ServerConfig.value``), at the first check rather than at
    construction (the dispatcher exists before it serves); ``bindings()`` returns the ACL bindings of the current
    image (read at each check)."""

    def __init__(
        self,
        value: Callable[[str], object],
        bindings: Callable[[], Mapping[str, AclBinding]],
        denials: DenialCounter | None = None,
    ) -> None:
        self._value = value
        self._configured: tuple[bool, Authorizer] | None = None
        self._bindings = bindings
        self._denials = DenialLog(denials, logger)

    @classmethod
    def disabled(cls) -> BrokerAuthorizer:
        return cls(lambda _key: None, dict)

    def _configuration(self) -> tuple[bool, Authorizer]:
        if self._configured is None:
            settings = settings_from(self._value)
            self._configured = settings is not None, Authorizer(settings or AuthorizerSettings())
        return self._configured

    @property
    def enabled(self) -> bool:
        return self._configuration()[0]

    @property
    def _authorizer(self) -> Authorizer:
        return self._configuration()[1]

    def allowed(
        self,
        principal: str,
        host: str,
        listener: str,
        op: AclOperation,
        *,
        resource: ResourceType,
        name: str,
        log_denial: bool = True,
    ) -> bool:
        """Whether the request may proceed. ``log_denial`` False for checks whose failure is not a refusal
        (Metadata silently leaves out topics the principal may not describe, as Kafka does)."""
        if not self.enabled:
            return True
        if self._authorizer.authorize(self._bindings(), principal, host, op, resource=resource, name=name):
            return True
        if log_denial:
            self._denials.operation_denied(principal, host, listener, op, resource=resource, name=name)
        return False

    def allowed_on_some(self, principal: str, host: str, op: AclOperation, resource: ResourceType) -> bool:
        """Whether ``op`` is allowed on at least one resource of the type (not logged: a fallback check)."""
        if not self.enabled:
            return True
        return self._authorizer.allowed_on_some(self._bindings(), principal, host, op, resource)

    def operations(
        self, principal: str, host: str, resource: ResourceType, name: str, candidates: Iterable[AclOperation]
    ) -> frozenset[AclOperation]:
        """The operations of ``candidates`` the principal may do (all of them when authorization is off)."""
        if not self.enabled:
            return frozenset(candidates)
        return self._authorizer.authorized_operations(
            self._bindings(), principal, host, resource=resource, name=name, operations=candidates
        )
