"""The authorized-operations bit fields Metadata, DescribeCluster and DescribeGroups report (KIP-430).

Fjord has no authorizer, and Kafka without one reports every operation a resource type supports as allowed, as a
32-bit field with bit ``AclOperation.code`` set. When the client did not ask, the field carries Int.MinValue,
which the Java Admin turns into "not requested" (null) rather than "nothing allowed".
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class AclOperation(IntEnum):
    """Kafka's AclOperation codes (the bit positions of the field)."""

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


def bit_field(operations: frozenset[AclOperation]) -> int:
    return sum(1 << op for op in operations)


#: The sentinel for "the client did not ask for authorized operations".
OMITTED: Final = -(2**31)

TOPIC: Final = bit_field(frozenset({
    AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
    AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
}))
GROUP: Final = bit_field(frozenset({AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE}))
CLUSTER: Final = bit_field(frozenset({
    AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE,
}))


def reported(requested: object, allowed: int) -> int:
    """What a response carries for a resource whose allowed operations are ``allowed``."""
    return allowed if requested else OMITTED
