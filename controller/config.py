"""Server configuration: every non-storage key, the topic config definitions, and ``meta.properties``.

One place for each key, with Kafka's name, type, default and validation. Three consumers share it:

- process start: :meth:`ServerConfig.load` reads a ``server.properties`` file plus ``--override key=value`` pairs
  (the ``s3.*`` keys are parsed by :class:`storage.config.StorageConfig`, composed here, not duplicated);
- the controller: :func:`validate_topic_config` / :func:`validate_broker_config` check CreateTopics, AlterConfigs
  and IncrementalAlterConfigs values;
- DescribeConfigs and CreateTopics v5+: :func:`describe_topic_configs` / :func:`describe_broker_configs` report
  each value with its source and synonyms exactly as Kafka orders them (topic, dynamic per-broker, dynamic
  cluster default, static file, built-in default).

Deliberate departures from Kafka's defaults are marked ``# fjord:`` with the reason.
"""

from __future__ import annotations

import base64
import enum
import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from controller.metadata_records import RESOURCE_BROKER, RESOURCE_TOPIC, Endpoint
from storage.config import ConfigError, StorageConfig, parse_overrides, read_properties
from storage.durable import write_atomically

logger = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000


class ConfigValueError(ConfigError):
    """A config value (or key) a client sent is invalid; the message is what the client sees (INVALID_CONFIG)."""


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigs config sources."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigType(enum.IntEnum):
    """Kafka's DescribeConfigs config types (v3+ ``config_type``)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of a DescribeConfigs (or CreateTopics v5+) answer."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool = False
    is_sensitive: bool = False
    config_type: ConfigType = ConfigType.STRING
    synonyms: tuple[ConfigSynonym, ...] = ()


# ---------------------------------------------------------------------- typed values

Validator = Callable[[Any], str | None]  # returns the reason a parsed value is invalid, or None


def _parse_typed(kind: ConfigType, text: str) -> Any:
    """Parses ``text`` as Kafka's ConfigDef does; raises ValueError with Kafka's wording."""
    stripped = text.strip()
    if kind is ConfigType.BOOLEAN:
        lower = stripped.lower()
        if lower not in ("true", "false"):
            raise ValueError("Expected value to be either true or false")
        return lower == "true"
    if kind in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
        bounds = {ConfigType.INT: INT_MAX, ConfigType.LONG: LONG_MAX, ConfigType.SHORT: 2**15 - 1}[kind]
        try:
            number = int(stripped)
        except ValueError:
            raise ValueError(f"Not a number of type {kind.name}") from None
        if not -bounds - 1 <= number <= bounds:
            raise ValueError(f"Not a number of type {kind.name}")
        return number
    if kind is ConfigType.DOUBLE:
        try:
            return float(stripped)
        except ValueError:
            raise ValueError("Not a number of type DOUBLE") from None
    if kind is ConfigType.LIST:
        return [item.strip() for item in stripped.split(",") if item.strip()] if stripped else []
    return stripped if kind is not ConfigType.PASSWORD else text


def _render(kind: ConfigType, value: Any) -> str | None:
    if value is None:
        return None
    if kind is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if kind is ConfigType.LIST:
        return ",".join(value)
    return str(value)


def at_least(minimum: float) -> Validator:
    return lambda v: None if v is None or v >= minimum else f"Value must be at least {minimum}"


def between(low: float, high: float) -> Validator:
    return lambda v: (
        None if v is None or low <= v <= high else f"Value must be no less than {low} and no more than {high}"
    )


def one_of(*allowed: str, case_sensitive: bool = True) -> Validator:
    def check(v: Any) -> str | None:
        if v is None:
            return None
        matches = v in allowed if case_sensitive else str(v).lower() in {a.lower() for a in allowed}
        return None if matches else f"String must be one of: {', '.join(allowed)}"

    return check


def all_of(*allowed: str) -> Validator:
    """Every list item must be one of ``allowed`` (cleanup.policy)."""

    def check(v: Any) -> str | None:
        bad = [item for item in v or [] if item not in allowed]
        return f"Invalid value(s) {', '.join(bad)}; allowed: {', '.join(allowed)}" if bad else None

    return check


def either(first: Validator, second: Validator) -> Validator:
    return lambda v: None if first(v) is None or second(v) is None else first(v)


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key: Kafka's name, type, default (typed, None = no default) and validator."""

    name: str
    type: ConfigType
    default: Any = None
    validator: Validator | None = None
    dynamic: bool = False  # brokers: may be changed with AlterConfigs (cluster-wide or per broker)

    def parse(self, text: str) -> Any:
        """The typed value of ``text``; ConfigValueError with Kafka's message if it is not valid."""
        try:
            value = _parse_typed(self.type, text)
        except ValueError as exc:
            raise ConfigValueError(f"Invalid value {text} for configuration {self.name}: {exc}") from None
        reason = self.validator(value) if self.validator is not None else None
        if reason is not None:
            raise ConfigValueError(f"Invalid value {text} for configuration {self.name}: {reason}")
        return value

    def render(self, value: Any) -> str | None:
        return _render(self.type, value)

    def default_text(self) -> str | None:
        return _render(self.type, self.default)


