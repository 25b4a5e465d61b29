"""A consumer group as DescribeGroups shows it, as Kafka's ``ConsumerGroup.asDescribedGroup`` does: protocol type
``consumer``, the default assignor as protocol data, and each member's subscription and assignment in the classic
consumer protocol's encoding, so tools that only know DescribeGroups (kafka-python, aiokafka, older admin clients)
can read a KIP-848 group too.

Version 0 of the encodings (topics, no user data), which every client parses.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator, Mapping

from broker.groups.consumer.group import ConsumerGroup
from metadata.image import TopicImage

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_NO_USER_DATA = _I32.pack(-1)


def _string(value: str) -> bytes:
    encoded = value.encode("utf-8")
    return _I16.pack(len(encoded)) + encoded


def subscription_bytes(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0."""
    return _I16.pack(0) + _I32.pack(len(topics)) + b"".join(_string(t) for t in topics) + _NO_USER_DATA


def assignment_bytes(partitions: dict[str, list[int]]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    out = [_I16.pack(0), _I32.pack(len(partitions))]
    for topic, ps in partitions.items():
        out.append(_string(topic))
        out.append(_I32.pack(len(ps)))
        out.extend(_I32.pack(p) for p in ps)
    out.append(_NO_USER_DATA)
    return b"".join(out)


def described_members(
    group: ConsumerGroup, topics_by_id: Mapping[uuid.UUID, TopicImage]
) -> Iterator[tuple[str, str | None, str, str, bytes, bytes]]:
    """(member id, instance id, client id, client host, metadata, assignment) of each member, by member id."""
    for member, _target in group.describe_members():
        topics = sorted(member.subscribed_topic_names)
        assigned: dict[str, list[int]] = {}
        for topic_id, ps in member.assigned.items():
            topic = topics_by_id.get(topic_id)
            if topic is not None and ps:
                assigned[topic.name] = sorted(ps)
        yield (
            member.member_id,
            member.instance_id,
            member.client_id,
            member.client_host,
            subscription_bytes(topics),
            assignment_bytes(dict(sorted(assigned.items()))),
        )
