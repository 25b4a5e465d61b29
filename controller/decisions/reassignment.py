"""Partition reassignment (DESIGN §9, AutoMQ's six steps) — the controller's decisions, sans-I/O.

A Fjord partition has one replica, its leader, and its data lives in object storage, so moving it copies nothing:

1. ``plan`` validates an AlterPartitionReassignments request against the image and returns the records that set
   ``replicas=[target]`` with no leader (the leader epoch bumped) and remember the source in ``removing_replicas``.
2. The source broker sees it no longer leads the partition and closes it as on any leadership loss: appends stop,
   meta is persisted with the clean-shutdown flag, its streams are force-uploaded and closed at the controller.
3. ``complete`` elects the target once the source's streams are closed, or once the election timer fired (a dead or
   stuck source: the data then comes back through its WAL). The target opens the streams with the new epoch.

The I/O (reading stream states, the timer, committing) is ``controller.controller.Controller``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from controller.decisions.leadership import leader_loads, least_loaded
from metadata.cluster_records import NO_LEADER, PartitionChangeRecord
from metadata.controller_api import PartitionReassignment, ReassignmentResult
from metadata.image import MetadataImage, PartitionImage
from metadata.move_leader import elected_target, settled_epoch

ONE_REPLICA_MESSAGE = (
    "Fjord keeps exactly one replica per partition (its data lives in object storage, so the one broker that "
    "leads it is the only replica); reassign it to a single broker"
)


@dataclass(frozen=True, slots=True)
class Plan:
    results: list[ReassignmentResult]
    records: list[PartitionChangeRecord]


def plan(image: MetadataImage, requests: Sequence[PartitionReassignment]) -> Plan:
    """The result of each request item and the records of the accepted ones (validation reads only ``image``)."""
    results: list[ReassignmentResult] = []
    records: list[PartitionChangeRecord] = []
    seen: set[tuple[str, int]] = set()
    for request in requests:
        where = f"{request.topic}-{request.partition}"
        partition = image.partition(request.topic, request.partition)
        if (request.topic, request.partition) in seen:
            results.append(_error(request, ErrorCode.invalid_request, f"{where} appears twice in the request"))
            continue
        seen.add((request.topic, request.partition))
        if partition is None:
            results.append(_error(request, ErrorCode.unknown_topic_or_partition, f"Partition {where} does not exist."))
            continue
        if request.replicas is None:
            if not partition.reassigning:
                results.append(_error(request, ErrorCode.no_reassignment_in_progress,
                                      f"no reassignment of {where} is in progress"))
                continue
            records.append(_cancel(image, partition))
            results.append(ReassignmentResult(request.topic, request.partition))
            continue
        error = _invalid_target(image, where, request.replicas)
        if error is not None:
            results.append(_error(request, ErrorCode.invalid_replica_assignment, error))
            continue
        target = request.replicas[0]
        if (partition.reassigning and partition.replicas == (target,)) or (
            not partition.reassigning and partition.leader == target and partition.replicas == (target,)
        ):
            results.append(ReassignmentResult(request.topic, request.partition))  # already there or on its way
            continue
        records.append(start(partition, target))
        results.append(ReassignmentResult(request.topic, request.partition))
    return Plan(results, records)


def complete(image: MetadataImage, partition: PartitionImage) -> PartitionChangeRecord:
    """Ends the reassignment of ``partition``: its target leads it, with a leader epoch above the source's. A target
    gone meanwhile (fenced, unregistered) leaves the partition to the least loaded live broker, or leaderless for
    the next broker that registers, as a fenced leader's partitions are. A target in controlled shutdown counts as
    gone (``controller.decisions.controlled_shutdown``)."""
    target = elected_target(image, partition)  # what the brokers named to clients ahead of this election
    if target == NO_LEADER:
        target = least_loaded(leader_loads(image, [b.node_id for b in image.leader_candidates()]))
    return PartitionChangeRecord(
        str(partition.topic_id),
        partition.partition,
        leader=target,
        leader_epoch=settled_epoch(image, partition, target),
        isr=(target,) if target != NO_LEADER else (),
        replicas=(target,) if target != NO_LEADER else partition.replicas,
        removing_replicas=(),
    )


def start(partition: PartitionImage, target: int) -> PartitionChangeRecord:
    """Starts moving ``partition`` to ``target``: no leader until the source closed its streams (an accepted
    AlterPartitionReassignments item, or a move of the auto-balancer, ``controller.decisions.balancing``)."""
    source = partition.removing_replicas or tuple(r for r in partition.replicas if r != target)
    return PartitionChangeRecord(
        str(partition.topic_id),
        partition.partition,
        leader=NO_LEADER,
        leader_epoch=partition.leader_epoch + 1,
        isr=(),
        replicas=(target,),
        removing_replicas=source or partition.replicas,
    )


def _cancel(image: MetadataImage, partition: PartitionImage) -> PartitionChangeRecord:
    """Back to the replicas the reassignment started from; the source reopens its streams with a new epoch (two up:
    the brokers may have named the target at one up, ``metadata.move_leader.settled_epoch``).

    A source that may not lead any more (fenced, or in controlled shutdown) leaves the partition, as ``complete``
    does, to the leader candidate leading the fewest partitions: its data is in shared storage, so any broker can
    serve it. Left leaderless, nothing would ever elect it: it no longer moves, the balancer moves only led
    partitions, and a broker adopts leaderless ones only when it registers. Leaderless only with no candidate at
    all, for the next broker that registers (``controller.decisions.leadership.on_register``)."""
    candidates = [b.node_id for b in image.leader_candidates()]
    original = partition.removing_replicas
    leader = next((r for r in original if r in candidates), NO_LEADER)
    replicas = original
    if leader == NO_LEADER:
        leader = least_loaded(leader_loads(image, candidates))
        replicas = (leader,) if leader != NO_LEADER else original
    return PartitionChangeRecord(
        str(partition.topic_id),
        partition.partition,
        leader=leader,
        leader_epoch=settled_epoch(image, partition, leader),
        isr=(leader,) if leader != NO_LEADER else (),
        replicas=replicas,
        removing_replicas=(),
    )


def _invalid_target(image: MetadataImage, where: str, replicas: Sequence[int]) -> str | None:
    if len(replicas) != 1:
        return f"cannot reassign {where} to {list(replicas)}: {ONE_REPLICA_MESSAGE}"
    target = replicas[0]
    broker = image.brokers.get(target)
    if broker is None:
        return f"cannot reassign {where} to broker {target}: no such broker is registered"
    if broker.fenced:
        return f"cannot reassign {where} to broker {target}: it is fenced"
    if broker.in_controlled_shutdown:
        return f"cannot reassign {where} to broker {target}: it is shutting down"
    return None


def _error(request: PartitionReassignment, code: ErrorCode, message: str) -> ReassignmentResult:
    return ReassignmentResult(request.topic, request.partition, code, message)
