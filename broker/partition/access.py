"""Finding the open partition a request targets, with the error Kafka clients expect when it is not here.

Every data-plane handler (produce, fetch, list offsets, delete records, leader epochs) goes through ``leader_log`` so
the same situation always yields the same code: an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION, a
partition led elsewhere (or not yet open here) NOT_LEADER_OR_FOLLOWER, and a client-supplied leader epoch older or
newer than ours FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH (KIP-320), checked first, as Kafka's replicas do, also by a
move's target before its election (a client told it at the election's epoch is ahead of it, and retries). A request
for a partition being moved here may wait for the move's election and the open first: the source's refusals and every
broker's Metadata answers name this broker before the election (``metadata.move_leader``), so a client's request can
arrive while the hand-over still runs.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker.partition.manager import PartitionManager
from broker.partition.partition_log import PartitionLog
from wire.errors import KafkaError

#: How long a request waits for a partition this broker was just made leader of to finish opening.
OPEN_WAIT_SECONDS = 5.0
#: How long a request (not a fetch, not a produce: those choose their own) waits for the election of a move to this
#: broker. A move's election normally follows in a few hundred milliseconds; a stuck one waits for the controller's
#: timer (``partition.reassignment.election.timeout.ms``), and the request is then refused for the client to retry.
MOVE_WAIT_SECONDS = 5.0


def check_leader_epoch(log: PartitionLog, current_leader_epoch: int) -> None:
    _check_replica_epoch(log.where, log.leader_epoch, current_leader_epoch)


def _check_replica_epoch(where: str, known_epoch: int, current_leader_epoch: int) -> None:
    """KIP-320: FENCED_LEADER_EPOCH for a client behind the epoch this replica knows, UNKNOWN_LEADER_EPOCH for one
    ahead of it (it retries without refreshing its metadata); -1 is not checked."""
    if current_leader_epoch < 0:
        return
    if current_leader_epoch < known_epoch:
        raise KafkaError(
            ErrorCode.fenced_leader_epoch,
            f"{where}: request leader epoch {current_leader_epoch} is older than {known_epoch}",
        )
    if current_leader_epoch > known_epoch:
        raise KafkaError(
            ErrorCode.unknown_leader_epoch,
            f"{where}: request leader epoch {current_leader_epoch} is newer than {known_epoch}",
        )


async def leader_log(
    manager: PartitionManager, topic: str, partition: int, current_leader_epoch: int = -1, *,
    move_wait: float = MOVE_WAIT_SECONDS, within: float | None = None,
) -> PartitionLog:
    """The open PartitionLog of ``topic``-``partition`` on this broker, or a KafkaError saying why not.

    ``move_wait``: how long to wait for the election of a move to this broker. A produce waits for its own bound
    (its records then go in without a retry); a fetch does not wait, since it reads its partitions one after another
    and one held partition would hold back the others' records; the other requests (offsets, leader epochs, deleted
    records, producers, transaction markers) wait for :data:`MOVE_WAIT_SECONDS`. The open then gets up to
    :data:`OPEN_WAIT_SECONDS`; ``within`` bounds both waits together (a produce's part of its timeout)."""
    log = manager.get(topic, partition)
    if log is None:
        image = manager.controller.image
        part = image.partition(topic, partition)
        if part is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{partition} does not exist")
        loop = asyncio.get_running_loop()
        deadline = None if within is None else loop.time() + within
        if within is not None:
            move_wait = min(move_wait, within)
        if part.leader != manager.node_id and not await manager.wait_for_move_here(topic, partition, move_wait):
            now = manager.controller.image.partition(topic, partition)
            if now is not None and manager.node_id in now.replicas:
                # A replica checks the client's epoch first, as Kafka's Partition does: a client told this broker
                # at the epoch of the move's election (``metadata.move_leader``) before it happened is ahead of it.
                _check_replica_epoch(f"{topic}-{partition}", now.leader_epoch, current_leader_epoch)
            raise KafkaError(
                ErrorCode.not_leader_or_follower,
                f"{topic}-{partition} is led by node {now.leader if now is not None else -1}, not this one",
            )
        open_wait = OPEN_WAIT_SECONDS if deadline is None else min(OPEN_WAIT_SECONDS, max(deadline - loop.time(), 0.0))
        log = await manager.wait_open(topic, partition, open_wait)
        if log is None:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{topic}-{partition} is not open on this broker yet")
    check_leader_epoch(log, current_leader_epoch)
    return log
