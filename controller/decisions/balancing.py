"""The auto-balancer's decisions, sans-I/O: which partitions to move so that every live broker leads its share.

A Fjord partition's data lives in object storage, so moving one copies nothing (``controller.decisions.reassignment``,
DESIGN §9) and leadership can follow the brokers. Failover alone does not bring it back: a broker that restarts after
its partitions moved away, or a broker added to a running cluster, would lead nothing for ever. :func:`plan` reads the
image and returns the moves that bring the leader counts of the live brokers within ``tolerance`` of each other,
taking from the broker leading the most and giving to the one leading the fewest. ``controller.auto_balancer`` runs
it periodically on the active controller and starts the moves through the reassignment mechanism.

Why it cannot oscillate: a move is made only when the most loaded broker leads at least ``tolerance + 1 >= 2``
more partitions than the least loaded one, and it changes the sum of the squared leader counts by
``2 * (low - high + 1) <= -2``. That sum is a non-negative integer, so any run of moves on a steady cluster ends
after at most ``sum / 2`` moves, and a balanced cluster (spread within ``tolerance``) yields none. Moves in flight
count for their target already, so the next round never moves the same load twice.

It stands aside rather than fight other mechanisms:
- a partition being reassigned (by an operator, or by an earlier round) is never touched, and every reassignment
  in flight counts against ``max_moves_in_flight``: an operator's explicit move wins;
- while a broker is fenced (dead, restarting, or in controlled shutdown) and not yet given up on
  (``fenced_broker_wait_s``), or while a dead broker's WAL is being replayed, nothing moves: leadership is
  already in motion and the fenced broker may come back;
- while a broker's registration is younger than ``new_broker_wait_s`` nothing moves: it registers before its
  storage engine has recovered (a partition moved to it then would wait for that recovery), and balancing the
  others meanwhile would only move partitions twice.
Internal topics (``__consumer_offsets``, ``__transaction_state``) are balanced like any other: the group and
transaction coordinators follow their partitions' leaders.

The load goal runs after the leader-count goal, on the traffic the brokers report (``metadata.broker_load``: bytes
in plus bytes out per partition), and only in a round where no move is in flight and the leader-count goal planned
none: a report measured while partitions moved shows traffic that has since changed brokers, and for the same
reason ``AutoBalancer.loads`` leaves out every report whose window started before the last move finished.
A broker whose load exceeds the mean of the balanced brokers by more than ``load_tolerance`` (the band) gives its
hottest partition at or above ``load_min_partition_rate`` to the least loaded broker that stays within the band
with it. When a plain move would take the leader counts out of their band,
the target gives back its coldest movable partition (a swap: two moves, the counts unchanged), so the leader-count
goal never has a reason to undo a load move. Why it cannot oscillate either: a load move is made only when the
target stays within the band, which is below the source's load, so it strictly lowers the sum of the squared broker
loads; under steady rates that sum takes finitely many values (placements are finite), so moves stop, and the
leader counts stay within their band throughout. The argument holds only for rates measured on the placement being
planned, which is why the goal waits for moves to land and for fresh windows after them. It also waits (moves nothing
for load) until every balanced broker has a report younger than ``STALE_INTERVALS`` of that broker's own reporting
intervals: a controller that just became active has none, and a broker's stale numbers would mislead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from metadata.broker_load import REPORT_INTERVAL, STALE_INTERVALS, BrokerLoad, PartitionKey, format_rate
from metadata.image import MetadataImage, PartitionImage
from settings.config_key import ConfigValueError
from settings.keys import BROKER_KEYS
from settings.server import ServerConfig

logger = logging.getLogger(__name__)

ENABLE = "autobalancer.controller.enable"
DETECT_INTERVAL = "autobalancer.controller.anomaly.detect.interval.ms"
EXECUTION_INTERVAL = "autobalancer.controller.execution.interval.ms"
MAX_MOVES_IN_FLIGHT = "autobalancer.controller.max.moves.in.flight"
TOLERANCE = "autobalancer.controller.leader.count.tolerance"
FENCED_BROKER_WAIT = "autobalancer.controller.fenced.broker.wait.ms"
EXCLUDE_TOPICS = "autobalancer.controller.exclude.topics"
EXCLUDE_BROKERS = "autobalancer.controller.exclude.broker.ids"
LOAD_TOLERANCE = "autobalancer.controller.load.tolerance"
LOAD_MIN_PARTITION_RATE = "autobalancer.controller.load.min.partition.bytes.per.sec"

#: What a move is for: the leader counts or the load (``Move.goal``, the moves metric's label).
GOALS = ("leader_count", "load")

#: Every key the balancer reads (defined with types and defaults in ``settings.keys``).
KEYS = (
    ENABLE,
    DETECT_INTERVAL,
    EXECUTION_INTERVAL,
    MAX_MOVES_IN_FLIGHT,
    TOLERANCE,
    FENCED_BROKER_WAIT,
    EXCLUDE_TOPICS,
    EXCLUDE_BROKERS,
    LOAD_TOLERANCE,
    LOAD_MIN_PARTITION_RATE,
)


@dataclass(frozen=True, slots=True)
class Settings:
    enabled: bool = True
    detect_interval_s: float = 10.0
    execution_interval_s: float = 1.0
    max_moves_in_flight: int = 4
    tolerance: int = 1
    fenced_broker_wait_s: float = 300.0
    exclude_topics: frozenset[str] = frozenset()
    exclude_brokers: frozenset[int] = frozenset()
    load_tolerance: float = 0.2
    load_min_partition_rate: float = 102400.0
    report_interval_s: float = 10.0

    @property
    def new_broker_wait_s(self) -> float:
        """A new registration becomes a target after one detection interval: long enough for a restarted broker
        to recover its WAL, short enough that a joining broker gets work within two intervals."""
        return self.detect_interval_s

    @classmethod
    def from_values(cls, value: Callable[[str], Any]) -> Settings:
        """Settings from typed config values (``value(key)``, as ``ServerConfig.value`` returns them)."""
        brokers: frozenset[int] = frozenset()
        for item in value(EXCLUDE_BROKERS) or []:
            try:
                brokers |= {int(item)}
            except ValueError:
                continue  # validated as a list of strings only; a non-number names no broker
        return cls(
            enabled=bool(value(ENABLE)),
            detect_interval_s=int(value(DETECT_INTERVAL)) / 1000,
            execution_interval_s=int(value(EXECUTION_INTERVAL)) / 1000,
            max_moves_in_flight=int(value(MAX_MOVES_IN_FLIGHT)),
            tolerance=int(value(TOLERANCE)),
            fenced_broker_wait_s=int(value(FENCED_BROKER_WAIT)) / 1000,
            exclude_topics=frozenset(value(EXCLUDE_TOPICS) or []),
            exclude_brokers=brokers,
            load_tolerance=float(value(LOAD_TOLERANCE)),
            load_min_partition_rate=float(value(LOAD_MIN_PARTITION_RATE)),
            report_interval_s=int(value(REPORT_INTERVAL)) / 1000,
        )


def effective_settings(config: ServerConfig, image: MetadataImage) -> Settings:
    """The balancer's settings: a cluster-wide dynamic value (AlterConfigs on the default broker resource) wins
    over the controller's own file, as for every dynamic broker key. Here rather than in ``controller.auto_balancer``
    because controlled shutdown (``controller.controller``) reads ``exclude_brokers`` from it too."""

    def value(name: str) -> Any:
        dynamic = image.broker_configs.get(name)
        if dynamic is not None:
            try:
                return BROKER_KEYS[name].parse(dynamic)
            except ConfigValueError as exc:  # validated when set; only a hand-edited log could get here
                logger.warning("%s; using this controller's value", exc)
        return config.value(name)

    return Settings.from_values(value)


@dataclass(frozen=True, slots=True)
class Move:
    """One partition to move from ``source`` to ``target``, with the leader counts (moves in flight included)
    that made the balancer choose it: what the log line says. ``goal``: ``leader_count`` or ``load`` (the moves
    metric's label); a load move carries its own ``note`` (the loads that made it)."""

    topic: str
    partition: PartitionImage
    source: int
    target: int
    source_leads: int
    target_leads: int
    tolerance: int
    goal: str = "leader_count"
    note: str = ""

    @property
    def reason(self) -> str:
        if self.note:
            return self.note
        return (
            f"moving {self.topic}-{self.partition.partition} from broker {self.source} to {self.target}: "
            f"broker {self.source} leads {self.source_leads}, broker {self.target} leads {self.target_leads}, "
            f"band ±{self.tolerance}"
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """A round's outcome: the moves to start, or why there are none (``paused``: the balancer stands aside;
    otherwise the cluster is balanced or the moves in flight fill the budget). ``leads`` are the leader counts
    of the brokers balanced over (moves in flight counted for their target) before this round's moves."""

    moves: list[Move] = field(default_factory=list)
    leads: Mapping[int, int] = field(default_factory=dict)
    in_flight: int = 0
    paused: str | None = None
    #: bytes/s per balanced broker after this round's leader-count moves (empty: the load goal did not run)
    loads: Mapping[int, float] = field(default_factory=dict)
    #: why the load goal did not run (no recent report from a broker), else None
    load_waiting: str | None = None

    @property
    def state(self) -> str:
        """``paused``, ``balancing`` (moves started), ``waiting`` (for moves in flight) or ``balanced``."""
        if self.paused is not None:
            return "paused"
        return "balancing" if self.moves else "waiting" if self.in_flight else "balanced"

    @property
    def summary(self) -> str:
        if self.paused is not None:
            return f"paused: {self.paused}"
        counts = ", ".join(f"{broker}:{count}" for broker, count in sorted(self.leads.items())) or "none"
        if self.loads:
            counts += "; load " + ", ".join(f"{b}:{format_rate(rate)}" for b, rate in sorted(self.loads.items()))
        elif self.load_waiting:
            counts += f"; load goal waiting: {self.load_waiting}"
        if self.moves:
            return f"balancing: {len(self.moves)} moves started, {self.in_flight} in flight; leaders {counts}"
        if self.in_flight:
            return f"waiting for {self.in_flight} moves in flight; leaders {counts}"
        return f"balanced; leaders {counts}"


def _partitions(image: MetadataImage) -> Iterable[tuple[str, PartitionImage]]:
    for name in sorted(image.topics_by_name):
        topic = image.topics_by_name[name]
        for index in sorted(topic.partitions):
            yield name, topic.partitions[index]


def leader_counts(
    image: MetadataImage, brokers: Iterable[int], exclude_topics: frozenset[str] = frozenset()
) -> tuple[dict[int, int], int]:
    """How many partitions each of ``brokers`` leads or is receiving (a reassignment in flight counts for its
    target), and how many reassignments are in flight in the whole cluster."""
    counts = dict.fromkeys(brokers, 0)
    in_flight = 0
    for name, partition in _partitions(image):
        if partition.reassigning:
            in_flight += 1
        if name not in exclude_topics and partition.holder in counts:
            counts[partition.holder] += 1
    return counts, in_flight


def plan(
    image: MetadataImage,
    settings: Settings,
    ages: Mapping[int, float],
    loads: Mapping[int, BrokerLoad] | None = None,
) -> Decision:
    """The moves to start now. ``ages``: seconds since this controller first saw each broker's current state
    (its registration epoch and fenced flag); a broker missing from it counts as just seen. ``loads``: the
    brokers' latest load reports (None: no load goal, as where nobody reports)."""
    if not settings.enabled:
        return Decision(paused=f"{ENABLE}=false")
    pending = sorted(f.node_id for f in image.wal_failovers.values() if f.pending)
    if pending:
        return Decision(paused=f"the WAL of broker {', '.join(map(str, pending))} is being replayed")
    for broker in image.brokers.values():
        age = ages.get(broker.node_id, 0.0)
        if broker.fenced and age < settings.fenced_broker_wait_s:
            return Decision(
                paused=f"broker {broker.node_id} is fenced (the others are balanced without it "
                f"{settings.fenced_broker_wait_s:.0f} s after it was fenced)"
            )
    # A broker in controlled shutdown is neither a target nor balanced over: its partitions are moving away.
    balanced = [b.node_id for b in image.leader_candidates() if b.node_id not in settings.exclude_brokers]
    counts, in_flight = leader_counts(image, balanced, settings.exclude_topics)
    if len(balanced) < 2:
        return Decision(leads=counts, in_flight=in_flight)
    settling = [b for b in balanced if ages.get(b, 0.0) < settings.new_broker_wait_s]
    if settling:  # wait rather than balance the others now and move again once it is ready
        return Decision(
            leads=counts,
            in_flight=in_flight,
            paused=f"broker {settling[0]} registered less than {settings.new_broker_wait_s:.0f} s ago",
        )
    budget = settings.max_moves_in_flight - in_flight
    movable: dict[int, list[tuple[str, PartitionImage]]] = {b: [] for b in balanced}
    for name, partition in _partitions(image):
        if name not in settings.exclude_topics and not partition.reassigning and partition.leader in movable:
            movable[partition.leader].append((name, partition))
    projected = dict(counts)
    moves: list[Move] = []
    while budget > 0:
        source = max(balanced, key=lambda b: (projected[b], -b))
        target = min(balanced, key=lambda b: (projected[b], b))
        if projected[source] - projected[target] <= settings.tolerance or not movable[source]:
            break
        chosen = _pick(movable[source], source, target, image, moves)
        movable[source].remove(chosen)
        moves.append(
            Move(chosen[0], chosen[1], source, target, projected[source], projected[target], settings.tolerance)
        )
        projected[source] -= 1
        projected[target] += 1
        budget -= 1
    if loads is None or in_flight or moves:
        # Rates measured while partitions move describe neither the old placement nor the new one: the load goal
        # waits until the moves landed and the brokers reported a window after that (``AutoBalancer.loads``).
        return Decision(moves=moves, leads=counts, in_flight=in_flight)
    waiting = _missing_reports(balanced, loads, settings)
    if waiting is not None:
        return Decision(moves=moves, leads=counts, in_flight=in_flight, load_waiting=waiting)
    goal = _LoadGoal(image, settings, balanced, loads=loads, counts=projected, planned=moves)
    before = dict(goal.load)
    moves += goal.run(budget)
    return Decision(moves=moves, leads=counts, in_flight=in_flight, loads=before)


def _missing_reports(balanced: list[int], loads: Mapping[int, BrokerLoad], settings: Settings) -> str | None:
    bound = settings.report_interval_s * STALE_INTERVALS  # for the message: this controller's expectation
    missing = [b for b in balanced if b not in loads or loads[b].stale]
    if not missing:
        return None
    return f"no load report younger than {bound:.0f} s from broker {', '.join(map(str, missing))}"


class _LoadGoal:
    """One round of the load goal over the placement the image and this round's earlier moves give."""

    def __init__(
        self,
        image: MetadataImage,
        settings: Settings,
        balanced: list[int],
        *,
        loads: Mapping[int, BrokerLoad],
        counts: dict[int, int],
        planned: list[Move],
    ) -> None:
        self.settings = settings
        self.balanced = balanced
        self.counts = dict(counts)
        # A partition just moved may be in two reports (its old and new leader's windows): the larger rate is
        # the better guess of its traffic.
        self.rate: dict[PartitionKey, float] = {}
        for report in loads.values():
            if not report.stale:
                for key, partition_load in report.partitions.items():
                    self.rate[key] = max(self.rate.get(key, 0.0), partition_load.load)
        planned_keys = {(m.topic, m.partition.partition): m.target for m in planned}
        self.load = dict.fromkeys(balanced, 0.0)
        self.movable: dict[int, list[tuple[str, PartitionImage]]] = {b: [] for b in balanced}
        for name, partition in _partitions(image):
            key = (name, partition.partition)
            holder = planned_keys.get(key)
            if holder is None:
                holder = partition.holder
                if holder in self.movable and not partition.reassigning and name not in settings.exclude_topics:
                    self.movable[holder].append((name, partition))
            if holder in self.load:
                self.load[holder] += self.rate.get(key, 0.0)
        for candidates in self.movable.values():  # hottest first; ties by name and number
            candidates.sort(key=lambda item: (-self._rate(item), item[0], item[1].partition))
        self.mean = sum(self.load.values()) / len(balanced)
        self.band = self.mean * (1 + settings.load_tolerance)

    def _rate(self, item: tuple[str, PartitionImage]) -> float:
        return self.rate.get((item[0], item[1].partition), 0.0)

    def run(self, budget: int) -> list[Move]:
        moves: list[Move] = []
        while budget > 0 and self.mean > 0:
            source = max(self.balanced, key=lambda b: (self.load[b], -b))
            if self.load[source] <= self.band:
                break
            chosen = self._choose(source, budget)
            if not chosen:
                break  # its partitions are each too hot for any other broker's band, or too cold to matter
            moves += chosen
            budget -= len(chosen)
        return moves

    def _choose(self, source: int, budget: int) -> list[Move]:
        """The move (or swap) that gives ``source``'s hottest possible partition to the least loaded broker that
        stays within the band; none if no partition fits anywhere."""
        targets = sorted((b for b in self.balanced if b != source), key=lambda b: (self.load[b], b))
        tolerance = self.settings.tolerance
        for item in self.movable[source]:
            rate = self._rate(item)
            if rate < self.settings.load_min_partition_rate:
                break  # hottest first: the rest are colder still
            for target in targets:
                if self.load[target] + rate > self.band:
                    break  # the coldest targets come first: no later one fits either
                counts = dict(self.counts)
                counts[source] -= 1
                counts[target] += 1
                why = (
                    f"broker {source} load (bytes in+out) {format_rate(self.load[source])}, "
                    f"{self.load[source] / self.mean:.1f}x the mean {format_rate(self.mean)} "
                    f"(band +{self.settings.load_tolerance:.0%}); moving {_name(item)} ({format_rate(rate)}) "
                    f"to broker {target} ({format_rate(self.load[target])})"
                )
                if max(counts.values()) - min(counts.values()) <= tolerance:
                    return [self._apply(item, source, target, why)]
                if budget < 2:
                    continue
                colder = [c for c in self.movable[target] if self._rate(c) < rate]
                back = min(colder, key=lambda c: (self._rate(c), c[0], c[1].partition), default=None)
                if back is None or self.load[target] + rate - self._rate(back) > self.band:
                    continue
                back_why = (
                    f"moving {_name(back)} ({format_rate(self._rate(back))}) from broker {target} to {source} in "
                    f"exchange for {_name(item)}, keeping the leader counts within ±{tolerance}"
                )
                why += f" in exchange for {_name(back)} ({format_rate(self._rate(back))})"
                return [self._apply(item, source, target, why), self._apply(back, target, source, back_why)]
        return []

    def _apply(self, item: tuple[str, PartitionImage], source: int, target: int, why: str) -> Move:
        name, partition = item
        rate = self._rate(item)
        move = Move(
            name,
            partition,
            source,
            target,
            self.counts[source],
            self.counts[target],
            self.settings.tolerance,
            goal="load",
            note=why,
        )
        self.movable[source].remove(item)
        self.load[source] -= rate
        self.load[target] += rate
        self.counts[source] -= 1
        self.counts[target] += 1
        return move


def _name(item: tuple[str, PartitionImage]) -> str:
    return f"{item[0]}-{item[1].partition}"


def _pick(
    candidates: list[tuple[str, PartitionImage]], source: int, target: int, image: MetadataImage, planned: list[Move]
) -> tuple[str, PartitionImage]:
    """The partition of ``source`` whose topic is most concentrated on it relative to ``target``, so that moves
    spread each topic as well as the totals (ties: topic name, then partition number)."""
    per_topic: dict[tuple[str, int], int] = {}
    for name, partition in _partitions(image):
        per_topic[(name, partition.holder)] = per_topic.get((name, partition.holder), 0) + 1
    for move in planned:
        per_topic[(move.topic, move.source)] -= 1
        per_topic[(move.topic, move.target)] = per_topic.get((move.topic, move.target), 0) + 1

    def skew(item: tuple[str, PartitionImage]) -> tuple[int, str, int]:
        name, partition = item
        return (per_topic.get((name, target), 0) - per_topic.get((name, source), 0), name, partition.partition)

    return min(candidates, key=skew)
