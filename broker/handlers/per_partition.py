"""The response shape of the APIs that answer each requested partition on its own (DeleteRecords,
OffsetForLeaderEpoch, DescribeProducers): one topic entry per requested topic, one partition entry per requested
partition in request order, whatever happens to its neighbours. Only the per-partition answer differs per API."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from broker.handlers.context import RequestContext
from wire import schema

#: ``answer(topic name, partition entity class, requested partition) -> partition entity``; must not raise for
#: a partition's own failure (it answers with an error code instead).
PartitionAnswer = Callable[[str, type[Any], Any], Awaitable[Any]]


async def answer_per_partition(
    ctx: RequestContext,
    request: Any,
    answer: PartitionAnswer,
    *,
    topic_field: str = "name",
    partitions_field: str = "partitions",
) -> Any:
    """The whole response to ``request`` (``topics``/``throttle_time`` shaped): ``topic_field`` names the topic in
    both request and response, ``partitions_field`` the request's per-topic partition list."""
    topic_cls = schema.field_entity(ctx.response_class, "topics")
    part_cls = schema.field_entity(topic_cls, "partitions")
    topics = []
    for topic in request.topics:
        name = getattr(topic, topic_field)
        parts = [await answer(name, part_cls, p) for p in getattr(topic, partitions_field)]
        topics.append(schema.build(topic_cls, **{topic_field: name}, partitions=tuple(parts)))
    return ctx.build(throttle_time=0, topics=tuple(topics))
