"""LogConfig takes its defaults and values from settings's resolution, so what DescribeConfigs reports for a
topic is what its partitions enforce."""

from __future__ import annotations

from broker.partition.log_config import LogConfig
from settings.describe import describe_topic_configs, effective_topic_configs
from settings.server import ServerConfig


def _enforced(config: ServerConfig, cluster: dict[str, str], topic: dict[str, str]) -> LogConfig:
    effective = effective_topic_configs(config, cluster, topic)
    return LogConfig.from_effective(effective, producer_id_expiration_ms=int(config.value("producer.id.expiration.ms")))


def test_defaults_are_the_values_describe_configs_reports_for_a_plain_topic() -> None:
    config = ServerConfig.load(None, [])
    reported = {e.name: e.value for e in describe_topic_configs(config, {}, {})}
    default = LogConfig()
    assert default == _enforced(config, {}, {})
    assert str(default.timestamp_after_max_ms) == reported["message.timestamp.after.max.ms"] == "3600000"
    assert str(default.max_message_bytes) == reported["max.message.bytes"]
    assert not default.log_append_time and reported["message.timestamp.type"] == "CreateTime"


def test_topic_overrides_beat_dynamic_then_static_broker_synonyms() -> None:
    config = ServerConfig.load(
        None, ["log.message.timestamp.type=LogAppendTime", "log.index.interval.bytes=100", "message.max.bytes=900"]
    )
    enforced = _enforced(
        config,
        {"log.message.timestamp.after.max.ms": "5000", "message.max.bytes": "800"},
        {"index.interval.bytes": "1"},
    )
    assert enforced.log_append_time  # static broker synonym
    assert enforced.timestamp_after_max_ms == 5000  # cluster-wide dynamic synonym
    assert enforced.max_message_bytes == 800  # dynamic beats static
    assert enforced.index_interval_bytes == 1  # topic override beats the broker
