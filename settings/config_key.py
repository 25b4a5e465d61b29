"""One config key's definition: Kafka's name, type, default and validator, how its text parses and renders.

The type every catalogue of keys is made of (:mod:`settings.keys` for the broker keys and topic configs), apart from
the catalogue itself, which is long enough to be a module of its own.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage.config import ConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000


class ConfigValueError(ConfigError):
    """A config value (or key) a client sent is invalid; the message is what the client sees (INVALID_CONFIG)."""


class ConfigType(enum.IntEnum):
    """A key's value type: how its text parses, and what DescribeConfigs v3+ reports as ``config_type``."""

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


def bounded_by_keys(value: Callable[[str], Any], key: str, low_key: str, high_key: str) -> int:
    """``key``'s value, checked to lie within the values of ``low_key`` and ``high_key`` (Kafka's min/max pairs,
    such as ``group.consumer.min/max.session.timeout.ms``); ConfigError naming the keys otherwise."""
    got, low, high = int(value(key)), int(value(low_key)), int(value(high_key))
    if low > high:
        raise ConfigError(f"{low_key} ({low}) must not exceed {high_key} ({high})")
    if not low <= got <= high:
        raise ConfigError(f"{key} ({got}) must be between {low_key} ({low}) and {high_key} ({high})")
    return got


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key: Kafka's name, type, default (typed, None = no default) and validator."""

    name: str
    type: ConfigType
    default: Any = None
    validator: Validator | None = None
    dynamic: bool = False  # brokers: may be changed with AlterConfigs (cluster-wide or per broker)
    #: What DescribeConfigs v3+ sends as the key's documentation (when asked); None: no text is kept for the key.
    doc: str | None = None

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
