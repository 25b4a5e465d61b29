"""The cluster's topics as a consumer group sees them on a heartbeat, and the hash a group stores of the topics
it subscribes to (Kafka 4.1+'s metadata hash), shared by the group and the coordinator that builds them."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from broker.groups.consumer.assignment import TopicMetadata
from broker.name_patterns import matching_names


@dataclass(frozen=True)
class ClusterTopics:
    """The cluster's topics when a heartbeat arrives, by name; one value per metadata image, shared by every
    group's heartbeats until the topics change, so a regex is matched once per image, not once per heartbeat."""

    by_name: Mapping[str, TopicMetadata]
    #: Topics a regex may match: internal topics are never subscribed by pattern (nor, with an authorizer, topics
    #: the heartbeating member's principal may not DESCRIBE: :meth:`describable_by`).
    regex_visible: frozenset[str]
    #: The views one image and one set of ACLs give different principals share it (:attr:`resolution`).
    generation: object = field(default=None, repr=False, compare=False)
    _matches: dict[str, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)

    @property
    def resolution(self) -> object:
        """What a group's regex resolution was computed on: a group resolves its regexes again when this changes
        (the topics or the ACLs), not at every heartbeat of a member whose principal sees other topics (as Kafka
        resolves them with the principal of the heartbeat that finds them stale)."""
        return self if self.generation is None else self.generation

    def describable_by(self, describable: Callable[[str], bool], generation: object) -> ClusterTopics:
        """This view with the topics a regex may match narrowed to those ``describable`` (a principal's TOPIC
        DESCRIBE), as Kafka's regex resolution filters them: a pattern is no way to be assigned a topic one may
        not see."""
        visible = frozenset(name for name in self.regex_visible if describable(name))
        return ClusterTopics(self.by_name, visible, generation)

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