# ---------------------------------------------------------------------- broker keys

_B = ConfigType
_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_SEGMENT_BYTES_FLOOR = 14  # LegacyRecord.RECORD_OVERHEAD_V0 in Kafka 3.x

# fjord: offsets.topic.num.partitions and transaction.state.log.num.partitions default to 10, not Kafka's 50. Every
# Fjord partition is a KV entry plus up to four streams in the metadata log, created when the topic is first used;
# 50 of them make the first FindCoordinator of a fresh single node take seconds. Ten still spreads coordinators over
# ten brokers, and the value is fixed at the topic's creation, so a cluster that needs more sets it before first use.
INTERNAL_TOPIC_PARTITIONS = 10

BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        # identity and networking (static)
        # The cluster id a quorum formats with (`kafka-storage format -t` in KRaft); unset: derived from the voters.
        ConfigKey("cluster.id", _B.STRING, None),
        ConfigKey("node.id", _B.INT, 0, at_least(0)),  # fjord: the embedded default needs one (Kafka: required)
        ConfigKey("process.roles", _B.LIST, ["broker", "controller"], all_of("broker", "controller")),
        ConfigKey("listeners", _B.STRING, "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"),
        ConfigKey("advertised.listeners", _B.STRING, None),
        ConfigKey("controller.listener.names", _B.LIST, ["CONTROLLER"]),
        ConfigKey("inter.broker.listener.name", _B.STRING, None),
        ConfigKey(
            "listener.security.protocol.map",
            _B.STRING,
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        ),
        ConfigKey("controller.quorum.voters", _B.LIST, ["0@127.0.0.1:9093"]),
        ConfigKey("controller.quorum.bootstrap.servers", _B.LIST, []),
        ConfigKey("controller.quorum.election.timeout.ms", _B.INT, 1000, at_least(1)),
        ConfigKey("controller.quorum.fetch.timeout.ms", _B.INT, 2000, at_least(1)),
        ConfigKey("controller.quorum.election.backoff.max.ms", _B.INT, 1000, at_least(1)),
        ConfigKey("controller.quorum.request.timeout.ms", _B.INT, 2000, at_least(1)),
        ConfigKey("log.dirs", _B.LIST, ["data/kraft"]),
        ConfigKey("log.dir", _B.STRING, None),  # fjord: no /tmp default; used only when log.dirs is not set
        ConfigKey("metadata.log.dir", _B.STRING, None),
        ConfigKey("metadata.log.max.record.bytes.between.snapshots", _B.LONG, 20 * 1024 * 1024, at_least(1)),
        ConfigKey("broker.rack", _B.STRING, None),
        ConfigKey("socket.request.max.bytes", _B.INT, 104857600, at_least(1)),
        ConfigKey("socket.send.buffer.bytes", _B.INT, 102400),
        ConfigKey("socket.receive.buffer.bytes", _B.INT, 102400),
        ConfigKey("connections.max.idle.ms", _B.LONG, 600000),
        ConfigKey("max.connections", _B.INT, INT_MAX, at_least(0), dynamic=True),
        ConfigKey("num.network.threads", _B.INT, 3, at_least(1), dynamic=True),
        ConfigKey("num.io.threads", _B.INT, 8, at_least(1), dynamic=True),
        ConfigKey("request.timeout.ms", _B.INT, 30000, at_least(0)),
        # cluster membership
        ConfigKey("broker.session.timeout.ms", _B.INT, 9000, at_least(1)),
        ConfigKey("broker.heartbeat.interval.ms", _B.INT, 2000, at_least(1)),
        # How long a reassigned partition waits for its source broker to close its streams before the target is
        # elected anyway (a dead or stuck source; DESIGN §9). AutoMQ waits 10 s too.
        ConfigKey("partition.reassignment.election.timeout.ms", _B.INT, 10000, at_least(0)),
        # topics
        ConfigKey("num.partitions", _B.INT, 1, at_least(1)),
        ConfigKey("default.replication.factor", _B.INT, 1, at_least(1)),
        ConfigKey("auto.create.topics.enable", _B.BOOLEAN, True),
        ConfigKey("delete.topic.enable", _B.BOOLEAN, True),
        ConfigKey("message.max.bytes", _B.INT, 1048588, at_least(0), dynamic=True),
        ConfigKey("compression.type", _B.STRING, "producer", one_of(*_COMPRESSION), dynamic=True),
        ConfigKey("compression.gzip.level", _B.INT, -1, either(between(1, 9), between(-1, -1)), dynamic=True),
        ConfigKey("compression.lz4.level", _B.INT, 9, between(1, 17), dynamic=True),
        ConfigKey("compression.zstd.level", _B.INT, 3, between(-131072, 22), dynamic=True),
        ConfigKey("min.insync.replicas", _B.INT, 1, at_least(1), dynamic=True),
        ConfigKey("unclean.leader.election.enable", _B.BOOLEAN, False, dynamic=True),
        ConfigKey("log.retention.ms", _B.LONG, None, at_least(-1), dynamic=True),
        ConfigKey("log.retention.minutes", _B.INT, None, at_least(-1)),
        ConfigKey("log.retention.hours", _B.INT, 168, at_least(-1)),
        ConfigKey("log.retention.bytes", _B.LONG, -1, dynamic=True),
        ConfigKey("log.retention.check.interval.ms", _B.LONG, 300000, at_least(1)),
        ConfigKey("log.cleanup.policy", _B.LIST, ["delete"], all_of("compact", "delete"), dynamic=True),
        ConfigKey("log.cleaner.enable", _B.BOOLEAN, True),
        ConfigKey("log.cleaner.delete.retention.ms", _B.LONG, 86400000, at_least(0), dynamic=True),
        ConfigKey("log.cleaner.min.compaction.lag.ms", _B.LONG, 0, at_least(0), dynamic=True),
        ConfigKey("log.cleaner.max.compaction.lag.ms", _B.LONG, LONG_MAX, at_least(1), dynamic=True),
        ConfigKey("log.cleaner.min.cleanable.ratio", _B.DOUBLE, 0.5, between(0, 1), dynamic=True),
        ConfigKey("log.cleaner.backoff.ms", _B.LONG, 15000, at_least(0), dynamic=True),
        ConfigKey("log.cleaner.dedupe.buffer.size", _B.LONG, 128 * 1024 * 1024, dynamic=True),
        ConfigKey("log.message.timestamp.type", _B.STRING, "CreateTime", one_of(*_TIMESTAMP_TYPES), dynamic=True),
        ConfigKey("log.message.timestamp.before.max.ms", _B.LONG, LONG_MAX, at_least(0), dynamic=True),
        ConfigKey("log.message.timestamp.after.max.ms", _B.LONG, 3600000, at_least(0), dynamic=True),
        ConfigKey("log.message.downconversion.enable", _B.BOOLEAN, True, dynamic=True),
        # Kafka 3.x's floor (the smallest possible record); Kafka 4.0 raised it to 1 MiB, but 3.6 clients and
        # their test suites still create topics with small segments. Fjord has no segments, so any size is safe.
        ConfigKey("log.segment.bytes", _B.INT, 1073741824, at_least(_SEGMENT_BYTES_FLOOR), dynamic=True),
        # Deprecated since Kafka 3.0 and ignored there (every batch is v2); accepted so 3.x clients can still set it.
        ConfigKey("log.message.format.version", _B.STRING, "3.0-IV1", dynamic=True),
        ConfigKey("log.segment.delete.delay.ms", _B.LONG, 60000, at_least(0), dynamic=True),
        ConfigKey("log.roll.ms", _B.LONG, None, at_least(1), dynamic=True),
        ConfigKey("log.roll.hours", _B.INT, 168, at_least(1)),
        ConfigKey("log.roll.jitter.ms", _B.LONG, None, at_least(0), dynamic=True),
        ConfigKey("log.roll.jitter.hours", _B.INT, 0, at_least(0)),
        ConfigKey("log.index.interval.bytes", _B.INT, 4096, at_least(0), dynamic=True),
        ConfigKey("log.index.size.max.bytes", _B.INT, 10485760, at_least(4), dynamic=True),
        ConfigKey("log.flush.interval.messages", _B.LONG, LONG_MAX, at_least(1), dynamic=True),
        ConfigKey("log.flush.interval.ms", _B.LONG, None, at_least(0), dynamic=True),
        ConfigKey("log.flush.scheduler.interval.ms", _B.LONG, LONG_MAX),
        ConfigKey("log.preallocate", _B.BOOLEAN, False, dynamic=True),
        # groups and offsets
        ConfigKey("group.initial.rebalance.delay.ms", _B.INT, 3000, at_least(0)),
        ConfigKey("group.min.session.timeout.ms", _B.INT, 6000),
        ConfigKey("group.max.session.timeout.ms", _B.INT, 1800000),
        ConfigKey("group.max.size", _B.INT, INT_MAX, at_least(1)),
        ConfigKey("offsets.topic.num.partitions", _B.INT, INTERNAL_TOPIC_PARTITIONS, at_least(1)),
        ConfigKey("offsets.topic.replication.factor", _B.SHORT, 1, at_least(1)),  # fjord: Kafka 3 (one node)
        ConfigKey("offsets.topic.segment.bytes", _B.INT, 104857600, at_least(1)),
        ConfigKey("offsets.retention.minutes", _B.INT, 10080, at_least(1)),
        ConfigKey("offsets.retention.check.interval.ms", _B.LONG, 600000, at_least(1)),
        ConfigKey("offsets.commit.timeout.ms", _B.INT, 5000, at_least(1)),
        ConfigKey("offset.metadata.max.bytes", _B.INT, 4096),
        # transactions and idempotence
        ConfigKey("transactional.id.expiration.ms", _B.INT, 604800000, at_least(1)),
        ConfigKey("transaction.max.timeout.ms", _B.INT, 900000, at_least(1)),
        ConfigKey("transaction.state.log.num.partitions", _B.INT, INTERNAL_TOPIC_PARTITIONS, at_least(1)),
        ConfigKey("transaction.state.log.replication.factor", _B.SHORT, 1, at_least(1)),  # fjord: as above
        ConfigKey("transaction.state.log.min.isr", _B.INT, 1, at_least(1)),
        ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", _B.INT, 10000, at_least(1)),
        ConfigKey("producer.id.expiration.ms", _B.INT, 86400000, at_least(1), dynamic=True),
        ConfigKey("max.incremental.fetch.session.cache.slots", _B.INT, 1000, at_least(0)),
        # fjord: the port of the Prometheus /metrics endpoint (absent: no endpoint)
        ConfigKey("metrics.port", _B.INT, None, between(0, 65535)),
    )
}


