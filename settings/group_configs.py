"""A group's dynamic configs: the keys of a GROUP config resource (``kafka-configs.sh --entity-type groups``), their
validation against the broker's bounds, what DescribeConfigs shows, and the effective values a group runs with.

Kafka 4.2's group keys (``GroupConfig``) for the two group types Fjord serves on the heartbeat model:
``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms`` (KIP-848 consumer groups) and
``share.session.timeout.ms``, ``share.heartbeat.interval.ms``, ``share.record.lock.duration.ms``,
``share.auto.offset.reset``, ``share.isolation.level`` (KIP-932 share groups). Kafka's streams-group keys are not
here: Fjord serves no streams groups, so they are refused as unknown.

A value must stay within the broker's bounds (``group.share.min.session.timeout.ms`` ...), and a heartbeat interval
below its session time-out, as Kafka's ``GroupConfig.validate`` checks; a refusal names the key (INVALID_CONFIG).
The controller checks with its own node's bounds, as Kafka's controller does. A key the group does not set takes
the broker's value: DescribeConfigs shows it as DEFAULT_CONFIG, a set one as GROUP_CONFIG.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from settings.config_key import ConfigKey, ConfigType, ConfigValueError, at_least, one_of
from settings.consumer_groups import ConsumerGroupSettings
from settings.describe import ConfigEntry, ConfigSource
from settings.share_groups import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ShareGroupConfig,
    ShareGroupSettings,
    share_group_settings,
)

CONSUMER_SESSION_TIMEOUT_MS: Final = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS: Final = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT_MS: Final = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL_MS: Final = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION_MS: Final = "share.record.lock.duration.ms"
SHARE_AUTO_OFFSET_RESET: Final = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL: Final = "share.isolation.level"

_ISOLATION_LEVELS: Final = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}
_BY_DURATION: Final = "by_duration:"
#: Java's ``Duration.parse`` form (ISO-8601 ``PnDTnHnMn.nS``, each part optional, signs allowed as Java allows).
_ISO_DURATION: Final = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def duration_ms(text: str) -> int:
    """An ISO-8601 duration (``PT1H``, ``P1DT30M``, ``PT0.5S``) in milliseconds; ValueError if not one."""
    match = _ISO_DURATION.fullmatch(text.strip())
    if match is None or text.strip().upper().endswith("T") or not any(match.group(i) for i in range(2, 6)):
        raise ValueError(f"{text!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    sign, days, hours, minutes, seconds, fraction = match.groups()
    total_ms = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000
    seconds_ms = int(seconds or 0) * 1000
    if fraction:
        part = int(fraction.ljust(3, "0")[:3])
        seconds_ms += -part if (seconds or "").startswith("-") else part
    total_ms += seconds_ms
    return -total_ms if sign == "-" else total_ms


def by_duration_ms(auto_offset_reset: str) -> int | None:
    """How far back a ``by_duration:<duration>`` reset starts, in milliseconds; None for earliest/latest."""
    if not auto_offset_reset.startswith(_BY_DURATION):
        return None
    return duration_ms(auto_offset_reset[len(_BY_DURATION):])


def _auto_offset_reset_valid(value: Any) -> str | None:
    text = str(value).strip().lower()
    if text in ("earliest", "latest"):
        return None
    if text.startswith(_BY_DURATION):
        try:
            if duration_ms(text[len(_BY_DURATION):]) < 0:
                return "Negative duration is not allowed"
        except ValueError as exc:
            return str(exc)
        return None
    return "Must be one of: latest, earliest, by_duration:PnDTnHnMn.nS"


def _normalized_reset(text: str) -> str:
    """``share.auto.offset.reset`` as stored: the strategy lower-cased, its duration upper-cased
    (``by_duration:PT1H``)."""
    text = text.strip().lower()
    if text.startswith(_BY_DURATION):
        return _BY_DURATION + text[len(_BY_DURATION):].strip().upper()
    return text


#: The keys of a GROUP config resource, with the type and static default of Kafka's ``GroupConfig`` (what a group
#: runs with when it does not set one is the broker's value instead: :func:`describe_group_configs`).
GROUP_CONFIG_KEYS: Final[Mapping[str, ConfigKey]] = {
    key.name: key
    for key in (
        ConfigKey(CONSUMER_HEARTBEAT_INTERVAL_MS, ConfigType.INT, 5000, at_least(1), dynamic=True,
                  doc="The heartbeat interval given to the members of a consumer group."),
        ConfigKey(CONSUMER_SESSION_TIMEOUT_MS, ConfigType.INT, 45000, at_least(1), dynamic=True,
                  doc="The timeout to detect client failures when using the consumer group protocol."),
        ConfigKey(SHARE_AUTO_OFFSET_RESET, ConfigType.STRING, "latest", _auto_offset_reset_valid, dynamic=True,
                  doc="The strategy to initialize the share-partition start offset: earliest, latest or "
                      "by_duration:<ISO-8601 duration> (from that long before now)."),
        ConfigKey(SHARE_HEARTBEAT_INTERVAL_MS, ConfigType.INT, 5000, at_least(1), dynamic=True,
                  doc="The heartbeat interval given to the members of a share group."),
        ConfigKey(SHARE_ISOLATION_LEVEL, ConfigType.STRING, "read_uncommitted",
                  one_of("read_committed", "read_uncommitted"), dynamic=True,
                  doc="read_committed: the share group delivers only committed transactional records; "
                      "read_uncommitted: every record, aborted transactional ones too."),
        ConfigKey(SHARE_RECORD_LOCK_DURATION_MS, ConfigType.INT, 30000, at_least(1000), dynamic=True,
                  doc="The record acquisition lock duration in milliseconds for the share group."),
        ConfigKey(SHARE_SESSION_TIMEOUT_MS, ConfigType.INT, 45000, at_least(1), dynamic=True,
                  doc="The timeout to detect client failures when using the share group protocol."),
    )
}


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """The values one KIP-848 consumer group runs with: its GROUP resource's configs over the broker's."""

    session_timeout_ms: int
    heartbeat_interval_ms: int


def _broker_defaults(value: Callable[[str], Any]) -> dict[str, str]:
    """The value each group key takes from the broker's settings when the group does not set it."""
    share = share_group_settings(value)
    return {
        CONSUMER_SESSION_TIMEOUT_MS: str(value("group.consumer.session.timeout.ms")),
        CONSUMER_HEARTBEAT_INTERVAL_MS: str(value("group.consumer.heartbeat.interval.ms")),
        SHARE_SESSION_TIMEOUT_MS: str(share.session_timeout_ms),
        SHARE_HEARTBEAT_INTERVAL_MS: str(share.heartbeat_interval_ms),
        SHARE_RECORD_LOCK_DURATION_MS: str(share.record_lock_duration_ms),
        SHARE_AUTO_OFFSET_RESET: "latest",
        SHARE_ISOLATION_LEVEL: "read_uncommitted",
    }


