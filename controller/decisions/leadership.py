"""Who leads each partition — the controller's leadership decisions, sans-I/O.

A Fjord partition's data lives in shared object storage, so any live broker can lead it: leadership follows the
brokers (a registering broker takes back what it led, a fenced one hands its partitions to live brokers) and the
preferred and unclean elections of ElectLeaders. Each function reads only the image and returns the
``PartitionChangeRecord``s to append; ``controller.controller.Controller`` appends them
(``controller.decisions.brokers`` composes the moves on register and fence into its membership records).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from metadata.cluster_records import NO_LEADER, PartitionChangeRecord
from metadata.controller_api import ElectionType, ElectLeaderResult
from metadata.errors import ControllerError
from metadata.image import MetadataImage, PartitionImage


@dataclass(frozen=True, slots=True)
class Election:
    """An ElectLeaders request decided: one result per partition asked, and the leader changes to append."""

    results: list[ElectLeaderResult]
    records: list[PartitionChangeRecord]


def leader_change(partition: PartitionImage, leader: int, live: set[int]) -> PartitionChangeRecord:
    """``leader`` leads ``partition`` with a higher leader epoch (so it reopens the streams with a strictly higher
    epoch), its live replicas in sync."""
    return PartitionChangeRecord(
        str(partition.topic_id),
        partition.partition,
        leader=leader,
        leader_epoch=partition.leader_epoch + 1,
        isr=tuple(r for r in partition.replicas if r in live),
    )


def moved(partition: PartitionImage, target: int) -> PartitionChangeRecord:
    """Reassigns a partition whose replicas are all gone to ``target`` alone."""
    return PartitionChangeRecord(
        str(partition.topic_id),
        partition.partition,
        leader=target,
        leader_epoch=partition.leader_epoch + 1,
        isr=(target,),
        replicas=(target,),
    )


def leader_loads(image: MetadataImage, candidates: Collection[int]) -> dict[int, int]:
    """How many partitions each of ``candidates`` leads: a partition given to a broker outside its replicas goes to
    the one leading the fewest (:func:`least_loaded`)."""
    load = dict.fromkeys(candidates, 0)
    for topic in image.topics_by_name.values():
        for partition in topic.partitions.values():
            if partition.leader in load:
                load[partition.leader] += 1
    return load


def least_loaded(load: dict[int, int]) -> int:
    """The broker of ``load`` leading the fewest partitions, lowest id first (counted as leading one more from
    now on, so that several partitions placed in one decision spread out); NO_LEADER when ``load`` is empty."""
    if not load:
        return NO_LEADER
    target = min(load, key=lambda broker: (load[broker], broker))
    load[target] += 1
    return target


def on_register(image: MetadataImage, node_id: int) -> list[PartitionChangeRecord]:
    """A (re)registering broker keeps what it led with a bumped leader epoch (so it reopens its streams with a
    strictly higher epoch), takes every leaderless partition it is a replica of, and adopts leaderless partitions
    with no live replica at all: their data is in shared object storage, so any broker can serve them."""
    live = {b.node_id for b in image.live_brokers()} | {node_id}
    changes: list[PartitionChangeRecord] = []
    for topic in image.topics_by_name.values():
        for partition in topic.partitions.values():
            if partition.reassigning:
                continue  # its target is elected when the source closed its streams (controller.decisions.reassignment)
            if partition.leader == node_id or (partition.leader == NO_LEADER and node_id in partition.replicas):
                changes.append(leader_change(partition, node_id, live))
            elif partition.leader == NO_LEADER and not live.intersection(partition.replicas):
                changes.append(moved(partition, node_id))
    return changes


def on_fence(image: MetadataImage, node_id: int) -> list[PartitionChangeRecord]:
    """Moves every partition ``node_id`` leads: to another live replica, else to the live broker leading the
    fewest partitions, else to no leader (the next broker to register adopts it). A broker in controlled shutdown
    is given none (``controller.decisions.controlled_shutdown``)."""
    live = {b.node_id for b in image.leader_candidates()} - {node_id}
    load = leader_loads(image, live)
    changes: list[PartitionChangeRecord] = []
    for _, partition in sorted(image.partitions_led_by(node_id), key=lambda item: (item[0], item[1].partition)):
        candidates = [r for r in partition.replicas if r in live]
        if candidates:
            changes.append(leader_change(partition, candidates[0], live))
            load[candidates[0]] += 1
        elif load:
            changes.append(moved(partition, least_loaded(load)))
        else:
            changes.append(
                PartitionChangeRecord(
                    str(partition.topic_id),
                    partition.partition,
                    leader=NO_LEADER,
                    leader_epoch=partition.leader_epoch + 1,
                    isr=(),
                )
            )
    return changes


def elect(
    image: MetadataImage, partitions: Sequence[tuple[str, int]] | None, election_type: int = ElectionType.PREFERRED
) -> Election:
    """ElectLeaders: one result per partition asked, or, when ``partitions`` is None, per partition of the cluster
    that needed an election (Kafka leaves out the ELECTION_NOT_NEEDED ones then).

    PREFERRED gives a partition its first replica when that broker is live. UNCLEAN gives a partition whose leader
    is offline its first live replica: Kafka risks losing data there, Fjord does not (every replica reads the same
    shared storage), so it is only a question of which broker serves; and for the same reason a partition with no
    live replica at all goes to the live broker leading the fewest partitions (as a fenced leader's partitions do),
    not ELIGIBLE_LEADERS_NOT_AVAILABLE while brokers that could serve it are up. A partition being reassigned is
    left to the reassignment, which elects its target. A broker in controlled shutdown counts as not live: it is
    never given leadership (``controller.decisions.controlled_shutdown``)."""
    if election_type not in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        # Kafka refuses the request as a whole (its parser rejects the type), not each partition.
        raise ControllerError(ErrorCode.invalid_request, f"Unknown election type {election_type}")
    live = {b.node_id for b in image.leader_candidates()}
    load = leader_loads(image, live)
    targets: list[tuple[str, int]] = (
        list(partitions)
        if partitions is not None
        else [(t.name, p) for t in image.topics_by_name.values() for p in sorted(t.partitions)]
    )
    results: list[ElectLeaderResult] = []
    records: list[PartitionChangeRecord] = []
    for name, index in targets:
        partition = image.partition(name, index)
        if partition is None:
            result = ElectLeaderResult(
                name, index, ErrorCode.unknown_topic_or_partition, f"Partition {name}-{index} does not exist."
            )
        elif partition.reassigning:
            result = ElectLeaderResult(
                name,
                index,
                ErrorCode.reassignment_in_progress,
                f"Partition {name}-{index} is being reassigned; its target is elected when the move ends",
            )
        else:
            leader, result = _choose(name, partition, live, load, election_type)
            if leader in partition.replicas:
                records.append(leader_change(partition, leader, live))
            elif leader != NO_LEADER:
                records.append(moved(partition, leader))
        if partitions is None and result.error is ErrorCode.election_not_needed:
            continue
        results.append(result)
    return Election(results, records)


def _choose(
    name: str, partition: PartitionImage, live: set[int], load: dict[int, int], election_type: int
) -> tuple[int, ElectLeaderResult]:
    """The broker to elect for one partition (NO_LEADER: none) and the partition's result; ``load`` counts the
    partitions each live broker leads, for an unclean election with no live replica (:func:`least_loaded`)."""
    index = partition.partition
    if election_type == ElectionType.PREFERRED:
        preferred = partition.replicas[0] if partition.replicas else NO_LEADER
        if partition.leader == preferred:
            return NO_LEADER, ElectLeaderResult(
                name, index, ErrorCode.election_not_needed, f"Partition {name}-{index} already has its preferred leader"
            )
        if preferred not in live:
            return NO_LEADER, ElectLeaderResult(
                name,
                index,
                ErrorCode.preferred_leader_not_available,
                f"The preferred leader {preferred} of {name}-{index} is not live",
            )
        return preferred, ElectLeaderResult(name, index, ErrorCode.none)
    if partition.leader in live:
        return NO_LEADER, ElectLeaderResult(
            name, index, ErrorCode.election_not_needed, f"Partition {name}-{index} has a live leader"
        )
    candidate = next((r for r in partition.replicas if r in live), NO_LEADER)
    if candidate == NO_LEADER:
        candidate = least_loaded(load)
    elif candidate in load:
        load[candidate] += 1
    if candidate == NO_LEADER:
        return NO_LEADER, ElectLeaderResult(
            name,
            index,
            ErrorCode.eligible_leaders_not_available,
            f"No live broker may lead {name}-{index} (its replicas {list(partition.replicas)} and every other "
            "broker are fenced or shutting down)",
        )
    return candidate, ElectLeaderResult(name, index, ErrorCode.none)
