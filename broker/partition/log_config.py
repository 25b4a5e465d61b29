"""The topic configs the partition log enforces, parsed once per open with Kafka's names and defaults.

Topic configs override broker-wide ones (``log.message.timestamp.type`` for ``message.timestamp.type`` etc.), as
in Kafka; values that do not parse fall back to the default with a warning instead of failing the partition,
because the controller already validated them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
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
    def from_configs(cls, topic: Mapping[str, str], broker: Mapping[str, str] | None = None) -> LogConfig:
        broker = broker or {}

        def pick(topic_key: str, broker_key: str) -> str | None:
            return topic.get(topic_key) or broker.get(broker_key)

        def as_int(topic_key: str, broker_key: str, default: int) -> int:
            raw = pick(topic_key, broker_key)
            if raw is None:
                return default
            try:
                return int(raw)
            except ValueError:
                logger.warning("ignoring invalid %s=%r (using %d)", topic_key, raw, default)
                return default

        ts_type = pick("message.timestamp.type", "log.message.timestamp.type") or "CreateTime"
        return cls(
            max_message_bytes=as_int("max.message.bytes", "message.max.bytes", 1048588),
            log_append_time=ts_type == "LogAppendTime",
            timestamp_before_max_ms=as_int(
                "message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms", _LONG_MAX
            ),
            timestamp_after_max_ms=as_int(
                "message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms", _LONG_MAX
            ),
            index_interval_bytes=as_int("index.interval.bytes", "log.index.interval.bytes", 4096),
            producer_id_expiration_ms=as_int("producer.id.expiration.ms", "producer.id.expiration.ms", 86_400_000),
        )
