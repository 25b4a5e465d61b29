"""The settings share group membership reads: session time-out, heartbeat interval and maximum size.

TODO(lead): swap to ``ServerConfig.share_groups`` (``settings/share_groups.py``'s ``ShareGroupSettings``, H-config)
and the per-group ``share.session.timeout.ms`` / ``share.heartbeat.interval.ms`` overrides of its resolver. Until
that lands this is the one place that reads the ``group.share.*`` keys: as given in ``server.properties`` (or
``--override``), with Kafka 4.2's defaults, checked only for being positive integers.
"""

from __future__ import annotations

from dataclasses import dataclass

from settings.server import ServerConfig
from storage.config import ConfigError


@dataclass(frozen=True, slots=True)
class ShareMembershipConfig:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200


def _positive(cfg: ServerConfig, key: str, default: int) -> int:
    text = cfg.static.get(key)
    if text is None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ConfigError(f"{key} ({text!r}) must be a number") from None
    if value < 1:
        raise ConfigError(f"{key} ({value}) must be at least 1")
    return value


def share_membership_config(cfg: ServerConfig) -> ShareMembershipConfig:
    """The broker-wide ``group.share.*`` values membership uses (see the module docstring)."""
    default = ShareMembershipConfig()
    return ShareMembershipConfig(
        session_timeout_ms=_positive(cfg, "group.share.session.timeout.ms", default.session_timeout_ms),
        heartbeat_interval_ms=_positive(cfg, "group.share.heartbeat.interval.ms", default.heartbeat_interval_ms),
        max_size=_positive(cfg, "group.share.max.size", default.max_size),
    )
