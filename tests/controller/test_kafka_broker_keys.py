"""Kafka 3.6's broker keys at a node's start: every one is known; one Fjord does not implement stops the node naming
it, one whose purpose Fjord's design makes moot is accepted with an INFO line and described with its reason."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from controller.config.describe import ConfigSource, describe_broker_configs
from controller.config.kafka_broker_keys import (
    KAFKA_BROKER_KEYS,
    KRAFT_ONLY,
    NO_EFFECT_KEYS,
    NODE_ID_SYNONYM,
    NOT_REPLICATED,
    kafka_key_refusal,
    refused_keys,
)
from controller.config.keys import BROKER_KEYS, ConfigValueError, validate_broker_config
from controller.config.security import refusal as security_refusal
from controller.config.server import ServerConfig
from node.process import Node
from storage.config import ConfigError
from tests.broker.broker_support import WireClient, api_versions_request

SERVER_LOGGER = "controller.config.server"

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


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == SERVER_LOGGER and r.levelno >= logging.WARNING]


def infos_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == SERVER_LOGGER and r.levelno == logging.INFO]


def test_every_kafka_broker_key_has_a_disposition() -> None:
    assert len(KAFKA_BROKER_KEYS) == 270  # the "Broker Configs" of Kafka 3.6's documentation
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


def test_an_unknown_non_kafka_key_only_warns(caplog: pytest.LogCaptureFixture) -> None:
    config = ServerConfig.load(None, ["foo.bar=1"])
    assert config.static["foo.bar"] == "1"
    assert warnings_of(caplog) == ["The configuration 'foo.bar' was supplied but isn't a known config."]


def test_broker_id_is_kafkas_other_name_for_node_id() -> None:
    assert ServerConfig.load(None, ["broker.id=4", "controller.quorum.voters=4@127.0.0.1:9093"]).node_id == 4
    assert ServerConfig.load(None, ["broker.id=0", "node.id=0"]).node_id == 0
    with pytest.raises(ConfigError, match=r"^broker\.id: 3 differs from node\.id 0"):
        ServerConfig.load(None, ["broker.id=3", "node.id=0"])


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
        assert await asyncio.to_thread(api_versions_error, node.server.bound_port) == 0
    finally:
        await node.stop()


def api_versions_error(port: int) -> int:
    """A blocking ApiVersions round trip (run off the event loop that serves it)."""
    with WireClient(port, timeout=5.0) as client:
        return int(client.request(api_versions_request(3)).error_code)
