"""Controlled shutdown and unregistration of a broker — the controller's decisions, sans-I/O.

Controlled shutdown (Kafka's KIP-631 BrokerHeartbeat ``wantShutDown``): a broker about to stop asks the active
controller, in its heartbeats, to take its partitions first. :func:`plan` marks it ``in_controlled_shutdown`` (it is
given no leadership from then on: ``MetadataImage.leader_candidates``) and starts moving each partition it leads
to the live broker leading the fewest, through the reassignment mechanism (``controller.decisions.reassignment``: the
source closes and uploads its streams, the target opens them, no data copied). The answer is ``shouldShutDown`` once it
leads nothing and no move from it waits for its streams to close; the broker then uploads what its WAL still holds
and stops, and its last heartbeat (``wantFence``) fences it. With no other broker to take them the partitions
stay, and the fence at the end leaves them to the next broker that registers, as before.

A broker replaying a dead broker's S3 WAL (a failover assigned before it asked: none is assigned after, see
``controller.decisions.wal_failover.choose_target``) is answered ``shouldShutDown`` only once that replay is done too.
Its WAL failover runner stops with the broker, after the controlled shutdown, so the replay finishes where it runs;
giving it to another broker instead would run it twice at once until the new target's WAL reservation fenced the
first. A replay that outlasts ``controlled.shutdown.timeout.ms`` is cut short by the stop like a target's death:
the fence hands it to another broker, which finishes it (the replay is idempotent).

Unregistration (UnregisterBroker, ``kafka-cluster.sh unregister``): removes a broker that is gone for good from
the image (DescribeCluster, Metadata). Kafka 3.6 removes whatever broker id it is asked; Fjord refuses a live one
(it would keep writing to its WAL and streams with nobody fencing it: stop it first, which drains it) and one
whose WAL a failover still replays (its acknowledged records are not all in object storage yet).

``controller.controller.Controller`` holds the lock, commits and logs.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from controller.decisions import balancing, reassignment
from metadata.cluster_records import BrokerRegistrationChangeRecord, UnregisterBrokerRecord
from metadata.errors import ControllerError
from metadata.image import MetadataImage, PartitionImage
from storage.metadata.record_codec import MetadataRecord


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    partition: int
    target: int


@dataclass(frozen=True, slots=True)
class Shutdown:
    """A controlled-shutdown heartbeat decided: the records to append, the moves they start, and how many of the
    broker's partitions are still to move (0: it may shut down)."""

    records: list[MetadataRecord]
    moves: list[Move]
    remaining: int  # partitions still to move, plus failovers it still replays
    started: bool  # this heartbeat put the broker in controlled shutdown
    failovers: int = 0  # WAL failovers assigned to it and not done: it may not stop in the middle of one


def plan(image: MetadataImage, node_id: int, epoch: int, exclude: Collection[int] = frozenset()) -> Shutdown:
    """What a ``wantShutDown`` heartbeat of ``node_id`` at registration ``epoch`` changes: it enters controlled
    shutdown, and every partition it leads, or that is on its way to it, moves to the other leader candidate
    leading the fewest partitions; it may stop once they moved and the WAL failovers it replays are done.
    ``exclude`` (``autobalancer.controller.exclude.broker.ids``): brokers taken only when no other is left, since a
    drained broker leads nothing and would otherwise be picked first.

    The heartbeat checked the registration outside the controller's lock; a broker that meanwhile is gone, has
    registered again or was fenced changes nothing here (an empty Shutdown)."""
    broker = image.brokers.get(node_id)
    if broker is None or broker.epoch != epoch or broker.fenced:
        return Shutdown([], [], 0, False)
    records: list[MetadataRecord] = []
    started = not broker.in_controlled_shutdown
    if started:
        records.append(BrokerRegistrationChangeRecord(node_id, epoch, True))
    candidates = [b.node_id for b in image.leader_candidates() if b.node_id != node_id]
    targets = [b for b in candidates if b not in exclude] or candidates
    load, _ = balancing.leader_counts(image, targets)
    mine: list[tuple[str, PartitionImage]] = []
    waiting = 0
    for topic in sorted(image.topics_by_name.values(), key=lambda t: t.name):
        for _, partition in sorted(topic.partitions.items()):
            if partition.holder == node_id:
                mine.append((topic.name, partition))
            elif partition.reassigning and node_id in partition.removing_replicas:
                waiting += 1  # moving away already: waits for this broker to close its streams
    failovers = len(image.failovers_delegated_to(node_id, epoch))
    if not load:
        return Shutdown(records, [], failovers, started, failovers)
    moves: list[Move] = []
    for name, partition in mine:
        target = min(load, key=lambda b: (load[b], b))
        load[target] += 1
        records.append(reassignment.start(partition, target))
        moves.append(Move(name, partition.partition, target))
    return Shutdown(records, moves, waiting + len(mine) + failovers, started, failovers)


def unregister(image: MetadataImage, node_id: int) -> UnregisterBrokerRecord:
    """The record removing ``node_id``; ControllerError BROKER_ID_NOT_REGISTERED for an unknown id (Kafka's
    answer), INVALID_REQUEST for a live broker or one whose WAL failover is pending (see the module docstring)."""
    broker = image.brokers.get(node_id)
    if broker is None:
        raise ControllerError(ErrorCode.broker_id_not_registered, f"Broker ID {node_id} is not currently registered")
    if not broker.fenced:
        raise ControllerError(
            ErrorCode.invalid_request,
            f"broker {node_id} is alive (registered with epoch {broker.epoch}, not fenced): stop it first (a clean "
            "stop moves its partitions away and empties its WAL), then unregister it",
        )
    failover = image.wal_failovers.get(node_id)
    if failover is not None and failover.pending:
        raise ControllerError(
            ErrorCode.invalid_request,
            f"the WAL of broker {node_id} is still being replayed (failover attempt {failover.attempt}, broker "
            f"{failover.target_id}); unregister it once that is done",
        )
    return UnregisterBrokerRecord(node_id, broker.epoch)
