"""Kafka 3.6's broker keys at a node's start: every one is known; one Fjord does not implement stops the node naming
it, one whose purpose Fjord's design makes moot is accepted with an INFO line and described with its reason."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from broker.transactions.state_topic import _transaction_topic_configs
from metadata.remote.channel import ActiveControllerChannel, ControllerUnavailableError
from metadata.rpc import kafka_apis as m
from node.process import Node
from settings.config_key import ConfigValueError
from settings.describe import ConfigSource, describe_broker_configs
from settings.kafka_broker_keys import (
    KAFKA_36_BROKER_KEYS,
    KAFKA_BROKER_KEYS,
    KRAFT_ONLY,
    NO_EFFECT_KEYS,
    NODE_ID_SYNONYM,
    NOT_REPLICATED,
    ONE_EVENT_LOOP,
    kafka_key_refusal,
    no_effect_reason,
    refused_kafka_defaults,
    refused_keys,
)
from settings.keys import BROKER_KEYS, validate_broker_config
from settings.security import refusal as security_refusal
from settings.server import ServerConfig
from storage.config import ConfigError
from testkit.node_process import WireClient, api_versions_request

SERVER_LOGGER = "settings.server"

#: Kafka 3.6's config/kraft/server.properties, its keys and values as Kafka ships them (comments left out).
KAFKA_36_KRAFT_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


#: Kafka 3.6's defaults ("Broker Configs" of its documentation) of keys Fjord does not implement as Kafka does, as a
#: file dumped or templated from a running Kafka sets them; written out here so that they are checked against the
#: documentation, not against what the module says.
KAFKA_36_DEFAULTS = {
    "connection.failed.authentication.delay.ms": "100",
    "controller.quorum.append.linger.ms": "25",
    "controller.socket.timeout.ms": "30000",
    "early.start.listeners": "",
    "initial.broker.registration.timeout.ms": "60000",
    "metadata.log.max.snapshot.interval.ms": "3600000",
    "metadata.log.segment.bytes": "1073741824",
    "metadata.log.segment.ms": "604800000",
    "metadata.max.idle.interval.ms": "500",
    "num.recovery.threads.per.data.dir": "1",
    "offsets.load.buffer.size": "5242880",
    "principal.builder.class": "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
    "replica.selector.class": "",
    "sasl.server.max.receive.size": "524288",
    "socket.connection.setup.timeout.max.ms": "30000",
    "socket.connection.setup.timeout.ms": "10000",
    "ssl.protocol": "TLSv1.3",
    "transaction.state.log.load.buffer.size": "5242880",
    "transaction.state.log.segment.bytes": "104857600",
    "zookeeper.metadata.migration.enable": "false",
    "zookeeper.session.timeout.ms": "18000",
    "zookeeper.set.acl": "false",
}
#: ... and every other Kafka default the catalogue knows: of the refusable keys and of those with no effect.
ALL_KAFKA_DEFAULTS = {
    **refused_kafka_defaults(),
    **{k.name: BROKER_KEYS[k.name].default_text() or "" for k in NO_EFFECT_KEYS if k.default is not None},
    **KAFKA_36_DEFAULTS,
}


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == SERVER_LOGGER and r.levelno >= logging.WARNING]


def infos_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == SERVER_LOGGER and r.levelno == logging.INFO]


def test_every_kafka_broker_key_has_a_disposition() -> None:
    assert len(KAFKA_36_BROKER_KEYS) == 270  # the "Broker Configs" of Kafka 3.6's documentation
    assert len(KAFKA_BROKER_KEYS - KAFKA_36_BROKER_KEYS) == 109  # and those Kafka 4.0-4.2 added
    refused = refused_keys()
    assert refused <= KAFKA_BROKER_KEYS and not refused & BROKER_KEYS.keys()
    assert {key.name for key in NO_EFFECT_KEYS} <= KAFKA_BROKER_KEYS
    for name in KAFKA_BROKER_KEYS:
        known = name in BROKER_KEYS or name == NODE_ID_SYNONYM
        refused_by_security = security_refusal(name, "x") is not None
        refused_here = kafka_key_refusal(name, "x") is not None
        # (Kafka's dynamic Kerberos keys are both: in the catalogue for AlterConfigs, refused in a file by security.)
        assert known or refused_by_security or refused_here, name
        assert not (refused_here and (known or refused_by_security)), name


@pytest.mark.parametrize(
    ("setting", "reason"),
    [
        ("zookeeper.connect=localhost:2181", KRAFT_ONLY),
        ("zookeeper.metadata.migration.enable=true", KRAFT_ONLY),
        ("log.message.timestamp.difference.max.ms=60000", "log.message.timestamp.before.max.ms"),
        ("log.cleaner.threads=4", "one task"),
        ("auto.leader.rebalance.enable=false", "autobalancer.controller.enable"),
        ("metric.reporters=com.example.Reporter", "Java plugin"),
        ("zookeeper.set.acl=true", KRAFT_ONLY),
        ("controller.quorum.append.linger.ms=50", "flushes at once"),
        ("metadata.log.segment.bytes=1048576", "16 MiB"),
        ("early.start.listeners=CONTROLLER", "starts all its listeners together"),
        ("offsets.load.buffer.size=1000", "1 MiB reads"),
        ("sasl.server.max.receive.size=1000", "524288"),
        ("principal.builder.class=com.example.Builder", "DefaultKafkaPrincipalBuilder"),
        # Kafka 4.0-4.2's keys
        ("transaction.two.phase.commit.enable=true", "KIP-939"),
        ("config.providers=file", "Java plugin"),
        ("add.partitions.to.txn.retry.backoff.ms=50", "fixed 20 ms"),
    ],
)
def test_a_refused_key_stops_the_start_with_one_line_naming_it(setting: str, reason: str) -> None:
    with pytest.raises(ConfigError) as raised:
        ServerConfig.load(None, ["num.replica.fetchers=2", setting])
    [line] = str(raised.value).splitlines()  # `fjord server start` prints it after "fjord: configuration error: "
    assert line.startswith(f"{setting.partition('=')[0]}: ") and reason in line


def test_a_value_that_asks_for_what_fjord_does_is_accepted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, SERVER_LOGGER)
    ServerConfig.load(
        None,
        [
            "log.cleaner.threads=1",
            "transaction.partition.verification.enable=true",
            "remote.log.storage.system.enable=false",
            "metric.reporters=",
        ],
    )
    assert "log.cleaner.threads=1 is accepted: it is what Fjord does" in infos_of(caplog)
    assert warnings_of(caplog) == []


def test_a_no_effect_key_starts_with_its_reason_logged_and_described(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, SERVER_LOGGER)
    config = ServerConfig.load(None, ["num.replica.fetchers=4", "replica.lag.time.max.ms=30000"])
    assert infos_of(caplog) == [
        f"num.replica.fetchers has no effect in Fjord: {NOT_REPLICATED}",
        f"replica.lag.time.max.ms has no effect in Fjord: {NOT_REPLICATED}",
    ]
    assert warnings_of(caplog) == []
    names = ("num.replica.fetchers", "replica.fetch.max.bytes")
    entries = {e.name: e for e in describe_broker_configs(config, {}, names=names)}
    given, default = entries["num.replica.fetchers"], entries["replica.fetch.max.bytes"]
    assert (given.value, given.source) == ("4", ConfigSource.STATIC_BROKER_CONFIG)
    assert (default.value, default.source) == ("1048576", ConfigSource.DEFAULT_CONFIG)  # Kafka's default
    assert all(NOT_REPLICATED in (e.documentation or "") for e in entries.values())
    # AlterConfigs takes it as Kafka does: cluster-wide in Kafka, so dynamic, and typed.
    assert validate_broker_config("num.replica.fetchers", "8") == "8"
    with pytest.raises(ConfigValueError, match=r"num\.replica\.fetchers"):
        validate_broker_config("num.replica.fetchers", "many")
    with pytest.raises(ConfigError, match=r"num\.replica\.fetchers"):
        ServerConfig.load(None, ["num.replica.fetchers=many"])


def test_the_thread_counts_have_no_effect_on_one_event_loop_and_keep_kafkas_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """num.network.threads and num.io.threads size Kafka's thread pools; Fjord has one event loop. They start with
    the INFO line saying so, describe with that reason, and a value Kafka refuses (below 1) is still refused."""
    caplog.set_level(logging.INFO, SERVER_LOGGER)
    config = ServerConfig.load(None, ["num.network.threads=6", "num.io.threads=16"])
    assert infos_of(caplog) == [
        f"num.network.threads has no effect in Fjord: {ONE_EVENT_LOOP}",
        f"num.io.threads has no effect in Fjord: {ONE_EVENT_LOOP}",
    ]
    entries = {e.name: e for e in describe_broker_configs(config, {}, names=("num.io.threads",))}
    assert entries["num.io.threads"].value == "16" and ONE_EVENT_LOOP in (entries["num.io.threads"].documentation or "")
    assert validate_broker_config("num.io.threads", "4") == "4"  # dynamic, as Kafka's
    for name in ("num.network.threads", "num.io.threads"):
        with pytest.raises(ConfigValueError, match="Value must be at least 1"):
            validate_broker_config(name, "0")


def test_an_unknown_non_kafka_key_only_warns(caplog: pytest.LogCaptureFixture) -> None:
    config = ServerConfig.load(None, ["foo.bar=1"])
    assert config.static["foo.bar"] == "1"
    assert warnings_of(caplog) == ["The configuration 'foo.bar' was supplied but isn't a known config."]


def test_broker_id_is_kafkas_other_name_for_node_id() -> None:
    assert ServerConfig.load(None, ["broker.id=4", "controller.quorum.voters=4@127.0.0.1:9093"]).node_id == 4
    assert ServerConfig.load(None, ["broker.id=0", "node.id=0"]).node_id == 0
    voters = "controller.quorum.voters=1@127.0.0.1:9093"
    assert ServerConfig.load(None, ["broker.id=01", "node.id=1", voters]).node_id == 1  # the same number
    with pytest.raises(ConfigError, match=r"^broker\.id: 3 differs from node\.id 0"):
        ServerConfig.load(None, ["broker.id=3", "node.id=0"])
    for bad in ("broker.id=one", "broker.id=-1"):
        with pytest.raises(ConfigError, match=r"^broker\.id: '.*' is not a node id"):
            ServerConfig.load(None, [bad, "node.id=0"])


def test_broker_id_is_described_read_only_as_the_node_id() -> None:
    for overrides, source in (
        (["node.id=1", "controller.quorum.voters=1@127.0.0.1:9093"], ConfigSource.STATIC_BROKER_CONFIG),
        ([], ConfigSource.DEFAULT_CONFIG),
    ):
        config = ServerConfig.load(None, overrides)
        [entry] = describe_broker_configs(config, {}, names=[NODE_ID_SYNONYM])
        assert (entry.value, entry.source, entry.read_only) == (str(config.node_id), source, True)
        assert NODE_ID_SYNONYM in [e.name for e in describe_broker_configs(config, {})]
    # Not a dynamic key: AlterConfigs cannot change it.
    with pytest.raises(ConfigValueError, match=r"^Cannot update these configs dynamically: broker\.id$"):
        validate_broker_config(NODE_ID_SYNONYM, "2")


@pytest.mark.parametrize(("name", "default"), sorted(ALL_KAFKA_DEFAULTS.items()))
def test_every_kafka_default_starts_a_node(name: str, default: str, caplog: pytest.LogCaptureFixture) -> None:
    """A properties file dumped or templated from a running Kafka 3.6 sets keys at their defaults: none stops the
    node, whatever Fjord does with the key."""
    ServerConfig.load(None, [f"{name}={default}"])
    assert not [line for line in warnings_of(caplog) if "isn't a known config" in line]


def test_a_file_with_every_kafka_default_at_once_starts(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, SERVER_LOGGER)
    ServerConfig.load(None, [f"{name}={default}" for name, default in ALL_KAFKA_DEFAULTS.items()])
    # (Only that ssl.* and sasl.* keys are given with no listener to use them.)
    assert not [line for line in warnings_of(caplog) if "isn't a known config" in line]
    assert (
        "controller.quorum.append.linger.ms=25 is accepted as Kafka's default, though Fjord does not do what it asks: "
        "not implemented: the quorum leader flushes at once (what arrives during one fsync goes into the next)"
    ) in infos_of(caplog)


def test_replica_selector_class_has_no_effect_as_there_are_no_followers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, SERVER_LOGGER)
    selector = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
    config = ServerConfig.load(None, [f"replica.selector.class={selector}"])
    assert no_effect_reason("replica.selector.class") == NOT_REPLICATED
    assert f"replica.selector.class has no effect in Fjord: {NOT_REPLICATED}" in infos_of(caplog)
    [entry] = describe_broker_configs(config, {}, names=["replica.selector.class"])
    assert entry.value == selector and NOT_REPLICATED in (entry.documentation or "")


def test_ssl_protocol_takes_kafkas_names_and_is_described() -> None:
    for protocol in ("TLSv1.2", "TLSv1.3", "TLS"):
        assert ServerConfig.load(None, [f"ssl.protocol={protocol}"]).value("ssl.protocol") == protocol
    with pytest.raises(ConfigError, match=r"^Invalid value SSLv3 for configuration ssl\.protocol"):
        ServerConfig.load(None, ["ssl.protocol=SSLv3"])  # what Kafka's broker says too
    [entry] = describe_broker_configs(ServerConfig.load(None), {}, names=["ssl.protocol"])
    assert (entry.value, entry.source) == ("TLSv1.3", ConfigSource.DEFAULT_CONFIG)
    assert "ssl.enabled.protocols" in (entry.documentation or "")


def test_transaction_state_log_segment_bytes_sets_the_topics_segment_bytes() -> None:
    config = ServerConfig.load(None, ["transaction.state.log.segment.bytes=52428800"])
    assert _transaction_topic_configs(config)["segment.bytes"] == "52428800"
    assert no_effect_reason("transaction.state.log.segment.bytes") is None


async def test_controller_socket_timeout_ms_caps_each_attempt_at_the_controller() -> None:
    """Kafka bounds each broker-to-controller request by controller.socket.timeout.ms; so does Fjord, below its own
    floor for writes (5 s): a controller that accepts the connection and never answers is left after the cap."""
    held: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = ServerConfig.load(None, ["controller.socket.timeout.ms=200"])
    channel = ActiveControllerChannel(
        {0: ("127.0.0.1", port)},
        client_id="test",
        request_timeout_s=2.0,
        retry_budget_s=0.0,  # one attempt
        max_attempt_s=int(config.value("controller.socket.timeout.ms")) / 1000,
    )
    try:
        with pytest.raises(ControllerUnavailableError, match="TimeoutError"):
            # Uncapped, the attempt would wait 5 s and this bound would fail the test instead.
            await asyncio.wait_for(
                channel.kafka(m.ALLOCATE_PRODUCER_IDS, 0, "allocate producer ids", broker_id=1, broker_epoch=1), 3.0
            )
    finally:
        await channel.close()
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_kafkas_shipped_kraft_server_properties_start_a_node(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, SERVER_LOGGER)
    path = tmp_path / "server.properties"
    path.write_text(KAFKA_36_KRAFT_SERVER_PROPERTIES)
    # Only what a test must change: ports the OS picks and directories of its own.
    overrides = {
        "controller.quorum.voters": "1@127.0.0.1:0",
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "advertised.listeners": "",
        "log.dirs": str(tmp_path / "kraft"),
        "s3.data.buckets": f"0@file://{tmp_path / 'objects'}",
        "s3.wal.path": f"0@file://{tmp_path / 'wal'}",
    }
    node = Node(ServerConfig.load(path, [f"{key}={value}" for key, value in overrides.items()]))
    assert warnings_of(caplog) == []
    assert any(line.startswith("num.recovery.threads.per.data.dir has no effect in Fjord") for line in infos_of(caplog))
    await node.start()
    try:
        assert await asyncio.to_thread(api_versions_error, node.broker.server.bound_port) == 0
    finally:
        await node.stop()


def api_versions_error(port: int) -> int:
    """A blocking ApiVersions round trip (run off the event loop that serves it)."""
    with WireClient(port, timeout=5.0) as client:
        return int(client.request(api_versions_request(3)).error_code)
