"""What each client used against its quotas, and how long it must be throttled (Kafka's ClientQuotaManager).

The dispatcher reports, per request, the bytes a Produce appended (its request size, as Kafka counts it), the bytes
a Fetch returned (its response size) and the handler's own time (``busy_time``), and the admin requests the
partitions they created or deleted (``mutations``); :meth:`ClientQuotas.record` adds
them to the rate of whoever shares that quota (``resolution``) and answers the throttle time: 0 while within the
quota, else how long the rate needs to fall back to it. As in Kafka, a byte-rate or mutation throttle is not bounded
(a 1 MiB request against a 10 KiB/s quota waits about 100 s, so the client's average stays at its quota), while a
request-time throttle is at most one window (``ClientRequestQuotaManager``: a request's time cannot be paid back by
waiting longer than the window it is counted in).
Clients with no quota are not measured at all. Rates not used for longer than all windows together are dropped,
so a departed client leaves nothing behind.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.quotas.resolution import QuotaTags, ResolvedQuota, resolve
from metadata.client_quotas import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
    describe_entity,
)
from wire.log_text import untrusted
from wire.sampled_rate import SampledRate

logger = logging.getLogger(__name__)

#: The most distinct throttled clients remembered for "logged once" before the memory starts over.
_LOGGED_LIMIT = 10_000
#: The longest throttle answered: throttle_time_ms is an int32 field.
_MAX_THROTTLE_S = (2**31 - 1) / 1000


class QuotaType(enum.Enum):
    """A kind of quota and the key that sets it."""

    PRODUCE = PRODUCER_BYTE_RATE
    FETCH = CONSUMER_BYTE_RATE
    REQUEST = REQUEST_PERCENTAGE
    CONTROLLER_MUTATION = CONTROLLER_MUTATION_RATE


@dataclass(frozen=True, slots=True)
class QuotaWindows:
    """``quota.window.num`` windows of ``quota.window.size.seconds``."""

    samples: int = 11
    window_s: float = 1.0


#: Called with (quota type, user, throttle seconds) for every throttled request (metrics).
ThrottleObserver = Callable[[QuotaType, str, float], None]


class ClientQuotas:
    def __init__(self, windows: QuotaWindows, on_throttle: ThrottleObserver | None = None) -> None:
        self.windows = windows
        self._on_throttle = on_throttle
        self._rates: dict[tuple[QuotaType, QuotaTags], SampledRate] = {}
        self._used: dict[tuple[QuotaType, QuotaTags], float] = {}
        self._logged: set[tuple[QuotaType, str, str]] = set()
        self._next_sweep = 0.0

    def record(
        self,
        quotas: Mapping[QuotaEntity, Mapping[str, float]],
        kind: QuotaType,
        *,
        user: str,
        client_id: str,
        value: float,
        now: float,
    ) -> float:
        """Adds ``value`` (bytes; percent-seconds for REQUEST) used by ``user`` with ``client_id`` at ``now``
        (seconds, monotonic) and returns how many seconds the client must now be throttled."""
        resolved = resolve(quotas, kind.value, user, client_id)
        if resolved is None:
            return 0.0
        return self.record_resolved(resolved, kind, user=user, client_id=client_id, value=value, now=now)

    def record_resolved(
        self,
        resolved: ResolvedQuota,
        kind: QuotaType,
        *,
        user: str,
        client_id: str,
        value: float,
        now: float,
        check: bool = True,
    ) -> float:
        """:meth:`record` for a quota already resolved: a request resolves each of its quotas once
        (``RequestCharge``), not again at every charge. ``check=False`` records without asking for a throttle
        (0): a strict controller mutation quota checks before it records, never after (``mutations``)."""
        self._sweep(now)
        key = (kind, resolved.tags)
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = SampledRate(self.windows.samples, self.windows.window_s)
        rate.record(value, now)
        self._used[key] = now
        if not check:
            return 0.0
        throttle = self.over_quota(resolved, kind, now=now)
        if throttle > 0:
            self.report_throttle(kind, user, client_id, resolved, throttle)
        return throttle

    def over_quota(self, resolved: ResolvedQuota, kind: QuotaType, *, now: float) -> float:
        """How long the client must wait before its rate is back within the quota, recording nothing and reporting
        nothing: 0 while it is within (Kafka's ``Sensor.checkQuotas``, what a strict controller mutation quota asks
        before it records)."""
        self._sweep(now)
        rate = self._rates.get((kind, resolved.tags))
        if rate is None:
            return 0.0
        if kind is QuotaType.REQUEST:
            cap = self.windows.window_s  # Kafka's boundedThrottleTime
        elif resolved.limit <= 0:
            cap = self.windows.samples * self.windows.window_s  # nothing allowed: retried after all the windows
        else:
            cap = _MAX_THROTTLE_S
        return rate.throttle_s(resolved.limit, now, cap)

    def report_throttle(
        self, kind: QuotaType, user: str, client_id: str, resolved: ResolvedQuota, throttle: float
    ) -> None:
        """Counts one throttled request in the metrics and logs the client's first."""
        entity, limit = resolved.entity, resolved.limit
        if self._on_throttle is not None:
            self._on_throttle(kind, user, throttle)
        logged = (kind, user, client_id)
        if logged in self._logged:
            return
        if len(self._logged) >= _LOGGED_LIMIT:
            self._logged.clear()
        self._logged.add(logged)
        logger.info(
            "client '%s' of principal User:%s exceeds its %s quota %g (entity %s): throttled %.0f ms "
            "(logged once per client)",
            untrusted(client_id),
            untrusted(user),
            kind.value,
            limit,
            describe_entity(entity),
            throttle * 1000,
        )

    def _sweep(self, now: float) -> None:
        if now < self._next_sweep:
            return
        horizon = self.windows.samples * self.windows.window_s
        self._next_sweep = now + horizon
        for key in [k for k, used in self._used.items() if now - used >= horizon]:
            del self._used[key]
            del self._rates[key]
