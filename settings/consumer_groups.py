"""The KIP-848 consumer groups' settings, read and checked together.

Kafka's keys and defaults (``group.consumer.*``, ``group.coordinator.rebalance.protocols``; the migration policy
says which online conversions between classic and consumer groups are allowed). The node refuses to start on a
combination Kafka refuses (a time-out outside its bounds, a heartbeat interval not below the session time-out, an
assignor it does not know), naming the key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from settings.config_key import bounded_by_keys
from storage.config import ConfigError

#: The server-side assignors Fjord has (``broker.groups.consumer.assignors``), by the names clients send.
ASSIGNOR_NAMES = ("uniform", "range")
#: Kafka's class names for them, accepted too (a Kafka ``server.properties`` names them so).
_KAFKA_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.uniformassignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.rangeassignor": "range",
}


@dataclass(frozen=True, slots=True)
class ConsumerGroupSettings:
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_size: int
    #: ``group.consumer.assignors`` as short names, in order: the first is the default.
    assignors: tuple[str, ...]
    #: ``consumer`` is in ``group.coordinator.rebalance.protocols``: ConsumerGroupHeartbeat is served.
    enabled: bool
    #: ``group.consumer.migration.policy``, lower-cased: disabled, upgrade, downgrade or bidirectional.
    migration_policy: str = "bidirectional"

    @property
    def upgrade_allowed(self) -> bool:
        """A ConsumerGroupHeartbeat join may convert a classic group with members (Kafka's isUpgradeEnabled)."""
        return self.migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_allowed(self) -> bool:
        """A consumer group left with only classic members converts back (Kafka's isDowngradeEnabled)."""
        return self.migration_policy in ("downgrade", "bidirectional")

    @property
    def classic_joins_allowed(self) -> bool:
        """A JoinGroup may enter a consumer group with members unless migration is disabled altogether."""
        return self.migration_policy != "disabled"


def consumer_group_settings(value: Callable[[str], Any]) -> ConsumerGroupSettings:
    """The settings from a config's typed ``value`` lookup; ConfigError naming the key when Kafka would refuse."""
    session = bounded_by_keys(
        value,
        "group.consumer.session.timeout.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
    )
    heartbeat = bounded_by_keys(
        value,
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
    )
    if heartbeat >= session:
        raise ConfigError(
            f"group.consumer.heartbeat.interval.ms ({heartbeat}) must be smaller than "
            f"group.consumer.session.timeout.ms ({session})"
        )
    assignors: list[str] = []
    for name in value("group.consumer.assignors"):
        short = _KAFKA_CLASSES.get(name.strip().lower(), name.strip())
        if short not in ASSIGNOR_NAMES:
            raise ConfigError(
                f"group.consumer.assignors: unknown assignor {name!r} (Fjord has {', '.join(ASSIGNOR_NAMES)})"
            )
        if short not in assignors:
            assignors.append(short)
    if not assignors:
        raise ConfigError("group.consumer.assignors: at least one assignor is needed")
    protocols = value("group.coordinator.rebalance.protocols")
    if "classic" not in protocols:
        raise ConfigError("group.coordinator.rebalance.protocols: the classic protocol cannot be disabled")
    return ConsumerGroupSettings(
        session_timeout_ms=session,
        heartbeat_interval_ms=heartbeat,
        max_size=int(value("group.consumer.max.size")),
        assignors=tuple(assignors),
        enabled="consumer" in protocols,
        migration_policy=str(value("group.consumer.migration.policy")).strip().lower(),
    )
