"""What a broker keeps for client telemetry: the instances and subscriptions (``TelemetryManager``) and the pushed
metrics it exports (``PushedMetrics``), on one monotonic clock, with the bounds read from the broker's config."""

from __future__ import annotations

import time
from collections.abc import Callable

from broker.telemetry.exported import PushedMetrics
from broker.telemetry.manager import TelemetryManager
from settings.server import ServerConfig

#: A push's payload may decompress to this many times ``telemetry.max.bytes`` at most (else TELEMETRY_TOO_LARGE).
MAX_INFLATION = 10
_SWEEP_EVERY_MS = 1000.0


class ClientTelemetry:
    def __init__(self, config: ServerConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = int(config.value("telemetry.max.bytes"))
        self.manager = TelemetryManager(self.max_bytes)
        self.pushed = PushedMetrics(int(config.value("fjord.client.telemetry.max.clients")),
                                    int(config.value("fjord.client.telemetry.max.series.per.client")))
        self._clock = clock
        self._swept_ms = 0.0

    def now_ms(self) -> float:
        return self._clock() * 1000.0

    @property
    def max_uncompressed(self) -> int:
        return MAX_INFLATION * self.max_bytes

    def sweep(self, now_ms: float) -> None:
        """Forgets expired instances (and their exported series), at most once a second."""
        if now_ms - self._swept_ms < _SWEEP_EVERY_MS:
            return
        self._swept_ms = now_ms
        for instance_id in self.manager.expire(now_ms):
            self.pushed.forget(instance_id)
