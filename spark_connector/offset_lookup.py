"""What the cluster holds, asked on the driver: which partitions a subscription covers now, and their earliest,
latest and by-timestamp offsets.

One :class:`OffsetLookup` wraps a confluent-kafka ``AdminClient``, which batches ListOffsets for many partitions
into one request per leader (a consumer's ``get_watermark_offsets`` would ask partition by partition). The answers
are plain maps that ``offsets`` turns into ranges.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future

from confluent_kafka import IsolationLevel, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

# Public in confluent_kafka.admin, but re-exported there without __all__, which mypy's strict mode does not count.
from confluent_kafka.admin._listoffsets import ListOffsetsResultInfo, OffsetSpec

from spark_connector.options import Assign, FjordOptions, Subscribe, client_config, read_uncommitted

__all__ = ["ClusterLookupError", "OffsetLookup"]

TP = tuple[str, int]

REQUEST_TIMEOUT_S = 30.0
#: Between two lookups of offsets a partition did not answer (its leader moving or restarting).
RETRY_PAUSE_S = 0.5


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
        return self._positions(OffsetSpec.earliest(), partitions, "earliest")  # type: ignore[no-untyped-call]

    def latest(self, partitions: Iterable[TP]) -> dict[TP, int]:
        return self._positions(OffsetSpec.latest(), partitions, "latest")  # type: ignore[no-untyped-call]

    def _positions(self, spec: OffsetSpec, partitions: Iterable[TP], what: str) -> dict[TP, int]:
        """Earliest or latest offsets. While a partition has no leader for a moment (its broker restarting), the
        answer is an error or no offset (-1001), which a streaming query must not take for the partition's end
        (nor for data loss): such partitions are asked again until ``REQUEST_TIMEOUT_S`` has passed, as Spark's
        Kafka source retries its offset lookups. After an error the admin client is made anew: librdkafka's keeps
        asking with the leader epoch it cached (FENCED_LEADER_EPOCH once the restarted leader has a new one)."""
        wanted = list(partitions)
        found: dict[TP, int] = {}
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while True:
            error: ClusterLookupError | None = None
            try:
                answer = self._list({tp: spec for tp in wanted if tp not in found}, what)
            except ClusterLookupError as exc:
                answer, error = {}, exc
                self._admin = AdminClient(client_config(self._options))
            found.update((tp, offset) for tp, offset in answer.items() if offset >= 0)
            missing = [tp for tp in wanted if tp not in found]
            if not missing:
                return found
            if time.monotonic() >= deadline:
                names = ", ".join(f"{topic}-{partition}" for topic, partition in missing)
                raise error or ClusterLookupError(f"no {what} offset of {names} within {REQUEST_TIMEOUT_S:.0f} s")
            time.sleep(RETRY_PAUSE_S)

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
