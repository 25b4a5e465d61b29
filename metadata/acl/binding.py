"""ACL bindings and binding filters, with Kafka's enum codes (what CreateAcls, DescribeAcls and DeleteAcls carry).

A binding is a resource pattern (type, name, LITERAL or PREFIXED) plus an entry (principal, host, operation,
ALLOW/DENY). A filter has the same fields where ANY / None mean "whatever", and a MATCH pattern type that selects
every pattern which would apply to the named resource (the literal name, the ``*`` wildcard, the prefixes of the
name): that is what ``kafka-acls.sh --list --resource-pattern-type match`` asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final, TypeVar

_E = TypeVar("_E", bound=IntEnum)

#: The literal resource name (and the host, and the principal's name) that stands for every one.
WILDCARD: Final = "*"
#: The principal that stands for every user.
WILDCARD_PRINCIPAL: Final = "User:*"
#: The principal of a connection that authenticated neither with SASL nor with a client certificate (Kafka's
#: KafkaPrincipal.ANONYMOUS), on a client listener and on the CONTROLLER listener alike.
ANONYMOUS: Final = "User:ANONYMOUS"
#: The only name of the CLUSTER resource.
CLUSTER_NAME: Final = "kafka-cluster"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    """Kafka's AclOperation codes (also the bit positions of the authorized-operations fields, KIP-430)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def _enum(cls: type[_E], code: int) -> _E:
    """The member for a wire code; an unknown code reads as UNKNOWN (each enum's 0), as Kafka's fromCode does."""
    try:
        return cls(code)
    except ValueError:
        return cls(0)


def resource_type(code: int) -> ResourceType:
    return _enum(ResourceType, code)


def pattern_type(code: int) -> PatternType:
    return _enum(PatternType, code)


def operation(code: int) -> AclOperation:
    return _enum(AclOperation, code)


def permission(code: int) -> PermissionType:
    return _enum(PermissionType, code)


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: PermissionType

    def describe(self) -> str:
        """For logs and messages, in kafka-acls.sh's words."""
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission.name}) on {self.resource_type.name}:"
            f"{self.pattern_type.name}:{self.resource_name}"
        )

    def pattern_matches(self, resource: ResourceType, name: str) -> bool:
        """Whether this binding's resource pattern covers the resource ``resource``/``name``."""
        if self.resource_type is not resource:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)


def invalid_binding(binding: AclBinding) -> str | None:
    """Why CreateAcls refuses ``binding`` (Kafka's AclControlManager.validateNewAcl), or None."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return "Invalid resourceType " + binding.resource_type.name
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid patternType " + binding.pattern_type.name
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return "Invalid operation " + binding.operation.name
    if binding.permission in (PermissionType.UNKNOWN, PermissionType.ANY):
        return "Invalid permissionType " + binding.permission.name
    if not binding.resource_name:
        return "Resource name should not be empty"
    if binding.resource_type is ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, colon, name = binding.principal.partition(":")
    if not colon or not kind or not name:
        return (
            f"Could not parse principal from `{binding.principal}` (no colon is present separating the "
            "principal type from the principal name)"
        )
    if not binding.host:
        return "Invalid host: the host must not be empty (use * for every host)"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls' filter and each of DeleteAcls' filters; None and ANY match everything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: PermissionType = PermissionType.ANY

    def unknown(self) -> str | None:
        """Why the filter can match nothing sensible (an UNKNOWN code, as Kafka refuses), or None."""
        for name, value in (
            ("resourceType", self.resource_type),
            ("patternType", self.pattern_type),
            ("operation", self.operation),
            ("permissionType", self.permission),
        ):
            if value == 0:
                return f"The filter has an unknown {name}"
        return None

    def matches(self, binding: AclBinding) -> bool:
        return self._pattern_matches(binding) and self._entry_matches(binding)

    def _pattern_matches(self, binding: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not binding.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, binding.pattern_type):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type is PatternType.MATCH:
            if binding.pattern_type is PatternType.PREFIXED:
                return self.resource_name.startswith(binding.resource_name)
            return binding.resource_name in (self.resource_name, WILDCARD)
        return binding.resource_name == self.resource_name

    def _entry_matches(self, binding: AclBinding) -> bool:
        return (
            (self.principal is None or self.principal == binding.principal)
            and (self.host is None or self.host == binding.host)
            and self.operation in (AclOperation.ANY, binding.operation)
            and self.permission in (PermissionType.ANY, binding.permission)
        )
