"""Where a partition's leadership went, for the answers that tell a client its view is stale (KIP-951).

Produce (v10+) and Fetch (v12+, endpoints from v16) both carry, for a partition refused because this broker does not
lead it, the partition's ``current_leader`` (leader id and epoch) and, once per response, the ``node_endpoints`` of
the leaders named. A client that reads them retries at the new leader at once instead of first asking for metadata,
which is what makes a partition move, a drain or a failover nearly invisible to it. Both handlers collect the hints
here so they answer alike: the leader and epoch from this broker's metadata image (-1/-1 for a partition it does not
know, as Kafka's ``getCurrentLeader`` falls back to), and the endpoint on the request's listener only for a leader
that is alive (unfenced), as Kafka's ``getAliveBrokerNode``.

A partition being moved has no leader between its source's letting go and its target's election. Its hint names the
target already, with the epoch the election will give it (``metadata.move_leader``): the client's retry backoff then
runs while the hand-over does, instead of after it, and the target holds a produce that arrives before it has the
partition open. Clients ignore a hint whose epoch is below the one they know, so once the election is known a stale
answer cannot send a client back.
"""

from __future__ import annotations

from typing import Any

from broker.handlers.metadata import live_endpoint
from metadata.image import MetadataImage
from metadata.move_leader import client_leader
from wire import schema


class LeaderHints:
    """The leaders named in one response, and their endpoints for the response's ``node_endpoints``."""

    __slots__ = ("_endpoints", "_image", "_listener_name")

    def __init__(self, image: MetadataImage, listener_name: str) -> None:
        self._image = image
        self._listener_name = listener_name
        self._endpoints: dict[int, tuple[str, int, str | None]] = {}

    def current_leader(self, topic: str, partition: int) -> tuple[int, int]:
        """The partition's leader id and epoch as this broker knows them (-1, -1 when it knows no leader; a moving
        partition's target and its coming epoch), the leader's endpoint remembered for :meth:`node_endpoints` when
        the leader is alive on this listener."""
        found = self._image.partition(topic, partition)
        leader, epoch = client_leader(self._image, found) if found is not None else (-1, -1)
        broker = self._image.brokers.get(leader)
        if broker is not None and not broker.fenced:
            endpoint = live_endpoint(broker, self._listener_name)
            if endpoint is not None:
                self._endpoints[leader] = (endpoint[0], endpoint[1], broker.rack)
        return leader, epoch

    def current_leader_field(self, part_cls: type[Any], topic: str, partition: int) -> Any:
        """:meth:`current_leader` as the partition entry's nested ``current_leader`` value."""
        leader, epoch = self.current_leader(topic, partition)
        return schema.build_nested(part_cls, "current_leader", leader_id=leader, leader_epoch=epoch)

    def node_endpoints(self, resp_cls: type[Any]) -> tuple[Any, ...]:
        """The response's ``node_endpoints``: every live leader named so far, by node id; empty for a version
        without the field."""
        if not schema.has_field(resp_cls, "node_endpoints"):
            return ()
        return tuple(
            schema.build_nested(resp_cls, "node_endpoints", node_id=node_id, host=host, port=port, rack=rack)
            for node_id, (host, port, rack) in sorted(self._endpoints.items())
        )
