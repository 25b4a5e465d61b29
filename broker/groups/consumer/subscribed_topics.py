"""Which topic names a KIP-848 group's members subscribe to, by name or through a regex, as Kafka's
``ConsumerGroup.subscribedTopicNames`` counts them. A regex counts through what it matched when the group last
resolved it (``regex_matches``, by pattern)."""

from __future__ import annotations

from collections.abc import Mapping

from broker.groups.consumer.member import ConsumerMember


def member_topic_names(member: ConsumerMember, regex_matches: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """The names ``member`` subscribes to: its list and what its regex matched at the last resolution."""
    names = member.subscribed_topic_names
    if member.subscribed_topic_regex:
        names = names | regex_matches.get(member.subscribed_topic_regex, frozenset())
    return names

