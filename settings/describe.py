"""Describing configs: each value with its source and synonyms, as DescribeConfigs and CreateTopics v5+ report it.

A value comes from the first layer that sets it, in Kafka's order: the topic's own config, the dynamic per-broker
value, the dynamic cluster default, the node's static file, the built-in default. A topic config also falls back to
its broker synonyms (``retention.ms`` to ``log.retention.ms``/``.minutes``/``.hours``), and the partitions enforce
exactly what is described here (:func:`effective_topic_configs`), so what a client reads is what applies.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from settings.config_key import ConfigType, ConfigValueError
from settings.kafka_broker_keys import NODE_ID_SYNONYM
from settings.keys import BROKER_KEYS, REMOTE_STORAGE_REFUSED, TOPIC_CONFIGS, BrokerSynonym
from settings.quorum_voters import BOOTSTRAP_KEY, VOTERS_KEY
from settings.server import ServerConfig

logger = logging.getLogger(__name__)


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
    documentation: str | None = None  # DescribeConfigs v3+ (when asked): the key's ``doc``



def _broker_layers(
    config: ServerConfig, cluster_dynamic: Mapping[str, str], node_dynamic: Mapping[str, str]
) -> list[tuple[ConfigSource, Callable[[str], str | None]]]:
    """Where a broker key's value can come from, highest priority first."""
    return [
        (ConfigSource.DYNAMIC_BROKER_CONFIG, node_dynamic.get),
        (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, cluster_dynamic.get),
        (ConfigSource.STATIC_BROKER_CONFIG, config.static.get),
        (ConfigSource.DEFAULT_CONFIG, lambda name: _default_text(config, name)),
    ]


def _default_text(config: ServerConfig, name: str) -> str | None:
    """The key's default on this node. ``controller.quorum.voters``' built-in default, the embedded node's one voter
    on 9093, stands only where ``controller.quorum.bootstrap.servers`` is not given either (``settings.
    quorum_voters``): a node given bootstrap servers has Kafka's default, no voter listed, as Kafka describes it."""
    if name == VOTERS_KEY and config.value(BOOTSTRAP_KEY):
        return ""
    return BROKER_KEYS[name].default_text() if name in BROKER_KEYS else None


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
        documentation=definition.key.doc,
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


def check_topic_values(
    config: ServerConfig,
    cluster_dynamic: Mapping[str, str],
    topic_configs: Mapping[str, str],
) -> None:
    """Kafka's checks of a topic's configs together (``LogConfig.validateValues``, then its tiered-storage checks,
    which with tiered storage off refuse only remote.storage.enable=true), on the values that take effect: its own
    over the brokers' (:func:`effective_topic_configs`), so a topic's max.compaction.lag.ms below the brokers'
    log.cleaner.min.compaction.lag.ms is refused too. Each value is valid on its own already
    (``settings.keys.validate_topic_config``); ConfigValueError (INVALID_CONFIG) with Kafka's message."""
    values = effective_topic_configs(config, cluster_dynamic, topic_configs)
    low, high = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if low > high:
        raise ConfigValueError(
            f"conflict topic config setting min.compaction.lag.ms ({low}) > max.compaction.lag.ms ({high})"
        )
    if values["remote.storage.enable"]:
        raise ConfigValueError(REMOTE_STORAGE_REFUSED)


_BROKER_ID_DOC = "Kafka's other name for node.id: always equal to it, and set with it in the properties file."


def _broker_id_entry(config: ServerConfig) -> ConfigEntry:
    """``broker.id``, as a KRaft Kafka describes it: read-only, the node id, from the file that gave either name."""
    given = NODE_ID_SYNONYM in config.static or "node.id" in config.static
    source = ConfigSource.STATIC_BROKER_CONFIG if given else ConfigSource.DEFAULT_CONFIG
    value = str(config.node_id)
    return ConfigEntry(
        NODE_ID_SYNONYM,
        value,
        source,
        read_only=True,
        config_type=ConfigType.INT,
        synonyms=(ConfigSynonym(NODE_ID_SYNONYM, value, source),),
        documentation=_BROKER_ID_DOC,
    )


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
    known = [*BROKER_KEYS, NODE_ID_SYNONYM]
    wanted = sorted(known) if names is None else [n for n in names if n in known]
    out: list[ConfigEntry] = []
    for name in wanted:
        if name == NODE_ID_SYNONYM:
            if not cluster_default:
                out.append(_broker_id_entry(config))
            continue
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
                        documentation=key.doc,
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
                # A password's value is never sent, not even as a synonym (Kafka sends null there too).
                synonyms=tuple(
                    replace(s, value=None) if sensitive else s for s in synonyms if s.value is not None
                ),
                documentation=key.doc,
            )
        )
    return out