# ---------------------------------------------------------------------- topic configs


@dataclass(frozen=True, slots=True)
class BrokerSynonym:
    """A broker key a topic config falls back to; ``scale`` converts its unit (hours) to the topic's (ms)."""

    name: str
    scale: int = 1


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    key: ConfigKey
    synonyms: tuple[BrokerSynonym, ...] = ()  # most specific first, as Kafka lists them

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def type(self) -> str:
        return self.key.type.name.lower()

    def default_text(self) -> str | None:
        return self.key.default_text()


def _topic(
    name: str, kind: ConfigType, default: Any, validator: Validator | None = None, *synonyms: str | BrokerSynonym
) -> TopicConfigDef:
    syns = tuple(s if isinstance(s, BrokerSynonym) else BrokerSynonym(s) for s in synonyms)
    return TopicConfigDef(ConfigKey(name, kind, default, validator), syns)


TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        _topic("cleanup.policy", _B.LIST, ["delete"], all_of("compact", "delete"), "log.cleanup.policy"),
        _topic("compression.type", _B.STRING, "producer", one_of(*_COMPRESSION), "compression.type"),
        _topic("compression.gzip.level", _B.INT, -1, either(between(1, 9), between(-1, -1)), "compression.gzip.level"),
        _topic("compression.lz4.level", _B.INT, 9, between(1, 17), "compression.lz4.level"),
        _topic("compression.zstd.level", _B.INT, 3, between(-131072, 22), "compression.zstd.level"),
        _topic("delete.retention.ms", _B.LONG, 86400000, at_least(0), "log.cleaner.delete.retention.ms"),
        _topic("file.delete.delay.ms", _B.LONG, 60000, at_least(0), "log.segment.delete.delay.ms"),
        _topic("flush.messages", _B.LONG, LONG_MAX, at_least(1), "log.flush.interval.messages"),
        _topic("flush.ms", _B.LONG, LONG_MAX, at_least(0), "log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
        _topic("follower.replication.throttled.replicas", _B.LIST, []),
        _topic("leader.replication.throttled.replicas", _B.LIST, []),
        _topic("index.interval.bytes", _B.INT, 4096, at_least(0), "log.index.interval.bytes"),
        _topic("max.compaction.lag.ms", _B.LONG, LONG_MAX, at_least(1), "log.cleaner.max.compaction.lag.ms"),
        _topic("max.message.bytes", _B.INT, 1048588, at_least(0), "message.max.bytes"),
        _topic("message.downconversion.enable", _B.BOOLEAN, True, None, "log.message.downconversion.enable"),
        _topic("message.format.version", _B.STRING, "3.0-IV1", None, "log.message.format.version"),
        _topic(
            "message.timestamp.type", _B.STRING, "CreateTime", one_of(*_TIMESTAMP_TYPES), "log.message.timestamp.type"
        ),
        _topic(
            "message.timestamp.before.max.ms", _B.LONG, LONG_MAX, at_least(0), "log.message.timestamp.before.max.ms"
        ),
        _topic("message.timestamp.after.max.ms", _B.LONG, 3600000, at_least(0), "log.message.timestamp.after.max.ms"),
        _topic("min.cleanable.dirty.ratio", _B.DOUBLE, 0.5, between(0, 1), "log.cleaner.min.cleanable.ratio"),
        _topic("min.compaction.lag.ms", _B.LONG, 0, at_least(0), "log.cleaner.min.compaction.lag.ms"),
        _topic("min.insync.replicas", _B.INT, 1, at_least(1), "min.insync.replicas"),
        _topic("preallocate", _B.BOOLEAN, False, None, "log.preallocate"),
        _topic("retention.bytes", _B.LONG, -1, None, "log.retention.bytes"),
        _topic(
            "retention.ms",
            _B.LONG,
            604800000,
            at_least(-1),
            "log.retention.ms",
            BrokerSynonym("log.retention.minutes", MS_PER_MINUTE),
            BrokerSynonym("log.retention.hours", MS_PER_HOUR),
        ),
        _topic("segment.bytes", _B.INT, 1073741824, at_least(_SEGMENT_BYTES_FLOOR), "log.segment.bytes"),
        _topic("segment.index.bytes", _B.INT, 10485760, at_least(4), "log.index.size.max.bytes"),
        _topic(
            "segment.jitter.ms",
            _B.LONG,
            0,
            at_least(0),
            "log.roll.jitter.ms",
            BrokerSynonym("log.roll.jitter.hours", MS_PER_HOUR),
        ),
        _topic(
            "segment.ms", _B.LONG, 604800000, at_least(1), "log.roll.ms", BrokerSynonym("log.roll.hours", MS_PER_HOUR)
        ),
        _topic("unclean.leader.election.enable", _B.BOOLEAN, False, None, "unclean.leader.election.enable"),
    )
}


