"""The cluster's topics as a consumer group sees them on a heartbeat, and the hash a group stores of the topics
it subscribes to (Kafka 4.1+'s metadata hash), shared by the group and the coordinator that builds them."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from broker.groups.consumer.assignment import TopicMetadata
from broker.name_patterns import matching_names


@dataclass(frozen=True)
class ClusterTopics:
    """The cluster's topics when a heartbeat arrives, by name; one value per metadata image, shared by every
    group's heartbeats until the topics change, so a regex is matched once per image, not once per heartbeat."""

    by_name: Mapping[str, TopicMetadata]
    #: Topics a regex may match: internal topics are never subscribed by pattern.
    regex_visible: frozenset[str]
    _matches: dict[str, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)

    def matching(self, pattern: str) -> frozenset[str]:
        found = self._matches.get(pattern)
        if found is None:
            if len(self._matches) >= 1024:
                self._matches.clear()
            found = self._matches[pattern] = matching_names(pattern, self.regex_visible)
        return found


def metadata_hash(topics: Mapping[uuid.UUID, TopicMetadata]) -> int:
    """A signed 64-bit hash of the subscribed topics' ids, names, partition counts and racks, stable across
    processes (Python's ``hash`` is salted): what ``GroupEpochChanged.metadata_hash`` stores."""
    digest = hashlib.blake2b(digest_size=8)
    for topic in sorted(topics.values(), key=lambda t: t.topic_id.bytes):
        digest.update(topic.topic_id.bytes)
        digest.update(topic.name.encode())
        digest.update(topic.num_partitions.to_bytes(4, "big"))
        for partition in sorted(topic.partition_racks):
            digest.update(f"{partition}:{','.join(sorted(topic.partition_racks[partition]))};".encode())
    return int.from_bytes(digest.digest(), "big", signed=True)
