"""Protocol selection in a classic group, and the one embedded protocol the coordinator can read.

The classic protocol is assignor-agnostic: members name the protocols (assignors) they support, in order of
preference, with opaque metadata for each; the coordinator only picks one that every member supports and relays the
bytes. Kept apart from the state machine because it is a pure function of the members: it decides whether a
joining member fits the group and which protocol a new generation uses, and nothing here changes state.

The exception is the ``consumer`` protocol type (Kafka's ConsumerProtocolSubscription), whose subscribed topics
the coordinator parses so that offsets of topics a live group still reads neither expire nor can be deleted
(KIP-211, OffsetDelete).
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Sequence

from broker.groups.classic.state import Member

CONSUMER_PROTOCOL_TYPE = "consumer"


def supports_protocols(
    members: Collection[Member],
    group_protocol_type: str | None,
    protocol_type: str,
    protocols: tuple[tuple[str, bytes], ...],
) -> bool:
    """Whether a member joining with ``protocol_type`` and ``protocols`` fits the group's current members."""
    names = {name for name, _ in protocols}
    if not members:
        return bool(protocol_type) and bool(names)
    if protocol_type != group_protocol_type:
        return False
    return any(all(name in m.supported_protocols for m in members) for name in names)


def select_protocol(members: Sequence[Member]) -> str:
    """The protocol most members prefer among those every member supports (Kafka's vote)."""
    candidates = frozenset.intersection(*(m.supported_protocols for m in members))
    votes: dict[str, int] = {}
    for member in members:
        choice = member.vote(candidates)
        votes[choice] = votes.get(choice, 0) + 1
    # Ties go to the protocol the first member prefers (deterministic, unlike a hash-map order).
    order = [name for name, _ in members[0].protocols if name in candidates]
    return max(order, key=lambda name: (votes.get(name, 0), -order.index(name)))


def subscribed_topics(
    protocol_type: str | None, protocol_name: str | None, members: Collection[Member]
) -> set[str] | None:
    """Topics the members subscribe to (consumer protocol only); None when that cannot be known."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or protocol_name is None:
        return None
    topics: set[str] = set()
    for member in members:
        if protocol_name not in member.supported_protocols:
            return None
        parsed = parse_subscription_topics(member.metadata_for(protocol_name))
        if parsed is None:
            return None
        topics.update(parsed)
    return topics


def parse_subscription_topics(metadata: bytes) -> list[str] | None:
    """Topics in a ConsumerProtocolSubscription (any version: they all start with version + topic array)."""
    try:
        pos = 2  # int16 version
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        if count < 0:
            return None
        topics = []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.append(metadata[pos : pos + length].decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
