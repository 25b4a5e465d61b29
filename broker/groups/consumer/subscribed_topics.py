"""Which topic names a KIP-848 group's members subscribe to, by name or through a regex, as Kafka's
``ConsumerGroup.subscribedTopicNames`` counts them: what the assignor sees, and what OffsetDelete and offset
expiry must leave alone (``isSubscribedToTopic``).

A regex counts through what it matched when the group last resolved it (``regex_matches``, by pattern). A group
just loaded from ``__consumer_offsets`` has not resolved its members' regexes yet (Kafka reads their resolution
back from its own records; Fjord resolves again at the next heartbeat), so until then a topic counts when the
pattern matches its name: a live group's offsets are never taken for an idle group's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from broker.groups.consumer.member import ConsumerMember
from broker.name_patterns import matching_names


def member_topic_names(member: ConsumerMember, regex_matches: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """The names ``member`` subscribes to: its list and what its regex matched at the last resolution."""
    names = member.subscribed_topic_names
    if member.subscribed_topic_regex:
        names = names | regex_matches.get(member.subscribed_topic_regex, frozenset())
    return names


def subscribes_to(
    members: Iterable[ConsumerMember], regex_matches: Mapping[str, frozenset[str]], topic: str
) -> bool:
    """Whether any member subscribes to ``topic`` (Kafka's ``isSubscribedToTopic``), whether the topic exists
    or not and whether the group's topics were refreshed since it was loaded or not."""
    for member in members:
        if topic in member.subscribed_topic_names:
            return True
        regex = member.subscribed_topic_regex
        if regex:
            matched = regex_matches.get(regex)
            if topic in (matched if matched is not None else matching_names(regex, frozenset((topic,)))):
                return True
    return False
