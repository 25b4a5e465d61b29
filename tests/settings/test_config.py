"""Server configuration, topic config definitions and DescribeConfigs sources/synonyms."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from settings.config_key import ConfigType, ConfigValueError
from settings.describe import (
    ConfigSource,
    describe_broker_configs,
    describe_topic_configs,
    effective_topic_configs,
    resolve_topic_config,
)
from settings.endpoint import Endpoint
from settings.keys import BROKER_KEYS, NO_GSSAPI, TOPIC_CONFIGS, validate_broker_config, validate_topic_config
from settings.server import ServerConfig
from storage.config import ConfigError

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_server_properties_load(tmp_path: Path) -> None:
    config = ServerConfig.load(REPO / "config" / "server.properties")
    assert config.node_id == 0
    assert config.process_roles == ("broker", "controller")
    assert [(lst.name, lst.port) for lst in config.broker_listeners] == [("PLAINTEXT", 9092)]
    assert config.advertised_endpoints() == (Endpoint("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),)
    assert config.metadata_dir == Path("data/kraft")
    assert config.storage.wal_upload_threshold == 100 * 1024 * 1024  # s3.* keys reach StorageConfig


def test_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "node.id=3\ncontroller.quorum.voters=3@127.0.0.1:9093\nnum.partitions=4\nlog.dirs=/a,/b\n"
        "s3.wal.upload.interval.ms=5\n"
    )
    config = ServerConfig.load(path, ["num.partitions=6", "group.initial.rebalance.delay.ms=0"])
    assert config.node_id == 3 and config.storage.node_id == 3
    assert config.num_partitions == 6
    assert config.group_initial_rebalance_delay_ms == 0
    assert config.log_dirs == (Path("/a"), Path("/b")) and config.metadata_dir == Path("/a")
    assert config.storage.wal_upload_interval_ms == 5
    assert config.static["num.partitions"] == "6"


def test_log_dir_is_the_fallback_of_log_dirs() -> None:
    assert ServerConfig.load(None, ["log.dir=/var/x"]).metadata_dir == Path("/var/x")
    assert ServerConfig.load(None, ["log.dir=/var/x", "log.dirs=/var/y"]).metadata_dir == Path("/var/y")
    assert ServerConfig.load(None, ["metadata.log.dir=/m", "log.dirs=/var/y"]).metadata_dir == Path("/m")
    with pytest.raises(ConfigError, match=r"log\.dirs"):
        ServerConfig.load(None, ["log.dirs="])


def test_a_file_naming_its_log_dirs_and_no_wal_keeps_the_wal_in_the_first_log_dir() -> None:
    """As Kafka keeps all a node writes under its log directories: two brokers started from Kafka's files in one
    directory get a WAL each, and removing the log directories removes the WAL too."""
    def wal(*overrides: str) -> Path:
        return ServerConfig.load(None, list(overrides)).storage.wal_url.path

    assert wal("log.dirs=/tmp/kraft-broker-logs,/disk2") == Path("/tmp/kraft-broker-logs/wal")
    assert wal("log.dir=/var/x") == Path("/var/x/wal")
    assert wal("log.dir=/var/x", "log.dirs=/var/y") == Path("/var/y/wal")
    assert wal("log.dirs=/var/y", "s3.wal.path=0@file:///w") == Path("/w")
    assert wal() == Path("data/wal")  # the built-in default, where a node given neither key always kept it
    # The objects are shared by every node of the cluster, wherever their log directories are.
    assert ServerConfig.load(None, ["log.dirs=/var/y"]).storage.data_buckets[0].path == Path("data/objects")


def test_kafka_defaults() -> None:
    config = ServerConfig.load(None)
    assert config.message_max_bytes == 1048588
    assert config.socket_request_max_bytes == 104857600
    assert config.default_replication_factor == 1 and config.num_partitions == 1
    assert config.auto_create_topics_enable is True
    assert config.group_min_session_timeout_ms == 6000 and config.group_max_session_timeout_ms == 1800000
    assert config.offsets_retention_ms == 7 * 24 * 3600 * 1000
    assert config.transactional_id_expiration_ms == 604800000
    assert config.broker_session_timeout_ms == 9000 and config.broker_heartbeat_interval_ms == 2000
    assert config.value("log.retention.hours") == 168 and config.value("log.retention.ms") is None


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("num.partitions=zero", "num.partitions"),
        ("num.partitions=0", "num.partitions"),
        ("auto.create.topics.enable=maybe", "auto.create.topics.enable"),
        ("listeners=PLAINTEXT//127.0.0.1:9092", "listeners"),
        ("listeners=PLAINTEXT://127.0.0.1:port", "listeners"),
        ("controller.quorum.voters=1@127.0.0.1:9093", "controller.quorum.voters"),
        ("process.roles=worker", "process.roles"),
        ("s3.object.block.size=-1", "s3.object.block.size"),
        ("log.cleanup.policy=keep", "log.cleanup.policy"),
    ],
)
def test_bad_values_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        ServerConfig.load(None, [override])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("node_id", ["0", "1"])
def test_a_dynamic_quorum_stops_the_start_naming_the_key(node_id: str) -> None:
    """A Kafka 4 config that names several controllers only in controller.quorum.bootstrap.servers would otherwise
    run against the embedded default voters (node 0 alone: a cluster of its own). Its standalone form is served
    (tests/settings/test_quorum_voters.py)."""
    kafka4 = [f"node.id={node_id}", "controller.quorum.bootstrap.servers=127.0.0.1:9093,127.0.0.1:9094"]
    with pytest.raises(ConfigError) as info:
        ServerConfig.load(None, kafka4)
    assert str(info.value).startswith("controller.quorum.bootstrap.servers: 127.0.0.1:9093, 127.0.0.1:9094 is not only")
    assert "controller.quorum.voters" in str(info.value) and "\n" not in str(info.value)
    assert ServerConfig.load(None).voters, "neither key: the embedded single node still starts"


def test_duplicate_process_roles_are_refused_as_kafka_refuses_them() -> None:
    with pytest.raises(ConfigError) as info:
        ServerConfig.load(None, ["process.roles=broker,broker"])
    assert str(info.value) == "Duplicate role names found in `process.roles`: [broker, broker]"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["process.roles=controller", "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"],
            "The listeners config must only contain KRaft controller listeners from controller.listener.names when "
            "process.roles=controller",
        ),
        (
            ["process.roles=broker", "controller.quorum.voters=1@127.0.0.1:9093"],  # the default listeners: both
            "controller.listener.names must not contain a value appearing in the 'listeners' configuration when "
            "running KRaft with just the broker role",
        ),
    ],
)
def test_a_listener_in_the_wrong_role_is_refused_as_kafka_refuses_it(overrides: list[str], message: str) -> None:
    """Nothing would bind it: Kafka's KafkaConfig.validateValues refuses the configuration, with these messages."""
    with pytest.raises(ConfigError) as info:
        ServerConfig.load(None, overrides)
    assert str(info.value) == message