#: Each bounded group key: the broker keys of its lower and upper bound.
_BOUNDS: Final = {
    CONSUMER_SESSION_TIMEOUT_MS: ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    CONSUMER_HEARTBEAT_INTERVAL_MS: ("group.consumer.min.heartbeat.interval.ms",
                                     "group.consumer.max.heartbeat.interval.ms"),
    SHARE_SESSION_TIMEOUT_MS: ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    SHARE_HEARTBEAT_INTERVAL_MS: ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    SHARE_RECORD_LOCK_DURATION_MS: ("group.share.min.record.lock.duration.ms",
                                    "group.share.max.record.lock.duration.ms"),
}


def validate_group_configs(configs: Mapping[str, str], value: Callable[[str], Any]) -> dict[str, str]:
    """The normalized configs a group would have (every key it sets), checked as Kafka's ``GroupConfig.validate``
    against the broker settings of ``value`` (a ServerConfig's typed lookup); ConfigValueError naming the key."""
    normalized: dict[str, str] = {}
    for key, text in configs.items():
        definition = GROUP_CONFIG_KEYS.get(key)
        if definition is None:
            raise ConfigValueError(f"Unknown group config name: {key}")
        parsed = definition.parse(text)
        if key == SHARE_AUTO_OFFSET_RESET:
            parsed = _normalized_reset(str(parsed))
        normalized[key] = definition.render(parsed) or ""
    for key, (low_key, high_key) in _BOUNDS.items():
        if key not in normalized:
            continue
        got = int(normalized[key])
        if got < int(value(low_key)):
            raise ConfigValueError(f"{key} must be greater than or equal to {low_key}")
        if got > int(value(high_key)):
            raise ConfigValueError(f"{key} must be less than or equal to {high_key}")
    effective = _broker_defaults(value) | normalized
    for session, heartbeat in ((CONSUMER_SESSION_TIMEOUT_MS, CONSUMER_HEARTBEAT_INTERVAL_MS),
                               (SHARE_SESSION_TIMEOUT_MS, SHARE_HEARTBEAT_INTERVAL_MS)):
        if (session in normalized or heartbeat in normalized) and int(effective[session]) <= int(effective[heartbeat]):
            raise ConfigValueError(f"{session} must be greater than {heartbeat}")
    return normalized


