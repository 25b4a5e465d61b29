"""Write semantics of the quorum controller, with three voters in this process over real TCP on 127.0.0.1: a write
returns only once a majority has it, and a write in flight when leadership is lost fails with NOT_CONTROLLER."""

from __future__ import annotations

import asyncio

import pytest

from controller.quorum import QuorumController
from metadata.errors import NotControllerError
from storage.metadata.api import NodeIdentity
from testkit.waiting import eventually_async
from tests.quorum_fixtures import active_voter

pytestmark = pytest.mark.timeout(60)

NODE = NodeIdentity(-1, -1)


async def test_a_write_is_applied_on_every_voter_once_it_returns_committed(voters: list[QuorumController]) -> None:
    leader = await active_voter(voters)
    await leader.controller.stream_metadata.put_kv("written", b"1")
    assert leader.driver.high_watermark > leader.image.offset  # committed before it returned

    async def values() -> list[bytes | None]:
        return [await q.controller.stream_metadata.get_kv("written") for q in voters]

    await eventually_async(values, until=lambda got: got == [b"1"] * 3, timeout=5, interval=0.02,
                           what="every voter to apply the write")


async def test_a_write_in_flight_when_leadership_is_lost_fails_with_not_controller(
    voters: list[QuorumController],
) -> None:
    leader = await active_voter(voters)
    followers = [q for q in voters if q is not leader]
    for follower in followers:
        await follower.stop(resign=False)  # the leader can no longer reach a majority
    write = asyncio.create_task(leader.controller.stream_metadata.put_kv("orphan", b"x"))
    await asyncio.sleep(0.2)  # time the write would need to return if it (wrongly) did not wait for a majority
    assert not write.done(), "a write returned without a majority"
    with pytest.raises(NotControllerError):
        async with asyncio.timeout(10):
            await write  # check-quorum makes the leader resign; the waiting write is told to go elsewhere
    assert await leader.controller.stream_metadata.get_kv("orphan") is None
    with pytest.raises(NotControllerError):
        await leader.controller.stream_metadata.put_kv("refused", b"y")
    voters[:] = [leader]
