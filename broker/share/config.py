"""The per-group settings a share partition applies, and the share metrics it reports to.

TODO(lead): H-config's ``settings/share_groups.py`` defines the real ``ShareGroupConfig`` (with the same field
names); when it is on main, import it from there and delete the dataclass below. ``ShareMetricsSink`` is the shape
of H-ops' ``broker/share/metrics.py`` ``ShareMetrics``, which satisfies it as is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from broker.share.partition_state import Limits


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """Effective per-group values (Kafka 4.2 defaults)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2_000
    #: "earliest" | "latest" | "by_duration:<ISO-8601 duration>"
    auto_offset_reset: str = "latest"
    #: 0 read_uncommitted, 1 read_committed
    isolation_level: int = 0


def limits_of(config: ShareGroupConfig) -> Limits:
    return Limits(
        record_lock_duration_ms=config.record_lock_duration_ms,
        delivery_count_limit=config.delivery_count_limit,
        max_record_locks=config.partition_max_record_locks,
    )


class ShareMetricsSink(Protocol):
    """The counters a share partition bumps (H-ops' ``ShareMetrics``)."""

    def acquired(self, group: str, topic: str, n: int) -> None: ...
    def acknowledged(self, group: str, topic: str, n: int) -> None: ...
    def released(self, group: str, topic: str, n: int) -> None: ...
    def rejected(self, group: str, topic: str, n: int) -> None: ...
    def archived(self, group: str, topic: str, n: int) -> None: ...
    def lock_timed_out(self, group: str, topic: str, n: int) -> None: ...
    def redelivered(self, group: str, topic: str, n: int) -> None: ...


class NoMetrics:
    """Counts nothing (a broker without the share metrics, tests)."""

    def acquired(self, group: str, topic: str, n: int) -> None: ...
    def acknowledged(self, group: str, topic: str, n: int) -> None: ...
    def released(self, group: str, topic: str, n: int) -> None: ...
    def rejected(self, group: str, topic: str, n: int) -> None: ...
    def archived(self, group: str, topic: str, n: int) -> None: ...
    def lock_timed_out(self, group: str, topic: str, n: int) -> None: ...
    def redelivered(self, group: str, topic: str, n: int) -> None: ...


_DURATION = re.compile(
    r"^P(?:(?P<d>[-+]?\d+)D)?(?:T(?:(?P<h>[-+]?\d+)H)?(?:(?P<m>[-+]?\d+)M)?(?:(?P<s>[-+]?\d+(?:\.\d{1,9})?)S)?)?$",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """Java's ``Duration.parse`` subset Kafka accepts for ``share.auto.offset.reset=by_duration:PnDTnHnMn.nS``;
    ValueError for anything else (a negative duration included, as Kafka refuses it)."""
    match = _DURATION.match(text.strip())
    if match is None or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise ValueError(f"not an ISO-8601 duration: {text!r}")
    days, hours, minutes = (int(match.group(k) or 0) for k in "dhm")
    seconds = float(match.group("s") or 0)
    total = ((days * 24 + hours) * 60 + minutes) * 60_000 + round(seconds * 1000)
    if total < 0:
        raise ValueError(f"negative duration: {text!r}")
    return total