def topic_config_def(name: str) -> TopicConfigDef | None:
    return TOPIC_CONFIGS.get(name)


def config_key(resource_type: int, name: str) -> ConfigKey | None:
    """The definition of a topic (resource type 2) or broker (4) config key, None if there is none."""
    if resource_type == RESOURCE_TOPIC:
        definition = TOPIC_CONFIGS.get(name)
        return None if definition is None else definition.key
    if resource_type == RESOURCE_BROKER:
        return BROKER_KEYS.get(name)
    return None


def validate_topic_config(name: str, value: str) -> str:
    """The normalized text of a topic config value; ConfigValueError (INVALID_CONFIG) if unknown or invalid."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise ConfigValueError(f"Unknown topic config name: {name}")
    return definition.key.render(definition.key.parse(value)) or ""


def validate_broker_config(name: str, value: str) -> str:
    """The normalized text of a dynamic broker config value; ConfigValueError if unknown, static or invalid."""
    key = BROKER_KEYS.get(name)
    if key is None:
        raise ConfigValueError(f"Unknown broker config name: {name}")
    if not key.dynamic:
        raise ConfigValueError(f"Cannot update these configs dynamically: {name}")
    return key.render(key.parse(value)) or ""


# ---------------------------------------------------------------------- the server configuration


@dataclass(frozen=True, slots=True)
class Listener:
    """A configured listener; ``host`` "" binds every interface."""

    name: str
    host: str
    port: int

    def endpoint(self, security_protocol: str) -> Endpoint:
        return Endpoint(self.name, self.host, self.port, security_protocol)


@dataclass(frozen=True, slots=True)
class QuorumVoter:
    node_id: int
    host: str
    port: int


def parse_listeners(text: str, key: str) -> tuple[Listener, ...]:
    """``NAME://host:port,...`` (host may be empty or a bracketed IPv6 address); names must be unique."""
    out: list[Listener] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, rest = item.partition("://")
        if not sep or not name:
            raise ConfigError(f"{key}: {item!r} is not NAME://host:port")
        host, colon, port_text = rest.rpartition(":")
        if not colon:
            raise ConfigError(f"{key}: {item!r} has no port")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        try:
            port = int(port_text)
        except ValueError:
            raise ConfigError(f"{key}: port {port_text!r} of {item!r} is not a number") from None
        if not 0 <= port <= 65535:
            raise ConfigError(f"{key}: port {port} of {item!r} is out of range")
        if any(existing.name == name.upper() for existing in out):
            raise ConfigError(f"{key}: listener name {name} appears twice")
        out.append(Listener(name.upper(), host, port))
    return tuple(out)


