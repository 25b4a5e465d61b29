"""Prometheus metrics of one broker node.

Each node gets its own ``CollectorRegistry`` so several nodes can run in one process (tests, embedded use)
without clashing on metric names. Label children are cached because ``labels()`` is the slow part on hot paths.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from broker.protocol.api_versions import api_name

logger = logging.getLogger(__name__)


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.connections = Gauge(
            "fjord_broker_connections", "Open client connections", ["listener"], registry=self.registry
        )
        self.connections_total = Counter(
            "fjord_broker_connections_accepted", "Client connections accepted", ["listener"], registry=self.registry
        )
        self.requests = Counter("fjord_broker_requests", "Requests served", ["api"], registry=self.registry)
        self.request_errors = Counter(
            "fjord_broker_request_failures",
            "Requests whose handler failed or whose frame was rejected",
            ["api"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "fjord_broker_request_seconds", "Time from decoded request to encoded response", ["api"],
            registry=self.registry,
        )
        self._children: dict[tuple[str, int], Any] = {}
        self._http: Any = None
        self._http_thread: threading.Thread | None = None

    def _child(self, kind: str, metric: Any, api_key: int) -> Any:
        key = (kind, api_key)
        child = self._children.get(key)
        if child is None:
            child = metric.labels(api=api_name(api_key))
            self._children[key] = child
        return child

    def observe_request(self, api_key: int, seconds: float) -> None:
        self._child("requests", self.requests, api_key).inc()
        self._child("seconds", self.request_seconds, api_key).observe(seconds)

    def observe_failure(self, api_key: int) -> None:
        self._child("errors", self.request_errors, api_key).inc()

    def start_http(self, port: int, host: str = "127.0.0.1") -> int:
        """Serves ``/metrics`` on ``host:port`` (port 0 picks a free one); returns the bound port."""
        self._http, self._http_thread = start_http_server(port, addr=host, registry=self.registry)
        bound = int(self._http.server_port)
        logger.info("metrics served on http://%s:%d/metrics", host, bound)
        return bound

    def stop_http(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._http_thread is not None:
            self._http_thread.join(timeout=5)
            self._http_thread = None
