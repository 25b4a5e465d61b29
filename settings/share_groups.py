"""KIP-932 share groups' settings: the broker's ``group.share.*`` keys read and checked together, and the effective
config of one share group.

:class:`ShareGroupSettings` holds Kafka 4.2's broker keys and defaults (``GroupCoordinatorConfig``'s
``group.share.session.timeout.ms`` / ``heartbeat.interval.ms`` / ``max.size`` / ``assignors`` and
``ShareGroupConfig``'s ``record.lock.duration.ms`` / ``delivery.count.limit`` / ``partition.max.record.locks`` /
``max.share.sessions``). Each key's own range is its catalogue validator (``settings.keys``); what Kafka checks
across keys (a value inside its min/max pair, a heartbeat below the session time-out, at least as many share
sessions as members of a group, one assignor) is checked here, and the node refuses to start naming the key.

:class:`ShareGroupConfig` is what one group runs with: a group's dynamic configs (the GROUP config resource,
``settings.group_configs``) over these broker values. ``metadata.group_configs.share_group_config`` is the one
place that resolves it from the metadata image.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from settings.config_key import bounded_by_keys
from storage.config import ConfigError

#: The server-side assignor Fjord has for share groups (``broker.groups.share.assignor``), by the name clients see.
SHARE_ASSIGNOR_NAMES: Final = ("simple",)
#: Kafka's class name for it, accepted too (a Kafka ``server.properties`` may name it so).
_KAFKA_CLASSES: Final = {
    "org.apache.kafka.coordinator.group.assignor.simpleassignor": "simple",
    "org.apache.kafka.coordinator.group.modern.share.simpleassignor": "simple",
}

#: ``share.isolation.level`` as the share partitions use it (the Fetch request's numbering).
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """The broker's share group settings (``config.share_groups``): the defaults every share group runs with and
    the bounds a group's own configs must stay within."""

    session_timeout_ms: int
    min_session_timeout_ms: int
    max_session_timeout_ms: int
    heartbeat_interval_ms: int
    min_heartbeat_interval_ms: int
    max_heartbeat_interval_ms: int
    record_lock_duration_ms: int
    min_record_lock_duration_ms: int
    max_record_lock_duration_ms: int
    #: A record delivered this many times without being acknowledged is archived (the poison-message guard).
    delivery_count_limit: int
    #: The most records of one share partition that may be acquired (in flight) at once.
    partition_max_record_locks: int
    #: The most members of one share group.
    max_size: int
    #: The most share sessions (ShareFetch) one broker keeps; one more gets SHARE_SESSION_LIMIT_REACHED.
    max_share_sessions: int
    #: ``group.share.assignors`` as short names: Kafka allows exactly one.
    assignors: tuple[str, ...]

    def default_group_config(self) -> ShareGroupConfig:
        """The config of a share group that has no dynamic configs of its own."""
        return ShareGroupConfig(
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            record_lock_duration_ms=self.record_lock_duration_ms,
            delivery_count_limit=self.delivery_count_limit,
            partition_max_record_locks=self.partition_max_record_locks,
            auto_offset_reset="latest",
            isolation_level=READ_UNCOMMITTED,
        )


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """The values one share group runs with: its GROUP resource's configs over the broker's settings."""

    session_timeout_ms: int
    heartbeat_interval_ms: int
    record_lock_duration_ms: int
    delivery_count_limit: int
    partition_max_record_locks: int
    #: ``share.auto.offset.reset`` lower-cased: ``earliest``, ``latest`` or ``by_duration:<ISO-8601 duration>``
    #: (where a share partition's start offset begins when the group first reads it).
    auto_offset_reset: str
    #: ``share.isolation.level``: :data:`READ_UNCOMMITTED` (0) or :data:`READ_COMMITTED` (1).
    isolation_level: int


def share_group_settings(value: Callable[[str], Any]) -> ShareGroupSettings:
    """The settings from a config's typed ``value`` lookup; ConfigError naming the key when Kafka would refuse."""
    session = bounded_by_keys(value, "group.share.session.timeout.ms", "group.share.min.session.timeout.ms",
                       "group.share.max.session.timeout.ms")
    heartbeat = bounded_by_keys(value, "group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
                         "group.share.max.heartbeat.interval.ms")
    if heartbeat >= session:
        raise ConfigError(
            f"group.share.heartbeat.interval.ms ({heartbeat}) must be smaller than "
            f"group.share.session.timeout.ms ({session})"
        )
    lock = bounded_by_keys(value, "group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
                    "group.share.max.record.lock.duration.ms")
    max_size = int(value("group.share.max.size"))
    sessions = int(value("group.share.max.share.sessions"))
    if sessions < max_size:
        raise ConfigError(
            f"group.share.max.share.sessions ({sessions}) must be greater than or equal to "
            f"group.share.max.size ({max_size})"
        )
    assignors: list[str] = []
    for name in value("group.share.assignors"):
        short = _KAFKA_CLASSES.get(name.strip().lower(), name.strip())
        if short not in SHARE_ASSIGNOR_NAMES:
            raise ConfigError(
                f"group.share.assignors: unknown assignor {name!r} (Fjord has {', '.join(SHARE_ASSIGNOR_NAMES)})"
            )
        assignors.append(short)
    if len(assignors) != 1:
        raise ConfigError(f"group.share.assignors must contain exactly one assignor, but found {len(assignors)}")
    return ShareGroupSettings(
        session_timeout_ms=session,
        min_session_timeout_ms=int(value("group.share.min.session.timeout.ms")),
        max_session_timeout_ms=int(value("group.share.max.session.timeout.ms")),
        heartbeat_interval_ms=heartbeat,
        min_heartbeat_interval_ms=int(value("group.share.min.heartbeat.interval.ms")),
        max_heartbeat_interval_ms=int(value("group.share.max.heartbeat.interval.ms")),
        record_lock_duration_ms=lock,
        min_record_lock_duration_ms=int(value("group.share.min.record.lock.duration.ms")),
        max_record_lock_duration_ms=int(value("group.share.max.record.lock.duration.ms")),
        delivery_count_limit=int(value("group.share.delivery.count.limit")),
        partition_max_record_locks=int(value("group.share.partition.max.record.locks")),
        max_size=max_size,
        max_share_sessions=sessions,
        assignors=tuple(assignors),
    )
