"""The response shape of the APIs that answer each requested partition on its own (DeleteRecords,
OffsetForLeaderEpoch, DescribeProducers): one topic entry per requested topic, one partition entry per requested
partition in request order, whatever happens to its neighbours. Only the per-partition answer differs per API.

The partitions are answered a few at a time (:func:`side_by_side`, ListOffsets too; DeleteRecords one at a time,
since its answers change the partitions): an answer may wait, for a move's election and open at its target
(``broker.partition.access``), and a request naming several moving partitions then waits about once, not once for
each in turn; a request naming a million partitions still runs only a few answers at once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from broker.handlers.context import RequestContext
from wire import schema

#: ``answer(topic name, partition entity class, requested partition) -> partition entity``; must not raise for
#: a partition's own failure (it answers with an error code instead).
PartitionAnswer = Callable[[str, type[Any], Any], Awaitable[Any]]

#: How many partitions of one request are answered at once.
PARTITIONS_AT_ONCE = 16

_Item = TypeVar("_Item")
_Result = TypeVar("_Result")


async def side_by_side(
    answer: Callable[[_Item], Awaitable[_Result]], items: Sequence[_Item], limit: int = PARTITIONS_AT_ONCE
) -> list[_Result]:
    """``answer`` of each of ``items``, in their order, with at most ``limit`` running at once."""
    if len(items) <= 1:
        return [await answer(item) for item in items]
    results: dict[int, _Result] = {}
    taken = 0

    async def worker() -> None:
        nonlocal taken
        while taken < len(items):
            index, taken = taken, taken + 1
            results[index] = await answer(items[index])

    try:
        async with asyncio.TaskGroup() as group:
            for _ in range(min(limit, len(items))):
                group.create_task(worker())
    except BaseExceptionGroup as failed:
        # The others were cancelled; the request fails with the first error as it would have one at a time (the
        # dispatcher maps it to its Kafka code).
        raise failed.exceptions[0] from None
    return [results[index] for index in range(len(items))]


async def answer_per_partition(
    ctx: RequestContext,
    request: Any,
    answer: PartitionAnswer,
    *,
    topic_field: str = "name",
    partitions_field: str = "partitions",
    at_once: int = PARTITIONS_AT_ONCE,
) -> Any:
    """The whole response to ``request`` (``topics``/``throttle_time`` shaped): ``topic_field`` names the topic in
    both request and response, ``partitions_field`` the request's per-topic partition list; ``at_once``: how many
    partitions are answered at once (1 for an API whose answers change a partition, which a request may name twice)."""
    topic_cls = schema.field_entity(ctx.response_class, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    asked = [(topic, list(getattr(topic, partitions_field))) for topic in request.topics]
    flat = [(getattr(topic, topic_field), p) for topic, parts in asked for p in parts]
    answers = iter(await side_by_side(lambda item: answer(item[0], part_cls, item[1]), flat, at_once))
    topics = tuple(
        schema.build(topic_cls, **{topic_field: getattr(topic, topic_field)},
                     partitions=tuple(next(answers) for _ in parts))
        for topic, parts in asked
    )
    return ctx.build(throttle_time=0, topics=topics)
