"""What a server-side assignor sees and returns: the value types shared by the assignors and the group.

Kept apart from both so that an assignor is a pure function of these values (testable without a group) and the
group state machine does not depend on any one assignor.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

#: Partitions by topic id: a member's assignment, in the form every group record and response uses.
Assignment = Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """One member as the assignor sees it.

    ``current`` is the member's share of the previous target assignment: the assignors keep partitions where they
    were (stickiness), so a new member or a leaving one moves as few partitions as balance allows.

    ``instance_id`` is the static member's ``group.instance.id`` (None for a dynamic member): the range assignor
    orders static members by it, as Kafka's does, so a rolling bounce (each static member back with a new member
    id) gives every instance the ranges it had.
    """

    rack_id: str | None
    subscribed_topic_ids: frozenset[uuid.UUID]
    current: Assignment = field(default_factory=dict)
    instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A subscribed topic as the group saw it when it computed the assignment.

    ``partition_racks`` maps a partition to the racks of the brokers that serve it (in Fjord, the rack of its
    leader's broker: partitions are not replicated between brokers); a partition missing from it, or an empty
    mapping, has no known rack and rack-awareness does not apply to it.
    """

    topic_id: uuid.UUID
    name: str
    num_partitions: int
    partition_racks: Mapping[int, frozenset[str]] = field(default_factory=dict)


class AssignorError(Exception):
    """The assignor could not compute an assignment (the group keeps its previous target)."""


class Assignor(Protocol):
    """A server-side assignor, named by ``group.consumer.assignors`` and the client's ``group.remote.assignor``."""

    @property
    def name(self) -> str: ...

    def assign(
        self, members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, TopicMetadata]
    ) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
        """The target assignment: every member id of ``members`` mapped to its partitions (an empty dict for a
        member given nothing). Deterministic for equal inputs; every partition of a topic someone subscribes to is
        assigned to exactly one of its subscribers; a topic in a subscription but absent from ``topics`` (not
        created yet, or deleted) is ignored."""
        ...
