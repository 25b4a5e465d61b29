"""The auto-balancer's asyncio shell: runs ``controller.decisions.balancing.plan`` on the active controller,
periodically.

The quorum controller calls :meth:`AutoBalancer.tick` from its watch loop while it is the active controller and
:meth:`AutoBalancer.reset` when it stops being so; a round runs as a background task (a metadata write must not
hold up session expiry), every ``autobalancer.controller.anomaly.detect.interval.ms`` while the cluster is
balanced and every ``autobalancer.controller.execution.interval.ms`` while it is moving partitions. What the
decision needs beyond the image is when this controller first saw each broker's current state (a fenced broker's
wait, a new broker's settling); that is not replicated, so a new active controller starts those clocks afresh.

The brokers' load reports (ReportBrokerLoad, ``metadata.broker_load``) are kept here too, in memory: the load goal
plans on them, and :meth:`reset` forgets them with the clocks, so a new active controller waits for fresh reports
before it moves anything for load.

Each move is logged with its reason and counted in ``fjord_autobalancer_moves_total`` (label ``goal``:
``leader_count`` or ``load``); the round's outcome (balanced, waiting, paused and why) is logged when it changes and
kept in :attr:`AutoBalancer.status`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from controller.controller import Controller
from controller.decisions import balancing
from metadata.broker_load import REPORT_INTERVAL, BrokerLoad, LoadReports, PartitionLoad
from metadata.image import MetadataImage
from settings.server import ServerConfig

logger = logging.getLogger(__name__)


class AutoBalancer:
    def __init__(
        self, controller: Controller, config: ServerConfig, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._controller = controller
        self._config = config
        self._clock = clock
        # broker id -> (registration epoch, fenced, when this controller first saw that state)
        self._seen: dict[int, tuple[int, bool, float]] = {}
        self._next_round = 0.0
        self._task: asyncio.Task[None] | None = None
        self.status = "not run yet"
        self._state = ""
        self._paused: str | None = None
        self._moves_metric: Counter | None = None
        self._in_flight_metric: Gauge | None = None
        self._reports = LoadReports()
        # When a round last saw moves started or in flight, or first saw none after that (so at or after the
        # moves landed): reports whose window started earlier measured traffic the moves have redistributed.
        self.last_busy_at = -math.inf
        self._busy = False

    def register_metrics(self, registry: CollectorRegistry) -> None:
        self._moves_metric = Counter(
            "fjord_autobalancer_moves",
            "Partition moves the auto-balancer started on this controller, by the goal that made them",
            ["goal"],
            registry=registry,
        )
        for goal in balancing.GOALS:  # every series exists from the start, at 0
            self._moves_metric.labels(goal=goal)
        self._in_flight_metric = Gauge(
            "fjord_autobalancer_moves_in_flight",
            "Partition reassignments in flight (the balancer's and operators') at the balancer's last round",
            registry=registry,
        )

    def record_load(
        self, node_id: int, node_epoch: int, partitions: Sequence[PartitionLoad], interval_ms: int = 0
    ) -> None:
        """A broker's load report (ReportBrokerLoad), replacing its previous one. ``interval_ms``: the broker's
        reporting interval, which its report is judged by (0, from a broker that does not send it: this
        controller's own value)."""
        interval_s = (interval_ms or int(self._config.value(REPORT_INTERVAL))) / 1000
        self._reports.record(node_id, node_epoch, partitions, self._clock(), interval_s)

    def loads(self, image: MetadataImage, *, after_moves: bool = False) -> dict[int, BrokerLoad]:
        """The latest report of each broker's current registration, with its age. ``after_moves`` (what the load
        goal plans on): none whose window started before the last partition move finished (:attr:`last_busy_at`);
        the shell (DescribeBrokerLoad) shows every report."""
        epochs = {b.node_id: b.epoch for b in image.brokers.values()}
        since = self.last_busy_at if after_moves else -math.inf
        return self._reports.snapshot(self._clock(), epochs, since=since)

    def reset(self) -> None:
        """This controller is no longer active: forget the clocks and the load reports (the next active one
        starts its own)."""
        self._seen.clear()
        self._reports.clear()
        self.last_busy_at = -math.inf
        self._busy = False
        self._next_round = 0.0
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None

    def tick(self) -> None:
        """Notes broker state changes and starts a round when one is due and none runs."""
        now = self._clock()
        self._observe(self._controller.image, now)
        if now < self._next_round or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.create_task(self._round(), name="auto-balancer")

    def _observe(self, image: MetadataImage, now: float) -> None:
        for node_id, broker in image.brokers.items():
            seen = self._seen.get(node_id)
            if seen is None or seen[:2] != (broker.epoch, broker.fenced):
                self._seen[node_id] = (broker.epoch, broker.fenced, now)
        for gone in [n for n in self._seen if n not in image.brokers]:
            del self._seen[gone]

    def _ages(self, image: MetadataImage, now: float) -> dict[int, float]:
        self._observe(image, now)
        return {node_id: now - since for node_id, (_, _, since) in self._seen.items()}

    async def _round(self) -> None:
        settings = balancing.effective_settings(self._config, self._controller.image)
        try:
            decision = await self._controller.rebalance(
                lambda image: balancing.plan(
                    image, settings, self._ages(image, self._clock()), self.loads(image, after_moves=True)
                )
            )
        except Exception as exc:  # NotControllerError after losing leadership, a log write failed, ...
            logger.info("controller %d: auto-balancer round abandoned: %s", self._config.node_id, exc)
            self._next_round = self._clock() + settings.execution_interval_s
            return
        for move in decision.moves:
            logger.info("auto-balancer: %s", move.reason)
        if self._moves_metric is not None:
            for move in decision.moves:
                self._moves_metric.labels(goal=move.goal).inc()
        if self._in_flight_metric is not None:
            self._in_flight_metric.set(decision.in_flight + len(decision.moves))
        busy = bool(decision.moves or decision.in_flight)
        if busy or self._busy:
            self.last_busy_at = self._clock()
        self._busy = busy
        self._next_round = self._clock() + (settings.execution_interval_s if busy else settings.detect_interval_s)
        if decision.state != self._state or decision.paused != self._paused:
            logger.info("controller %d: auto-balancer %s", self._config.node_id, decision.summary)
        self._state, self._paused = decision.state, decision.paused
        self.status = decision.summary
