"""A consumer group as DescribeGroups shows it, as Kafka's ``ConsumerGroup.asDescribedGroup`` does: protocol type
``consumer``, the default assignor as protocol data, and each member's subscription and assignment in the classic
consumer protocol's encoding, so tools that only know DescribeGroups (kafka-python, aiokafka, older admin clients)
can read a KIP-848 group too.

Version 0 of the encodings (topics, no user data), which every client parses.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping

from broker.groups.consumer.consumer_protocol import assignment_bytes, subscription_bytes
from broker.groups.consumer.group import ConsumerGroup
from metadata.image import TopicImage


def described_members(
    group: ConsumerGroup, topics_by_id: Mapping[uuid.UUID, TopicImage]
) -> Iterator[tuple[str, str | None, str, str, bytes, bytes]]:
    """(member id, instance id, client id, client host, metadata, assignment) of each member, by member id."""
    for member, _target in group.describe_members():
        topics = sorted(member.subscribed_topic_names)
        assigned: dict[str, frozenset[int]] = {}
        for topic_id, ps in member.assigned.items():
            topic = topics_by_id.get(topic_id)
            if topic is not None and ps:
                assigned[topic.name] = frozenset(ps)
        yield (
            member.member_id,
            member.instance_id,
            member.client_id,
            member.client_host,
            subscription_bytes(topics),
            assignment_bytes(assigned, 0),
        )
