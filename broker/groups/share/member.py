"""A member of a KIP-932 share group: what it subscribes to, its epochs and the partitions it was given.

Immutable like a consumer group's member (``replace`` makes the next value), so the group compares a member
before and after a heartbeat to decide what must be written and whether the answer carries the assignment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.groups.consumer.assignment import Assignment
from broker.groups.consumer.member import empty_assignment, normalized

#: ShareGroupHeartbeat's member epochs with a meaning of their own (a share member has no static leave, -2).
JOIN_EPOCH = 0
LEAVE_EPOCH = -1


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    member_epoch: int = 0
    previous_member_epoch: int = -1
    #: The partitions the member consumes now: its share of the target at ``member_epoch``.
    assigned: Assignment = field(default_factory=empty_assignment)

    def metadata_differs(self, other: ShareMember) -> bool:
        """True when the member's metadata record (Kafka's ShareGroupMemberMetadata) must be written again."""
        return (self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names) != (
            other.rack_id,
            other.client_id,
            other.client_host,
            other.subscribed_topic_names,
        )

    def assignment_differs(self, other: ShareMember) -> bool:
        """True when the member's current-assignment record must be written again."""
        return (
            self.member_epoch != other.member_epoch
            or self.previous_member_epoch != other.previous_member_epoch
            or normalized(self.assigned) != normalized(other.assigned)
        )
