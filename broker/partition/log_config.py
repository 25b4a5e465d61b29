"""The topic configs the partition log enforces, with Kafka's names.

The effective values come from controller.config's resolution (topic override, then the broker synonyms
``log.message.timestamp.type`` etc., then Kafka's default) so there is one definition of every default; values
that do not parse fall back to the default with a warning instead of failing the partition, because the
controller already validated them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

logger = logging.getLogger(__name__)

_LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    max_message_bytes: int = 1048588
    log_append_time: bool = False  # message.timestamp.type=LogAppendTime
    timestamp_before_max_ms: int = _LONG_MAX
    timestamp_after_max_ms: int = _LONG_MAX
    index_interval_bytes: int = 4096
    producer_id_expiration_ms: int = 86_400_000
    #: Persist producer state and the partition record after this many appended bytes, bounding recovery.
    checkpoint_interval_bytes: int = 16 << 20
    #: ... or after this long with appends, whichever comes first.
    checkpoint_interval_ms: int = 30_000

    @classmethod
    def from_lookup(cls, lookup: Callable[[str], str | None], *, producer_id_expiration_ms: int) -> LogConfig:
        """Builds the config from ``lookup(topic config name) -> effective value`` (controller.config's
        resolution: topic override, dynamic and static broker synonyms, Kafka default)."""

        def as_int(name: str, default: int) -> int:
            raw = lookup(name)
            if raw is None:
                return default
            try:
                return int(raw)
            except ValueError:
                logger.warning("ignoring invalid %s=%r (using %d)", name, raw, default)
                return default

        return cls(
            max_message_bytes=as_int("max.message.bytes", 1048588),
            log_append_time=(lookup("message.timestamp.type") or "CreateTime") == "LogAppendTime",
            timestamp_before_max_ms=as_int("message.timestamp.before.max.ms", _LONG_MAX),
            timestamp_after_max_ms=as_int("message.timestamp.after.max.ms", _LONG_MAX),
            index_interval_bytes=as_int("index.interval.bytes", 4096),
            producer_id_expiration_ms=producer_id_expiration_ms,
        )

    @classmethod
    def from_configs(cls, topic: Mapping[str, str], broker: Mapping[str, str] | None = None) -> LogConfig:
        """Topic configs over broker synonyms (``log.`` prefixed), without controller.config's defaults."""
        broker = broker or {}
        synonyms = {"max.message.bytes": "message.max.bytes"}

        def lookup(name: str) -> str | None:
            return topic.get(name) or broker.get(synonyms.get(name, f"log.{name}"))

        expiration = broker.get("producer.id.expiration.ms")
        return cls.from_lookup(lookup, producer_id_expiration_ms=int(expiration) if expiration else 86_400_000)