def describe_group_configs(
    stored: Mapping[str, str], value: Callable[[str], Any], keys: tuple[str, ...] | None
) -> list[ConfigEntry]:
    """DescribeConfigs of a GROUP resource: each key (of ``keys``, None: all) with the group's value (GROUP_CONFIG)
    or the broker's (DEFAULT_CONFIG). A group without configs, or one that does not exist, reads as the broker's."""
    defaults = _broker_defaults(value)
    entries = []
    for name, definition in sorted(GROUP_CONFIG_KEYS.items()):
        if keys is not None and name not in keys:
            continue
        own = stored.get(name)
        entries.append(ConfigEntry(
            name=name,
            value=own if own is not None else defaults[name],
            source=ConfigSource.GROUP_CONFIG if own is not None else ConfigSource.DEFAULT_CONFIG,
            config_type=definition.type,
            documentation=definition.doc,
        ))
    return entries


def _clamped(stored: Mapping[str, str], key: str, default: int, low: int, high: int) -> int:
    """A stored group value within the broker's bounds in force now (they may have narrowed since it was set)."""
    text = stored.get(key)
    return default if text is None else min(max(int(text), low), high)


def effective_share_group_config(settings: ShareGroupSettings, stored: Mapping[str, str]) -> ShareGroupConfig:
    """What a share group runs with: its ``stored`` GROUP configs (validated when written) over ``settings``."""
    session = _clamped(stored, SHARE_SESSION_TIMEOUT_MS, settings.session_timeout_ms,
                       settings.min_session_timeout_ms, settings.max_session_timeout_ms)
    heartbeat = _clamped(stored, SHARE_HEARTBEAT_INTERVAL_MS, settings.heartbeat_interval_ms,
                         settings.min_heartbeat_interval_ms, settings.max_heartbeat_interval_ms)
    return ShareGroupConfig(
        session_timeout_ms=session,
        heartbeat_interval_ms=heartbeat if heartbeat < session else settings.heartbeat_interval_ms,
        record_lock_duration_ms=_clamped(stored, SHARE_RECORD_LOCK_DURATION_MS, settings.record_lock_duration_ms,
                                          settings.min_record_lock_duration_ms, settings.max_record_lock_duration_ms),
        delivery_count_limit=settings.delivery_count_limit,
        partition_max_record_locks=settings.partition_max_record_locks,
        auto_offset_reset=stored.get(SHARE_AUTO_OFFSET_RESET, "latest"),
        isolation_level=_ISOLATION_LEVELS.get(stored.get(SHARE_ISOLATION_LEVEL, ""), READ_UNCOMMITTED),
    )


def effective_consumer_group_config(settings: ConsumerGroupSettings, stored: Mapping[str, str]) -> ConsumerGroupConfig:
    """What a KIP-848 consumer group runs with: its ``stored`` GROUP configs over the broker's ``settings``."""
    session = int(stored.get(CONSUMER_SESSION_TIMEOUT_MS, settings.session_timeout_ms))
    heartbeat = int(stored.get(CONSUMER_HEARTBEAT_INTERVAL_MS, settings.heartbeat_interval_ms))
    return ConsumerGroupConfig(
        session_timeout_ms=session,
        heartbeat_interval_ms=heartbeat if heartbeat < session else settings.heartbeat_interval_ms,
    )