def test_a_properties_file_that_is_not_utf8_is_read_as_iso_8859_1(tmp_path: Path) -> None:
    """Kafka reads properties files as ISO-8859-1: an accented comment or value from such a file loads."""
    path = tmp_path / "server.properties"
    path.write_bytes("# r\u00e9glages du n\u00e9ud\nbroker.rack=b\u00e9ta\nnum.partitions=2\n".encode("iso-8859-1"))
    config = ServerConfig.load(path)
    assert config.rack == "b\u00e9ta" and config.num_partitions == 2
    path.write_text("# r\u00e9glages\nbroker.rack=b\u00e9ta\n", encoding="utf-8")  # UTF-8 stays UTF-8
    assert ServerConfig.load(path).rack == "b\u00e9ta"


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        ServerConfig.load(tmp_path / "nope.properties")


def test_advertised_listeners_default_to_the_broker_listeners() -> None:
    config = ServerConfig.load(None, ["listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"])
    assert [e.name for e in config.advertised_endpoints()] == ["PLAINTEXT"]


def test_every_topic_config_has_a_valid_default_and_known_synonyms() -> None:
    for name, definition in TOPIC_CONFIGS.items():
        text = definition.default_text()
        assert text is not None, name
        assert validate_topic_config(name, text) == text, name
        for synonym in definition.synonyms:
            assert synonym.name in BROKER_KEYS, (name, synonym.name)


