"""The authorization decision of Kafka's StandardAuthorizer, pure: may ``principal`` from ``host`` do ``operation``
on a resource, given the ACL bindings of the metadata image.

Kafka's rules, in order:

1. A super user (``super.users``) may do everything.
2. The bindings that apply are those whose pattern covers the resource: the LITERAL name, the LITERAL ``*``, and
   every PREFIXED pattern the name starts with.
3. If none applies (whoever they name), the answer is ``allow.everyone.if.no.acl.found`` (default false).
4. Among those naming the principal (or ``User:*``) and the host (or ``*``; an address matches however it is
   spelt, see :func:`_host_matches`), a DENY of the operation (or of ALL)
   wins over everything; else an ALLOW of the operation, of ALL, or of an operation implying it allows:
   DESCRIBE is implied by READ, WRITE, DELETE and ALTER, DESCRIBE_CONFIGS by ALTER_CONFIGS.
5. Otherwise the answer is no.

The bindings are indexed by resource type once per image (the image's map is immutable, so its identity is the
cache key), so a check costs a scan of that type's bindings only.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from metadata.acl.binding import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from settings.security import STANDARD_AUTHORIZER

#: The resource name Kafka's authorizeByResourceType decides on first (no ACL is expected to name it).
_HARDCODE: Final = "hardcode"

#: operation asked -> the ALLOWed operations that grant it besides itself and ALL.
_IMPLIED_BY: Final[Mapping[AclOperation, frozenset[AclOperation]]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class AuthorizerSettings:
    """``super.users`` (principals such as ``User:admin``) and ``allow.everyone.if.no.acl.found``."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by semicolons, as Kafka reads it (blanks ignored)."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())


def settings_from(value: Callable[[str], object]) -> AuthorizerSettings | None:
    """The settings a node's config gives the authorizer (``value(key)``: ``ServerConfig.value``), or None when
    ``authorizer.class.name`` names none (authorization off). One reading for the broker's listeners and the
    CONTROLLER listener, so both decide with the same ``super.users`` and ``allow.everyone.if.no.acl.found``."""
    if str(value("authorizer.class.name") or "").strip() != STANDARD_AUTHORIZER:
        return None
    return AuthorizerSettings(
        parse_super_users(str(value("super.users") or "")), bool(value("allow.everyone.if.no.acl.found"))
    )


@dataclass(slots=True)
class Authorizer:
    settings: AuthorizerSettings = field(default_factory=AuthorizerSettings)
    _indexed: Mapping[str, AclBinding] | None = None
    _index: dict[ResourceType, tuple[AclBinding, ...]] = field(default_factory=dict)

    def authorize(
        self,
        bindings: Mapping[str, AclBinding],
        principal: str,
        host: str,
        operation: AclOperation,
        *,
        resource: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.settings.super_users:
            return True
        applying = [b for b in self._of_type(bindings, resource) if b.pattern_matches(resource, name)]
        if not applying:
            return self.settings.allow_everyone_if_no_acl_found
        return _decide(applying, principal, host, operation)

    def authorized_operations(
        self,
        bindings: Mapping[str, AclBinding],
        principal: str,
        host: str,
        *,
        resource: ResourceType,
        name: str,
        operations: Iterable[AclOperation],
    ) -> frozenset[AclOperation]:
        """The subset of ``operations`` the principal may do on the resource (KIP-430's authorized operations)."""
        return frozenset(
            op for op in operations if self.authorize(bindings, principal, host, op, resource=resource, name=name)
        )

    def allowed_on_some(
        self,
        bindings: Mapping[str, AclBinding],
        principal: str,
        host: str,
        operation: AclOperation,
        resource: ResourceType,
    ) -> bool:
        """Whether the principal may do ``operation`` on at least one resource of the type, as Kafka's
        Authorizer.authorizeByResourceType answers (InitProducerId without a transactional id is allowed with
        WRITE on any topic).

        First the decision on a literal resource named ``hardcode``, which grants a super user, and grants anyone
        when no ACL covers that name and ``allow.everyone.if.no.acl.found`` is set (the default applies per
        resource, not per type). Then the principal's (or ``User:*``'s) bindings from the host (or ``*``) naming
        the operation itself or ALL (no implied operation here, as in Kafka): a LITERAL ``*`` DENY refuses, a
        LITERAL ``*`` ALLOW grants; otherwise an ALLOW grants unless a DENY covers its whole pattern (a DENY on the
        same literal name for a literal ALLOW, or a PREFIXED DENY on a prefix of the ALLOW's name)."""
        if self.authorize(bindings, principal, host, operation, resource=resource, name=_HARDCODE):
            return True
        mine = [
            b
            for b in self._of_type(bindings, resource)
            if b.principal in (principal, WILDCARD_PRINCIPAL)
            and _host_matches(b.host, host)
            and b.operation in (operation, AclOperation.ALL)
        ]
        denies = [b for b in mine if b.permission is PermissionType.DENY]
        if any(d.pattern_type is PatternType.LITERAL and d.resource_name == WILDCARD for d in denies):
            return False
        allows = [b for b in mine if b.permission is PermissionType.ALLOW]
        if any(a.pattern_type is PatternType.LITERAL and a.resource_name == WILDCARD for a in allows):
            return True

        def covered(allow: AclBinding) -> bool:
            for deny in denies:
                if deny.pattern_type is PatternType.PREFIXED and allow.resource_name.startswith(deny.resource_name):
                    return True
                if (
                    deny.pattern_type is PatternType.LITERAL
                    and allow.pattern_type is PatternType.LITERAL
                    and deny.resource_name == allow.resource_name
                ):
                    return True
            return False

        return any(not covered(a) for a in allows)

    def _of_type(self, bindings: Mapping[str, AclBinding], resource: ResourceType) -> tuple[AclBinding, ...]:
        if self._indexed is not bindings:
            index: dict[ResourceType, list[AclBinding]] = {}
            for binding in bindings.values():
                index.setdefault(binding.resource_type, []).append(binding)
            self._index = {kind: tuple(items) for kind, items in index.items()}
            self._indexed = bindings
        return self._index.get(resource, ())


def _decide(applying: Iterable[AclBinding], principal: str, host: str, operation: AclOperation) -> bool:
    allowed = False
    implied = _IMPLIED_BY.get(operation, frozenset())
    for binding in applying:
        if binding.principal not in (principal, WILDCARD_PRINCIPAL) or not _host_matches(binding.host, host):
            continue
        if binding.permission is PermissionType.DENY:
            if binding.operation in (operation, AclOperation.ALL):
                return False
        elif binding.operation in (operation, AclOperation.ALL) or binding.operation in implied:
            allowed = True
    return allowed


def _host_matches(binding_host: str, host: str) -> bool:
    """Whether a binding's host covers the client's address. Kafka compares the binding's text with Java's
    ``InetAddress.getHostAddress()``, which spells an IPv6 address in full (``0:0:0:0:0:0:0:1``) and an IPv4 client
    of a dual-stack listener as IPv4, while Python reports ``::1`` and ``::ffff:10.0.0.1``: both sides are compared
    as addresses, so a binding written either way (as Kafka's tools write it, or shortened) covers the client."""
    return binding_host in (host, WILDCARD) or _address(binding_host) == _address(host)


@functools.lru_cache(maxsize=4096)
def _address(host: str) -> str:
    """One spelling of a host: an IP address compressed, an IPv4-mapped IPv6 address as the IPv4 address (as Java
    reports such a client), anything else (not an address) as written."""
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)
