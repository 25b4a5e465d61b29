"""The auto-balancer's decisions, sans-I/O: which partitions to move so that every live broker leads its share.

A Fjord partition's data lives in object storage, so moving one copies nothing (``controller.reassignment``, DESIGN
§9) and leadership can follow the brokers. Failover alone does not bring it back: a broker that restarts after its
partitions moved away, or a broker added to a running cluster, would lead nothing for ever. :func:`plan` reads the
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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.image import MetadataImage, PartitionImage
from controller.metadata_records import NO_LEADER

ENABLE = "autobalancer.controller.enable"
DETECT_INTERVAL = "autobalancer.controller.anomaly.detect.interval.ms"
EXECUTION_INTERVAL = "autobalancer.controller.execution.interval.ms"
MAX_MOVES_IN_FLIGHT = "autobalancer.controller.max.moves.in.flight"
TOLERANCE = "autobalancer.controller.leader.count.tolerance"
FENCED_BROKER_WAIT = "autobalancer.controller.fenced.broker.wait.ms"
EXCLUDE_TOPICS = "autobalancer.controller.exclude.topics"
EXCLUDE_BROKERS = "autobalancer.controller.exclude.broker.ids"

#: Every key the balancer reads (defined with types and defaults in ``controller.config.keys``).
KEYS = (
    ENABLE,
    DETECT_INTERVAL,
    EXECUTION_INTERVAL,
    MAX_MOVES_IN_FLIGHT,
    TOLERANCE,
    FENCED_BROKER_WAIT,
    EXCLUDE_TOPICS,
    EXCLUDE_BROKERS,
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
        )


@dataclass(frozen=True, slots=True)
class Move:
    """One partition to move from ``source`` to ``target``, with the leader counts (moves in flight included)
    that made the balancer choose it: what the log line says."""

    topic: str
    partition: PartitionImage
    source: int
    target: int
    source_leads: int
    target_leads: int
    tolerance: int

    @property
    def reason(self) -> str:
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
            holder = partition.replicas[0] if partition.replicas else NO_LEADER
        else:
            holder = partition.leader
        if name not in exclude_topics and holder in counts:
            counts[holder] += 1
    return counts, in_flight


def plan(image: MetadataImage, settings: Settings, ages: Mapping[int, float]) -> Decision:
    """The moves to start now. ``ages``: seconds since this controller first saw each broker's current state
    (its registration epoch and fenced flag); a broker missing from it counts as just seen."""
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
    return Decision(moves=moves, leads=counts, in_flight=in_flight)


def _pick(
    candidates: list[tuple[str, PartitionImage]], source: int, target: int, image: MetadataImage, planned: list[Move]
) -> tuple[str, PartitionImage]:
    """The partition of ``source`` whose topic is most concentrated on it relative to ``target``, so that moves
    spread each topic as well as the totals (ties: topic name, then partition number)."""
    per_topic: dict[tuple[str, int], int] = {}
    for name, partition in _partitions(image):
        holder = partition.replicas[0] if partition.reassigning and partition.replicas else partition.leader
        per_topic[(name, holder)] = per_topic.get((name, holder), 0) + 1
    for move in planned:
        per_topic[(move.topic, move.source)] -= 1
        per_topic[(move.topic, move.target)] = per_topic.get((move.topic, move.target), 0) + 1

    def skew(item: tuple[str, PartitionImage]) -> tuple[int, str, int]:
        name, partition = item
        return (per_topic.get((name, target), 0) - per_topic.get((name, source), 0), name, partition.partition)

    return min(candidates, key=skew)
