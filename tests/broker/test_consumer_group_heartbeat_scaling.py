"""What one steady-state ConsumerGroupHeartbeat costs the sans-I/O consumer group as the group grows.

A member heartbeating at its epoch with nothing changed (the request every member sends every interval) should cost
the coordinator about the same in a group of 2,000 as in a group of 50: the issue asks for 5,000 heartbeats/s on
one core, and a group's heartbeat rate already grows with its size. Today ``ConsumerGroup._refresh_subscription``
walks every member's subscription on every heartbeat (and ``next_deadline_ms`` every member's deadline), so the
cost grows with the group: about 20 us per heartbeat at 50 members, 90 us at 500, 330 us at 2,000 on the 2-core
development machine (``bench/consumer_groups.py --members 500`` answers 5,600 heartbeats per broker CPU-second,
against 11,000 at 50 members).
"""

from __future__ import annotations

import statistics
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from broker.groups.consumer.assignment import TopicMetadata
from broker.groups.consumer.assignors.uniform import UniformAssignor
from broker.groups.consumer.cluster_topics import ClusterTopics, metadata_hash
from broker.groups.consumer.group import ConsumerGroup, ConsumerGroupConfig, HeartbeatRequest
from broker.groups.consumer.member import ConsumerMember

TOPIC = "orders"
TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_URL, "fjord-test/orders")


def settled_group(members: int) -> tuple[ConsumerGroup, ClusterTopics, list[HeartbeatRequest]]:
    """A group of ``members`` over 4 partitions each, every member stable at the group epoch owning its target (as
    a coordinator restores a settled group from ``__consumer_offsets``: built directly, not through 2,000 joins);
    returns it with each member's steady heartbeat (epoch only, every other field null: unchanged)."""
    topic = TopicMetadata(TOPIC_ID, TOPIC, 4 * members)
    topics = ClusterTopics(by_name={TOPIC: topic}, regex_visible=frozenset({TOPIC}))
    config = ConsumerGroupConfig(heartbeat_interval_ms=5_000, assignors={"uniform": UniformAssignor()})
    settled = [
        ConsumerMember(
            member_id=f"m{i}", subscribed_topic_names=frozenset({TOPIC}), rebalance_timeout_ms=10_000, member_epoch=3,
            previous_member_epoch=2, assigned={TOPIC_ID: frozenset(range(4 * i, 4 * i + 4))},
        )
        for i in range(members)
    ]
    group = ConsumerGroup.restored(
        "scaling", config, 0, group_epoch=3, metadata_hash=metadata_hash({TOPIC_ID: topic}), target_epoch=3,
        target={m.member_id: m.assigned for m in settled}, members=settled,
    )
    steady = [HeartbeatRequest(member_id=m.member_id, member_epoch=3) for m in settled]
    first = group.heartbeat(1, steady[0], topics)  # the first heartbeat after the load sees the same topics
    assert (first.error, first.member_epoch, group.group_epoch) == (ErrorCode.none, 3, 3)
    group.take_changes()
    return group, topics, steady


def steady_heartbeat_seconds(members: int, heartbeats: int = 2_000) -> float:
    """Median seconds per steady heartbeat (with the deadline the runtime re-arms its timer by after each)."""
    group, topics, steady = settled_group(members)
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        for i in range(heartbeats):
            result = group.heartbeat(2, steady[i % members], topics)
            group.next_deadline_ms()
        samples.append((time.perf_counter() - started) / heartbeats)
        assert result.error is ErrorCode.none and not group.take_changes()
    return statistics.median(samples)


@pytest.mark.xfail(strict=True, reason="group.py: every steady heartbeat walks every member (_refresh_subscription, "
                                       "next_deadline_ms), so its cost grows with the group")
def test_a_steady_heartbeat_costs_about_the_same_in_a_large_group() -> None:
    small, large = steady_heartbeat_seconds(50), steady_heartbeat_seconds(2_000)
    assert large < 3 * small, f"{small * 1e6:.0f} us per heartbeat at 50 members, {large * 1e6:.0f} us at 2,000"