@pytest.mark.parametrize(
    ("name", "value", "normalized"),
    [
        ("retention.ms", "-1", "-1"),
        ("cleanup.policy", "compact, delete", "compact,delete"),
        ("compression.type", "zstd", "zstd"),
        ("min.cleanable.dirty.ratio", "0.25", "0.25"),
        ("preallocate", "TRUE", "true"),
        ("message.timestamp.type", "LogAppendTime", "LogAppendTime"),
    ],
)
def test_valid_topic_values(name: str, value: str, normalized: str) -> None:
    assert validate_topic_config(name, value) == normalized


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("retention.ms", "soon", "Invalid value soon for configuration retention.ms: Not a number of type LONG"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("segment.bytes", "13", "segment.bytes"),
        ("cleanup.policy", "forever", "forever"),
        ("compression.type", "brotli", "String must be one of"),
        ("min.cleanable.dirty.ratio", "1.5", "no more than"),
        ("max.message.bytes", "99999999999", "Not a number of type INT"),
        ("preallocate", "yes", "true or false"),
        ("no.such.config", "1", "Unknown topic config name: no.such.config"),
    ],
)
def test_invalid_topic_values(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigValueError, match=message):
        validate_topic_config(name, value)


def test_broker_configs_must_be_known_and_dynamic() -> None:
    assert validate_broker_config("log.retention.ms", "100") == "100"
    with pytest.raises(ConfigValueError, match="dynamically"):
        validate_broker_config("node.id", "2")
    with pytest.raises(ConfigValueError, match="Unknown broker config"):
        validate_broker_config("nope", "2")


#: Kafka's dynamic Kerberos keys (DynamicListenerConfig) and their defaults.
KERBEROS_KEYS = {
    "sasl.kerberos.service.name": None,
    "sasl.kerberos.kinit.cmd": "/usr/bin/kinit",
    "sasl.kerberos.ticket.renew.window.factor": "0.8",
    "sasl.kerberos.ticket.renew.jitter": "0.05",
    "sasl.kerberos.min.time.before.relogin": "60000",
    "sasl.kerberos.principal.to.local.rules": "DEFAULT",
}


def test_kafkas_dynamic_kerberos_keys_are_accepted_without_effect_at_run_time_and_refused_in_a_file() -> None:
    # What librdkafka's 0081 admin test sets on broker 0 with AlterConfigs, as Kafka accepts it without GSSAPI.
    assert validate_broker_config("sasl.kerberos.min.time.before.relogin", "58000") == "58000"
    assert validate_broker_config("sasl.kerberos.ticket.renew.jitter", "0.1") == "0.1"
    with pytest.raises(ConfigValueError, match=re.escape("sasl.kerberos.min.time.before.relogin: Not a number")):
        validate_broker_config("sasl.kerberos.min.time.before.relogin", "soon")
    node = {"sasl.kerberos.min.time.before.relogin": "58000"}
    entries = {e.name: e for e in describe_broker_configs(ServerConfig.load(None), {}, node, names=KERBEROS_KEYS)}
    assert {name: e.value for name, e in entries.items()} == {**KERBEROS_KEYS, **node}
    assert entries["sasl.kerberos.min.time.before.relogin"].source is ConfigSource.DYNAMIC_BROKER_CONFIG
    assert all(not e.read_only and e.documentation == NO_GSSAPI for e in entries.values())
    # Written in a node's file they ask for Kerberos, which Fjord does not serve: the node does not start.
    with pytest.raises(ConfigError, match=re.escape("sasl.kerberos.min.time.before.relogin: not implemented")):
        ServerConfig.load(None, ["sasl.kerberos.min.time.before.relogin=58000"])


def test_topic_config_defaults_come_from_the_broker_synonym() -> None:
    config = ServerConfig.load(None)
    entry = resolve_topic_config("retention.ms", config, {}, {})
    assert entry.value == "604800000" and entry.source is ConfigSource.DEFAULT_CONFIG
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG)
    ]
    assert entry.config_type is ConfigType.LONG