def parse_voters(items: Sequence[str], key: str = "controller.quorum.voters") -> tuple[QuorumVoter, ...]:
    voters: list[QuorumVoter] = []
    for item in items:
        node, at, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not colon or not node.strip().isdigit() or not port.isdigit():
            raise ConfigError(f"{key}: {item!r} is not id@host:port")
        voters.append(QuorumVoter(int(node), host.strip("[]"), int(port)))
    if len({v.node_id for v in voters}) != len(voters):
        raise ConfigError(f"{key}: a node id appears twice in {','.join(items)}")
    return tuple(voters)


def _parse_protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, colon, protocol = item.partition(":")
        if not colon:
            raise ConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL")
        out[name.strip().upper()] = protocol.strip().upper()
    return out


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """A node's configuration: the static values from its file and overrides, typed and validated."""

    static: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # as given, for describe
    values: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # typed, defaults filled
    storage: StorageConfig = field(default_factory=StorageConfig)
    listeners: tuple[Listener, ...] = ()
    advertised_listeners: tuple[Listener, ...] = ()
    security_protocols: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    voters: tuple[QuorumVoter, ...] = ()

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, overrides: Iterable[str] = ()) -> ServerConfig:
        """Reads ``path`` (None: built-in defaults only, the embedded default) then applies ``key=value``
        overrides, as ``kafka-server-start --override`` does."""
        props = read_properties(path) if path is not None else {}
        props.update(parse_overrides(overrides))
        return cls.from_properties(props)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ServerConfig:
        values: dict[str, Any] = {}
        for name, key in BROKER_KEYS.items():
            if name in props:
                try:
                    values[name] = key.parse(props[name])
                except ConfigValueError as exc:
                    raise ConfigError(str(exc)) from None
            else:
                values[name] = key.default
        for name in props:
            if name not in BROKER_KEYS and not name.startswith("s3."):
                logger.warning("The configuration '%s' was supplied but isn't a known config.", name)
        node_id: int = values["node.id"]
        storage = StorageConfig.from_properties(props, node_id=node_id)
        listeners = parse_listeners(values["listeners"], "listeners")
        advertised_text = values["advertised.listeners"]
        controller_names = {n.upper() for n in values["controller.listener.names"]}
        if advertised_text is None:
            advertised = tuple(
                Listener(lst.name, lst.host or socket.gethostname(), lst.port)
                for lst in listeners
                if lst.name not in controller_names
            )
        else:
            advertised = parse_listeners(advertised_text, "advertised.listeners")
        config = cls(
            static=MappingProxyType(dict(props)),
            values=MappingProxyType(values),
            storage=storage,
            listeners=listeners,
            advertised_listeners=advertised,
            security_protocols=MappingProxyType(_parse_protocol_map(values["listener.security.protocol.map"])),
            voters=parse_voters(values["controller.quorum.voters"]),
        )
        config.validate()
        return config

    def validate(self) -> None:
        roles = set(self.process_roles)
        if not roles:
            raise ConfigError("process.roles: at least one of broker, controller is required")
        names = {lst.name for lst in self.listeners}
        for name in self.controller_listener_names:
            if "controller" in roles and name not in names:
                raise ConfigError(f"controller.listener.names: {name} is not one of the listeners ({', '.join(names)})")
        for lst in (*self.listeners, *self.advertised_listeners):
            if lst.name not in self.security_protocols:
                raise ConfigError(
                    f"listener.security.protocol.map: listener {lst.name} has no security protocol mapped"
                )
        for lst in self.advertised_listeners:
            if lst.name in self.controller_listener_names and "broker" in roles and "controller" not in roles:
                raise ConfigError(f"advertised.listeners: controller listener {lst.name} must not be advertised")
        if not self.log_dirs:
            raise ConfigError("log.dirs: at least one directory is required")
        if "broker" in roles and not self.broker_listeners:
            raise ConfigError("listeners: a broker needs at least one listener that is not a controller listener")
        if "controller" in roles and self.node_id not in {v.node_id for v in self.voters}:
            raise ConfigError(
                f"controller.quorum.voters: this controller's node.id {self.node_id} is not among the voters "
                f"({', '.join(str(v.node_id) for v in self.voters)})"
            )
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ConfigError("group.min.session.timeout.ms must not exceed group.max.session.timeout.ms")
        if self.broker_heartbeat_interval_ms >= self.broker_session_timeout_ms:
            raise ConfigError("broker.heartbeat.interval.ms must be smaller than broker.session.timeout.ms")

    def value(self, name: str) -> Any:
        """The typed value of a broker key (its default when not set)."""
        if name not in BROKER_KEYS:
            raise KeyError(f"unknown broker config {name}")
        return self.values.get(name, BROKER_KEYS[name].default)

    # typed accessors for the keys other components read
    @property
    def node_id(self) -> int:
        return int(self.value("node.id"))

    @property
    def process_roles(self) -> tuple[str, ...]:
        return tuple(self.value("process.roles"))

    @property
    def controller_listener_names(self) -> tuple[str, ...]:
        return tuple(n.upper() for n in self.value("controller.listener.names"))

    @property
    def broker_listeners(self) -> tuple[Listener, ...]:
        return tuple(lst for lst in self.listeners if lst.name not in self.controller_listener_names)

    def advertised_endpoints(self) -> tuple[Endpoint, ...]:
        """What the broker registers with the controller (Metadata reports these)."""
        return tuple(lst.endpoint(self.security_protocols[lst.name]) for lst in self.advertised_listeners)

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        """``log.dirs``, or Kafka's fallback ``log.dir`` when only that one is given."""
        if "log.dirs" not in self.static and self.value("log.dir"):
            return (Path(self.value("log.dir")),)
        return tuple(Path(d) for d in self.value("log.dirs"))

    @property
    def metadata_dir(self) -> Path:
        """Where meta.properties and the metadata log live (metadata.log.dir, else the first of log.dirs)."""
        explicit = self.value("metadata.log.dir")
        return Path(explicit) if explicit else self.log_dirs[0]

    @property
    def rack(self) -> str | None:
        rack = self.value("broker.rack")
        return str(rack) if rack else None

    @property
    def num_partitions(self) -> int:
        return int(self.value("num.partitions"))

    @property
    def default_replication_factor(self) -> int:
        return int(self.value("default.replication.factor"))

    @property
    def auto_create_topics_enable(self) -> bool:
        return bool(self.value("auto.create.topics.enable"))

    @property
    def message_max_bytes(self) -> int:
        return int(self.value("message.max.bytes"))

    @property
    def socket_request_max_bytes(self) -> int:
        return int(self.value("socket.request.max.bytes"))

    @property
    def broker_session_timeout_ms(self) -> int:
        return int(self.value("broker.session.timeout.ms"))

    @property
    def broker_heartbeat_interval_ms(self) -> int:
        return int(self.value("broker.heartbeat.interval.ms"))

    @property
    def group_initial_rebalance_delay_ms(self) -> int:
        return int(self.value("group.initial.rebalance.delay.ms"))

    @property
    def group_min_session_timeout_ms(self) -> int:
        return int(self.value("group.min.session.timeout.ms"))

    @property
    def group_max_session_timeout_ms(self) -> int:
        return int(self.value("group.max.session.timeout.ms"))

    @property
    def group_max_size(self) -> int:
        return int(self.value("group.max.size"))

    @property
    def offsets_topic_num_partitions(self) -> int:
        return int(self.value("offsets.topic.num.partitions"))

    @property
    def offsets_retention_ms(self) -> int:
        return int(self.value("offsets.retention.minutes")) * MS_PER_MINUTE

    @property
    def offsets_commit_timeout_ms(self) -> int:
        return int(self.value("offsets.commit.timeout.ms"))

    @property
    def transactional_id_expiration_ms(self) -> int:
        return int(self.value("transactional.id.expiration.ms"))

    @property
    def transaction_max_timeout_ms(self) -> int:
        return int(self.value("transaction.max.timeout.ms"))

    @property
    def transaction_state_log_num_partitions(self) -> int:
        return int(self.value("transaction.state.log.num.partitions"))


