"""Who will lead a partition being moved, known before the controller elects it (DESIGN §9).

A reassignment leaves the partition leaderless while its source closes it, then elects the first of its new
replicas that may lead, one leader epoch up (``controller.decisions.reassignment.complete``). Both the controller's
election and the brokers' answers to clients take the target from here, so what a broker tells a client ahead of the
election is what the election then does.

A source that refuses a produce names that target at once (KIP-951's ``CurrentLeader``) instead of waiting for the
election: the client waits out its retry backoff (librdkafka's 100 ms) while the hand-over runs, and the target holds
a produce that arrives early until it has the partition open (``broker.partition.access``). Every answer that tells a
client who leads (those refusals, Metadata, DescribeTopicPartitions) takes :func:`client_leader`, so a client told the
target by one is not told "no leader", at an older epoch, by another.

So that an epoch once named always means the same leader (as in Kafka, where a leader epoch is never reused), the
epoch a moving partition's answers name is the election's whether or not a target may lead by then, and an election
that ends the move with any other broker (the reassignment cancelled, or its target gone by the time the source let
go) skips it: :func:`settled_epoch`.
"""

from __future__ import annotations

from metadata.cluster_records import NO_LEADER
from metadata.image import MetadataImage, PartitionImage


def elected_target(image: MetadataImage, partition: PartitionImage) -> int:
    """The first of the partition's replicas that may lead (live, not in controlled shutdown), or NO_LEADER."""
    candidates = {broker.node_id for broker in image.leader_candidates()}
    return next((replica for replica in partition.replicas if replica in candidates), NO_LEADER)


def next_leader(image: MetadataImage, partition: PartitionImage) -> tuple[int, int] | None:
    """The broker and leader epoch the election of a partition being moved will give it, while it has no leader;
    None for a partition that is not moving, or whose targets may not lead (the election then picks the least
    loaded broker, which only the controller knows at that moment)."""
    if not partition.reassigning or partition.leader != NO_LEADER:
        return None
    target = elected_target(image, partition)
    return None if target == NO_LEADER else (target, partition.leader_epoch + 1)


def client_leader(image: MetadataImage, partition: PartitionImage) -> tuple[int, int]:
    """The leader id and epoch to tell a client: a moving partition's :func:`next_leader` (no leader, at the
    election's epoch, while none of its targets may lead: an earlier answer may have named one at that epoch), else
    the image's (the leader may be NO_LEADER; whether it is reachable is the caller's to check)."""
    if partition.reassigning and partition.leader == NO_LEADER:
        return next_leader(image, partition) or (NO_LEADER, partition.leader_epoch + 1)
    return partition.leader, partition.leader_epoch


def settled_epoch(image: MetadataImage, partition: PartitionImage, leader: int) -> int:
    """The leader epoch of the election that ends a move of ``partition`` with ``leader``: one up for the target
    the brokers named ahead (:func:`next_leader`), two up for any other outcome, so that no client is told one
    broker and then another at the same epoch."""
    named = elected_target(image, partition)
    return partition.leader_epoch + (1 if leader == named else 2)
