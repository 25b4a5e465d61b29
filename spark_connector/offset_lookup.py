"""What the cluster holds, asked on the driver: which partitions a subscription covers now, and their earliest,
latest and by-timestamp offsets.

One :class:`OffsetLookup` wraps a confluent-kafka ``AdminClient``, which batches ListOffsets for many partitions
into one request per leader (a consumer's ``get_watermark_offsets`` would ask partition by partition). The answers
are plain maps that ``offsets`` turns into ranges.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future

from confluent_kafka import IsolationLevel, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

# Public in confluent_kafka.admin, but re-exported there without __all__, which mypy's strict mode does not count.
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._listoffsets import ListOffsetsResultInfo, OffsetSpec
from confluent_kafka.admin._resource import ResourceType

from spark_connector.options import Assign, FjordOptions, Subscribe, client_config, read_uncommitted

__all__ = ["ClusterLookupError", "OffsetLookup"]

TP = tuple[str, int]

REQUEST_TIMEOUT_S = 30.0


class ClusterLookupError(RuntimeError):
    """The cluster could not say which partitions or offsets there are (unreachable, unknown partition, ...)."""


class OffsetLookup:
    """Partitions and offsets of one read's subscription; one instance per planning step (cheap to make)."""

    def __init__(self, options: FjordOptions) -> None:
        self._options = options
        self._admin = AdminClient(client_config(options))
        self._isolation = (IsolationLevel.READ_UNCOMMITTED if read_uncommitted(options)
                           else IsolationLevel.READ_COMMITTED)

    def partitions(self) -> list[TP]:
        """The partitions the subscription covers now: every partition of the named topics that exist (a topic
        that does not exist yet has none), of the non-internal topics matching the pattern, or the assigned ones,
        which must exist."""
        try:
            metadata = self._admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            raise ClusterLookupError(f"could not list the topics of {self._options.bootstrap_servers}: {exc}") from exc
        existing = {name: sorted(topic.partitions) for name, topic in metadata.topics.items()
                    if topic.error is None}
        subscription = self._options.subscription
        if isinstance(subscription, Assign):
            missing = [tp for tp in subscription.partitions if tp[1] not in existing.get(tp[0], ())]
            if missing:
                names = ", ".join(f"{topic}-{partition}" for topic, partition in missing)
                raise ClusterLookupError(f"option 'assign' names partitions that do not exist: {names}")
            return sorted(subscription.partitions)
        if isinstance(subscription, Subscribe):
            topics: Iterable[str] = (topic for topic in subscription.topics if topic in existing)
        else:
            topics = (topic for topic in existing if not topic.startswith("__") and subscription.matches(topic))
        return sorted((topic, partition) for topic in set(topics) for partition in existing[topic])

    def earliest(self, partitions: Iterable[TP]) -> dict[TP, int]:
        # confluent-kafka leaves OffsetSpec.earliest()/latest() unannotated.
        return self._list({tp: OffsetSpec.earliest() for tp in partitions}, "earliest")  # type: ignore[no-untyped-call]

    def latest(self, partitions: Iterable[TP]) -> dict[TP, int]:
        return self._list({tp: OffsetSpec.latest() for tp in partitions}, "latest")  # type: ignore[no-untyped-call]

    def for_timestamps(self, timestamps: Mapping[TP, int]) -> dict[TP, int | None]:
        """The first offset whose timestamp is at or after the given one, or None when no record is that recent."""
        found = self._list({tp: OffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()}, "by timestamp")
        return {tp: (offset if offset >= 0 else None) for tp, offset in found.items()}

    def cluster_id(self) -> str:
        """The cluster id (Metadata's), which names the cluster's objects and KV entries (``_fjord_<clusterId>``)."""
        try:
            found = self._admin.list_topics(timeout=REQUEST_TIMEOUT_S).cluster_id
        except KafkaException as exc:
            raise ClusterLookupError(f"could not read the cluster id of {self._options.bootstrap_servers}: {exc}") \
                from exc
        if not found:
            raise ClusterLookupError(f"{self._options.bootstrap_servers} did not say its cluster id")
        return str(found)

    def topic_ids(self, topics: Iterable[str]) -> dict[str, uuid.UUID]:
        """Each topic's id: the controller keys a partition's streams by it, not by name."""
        names = sorted(set(topics))
        if not names:
            return {}
        futures = self._admin.describe_topics(TopicCollection(names), request_timeout=REQUEST_TIMEOUT_S)
        result: dict[str, uuid.UUID] = {}
        for name, future in futures.items():
            try:
                topic_id = future.result().topic_id
            except KafkaException as exc:
                raise ClusterLookupError(f"could not describe topic {name}: {exc}") from exc
            mask = (1 << 64) - 1
            result[name] = uuid.UUID(int=((topic_id.get_most_significant_bits() & mask) << 64)
                                     | (topic_id.get_least_significant_bits() & mask))
        return result

    def compacted(self, topics: Iterable[str]) -> set[str]:
        """The topics whose ``cleanup.policy`` includes ``compact``."""
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in sorted(set(topics))]
        if not resources:
            return set()
        futures = self._admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
        result: set[str] = set()
        for resource, future in futures.items():
            try:
                entry = future.result().get("cleanup.policy")
            except KafkaException as exc:
                raise ClusterLookupError(f"could not describe the configs of topic {resource.name}: {exc}") from exc
            if entry is not None and "compact" in str(entry.value or ""):
                result.add(resource.name)
        return result

    def _list(self, specs: Mapping[TP, OffsetSpec], what: str) -> dict[TP, int]:
        if not specs:
            return {}
        request = {TopicPartition(topic, partition): spec for (topic, partition), spec in specs.items()}
        futures: dict[TopicPartition, Future[ListOffsetsResultInfo]] = self._admin.list_offsets(
            request, isolation_level=self._isolation, request_timeout=REQUEST_TIMEOUT_S)
        result: dict[TP, int] = {}
        for tp, future in futures.items():
            try:
                result[(tp.topic, tp.partition)] = future.result().offset
            except KafkaException as exc:
                raise ClusterLookupError(
                    f"could not list the {what} offset of {tp.topic}-{tp.partition}: {exc}") from exc
        return result
