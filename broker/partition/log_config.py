"""The topic configs the partition log enforces, with Kafka's names.

settings is the one definition of every topic config (type, broker synonyms, Kafka's default) and of how
a topic's effective values resolve; this module only picks the values the partition log acts on into a typed record,
so the log never re-implements a lookup or carries a default of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from settings.keys import BROKER_KEYS, TOPIC_CONFIGS


def _default(name: str) -> Any:
    return TOPIC_CONFIGS[name].key.default


_CHECKPOINT_MS: int = BROKER_KEYS["log.flush.offset.checkpoint.interval.ms"].default
_CHECKPOINT_BYTES: int = BROKER_KEYS["log.flush.offset.checkpoint.interval.bytes"].default


@dataclass(frozen=True, slots=True)
class LogConfig:
    max_message_bytes: int = _default("max.message.bytes")
    log_append_time: bool = _default("message.timestamp.type") == "LogAppendTime"
    timestamp_before_max_ms: int = _default("message.timestamp.before.max.ms")
    timestamp_after_max_ms: int = _default("message.timestamp.after.max.ms")
    index_interval_bytes: int = _default("index.interval.bytes")
    #: ``cleanup.policy`` contains ``delete``: retention.ms / retention.bytes trim the log (compact-only topics such
    #: as ``__consumer_offsets`` are left to compaction).
    delete_retention_enabled: bool = "delete" in _default("cleanup.policy")
    #: ``retention.ms``; negative keeps records forever.
    retention_ms: int = _default("retention.ms")
    #: ``retention.bytes``; negative means no size limit.
    retention_bytes: int = _default("retention.bytes")
    #: ``cleanup.policy`` contains ``compact``: the log cleaner keeps the latest record per key, and produce rejects
    #: records without a key (as Kafka does).
    compact: bool = "compact" in _default("cleanup.policy")
    #: ``delete.retention.ms``: how long the cleaner keeps a tombstone (a record with a null value).
    delete_retention_ms: int = _default("delete.retention.ms")
    #: ``min.compaction.lag.ms``: records younger than this are never cleaned.
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    #: ``max.compaction.lag.ms``: a dirty record older than this makes the partition cleanable whatever its ratio.
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    #: ``min.cleanable.dirty.ratio``: the share of uncleaned bytes at which the partition is worth a round.
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    producer_id_expiration_ms: int = BROKER_KEYS["producer.id.expiration.ms"].default
    #: ``log.flush.offset.checkpoint.interval.bytes``: checkpoint the recovery point (producer snapshot, PARTITION)
    #: once this many bytes were appended since the last one, bounding what an unclean restart replays ...
    checkpoint_interval_bytes: int = _CHECKPOINT_BYTES
    #: ... ``log.flush.offset.checkpoint.interval.ms``: or this long after the first append since the last one.
    checkpoint_interval_ms: int = _CHECKPOINT_MS

    @classmethod
    def from_effective(
        cls,
        effective: Mapping[str, Any],
        *,
        producer_id_expiration_ms: int,
        checkpoint_interval_ms: int = _CHECKPOINT_MS,
        checkpoint_interval_bytes: int = _CHECKPOINT_BYTES,
    ) -> LogConfig:
        """From a topic's typed values as :func:`settings.describe.effective_topic_configs` resolves them
        (topic override, dynamic and static broker synonyms, Kafka default; invalid values already replaced by
        defaults); the broker-only keys come from the server config."""
        return cls(
            max_message_bytes=effective["max.message.bytes"],
            log_append_time=effective["message.timestamp.type"] == "LogAppendTime",
            timestamp_before_max_ms=effective["message.timestamp.before.max.ms"],
            timestamp_after_max_ms=effective["message.timestamp.after.max.ms"],
            index_interval_bytes=effective["index.interval.bytes"],
            delete_retention_enabled="delete" in effective["cleanup.policy"],
            retention_ms=effective["retention.ms"],
            retention_bytes=effective["retention.bytes"],
            compact="compact" in effective["cleanup.policy"],
            delete_retention_ms=effective["delete.retention.ms"],
            min_compaction_lag_ms=effective["min.compaction.lag.ms"],
            max_compaction_lag_ms=effective["max.compaction.lag.ms"],
            min_cleanable_dirty_ratio=effective["min.cleanable.dirty.ratio"],
            producer_id_expiration_ms=producer_id_expiration_ms,
            checkpoint_interval_ms=checkpoint_interval_ms,
            checkpoint_interval_bytes=checkpoint_interval_bytes,
        )
