"""A member of a KIP-848 consumer group: what it subscribes to and where its reconciliation stands.

A member is immutable; every change is a new value (``replace``), so the group can compare the member before and
after a heartbeat to decide what changed: whether the group epoch must move (its subscription changed), whether a
record must be written (its assignment or epoch changed) and whether the response carries the assignment.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from broker.groups.consumer.assignment import Assignment

#: ConsumerGroupHeartbeat's member epochs with a meaning of their own.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(enum.Enum):
    """Where a member stands between its current assignment and its share of the target (Kafka's
    ``MemberState``; the values are what Kafka stores in the current-assignment record and shows in tools)."""

    STABLE = 0  # owns its target partitions at the target epoch
    UNREVOKED_PARTITIONS = 1  # must give partitions up before it gets anything new
    UNRELEASED_PARTITIONS = 2  # at the target epoch, waiting for others to give up what it is to get
    UNKNOWN = 127

    @property
    def label(self) -> str:
        return self.name.lower()


def empty_assignment() -> dict[uuid.UUID, frozenset[int]]:
    return {}


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """What a member speaking the classic protocol (JoinGroup/SyncGroup) brought along (Kafka's
    ClassicMemberMetadata): its session time-out, and its protocols in order of preference, each with its
    ConsumerProtocolSubscription bytes, so that the group can turn back into a classic group."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        """The protocol a JoinGroup answer names: the member's first (Kafka answers so)."""
        return self.protocols[0][0] if self.protocols else ""


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    #: Partitions the member may own now (what the response's assignment carries).
    assigned: Assignment = field(default_factory=empty_assignment)
    #: Partitions taken from the member that it has not yet confirmed it gave up; nobody else gets them meanwhile.
    pending_revocation: Assignment = field(default_factory=empty_assignment)
    #: Set for a member that speaks the classic protocol inside the consumer group (KIP-848's online migration).
    classic: ClassicMetadata | None = None

    def session_ms(self, default: int) -> int:
        """The member's session time-out: a classic member keeps the one of its JoinGroup (Kafka's
        ``classicProtocolSessionTimeout``), the others have the group's."""
        return self.classic.session_timeout_ms if self.classic is not None else default

    def subscription_differs(self, other: ConsumerMember) -> bool:
        """True when the member subscribes to other topics: the group epoch must move. As in Kafka
        (``hasMemberSubscriptionChanged``), a new rack or server assignor alone does not move it; the next
        rebalance uses them."""
        return (
            self.subscribed_topic_names != other.subscribed_topic_names
            or self.subscribed_topic_regex != other.subscribed_topic_regex
        )

    def metadata_differs(self, other: ConsumerMember) -> bool:
        """True when the member's metadata record must be written again."""
        return (
            self.subscription_differs(other)
            or self.classic != other.classic
            or (
                self.rack_id,
                self.server_assignor,
                self.instance_id,
                self.client_id,
                self.client_host,
                self.rebalance_timeout_ms,
            )
            != (
                other.rack_id,
                other.server_assignor,
                other.instance_id,
                other.client_id,
                other.client_host,
                other.rebalance_timeout_ms,
            )
        )

    def assignment_differs(self, other: ConsumerMember) -> bool:
        """True when the member's current-assignment record must be written again."""
        return (
            self.member_epoch != other.member_epoch
            or self.previous_member_epoch != other.previous_member_epoch
            or self.state is not other.state
            or normalized(self.assigned) != normalized(other.assigned)
            or normalized(self.pending_revocation) != normalized(other.pending_revocation)
        )

    def owned_partitions(self) -> list[tuple[uuid.UUID, int]]:
        """Every partition this member holds a claim on (assigned or still to be revoked)."""
        return [(t, p) for a in (self.assigned, self.pending_revocation) for t, ps in a.items() for p in ps]

    def partition_count(self) -> int:
        return sum(len(ps) for ps in self.assigned.values())


def normalized(assignment: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    """The assignment without topics that have no partitions, so that equal assignments compare equal."""
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}
