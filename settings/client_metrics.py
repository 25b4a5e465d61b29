"""KIP-714 client-metrics subscriptions: the keys of a CLIENT_METRICS config resource, their validation, and the
parsed subscription a broker matches clients against.

A subscription is a config resource named by the operator (``kafka-client-metrics.sh --alter --name NAME`` sends
IncrementalAlterConfigs on resource type 16) with three keys, as Kafka's ``ClientMetricsConfigs``:

- ``metrics``: metric name prefixes the matching clients push (``*``: every metric; empty: none);
- ``interval.ms``: how often they push, 100 ms to one hour (default five minutes);
- ``match``: ``attribute=regex`` pairs a client must all match (a Java-style full match) to be subscribed, over
  ``client_instance_id``, ``client_id``, ``client_software_name``, ``client_software_version``,
  ``client_source_address`` and ``client_source_port``; none: every client matches.

The controller validates a change with :func:`validate_subscription` before it writes the ConfigRecords, and a
broker reads the stored configs back with :func:`parse_subscription`, so both read one definition.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from settings.config_key import ConfigKey, ConfigType, ConfigValueError
from settings.describe import ConfigEntry, ConfigSource

METRICS: Final = "metrics"
INTERVAL_MS: Final = "interval.ms"
MATCH: Final = "match"

#: A subscription's ``metrics`` naming every metric (sent to the client as the one requested prefix, as Kafka does).
ALL_METRICS: Final = "*"
DEFAULT_INTERVAL_MS: Final = 300_000
MIN_INTERVAL_MS: Final = 100
MAX_INTERVAL_MS: Final = 3_600_000

#: The client attributes a ``match`` pattern may name (Kafka's ``ClientMetricsConfigs``).
MATCH_ATTRIBUTES: Final = frozenset((
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
))

#: The keys of a client-metrics resource, with Kafka's types and defaults (what DescribeConfigs reports).
CLIENT_METRICS_KEYS: Final[Mapping[str, ConfigKey]] = {
    key.name: key
    for key in (
        ConfigKey(METRICS, ConfigType.LIST, [], dynamic=True, doc="Metric name prefixes the matching clients push."),
        # No validator, as Kafka's ConfigDef has none: its range is checked after parsing (INVALID_REQUEST, where a
        # value that is no number at all is INVALID_CONFIG).
        ConfigKey(INTERVAL_MS, ConfigType.INT, DEFAULT_INTERVAL_MS, dynamic=True,
                  doc="How often the matching clients push their metrics, in milliseconds."),
        ConfigKey(MATCH, ConfigType.LIST, [], dynamic=True,
                  doc="attribute=regex pairs a client must all match to be subscribed (none: every client)."),
    )
}


class ClientMetricsConfigError(ConfigValueError):
    """A client-metrics change refused. ``invalid_request``: Kafka answers INVALID_REQUEST (an empty name, an
    unknown key, an interval out of range) rather than INVALID_CONFIG (a value that does not parse, a malformed
    ``match`` pattern)."""

    def __init__(self, message: str, *, invalid_request: bool) -> None:
        super().__init__(message)
        self.invalid_request = invalid_request


@dataclass(frozen=True, slots=True)
class Subscription:
    """One parsed subscription, as a broker matches clients against it."""

    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: tuple[tuple[str, re.Pattern[str]], ...]

    def matches(self, attributes: Mapping[str, str | None]) -> bool:
        """Every pattern fully matches its attribute (a missing attribute never matches); no pattern: all match."""
        for attribute, pattern in self.match:
            value = attributes.get(attribute)
            if value is None or pattern.fullmatch(value) is None:
                return False
        return True


def _parse_match(patterns: list[str]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    """``attribute=regex`` pairs, split at ``=`` as Kafka's Java ``String.split("=")`` splits them, which drops
    the trailing empty parts: ``client_id=`` (no regex) is refused and ``client_id=a=`` is ``a``, as Kafka reads
    them; any other second ``=`` is refused."""
    parsed: dict[str, re.Pattern[str]] = {}
    for pattern in patterns:
        parts = pattern.split("=")
        while parts and not parts[-1]:
            parts.pop()
        if len(parts) != 2 or parts[0].strip() not in MATCH_ATTRIBUTES:
            raise ClientMetricsConfigError(f"Illegal client matching pattern: {pattern}", invalid_request=False)
        try:
            parsed[parts[0].strip()] = re.compile(parts[1].strip())
        except re.error:
            raise ClientMetricsConfigError(f"Illegal client matching pattern: {pattern}",
                                           invalid_request=False) from None
    return tuple(sorted(parsed.items()))


def validate_subscription(name: str, configs: Mapping[str, str]) -> dict[str, str]:
    """The normalized configs of subscription ``name``; ClientMetricsConfigError when refused."""
    if not name:
        raise ClientMetricsConfigError("Subscription name can't be empty", invalid_request=True)
    normalized: dict[str, str] = {}
    for key, value in configs.items():
        definition = CLIENT_METRICS_KEYS.get(key)
        if definition is None:
            raise ClientMetricsConfigError(f"Unknown client metrics configuration: {key}", invalid_request=True)
        try:
            parsed = definition.parse(value)
        except ConfigValueError as exc:  # Kafka's ConfigDef.parse: a ConfigException, INVALID_CONFIG
            raise ClientMetricsConfigError(str(exc), invalid_request=False) from None
        if key == INTERVAL_MS and not MIN_INTERVAL_MS <= parsed <= MAX_INTERVAL_MS:
            raise ClientMetricsConfigError(
                f"Invalid value {parsed} for {key}, interval must be between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} "
                "(1 hour)",
                invalid_request=True,
            )
        if key == MATCH:
            _parse_match(parsed)
        normalized[key] = definition.render(parsed) or ""
    return normalized


def parse_subscription(name: str, configs: Mapping[str, str]) -> Subscription:
    """A stored subscription (validated when it was written) as a broker uses it."""
    metrics = CLIENT_METRICS_KEYS[METRICS].parse(configs.get(METRICS, ""))
    interval = configs.get(INTERVAL_MS)
    return Subscription(
        name=name,
        metrics=tuple(metrics),
        interval_ms=DEFAULT_INTERVAL_MS if interval is None else int(interval),
        match=_parse_match(CLIENT_METRICS_KEYS[MATCH].parse(configs.get(MATCH, ""))),
    )


def describe_subscription(configs: Mapping[str, str], keys: tuple[str, ...] | None) -> list[ConfigEntry]:
    """DescribeConfigs of a subscription, as Kafka answers it: each key (of ``keys``, None: all) with its stored
    value (source CLIENT_METRICS_CONFIG) or its default (DEFAULT_CONFIG); a subscription that does not exist reads
    as defaults."""
    entries = []
    for name, definition in CLIENT_METRICS_KEYS.items():
        if keys is not None and name not in keys:
            continue
        stored = configs.get(name)
        entries.append(ConfigEntry(
            name=name,
            value=stored if stored is not None else definition.default_text(),
            source=ConfigSource.CLIENT_METRICS_CONFIG if stored is not None else ConfigSource.DEFAULT_CONFIG,
            config_type=definition.type,
            documentation=definition.doc,
        ))
    return entries
