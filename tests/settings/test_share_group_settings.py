"""Share groups' settings (KIP-932) as a Kafka 4.2 operator writes them: the ``group.share.*`` broker keys with
Kafka's defaults and ranges, refused at start naming the key, and a group's effective config: its GROUP configs in
the metadata image over the broker's values, within the broker's bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from metadata.cluster_records import ConfigRecord, FeatureLevelRecord
from metadata.group_configs import consumer_group_config, share_group_config, share_groups_enabled
from metadata.image import MetadataImage
from settings.config_key import ConfigValueError
from settings.config_resources import RESOURCE_GROUP
from settings.describe import ConfigSource
from settings.group_configs import by_duration_ms, describe_group_configs, duration_ms, validate_group_configs
from settings.server import ServerConfig
from settings.share_groups import READ_COMMITTED, READ_UNCOMMITTED
from storage.config import ConfigError
from testkit.node_process import default_overrides, server_command
from tests.node.cli_exit import assert_one_line_error, run_to_exit


def test_kafka_42_defaults() -> None:
    settings = ServerConfig.load(None).share_groups
    assert (settings.session_timeout_ms, settings.min_session_timeout_ms, settings.max_session_timeout_ms) == (
        45000, 45000, 60000)
    assert (settings.heartbeat_interval_ms, settings.min_heartbeat_interval_ms,
            settings.max_heartbeat_interval_ms) == (5000, 5000, 15000)
    assert (settings.record_lock_duration_ms, settings.min_record_lock_duration_ms,
            settings.max_record_lock_duration_ms) == (30000, 15000, 60000)
    assert (settings.delivery_count_limit, settings.partition_max_record_locks) == (5, 2000)
    assert (settings.max_size, settings.max_share_sessions, settings.assignors) == (200, 2000, ("simple",))


def test_values_inside_kafkas_ranges_are_taken() -> None:
    settings = ServerConfig.load(None, [
        "group.share.record.lock.duration.ms=1000", "group.share.min.record.lock.duration.ms=1000",
        "group.share.delivery.count.limit=10", "group.share.partition.max.record.locks=100",
        "group.share.session.timeout.ms=6000", "group.share.min.session.timeout.ms=6000",
        "group.share.heartbeat.interval.ms=1000", "group.share.min.heartbeat.interval.ms=1000",
        "group.share.assignors=org.apache.kafka.coordinator.group.assignor.SimpleAssignor",
    ]).share_groups
    assert (settings.record_lock_duration_ms, settings.delivery_count_limit) == (1000, 10)
    assert (settings.session_timeout_ms, settings.heartbeat_interval_ms) == (6000, 1000)
    assert settings.assignors == ("simple",)
    assert settings.default_group_config().partition_max_record_locks == 100


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("group.share.delivery.count.limit=1", "group.share.delivery.count.limit"),
        ("group.share.delivery.count.limit=11", "group.share.delivery.count.limit"),
        ("group.share.record.lock.duration.ms=999", "group.share.record.lock.duration.ms"),
        ("group.share.min.record.lock.duration.ms=30001", "group.share.min.record.lock.duration.ms"),
        ("group.share.max.record.lock.duration.ms=29999", "group.share.max.record.lock.duration.ms"),
        ("group.share.partition.max.record.locks=99", "group.share.partition.max.record.locks"),
        ("group.share.partition.max.record.locks=10001", "group.share.partition.max.record.locks"),
        ("group.share.max.size=1001", "group.share.max.size"),
        ("group.share.max.share.sessions=0", "group.share.max.share.sessions"),
        ("group.share.max.share.sessions=100", r"group.share.max.share.sessions \(100\) must be greater than or equal "
                                                r"to group.share.max.size \(200\)"),
        ("group.share.record.lock.duration.ms=70000", r"group.share.record.lock.duration.ms \(70000\) must be between"),
        ("group.share.session.timeout.ms=30000", r"group.share.session.timeout.ms \(30000\) must be between"),
        ("group.share.heartbeat.interval.ms=20000", r"group.share.heartbeat.interval.ms \(20000\) must be between"),
        ("group.share.assignors=uniform", "group.share.assignors: unknown assignor 'uniform'"),
        ("group.share.session.timeout.ms=abc", "group.share.session.timeout.ms"),
    ],
)
def test_bad_values_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        ServerConfig.load(None, [override])
    assert "\n" not in str(info.value)


def test_heartbeat_must_be_below_the_session_timeout_and_one_assignor_only() -> None:
    with pytest.raises(ConfigError, match=r"group\.share\.heartbeat\.interval\.ms \(9000\) must be smaller than"):
        ServerConfig.load(None, ["group.share.heartbeat.interval.ms=9000", "group.share.session.timeout.ms=9000",
                                 "group.share.min.session.timeout.ms=1000",
                                 "group.share.max.heartbeat.interval.ms=9000"])
    with pytest.raises(ConfigError, match="exactly one assignor, but found 2"):
        ServerConfig.load(None, ["group.share.assignors=simple,simple"])


def test_a_kafka_file_naming_the_share_protocol_starts() -> None:
    config = ServerConfig.load(None, ["group.coordinator.rebalance.protocols=classic,consumer,share"])
    assert config.consumer_groups.enabled and config.share_groups.max_size == 200


def test_fjord_server_start_refuses_a_bad_share_key_in_one_line(tmp_path: Path) -> None:
    settings = default_overrides(tmp_path)
    settings["group.share.record.lock.duration.ms"] = "500"
    assert_one_line_error(run_to_exit(server_command(None, settings)), "group.share.record.lock.duration.ms")


# ---------------------------------------------------------------------------------------------- group configs
def _image(group: str, **configs: str) -> MetadataImage:
    return MetadataImage("c").apply(
        [ConfigRecord(RESOURCE_GROUP, group, key.replace("_", "."), value) for key, value in configs.items()], 1
    )


def test_a_group_runs_with_its_configs_over_the_brokers() -> None:
    config = ServerConfig.load(None, ["group.share.record.lock.duration.ms=20000",
                                      "group.share.delivery.count.limit=3"])
    settings = config.share_groups
    image = _image("orders", share_record_lock_duration_ms="45000", share_isolation_level="read_committed")
    mine = share_group_config(image, settings, "orders")
    assert (mine.record_lock_duration_ms, mine.isolation_level, mine.delivery_count_limit) == (45000, READ_COMMITTED, 3)
    other = share_group_config(image, settings, "billing")
    assert (other.record_lock_duration_ms, other.isolation_level, other.auto_offset_reset) == (
        20000, READ_UNCOMMITTED, "latest")
    assert other == settings.default_group_config()
    # Deleting the key (a null ConfigRecord) returns the group to the broker's value.
    gone = image.apply([ConfigRecord(RESOURCE_GROUP, "orders", "share.record.lock.duration.ms", None)], 2)
    assert share_group_config(gone, settings, "orders").record_lock_duration_ms == 20000
    assert gone.group_configs == {"orders": {"share.isolation.level": "read_committed"}}
    assert MetadataImage("c").apply(gone.to_records(), 2).group_configs == gone.group_configs  # snapshots keep them


def test_a_stored_value_is_held_within_bounds_the_broker_narrowed_since() -> None:
    narrow = ServerConfig.load(None, ["group.share.max.record.lock.duration.ms=40000"]).share_groups
    image = _image("orders", share_record_lock_duration_ms="60000")
    assert share_group_config(image, narrow, "orders").record_lock_duration_ms == 40000


def test_consumer_group_config_resolves_the_same_way() -> None:
    consumer = ServerConfig.load(None).consumer_groups
    image = _image("cg", consumer_session_timeout_ms="50000")
    assert (consumer_group_config(image, consumer, "cg").session_timeout_ms,
            consumer_group_config(image, consumer, "cg").heartbeat_interval_ms) == (50000, 5000)


def test_share_groups_follow_the_share_version_feature() -> None:
    fresh = MetadataImage("c")
    assert share_groups_enabled(fresh)  # a new cluster finalizes share.version 1, as Kafka 4.2 does
    finalized = fresh.apply([FeatureLevelRecord("metadata.version", 14)], 1)
    assert not share_groups_enabled(finalized)  # a cluster finalized before share.version existed: off
    assert share_groups_enabled(finalized.apply([FeatureLevelRecord("share.version", 1)], 2))


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"share.record.lock.duration.ms": "70000"},
         "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
        ({"share.record.lock.duration.ms": "10000"},
         "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
        ({"share.record.lock.duration.ms": "999"}, "share.record.lock.duration.ms"),
        ({"share.session.timeout.ms": "61000"}, "share.session.timeout.ms must be less than or equal to "
                                                "group.share.max.session.timeout.ms"),
        ({"share.heartbeat.interval.ms": "4000"}, "share.heartbeat.interval.ms must be greater than or equal to "
                                                  "group.share.min.heartbeat.interval.ms"),
        ({"consumer.session.timeout.ms": "40000"}, "consumer.session.timeout.ms must be greater than or equal to "
                                                   "group.consumer.min.session.timeout.ms"),
        ({"share.auto.offset.reset": "newest"}, "share.auto.offset.reset"),
        ({"share.auto.offset.reset": "by_duration:-PT1H"}, "Negative duration is not allowed"),
        ({"share.auto.offset.reset": "by_duration:1 hour"}, "share.auto.offset.reset"),
        ({"share.isolation.level": "READ_COMMITTED"}, "share.isolation.level"),
        ({"share.delivery.count.limit": "3"}, "Unknown group config name: share.delivery.count.limit"),
        ({"streams.session.timeout.ms": "45000"}, "Unknown group config name: streams.session.timeout.ms"),
    ],
)
def test_group_values_outside_the_brokers_bounds_are_refused_naming_the_key(
    configs: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigValueError, match=message):
        validate_group_configs(configs, ServerConfig.load(None).value)


def test_heartbeat_of_a_group_must_stay_below_its_session_timeout() -> None:
    value = ServerConfig.load(None, ["group.share.max.heartbeat.interval.ms=50000"]).value
    with pytest.raises(ConfigValueError, match=r"share\.session\.timeout\.ms must be greater than "
                                               r"share\.heartbeat\.interval\.ms"):
        validate_group_configs({"share.heartbeat.interval.ms": "45000"}, value)
    both = {"share.heartbeat.interval.ms": "45000", "share.session.timeout.ms": "50000"}
    assert validate_group_configs(both, value) == both


def test_auto_offset_reset_by_duration() -> None:
    value = ServerConfig.load(None).value
    stored = validate_group_configs({"share.auto.offset.reset": "By_Duration:p1dt2h30m0.5s"}, value)
    assert stored == {"share.auto.offset.reset": "by_duration:P1DT2H30M0.5S"}
    assert by_duration_ms(stored["share.auto.offset.reset"]) == ((24 + 2) * 60 + 30) * 60_000 + 500
    assert by_duration_ms("earliest") is None
    assert duration_ms("PT15M") == 900_000
    for bad in ("P", "PT", "P1H", "1D"):
        with pytest.raises(ValueError, match="ISO-8601"):
            duration_ms(bad)


def test_describe_shows_the_groups_value_or_the_brokers() -> None:
    value = ServerConfig.load(None, ["group.share.record.lock.duration.ms=20000"]).value
    entries = {e.name: e for e in describe_group_configs({"share.session.timeout.ms": "50000"}, value, None)}
    assert set(entries) == {
        "consumer.heartbeat.interval.ms", "consumer.session.timeout.ms", "share.auto.offset.reset",
        "share.heartbeat.interval.ms", "share.isolation.level", "share.record.lock.duration.ms",
        "share.session.timeout.ms",
    }
    assert (entries["share.session.timeout.ms"].value, entries["share.session.timeout.ms"].source) == (
        "50000", ConfigSource.GROUP_CONFIG)
    assert (entries["share.record.lock.duration.ms"].value, entries["share.record.lock.duration.ms"].source) == (
        "20000", ConfigSource.DEFAULT_CONFIG)
    only = describe_group_configs({}, value, ("share.isolation.level",))
    assert [(e.name, e.value) for e in only] == [("share.isolation.level", "read_uncommitted")]