# ---------------------------------------------------------------------- describing configs


def _broker_layers(
    config: ServerConfig, cluster_dynamic: Mapping[str, str], node_dynamic: Mapping[str, str]
) -> list[tuple[ConfigSource, Callable[[str], str | None]]]:
    """Where a broker key's value can come from, highest priority first."""
    return [
        (ConfigSource.DYNAMIC_BROKER_CONFIG, node_dynamic.get),
        (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, cluster_dynamic.get),
        (ConfigSource.STATIC_BROKER_CONFIG, config.static.get),
        (ConfigSource.DEFAULT_CONFIG, lambda name: BROKER_KEYS[name].default_text() if name in BROKER_KEYS else None),
    ]


def resolve_topic_config(
    name: str,
    config: ServerConfig,
    cluster_dynamic: Mapping[str, str],
    topic_configs: Mapping[str, str],
    node_dynamic: Mapping[str, str] | None = None,
) -> ConfigEntry:
    """The effective value of one topic config with its source and synonyms, as DescribeConfigs reports it."""
    definition = TOPIC_CONFIGS[name]
    synonyms: list[ConfigSynonym] = []
    effective: tuple[str | None, ConfigSource] | None = None
    if name in topic_configs:
        synonyms.append(ConfigSynonym(name, topic_configs[name], ConfigSource.TOPIC_CONFIG))
        effective = (topic_configs[name], ConfigSource.TOPIC_CONFIG)
    layers = _broker_layers(config, cluster_dynamic, node_dynamic or {})
    for source, lookup in layers:
        for synonym in definition.synonyms:
            text = lookup(synonym.name)
            if text is None:
                continue
            synonyms.append(ConfigSynonym(synonym.name, text, source))
            if effective is None:
                effective = (_scaled(synonym, text), source)
    if effective is None:
        effective = (definition.default_text(), ConfigSource.DEFAULT_CONFIG)
    return ConfigEntry(
        name,
        effective[0],
        effective[1],
        read_only=False,
        is_sensitive=definition.key.type is ConfigType.PASSWORD,
        config_type=definition.key.type,
        synonyms=tuple(synonyms),
    )


