"""Which live broker replays a dead broker's S3 WAL — the controller's side of WAL failover, sans-I/O.

A broker killed without a controlled shutdown leaves its streams opened in its name, their tail only in its WAL.
With the ``file`` WAL that tail returns when the broker restarts. With the ``s3`` WAL every broker of the cluster
writes under its own node prefix of one shared WAL bucket, so once the dead broker is fenced by its session timeout
the active controller assigns its WAL to one live broker with the same WAL bucket (a ``WALFailoverRecord``). That
broker replays the WAL exactly like the dead one's restart would (``StorageEngine.recover_wal``): the controller
accepts its commits and closes for the dead broker's opened streams while the assignment holds, then the new
leaders open those streams with a higher epoch and see every acknowledged record.

Each broker announces where its WAL lives in the KV entry ``metadata.wal_failover.wal_location_key`` when it
starts (no entry: a ``file`` WAL, nothing another broker could read). A target that dies mid-way is replaced (the
attempt count grows, so the next target's WAL reservation fences the previous one); the replay is idempotent, so a
second attempt only finishes what the first left.
"""

from __future__ import annotations

from collections.abc import Mapping

from metadata.cluster_records import NO_TARGET, WALFailoverRecord
from metadata.image import MetadataImage, WALFailoverImage
from metadata.wal_failover import awaiting_own_failover


def needs_failover(image: MetadataImage, node_id: int, node_epoch: int, locations: Mapping[int, str]) -> bool:
    """Whether fencing incarnation ``node_epoch`` of ``node_id`` for a missed session leaves a WAL to take over:
    it has an S3 WAL and no failover of that node is already under way (which covers the same WAL)."""
    if node_id not in locations:
        return False
    current = image.wal_failovers.get(node_id)
    return current is None or current.done or current.node_epoch > node_epoch


def choose_target(
    image: MetadataImage, node_id: int, locations: Mapping[int, str], exclude: frozenset[int] = frozenset()
) -> tuple[int, int]:
    """(node id, epoch) of the live broker that should replay ``node_id``'s WAL: one sharing its WAL bucket, with
    the fewest failovers assigned, lowest id first; ``(NO_TARGET, -1)`` when there is none yet.

    Only a leader candidate (``MetadataImage.leader_candidates``) is given one: a broker in controlled shutdown stops
    once its partitions moved, in the middle of a replay given to it. A broker that registered again while its own
    failover is pending is left out too: it cannot run a replay before
    its join ends (``metadata.wal_failover.awaiting_own_failover``), and, leading nothing and replaying nothing, it
    would be the least loaded. Two brokers restarting together were each given the other's failover and waited
    on each other until both joins failed; left without a target, each takes its own back."""
    location = locations.get(node_id)
    load: dict[int, int] = {}
    for failover in image.wal_failovers.values():
        if failover.pending and failover.node_id != node_id:
            load[failover.target_id] = load.get(failover.target_id, 0) + 1
    candidates = [
        b
        for b in image.leader_candidates()
        if b.node_id != node_id and b.node_id not in exclude and location is not None
        and locations.get(b.node_id) == location and not awaiting_own_failover(image, b.node_id)
    ]
    if not candidates:
        return NO_TARGET, -1
    best = min(candidates, key=lambda b: (load.get(b.node_id, 0), b.node_id))
    return best.node_id, best.epoch


def assign(image: MetadataImage, node_id: int, node_epoch: int, locations: Mapping[int, str]) -> WALFailoverRecord:
    """The first assignment of incarnation ``node_epoch``'s WAL (made with the fence that ends its session)."""
    target, target_epoch = choose_target(image, node_id, locations)
    return WALFailoverRecord(node_id, node_epoch, target, target_epoch, 1 if target != NO_TARGET else 0)


def target_alive(image: MetadataImage, failover: WALFailoverImage) -> bool:
    broker = image.brokers.get(failover.target_id)
    return broker is not None and not broker.fenced and broker.epoch == failover.target_epoch


def reassignments(image: MetadataImage, locations: Mapping[int, str]) -> list[WALFailoverRecord]:
    """New assignments for pending failovers without a live target (none yet, or it was fenced or restarted)."""
    out: list[WALFailoverRecord] = []
    for failover in sorted(image.wal_failovers.values(), key=lambda f: f.node_id):
        if failover.done or target_alive(image, failover):
            continue
        target, target_epoch = choose_target(image, failover.node_id, locations)
        if target == NO_TARGET:
            if failover.target_id != NO_TARGET:
                out.append(WALFailoverRecord(failover.node_id, failover.node_epoch, NO_TARGET, -1, failover.attempt))
            continue
        out.append(WALFailoverRecord(failover.node_id, failover.node_epoch, target, target_epoch,
                                     failover.attempt + 1))
    return out
