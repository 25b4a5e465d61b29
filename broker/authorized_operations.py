"""The authorized-operations bit fields Metadata, DescribeCluster and DescribeGroups report (KIP-430).

A 32-bit field with bit ``AclOperation.code`` set for each operation the request's principal may do on the
resource: with no authorizer, every operation the resource type supports (as Kafka reports); with one, those the
ACLs allow (``broker.authorization``). When the client did not ask, the field carries Int.MinValue, which the Java
Admin turns into "not requested" (null) rather than "nothing allowed".
"""

from __future__ import annotations

from typing import Final

from broker.authorization import BrokerAuthorizer
from metadata.acl.binding import AclOperation, ResourceType

__all__ = ["CLUSTER", "GROUP", "OMITTED", "TOPIC", "AclOperation", "bit_field", "operations_of", "reported",
           "reported_for"]


def bit_field(operations: frozenset[AclOperation]) -> int:
    return sum(1 << op for op in operations)


#: The sentinel for "the client did not ask for authorized operations".
OMITTED: Final = -(2**31)

TOPIC: Final = bit_field(frozenset({
    AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
    AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
}))
#: A group's configs (KIP-848's group.consumer.* overrides) are described and altered on the GROUP resource, so
#: Kafka's AclEntry.supportedOperations(GROUP) lists DESCRIBE_CONFIGS and ALTER_CONFIGS too (KAFKA-14510).
GROUP: Final = bit_field(frozenset({
    AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
}))
CLUSTER: Final = bit_field(frozenset({
    AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE,
}))


def reported(requested: object, allowed: int) -> int:
    """What a response carries for a resource whose allowed operations are ``allowed``."""
    return allowed if requested else OMITTED


def operations_of(field: int) -> frozenset[AclOperation]:
    return frozenset(op for op in AclOperation if op > AclOperation.ALL and field & (1 << op))


def reported_for(
    requested: object, authorizer: BrokerAuthorizer, principal: str, host: str, *, resource: ResourceType, name: str,
    supported: int,
) -> int:
    """What a response carries for the resource ``name``: the operations of ``supported`` (the type's bit field)
    that ``principal`` may do on it."""
    if not requested:
        return OMITTED
    if not authorizer.enabled:
        return supported
    return bit_field(authorizer.operations(principal, host, resource, name, operations_of(supported)))
