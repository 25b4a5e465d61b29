"""``broker.handlers.per_partition.side_by_side``, which answers the partitions of ListOffsets, OffsetForLeaderEpoch,
DeleteRecords and DescribeProducers: answers in request order, several waiting at once (a request naming several
partitions moving to this broker waits for their elections together), never more than its bound at once (a request
naming a million partitions does not become a million tasks)."""

from __future__ import annotations

import asyncio

import pytest

from broker.handlers.per_partition import PARTITIONS_AT_ONCE, side_by_side


@pytest.mark.parametrize("count", [0, 1, 3, PARTITIONS_AT_ONCE * 4 + 1])
async def test_answers_come_in_request_order_with_at_most_the_bound_waiting_at_once(count: int) -> None:
    running = 0
    most = 0
    release = asyncio.Event()

    async def answer(index: int) -> str:
        nonlocal running, most
        running += 1
        most = max(most, running)
        if running == min(count, PARTITIONS_AT_ONCE):
            release.set()  # every answer that may wait at once is waiting
        # Later answers finish first: the order of the results is the request's, not the finishing order.
        await release.wait()
        await asyncio.sleep(0.001 * (count - index) / max(count, 1))
        running -= 1
        return f"partition {index}"

    answers = await asyncio.wait_for(side_by_side(answer, list(range(count))), timeout=10)
    assert answers == [f"partition {i}" for i in range(count)]
    assert most == min(count, PARTITIONS_AT_ONCE)


async def test_an_answer_that_raises_stops_the_others_and_its_error_is_the_requests() -> None:
    started: list[int] = []

    async def answer(index: int) -> int:
        started.append(index)
        if index == 2:
            raise ValueError("a handler's answer must not raise; if it does, the request fails")
        await asyncio.sleep(10)
        return index

    with pytest.raises(ValueError, match="must not raise"):
        await asyncio.wait_for(side_by_side(answer, list(range(5)), limit=3), timeout=5)
    assert started == [0, 1, 2]
