"""The KIP-848 consumer group state machine driven directly, for its tests (``test_consumer_group_state.py``,
``test_consumer_group_membership.py``): hand-built cluster topics, the group's config with the real ``uniform``
assignor, and ``Client``, a well-behaved consumer that applies every answer at once (revoking immediately) and
reports what it holds; ``check_exclusive`` is the invariant a user cares about: no partition held by two members, on
the coordinator's side or the clients'.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.groups.consumer.assignment import Assignment, TopicMetadata
from broker.groups.consumer.assignors.uniform import UniformAssignor
from broker.groups.consumer.cluster_topics import ClusterTopics
from broker.groups.consumer.group import (
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupState,
    HeartbeatRequest,
    HeartbeatResult,
)

SESSION_MS = 45_000
REBALANCE_MS = 10_000


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"fjord-test/{name}")


def cluster(**partitions: int) -> ClusterTopics:
    by_name = {name: TopicMetadata(topic_id(name), name, count) for name, count in partitions.items()}
    return ClusterTopics(by_name=by_name, regex_visible=frozenset(by_name))


def config(max_size: int = 2**31 - 1) -> ConsumerGroupConfig:
    return ConsumerGroupConfig(
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=5_000,
        max_size=max_size,
        assignors={"uniform": UniformAssignor()},
    )


def parts(name: str, *numbers: int) -> dict[uuid.UUID, frozenset[int]]:
    return {topic_id(name): frozenset(numbers)}


def count(assignment: Assignment | None) -> int:
    return sum(len(ps) for ps in (assignment or {}).values())


def flat(assignment: Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


@dataclass
class Client:
    """A consumer that applies every answer at once (revoking immediately) and reports what it holds."""

    member_id: str
    topics: tuple[str, ...] = ("orders",)
    regex: str | None = None
    instance_id: str | None = None
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    last: HeartbeatResult | None = None

    def heartbeat(
        self, group: ConsumerGroup, now_ms: int, topics: ClusterTopics, *, epoch: int | None = None, full: bool = False
    ) -> HeartbeatResult:
        joining = self.epoch == 0 if epoch is None else epoch == 0
        sending_full = joining or full
        request = HeartbeatRequest(
            member_id=self.member_id,
            member_epoch=self.epoch if epoch is None else epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=REBALANCE_MS if sending_full else -1,
            subscribed_topic_names=(self.topics if self.regex is None else None) if sending_full else None,
            subscribed_topic_regex=self.regex if sending_full else None,
            owned=dict(self.owned),
        )
        result = group.heartbeat(now_ms, request, topics)
        self.last = result
        if result.error is ErrorCode.none and epoch is None:
            self.epoch = result.member_epoch
            if result.assignment is not None:
                self.owned = dict(result.assignment)
        return result

    def leave(self, group: ConsumerGroup, now_ms: int, topics: ClusterTopics, epoch: int = -1) -> HeartbeatResult:
        result = group.heartbeat(
            now_ms, HeartbeatRequest(member_id=self.member_id, member_epoch=epoch, instance_id=self.instance_id), topics
        )
        self.owned = {}
        self.epoch = 0
        return result


def check_exclusive(group: ConsumerGroup, clients: Iterable[Client] = ()) -> None:
    """No partition held by two members: assigned or still being revoked on the coordinator, owned on clients."""
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for member in group.members.values():
        for tp in flat(member.assigned) | flat(member.pending_revocation):
            assert tp not in seen, f"{tp} held by {seen[tp]} and {member.member_id}"
            seen[tp] = member.member_id
    held: dict[tuple[uuid.UUID, int], str] = {}
    for client in clients:
        for tp in flat(client.owned):
            assert tp not in held, f"{tp} owned by clients {held[tp]} and {client.member_id}"
            held[tp] = client.member_id


def settle(group: ConsumerGroup, clients: list[Client], now_ms: int, topics: ClusterTopics, rounds: int = 8) -> None:
    for _ in range(rounds):
        for client in clients:
            assert client.heartbeat(group, now_ms, topics).error is ErrorCode.none
            check_exclusive(group, clients)
        if group.state is ConsumerGroupState.STABLE:
            return


def joined(group: ConsumerGroup, topics: ClusterTopics, *clients: Client, now_ms: int = 0) -> list[Client]:
    out = list(clients)
    for client in out:
        assert client.heartbeat(group, now_ms, topics).error is ErrorCode.none
    settle(group, out, now_ms, topics)
    assert group.state is ConsumerGroupState.STABLE
    return out


ORDERS6 = cluster(orders=6)