def _scaled(synonym: BrokerSynonym, text: str) -> str:
    if synonym.scale == 1:
        return text
    try:
        number = int(text)
    except ValueError:
        return text
    return str(number * synonym.scale) if number >= 0 else str(number)


def describe_topic_configs(
    config: ServerConfig,
    cluster_dynamic: Mapping[str, str],
    topic_configs: Mapping[str, str],
    names: Iterable[str] | None = None,
    node_dynamic: Mapping[str, str] | None = None,
) -> list[ConfigEntry]:
    """Every topic config (or just ``names``) of one topic."""
    wanted = sorted(TOPIC_CONFIGS) if names is None else [n for n in names if n in TOPIC_CONFIGS]
    return [resolve_topic_config(n, config, cluster_dynamic, topic_configs, node_dynamic) for n in wanted]


def effective_topic_configs(
    config: ServerConfig,
    cluster_dynamic: Mapping[str, str],
    topic_configs: Mapping[str, str],
    node_dynamic: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The typed value every topic config takes for one topic (what a partition enforces), resolved with the same
    precedence and synonyms DescribeConfigs reports: ``int`` for int/long, ``list[str]`` for lists, and so on."""
    out: dict[str, Any] = {}
    for entry in describe_topic_configs(config, cluster_dynamic, topic_configs, node_dynamic=node_dynamic):
        key = TOPIC_CONFIGS[entry.name].key
        if entry.value is None:
            out[entry.name] = key.default
            continue
        try:
            out[entry.name] = key.parse(entry.value)
        except ConfigValueError as exc:  # validated when set; only a hand-edited log could get here
            logger.warning("%s; using the default %s", exc, key.default_text())
            out[entry.name] = key.default
    return out


def describe_broker_configs(
    config: ServerConfig,
    cluster_dynamic: Mapping[str, str],
    node_dynamic: Mapping[str, str] | None = None,
    names: Iterable[str] | None = None,
    *,
    cluster_default: bool = False,
) -> list[ConfigEntry]:
    """Every broker key (or just ``names``); ``cluster_default`` describes the "" resource (dynamic defaults only),
    which Kafka answers with the dynamic cluster-wide values alone."""
    wanted = sorted(BROKER_KEYS) if names is None else [n for n in names if n in BROKER_KEYS]
    out: list[ConfigEntry] = []
    for name in wanted:
        key = BROKER_KEYS[name]
        if cluster_default:
            if name in cluster_dynamic:
                out.append(
                    ConfigEntry(
                        name,
                        cluster_dynamic[name],
                        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                        config_type=key.type,
                        synonyms=(
                            ConfigSynonym(name, cluster_dynamic[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                        ),
                    )
                )
            continue
        synonyms: list[ConfigSynonym] = []
        for source, lookup in _broker_layers(config, cluster_dynamic, node_dynamic or {}):
            text = lookup(name)
            if text is not None or (source is ConfigSource.DEFAULT_CONFIG and not synonyms):
                synonyms.append(ConfigSynonym(name, text, source))
        first = synonyms[0] if synonyms else ConfigSynonym(name, None, ConfigSource.DEFAULT_CONFIG)
        sensitive = key.type is ConfigType.PASSWORD
        out.append(
            ConfigEntry(
                name,
                None if sensitive else first.value,
                first.source,
                read_only=not key.dynamic,
                is_sensitive=sensitive,
                config_type=key.type,
                synonyms=tuple(s for s in synonyms if s.value is not None),
            )
        )
    return out


# ---------------------------------------------------------------------- meta.properties

META_PROPERTIES = "meta.properties"


@dataclass(frozen=True, slots=True)
class MetaProperties:
    """The identity of a data directory: which node owns it and which cluster it belongs to (KRaft v1)."""

    node_id: int
    cluster_id: str
    version: int = 1


def new_cluster_id() -> str:
    """A random UUID in URL-safe base64 without padding: 22 characters, as ``kafka-storage random-uuid``."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def is_valid_cluster_id(text: str) -> bool:
    if len(text) != 22:
        return False
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16
    except ValueError:
        return False


def read_meta_properties(directory: str | os.PathLike[str]) -> MetaProperties | None:
    """The directory's identity, or None if it was never formatted. ConfigError names the file if it is bad."""
    path = Path(directory) / META_PROPERTIES
    if not path.exists():
        return None
    props = read_properties(path)
    try:
        version = int(props.get("version", ""))
    except ValueError:
        raise ConfigError(f"{path}: version {props.get('version')!r} is not a number") from None
    if version != 1:
        raise ConfigError(f"{path}: unsupported version {version} (this node writes and reads version=1)")
    node_text = props.get("node.id")
    cluster_id = props.get("cluster.id")
    if node_text is None or not node_text.strip().lstrip("-").isdigit():
        raise ConfigError(f"{path}: node.id is missing or not a number")
    if not cluster_id or not is_valid_cluster_id(cluster_id):
        raise ConfigError(f"{path}: cluster.id {cluster_id!r} is not a 22-character base64url UUID")
    return MetaProperties(int(node_text), cluster_id, version)


def write_meta_properties(directory: str | os.PathLike[str], meta: MetaProperties) -> None:
    """Atomically (temp file, fsync, rename, fsync the directory) so a crash never leaves half a file."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    text = f"#\nnode.id={meta.node_id}\nversion={meta.version}\ncluster.id={meta.cluster_id}\n"
    write_atomically(folder / META_PROPERTIES, text.encode("utf-8"))


def ensure_meta_properties(
    directory: str | os.PathLike[str], node_id: int, cluster_id: str | None = None
) -> MetaProperties:
    """Formats ``directory`` on first start (a new cluster id unless one is given) and checks it afterwards: a
    directory that belongs to another node or cluster is refused with a one-line ConfigError."""
    path = Path(directory) / META_PROPERTIES
    existing = read_meta_properties(directory)
    if existing is None:
        if cluster_id is not None and not is_valid_cluster_id(cluster_id):
            raise ConfigError(f"cluster id {cluster_id!r} is not a 22-character base64url UUID")
        meta = MetaProperties(node_id, cluster_id or new_cluster_id())
        write_meta_properties(directory, meta)
        logger.info("formatted %s: node.id=%d cluster.id=%s", path, meta.node_id, meta.cluster_id)
        return meta
    if existing.node_id != node_id:
        raise ConfigError(
            f"{path} has node.id={existing.node_id} but the configuration has node.id={node_id}; "
            "use the matching node.id or another log.dirs"
        )
    if cluster_id is not None and existing.cluster_id != cluster_id:
        raise ConfigError(f"{path} belongs to cluster {existing.cluster_id}, not {cluster_id}")
    return existing


__all__ = [
    "BROKER_KEYS",
    "TOPIC_CONFIGS",
    "ConfigEntry",
    "ConfigError",
    "ConfigKey",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "ConfigValueError",
    "Listener",
    "MetaProperties",
    "QuorumVoter",
    "ServerConfig",
    "TopicConfigDef",
    "config_key",
    "describe_broker_configs",
    "describe_topic_configs",
    "effective_topic_configs",
    "ensure_meta_properties",
    "new_cluster_id",
    "read_meta_properties",
    "resolve_topic_config",
    "topic_config_def",
    "validate_broker_config",
    "validate_topic_config",
    "write_meta_properties",
]
