"""``broker.partition.access.leader_log`` at a partition that is not open here yet: how long a request may wait for
a move's election and the open, and the error it gets when they do not come. The partition manager is replaced by
one that answers from a metadata image and records what it was asked to wait for, so the bounds are checked
without a broker's timing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode

from broker.partition.access import MOVE_WAIT_SECONDS, OPEN_WAIT_SECONDS, leader_log
from broker.partition.manager import PartitionManager
from metadata.cluster_records import NO_LEADER
from wire.errors import KafkaError


@dataclass
class _Partition:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]


@dataclass
class _Image:
    partition_image: _Partition

    def partition(self, topic: str, partition: int) -> _Partition:
        return self.partition_image


@dataclass
class _Controller:
    image: _Image


@dataclass
class _Manager:
    """Broker 1's partitions: none open; a move's election takes ``election_s`` and then elects broker 1."""

    controller: _Controller
    election_s: float | None = None
    node_id: int = 1
    waits: list[tuple[str, float]] = field(default_factory=list)

    def get(self, topic: str, partition: int) -> None:
        return None

    async def wait_for_move_here(self, topic: str, partition: int, timeout: float) -> bool:
        self.waits.append(("election", timeout))
        if self.election_s is None or self.election_s > timeout:
            await asyncio.sleep(min(timeout, 0.05))
            return False
        await asyncio.sleep(self.election_s)
        return True

    async def wait_open(self, topic: str, partition: int, timeout: float) -> None:
        """The open does not come in time."""
        self.waits.append(("open", timeout))


def _manager(partition: _Partition, election_s: float | None = None) -> _Manager:
    return _Manager(_Controller(_Image(partition)), election_s)


async def _error(manager: _Manager, **kwargs: Any) -> ErrorCode:
    with pytest.raises(KafkaError) as refused:
        await leader_log(cast(PartitionManager, manager), "orders", 0, **kwargs)
    return refused.value.code


async def test_a_produce_waits_for_a_moves_election_and_the_open_within_its_bound_together() -> None:
    moving_here = _Partition(NO_LEADER, 3, (1,))
    manager = _manager(moving_here, election_s=0.15)
    assert await _error(manager, move_wait=0.3, within=0.3) == ErrorCode.not_leader_or_follower
    [(election, election_wait), (opening, open_wait)] = manager.waits
    assert (election, election_wait) == ("election", 0.3)
    # The election took 0.15 s of the 0.3: the open gets what is left, not OPEN_WAIT_SECONDS.
    assert opening == "open" and 0.0 <= open_wait <= 0.3 - 0.15 + 0.02


async def test_other_requests_wait_for_the_election_and_then_for_the_open_each_with_its_own_bound() -> None:
    manager = _manager(_Partition(NO_LEADER, 3, (1,)), election_s=0.0)
    assert await _error(manager) == ErrorCode.not_leader_or_follower
    assert manager.waits == [("election", MOVE_WAIT_SECONDS), ("open", OPEN_WAIT_SECONDS)]


@pytest.mark.parametrize(("client_epoch", "expected"), [
    (4, ErrorCode.unknown_leader_epoch),  # told this broker at the election's epoch, before the election
    (2, ErrorCode.fenced_leader_epoch),  # still at the source's epoch
    (3, ErrorCode.not_leader_or_follower),
    (-1, ErrorCode.not_leader_or_follower),
])
async def test_a_moves_target_checks_the_clients_epoch_before_its_election_as_a_replica(
    client_epoch: int, expected: ErrorCode
) -> None:
    manager = _manager(_Partition(NO_LEADER, 3, (1,)))
    assert await _error(manager, current_leader_epoch=client_epoch, move_wait=0.0) == expected


async def test_a_broker_that_is_no_replica_answers_not_leader_whatever_the_epoch() -> None:
    manager = _manager(_Partition(2, 3, (2,)))
    assert await _error(manager, current_leader_epoch=4, move_wait=0.0) == ErrorCode.not_leader_or_follower
