"""What the consumer-group handlers share: finding the coordinator and the values Kafka fills in for every group."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.handlers.registry import RequestContext

if TYPE_CHECKING:
    from broker.groups.coordinator import GroupCoordinator


def coordinator(ctx: RequestContext) -> GroupCoordinator | None:
    """The node's group coordinator; None while the node runs without one (then COORDINATOR_NOT_AVAILABLE)."""
    groups: GroupCoordinator | None = getattr(ctx.node, "groups", None)
    return groups


def member_host(ctx: RequestContext) -> str:
    """Kafka reports a member's host as ``/<address>`` (Java's InetAddress.toString); tools print it verbatim."""
    return f"/{ctx.client_host}"