def test_source_precedence_topic_dynamic_node_dynamic_cluster_static_default() -> None:
    config = ServerConfig.load(None, ["log.retention.hours=24"])
    static = resolve_topic_config("retention.ms", config, {}, {})
    assert (static.value, static.source) == (str(24 * 3600 * 1000), ConfigSource.STATIC_BROKER_CONFIG)

    cluster = resolve_topic_config("retention.ms", config, {"log.retention.ms": "5000"}, {})
    assert (cluster.value, cluster.source) == ("5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)

    node = resolve_topic_config("retention.ms", config, {"log.retention.ms": "5000"}, {}, {"log.retention.ms": "7"})
    assert (node.value, node.source) == ("7", ConfigSource.DYNAMIC_BROKER_CONFIG)

    topic = resolve_topic_config("retention.ms", config, {"log.retention.ms": "5000"}, {"retention.ms": "1"})
    assert (topic.value, topic.source) == ("1", ConfigSource.TOPIC_CONFIG)
    assert [(s.name, s.source) for s in topic.synonyms] == [
        ("retention.ms", ConfigSource.TOPIC_CONFIG),
        ("log.retention.ms", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", ConfigSource.DEFAULT_CONFIG),
    ]


def test_describe_topic_lists_every_config_or_only_those_asked() -> None:
    config = ServerConfig.load(None, ["message.max.bytes=2000000"])
    entries = describe_topic_configs(config, {}, {"cleanup.policy": "compact"})
    by_name = {e.name: e for e in entries}
    assert set(by_name) == set(TOPIC_CONFIGS)
    assert by_name["cleanup.policy"].value == "compact"
    assert by_name["max.message.bytes"].value == "2000000"
    assert by_name["max.message.bytes"].source is ConfigSource.STATIC_BROKER_CONFIG
    only = describe_topic_configs(config, {}, {}, names=["segment.bytes", "bogus"])
    assert [e.name for e in only] == ["segment.bytes"]


def test_describe_broker_reports_read_only_for_static_keys() -> None:
    config = ServerConfig.load(None, ["num.io.threads=4"])
    entries = {e.name: e for e in describe_broker_configs(config, {"log.retention.ms": "9"})}
    assert entries["node.id"].read_only and entries["node.id"].value == "0"
    assert entries["num.io.threads"].source is ConfigSource.STATIC_BROKER_CONFIG
    assert not entries["num.io.threads"].read_only
    assert entries["log.retention.ms"].value == "9"
    assert entries["log.retention.ms"].source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    cluster = describe_broker_configs(config, {"log.retention.ms": "9"}, cluster_default=True)
    assert [(e.name, e.value) for e in cluster] == [("log.retention.ms", "9")]


def test_a_node_upgraded_with_segments_left_in_the_earlier_wal_keeps_that_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the WAL followed log.dirs, such a node's WAL was data/wal under the directory it started in: records
    acknowledged but not uploaded may wait in its segments (after a kill -9, or a quorum's last node stopping)."""
    monkeypatch.chdir(tmp_path)
    logs = tmp_path / "kraft"

    def wal() -> Path:
        return ServerConfig.load(None, [f"log.dirs={logs}"]).storage.wal_url.path

    (tmp_path / "data" / "wal").mkdir(parents=True)
    (tmp_path / "data" / "wal" / "00000000000000000000.wal").write_bytes(b"\0" * 64)
    assert wal() == logs / "wal", "a node that never ran has no earlier WAL"
    logs.mkdir()
    (logs / "meta.properties").write_text("node.id=0\nversion=1\n")
    assert wal() == Path("data/wal")
    (tmp_path / "data" / "wal" / "00000000000000000000.wal").unlink()  # no segment: nothing there to replay
    assert wal() == logs / "wal"
    (tmp_path / "data" / "wal" / "00000000000000000064.wal").write_bytes(b"\0" * 64)
    (logs / "wal").mkdir()
    assert wal() == logs / "wal", "once the node has its own WAL, it keeps it"


def test_a_node_given_bootstrap_servers_describes_no_voter_as_its_default() -> None:
    """Not the embedded node's built-in voter, which a node configured from Kafka 4's files does not use."""
    def voters(*overrides: str) -> tuple[str | None, ConfigSource]:
        config = ServerConfig.load(None, list(overrides))
        [entry] = describe_broker_configs(config, {}, names=["controller.quorum.voters"])
        return entry.value, entry.source

    assert voters("controller.quorum.bootstrap.servers=127.0.0.1:9093") == ("", ConfigSource.DEFAULT_CONFIG)
    assert voters() == ("0@127.0.0.1:9093", ConfigSource.DEFAULT_CONFIG)
    given = ("controller.quorum.voters=0@127.0.0.1:9093", "controller.quorum.bootstrap.servers=127.0.0.1:9093")
    assert voters(*given) == ("0@127.0.0.1:9093", ConfigSource.STATIC_BROKER_CONFIG)


def test_effective_topic_configs_are_typed_and_follow_precedence() -> None:
    config = ServerConfig.load(None, ["log.retention.hours=2", "message.max.bytes=5000"])
    values = effective_topic_configs(
        config, {"log.cleanup.policy": "compact"}, {"max.message.bytes": "7000", "preallocate": "true"}
    )
    assert set(values) == set(TOPIC_CONFIGS)
    assert values["retention.ms"] == 2 * 3600 * 1000
    assert values["max.message.bytes"] == 7000
    assert values["cleanup.policy"] == ["compact"]
    assert values["preallocate"] is True
    assert values["min.cleanable.dirty.ratio"] == 0.5
    assert values["message.timestamp.type"] == "CreateTime"


def test_metrics_port_is_typed_and_range_checked_when_the_config_loads() -> None:
    # Node serves metrics on exactly this value; a bad port must stop the node at load, naming the key.
    assert ServerConfig.load(None, ["metrics.port=9102"]).value("metrics.port") == 9102
    assert ServerConfig.load(None, []).value("metrics.port") is None
    for bad in ("70000", "-1", "x"):
        with pytest.raises(ConfigError, match=r"metrics\.port"):
            ServerConfig.load(None, [f"metrics.port={bad}"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("s3.endpoint=http://minio:9000", "s3.endpoint: AutoMQ's older bucket setting, which Fjord does not read; "
         "give the bucket as one URL, s3.data.buckets=0@s3://BUCKET?region=R&endpoint=URL&pathStyle=true"),
        ("s3.bucket=prod-data", "s3.bucket: AutoMQ's older bucket setting"),
        ("s3.wal.upload.treshold=1MiB", "s3.wal.upload.treshold: not a storage setting of Fjord (did you mean "
         "s3.wal.upload.threshold?)"),
        ("s3.data.buckets=0@s3://b?pathStyle=maybe", "s3.data.buckets: bucket URL parameter pathStyle='maybe' is not "
         "true or false"),
        ("s3.data.buckets=0@s3://b?region=r&pathstyle=true", "s3.data.buckets: unknown bucket URL parameter "
         "'pathstyle' (s3:// URLs take region, endpoint, pathStyle, accessKey, secretKey)"),
        ("s3.data.buckets=0@file:///objects?region=r", "s3.data.buckets: unknown bucket URL parameter 'region' "
         "(file:// URLs take none)"),
        ("s3.data.buckets=0@s3://b?endpoint=minio:9000", "s3.data.buckets: bucket URL parameter "
         "endpoint='minio:9000' is not an http:// or https:// URL"),
        ("s3.data.buckets=0@s3://b?batchInterval=5", "s3.data.buckets: bucket URL parameter 'batchInterval' is for "
         "the WAL's URL only (s3.wal.path)"),
        ("s3.wal.path=0@s3://b?batchInterval=soon", "s3.wal.path: bucket URL parameter batchInterval='soon' is not "
         "a positive integer"),
    ],
)
def test_a_storage_key_or_bucket_url_parameter_fjord_does_not_read_stops_the_start(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        ServerConfig.load(None, [override])
    assert str(info.value).startswith(message), str(info.value)


def test_a_bucket_url_error_never_shows_the_secret_key() -> None:
    for url in ("0@s3://b?secretKey=hunter2&zz=1", "x@s3://b?secretKey=hunter2", "0@s3://?secretKey=hunter2"):
        with pytest.raises(ConfigError) as info:
            ServerConfig.load(None, [f"s3.data.buckets={url}"])
        assert "s3.data.buckets" in str(info.value) and "hunter2" not in str(info.value), str(info.value)


def test_every_storage_key_and_url_parameter_the_readme_documents_loads() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    refused = {"s3.endpoint", "s3.region", "s3.bucket", "s3.path.style"}  # AutoMQ's older keys, named as refused
    documented = sorted(set(re.findall(r"`(s3\.[a-z.]+[a-z])`", readme)) - refused)
    assert "s3.data.buckets" in documented and "s3.wal.upload.threshold" in documented
    values = {"s3.data.buckets": "0@s3://b?region=eu-west-1&endpoint=http://127.0.0.1:9000&pathStyle=TRUE"
              "&accessKey=a&secretKey=s", "s3.wal.path": "0@s3://b?batchInterval=250&maxBytesInBatch=8388608"}
    config = ServerConfig.load(None, [f"{key}={values.get(key, '2000')}" for key in documented])
    assert config.storage.data_buckets[0].path_style and config.storage.wal_url.params["batchInterval"] == "250"
