"""What the consumer-group handlers share: finding the coordinator and the values Kafka fills in for every group."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.handlers.registry import RequestContext

if TYPE_CHECKING:
    from broker.groups.coordinator import GroupCoordinator

# DescribeGroups v3+ when the client did not ask for authorized operations (Kafka's Int.MinValue sentinel).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
# Without ACLs every group operation is allowed: READ (3), DELETE (6), DESCRIBE (8) as AclOperation bits.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)


def coordinator(ctx: RequestContext) -> GroupCoordinator | None:
    """The node's group coordinator; None while the node runs without one (then COORDINATOR_NOT_AVAILABLE)."""
    groups: GroupCoordinator | None = getattr(ctx.node, "groups", None)
    return groups


def member_host(ctx: RequestContext) -> str:
    """Kafka reports a member's host as ``/<address>`` (Java's InetAddress.toString); tools print it verbatim."""
    return f"/{ctx.client_host}"
