"""What a broker keeps for client telemetry: the instances and subscriptions (``TelemetryManager``) and the pushed
metrics it exports (``PushedMetrics``), on one monotonic clock, with the bounds read from the broker's config.

An instance is forgotten, its exported series with it, when it expires or when the connection it last spoke on
closes, as Kafka's ClientMetricsManager forgets it on disconnect: a client that reconnects is subscribed afresh
instead of being told to wait for its push interval."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from broker.connection_lifetimes import ConnectionLifetimes
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
        self._connections = ConnectionLifetimes(self._connection_gone)
        #: The instances that last spoke on each connection, by the connection's key.
        self._on_connection: dict[int, set[uuid.UUID]] = {}
        self._connection_of: dict[uuid.UUID, int] = {}

    def spoke(self, instance_id: uuid.UUID, connection: object) -> None:
        """``instance_id`` was served on ``connection`` (its state object): it is forgotten when that one closes."""
        key = self._connections.key(connection)
        before = self._connection_of.get(instance_id)
        if before == key:
            return
        if before is not None:
            self._on_connection.get(before, set()).discard(instance_id)
        self._connection_of[instance_id] = key
        self._on_connection.setdefault(key, set()).add(instance_id)

    def _connection_gone(self, key: int) -> None:
        for instance_id in self._on_connection.pop(key, ()):
            self._connection_of.pop(instance_id, None)
            self.manager.forget(instance_id)
            self.pushed.forget(instance_id)

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
            key = self._connection_of.pop(instance_id, None)
            if key is not None:
                self._on_connection.get(key, set()).discard(instance_id)
