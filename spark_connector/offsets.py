"""From what the user asked for and what the cluster holds to the offset ranges Spark tasks read. No I/O here.

The driver looks up the partitions and their earliest/latest offsets (``offset_lookup``); the functions below turn
those numbers and the parsed options into per-partition start and end offsets, and then into :class:`OffsetRange`
tasks: one per partition, split further when ``minPartitions`` asks for more tasks, capped by
``maxOffsetsPerTrigger`` in a streaming micro-batch. The arithmetic (the split, the pro-rata cap that never starves a
small partition) is Spark's Kafka source's, so a job planned here gets the same number and shape of tasks.

A streaming offset (what Spark writes to the checkpoint) is Spark's JSON shape, ``{"topic": {"0": 42}}``: the next
offset to read in every partition.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spark_connector.options import EARLIEST, LATEST, OptionError

__all__ = [
    "DataLossError",
    "OffsetRange",
    "from_stream_offset",
    "plan_ranges",
    "rate_limit",
    "resolve_offsets",
    "resolve_timestamp_offsets",
    "to_stream_offset",
]

TopicPartition = tuple[str, int]
OffsetMap = dict[TopicPartition, int]


class DataLossError(RuntimeError):
    """Records the query asked for are gone (retention, DeleteRecords, a deleted topic) and ``failOnDataLoss`` is
    true. The message says which partition and offsets, and that ``failOnDataLoss=false`` skips them."""


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition: what one Spark task reads."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def data_loss_message(message: str) -> str:
    return (f"{message}. Some data may have been lost because it is no longer available in Fjord (retention, "
            "DeleteRecords or a deleted topic). Set the option failOnDataLoss to false to skip it instead.")


def resolve_offsets(spec: str | Mapping[TopicPartition, int], partitions: Iterable[TopicPartition],
                    earliest: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], *,
                    option: str) -> OffsetMap:
    """Offsets for ``partitions`` from ``"earliest"``, ``"latest"`` or a per-partition map with Spark's ``-2``
    (earliest) and ``-1`` (latest) markers. A map must name exactly the subscribed partitions, as in Spark: a
    partition left out or one that does not exist is a mistake worth an error rather than a silent default."""
    wanted = sorted(partitions)
    if spec == "earliest":
        return {tp: earliest[tp] for tp in wanted}
    if spec == "latest":
        return {tp: latest[tp] for tp in wanted}
    assert isinstance(spec, Mapping)
    _check_same_partitions(spec.keys(), wanted, option)
    resolved: OffsetMap = {}
    for tp in wanted:
        offset = spec[tp]
        resolved[tp] = earliest[tp] if offset == EARLIEST else latest[tp] if offset == LATEST else offset
    return resolved


def resolve_timestamp_offsets(found: Mapping[TopicPartition, int | None], latest: Mapping[TopicPartition, int], *,
                              strategy: str) -> OffsetMap:
    """Start offsets from a by-timestamp lookup: ``found`` holds, per partition, the first offset whose timestamp is
    at or after the asked one, or None when no record is that recent. Spark's default strategy ``error`` fails
    then; ``latest`` starts such a partition at its end."""
    resolved: OffsetMap = {}
    for tp, offset in sorted(found.items()):
        if offset is None or offset < 0:
            if strategy != "latest":
                raise OptionError(f"no offset in {tp[0]}-{tp[1]} has a timestamp at or after the one asked for in "
                                 "startingOffsetsByTimestamp/startingTimestamp; set "
                                 "startingOffsetsByTimestampStrategy=latest to start such partitions at their end")
            offset = latest[tp]
        resolved[tp] = offset
    return resolved


def check_batch_bounds(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> None:
    """A batch query whose start is after its end in some partition is a mistake in the options (Spark refuses it
    too)."""
    for tp in sorted(start):
        if tp in end and start[tp] > end[tp]:
            raise OptionError(f"the starting offset {start[tp]} of {tp[0]}-{tp[1]} is after its ending offset "
                             f"{end[tp]}; check startingOffsets and endingOffsets")


def plan_ranges(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                min_partitions: int | None) -> list[OffsetRange]:
    """One range per partition with records to read, split so that there are at least ``min_partitions`` tasks
    when asked: each partition gets a share of tasks in proportion to its size (at least one), and the offsets are
    divided evenly among them (Spark's ``KafkaOffsetRangeCalculator``)."""
    ranges = [OffsetRange(tp[0], tp[1], start[tp], end[tp]) for tp in sorted(end) if tp in start]
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    ideal = sum(r.size for r in ranges) / min_partitions
    split: list[OffsetRange] = []
    for r in ranges:
        parts = max(_round_half_up(r.size / ideal), 1)
        remaining, offset = r.size, r.start
        for part in range(parts):
            this = remaining // (parts - part)
            remaining -= this
            until = min(offset + this, r.end)
            if until > offset:
                split.append(OffsetRange(r.topic, r.partition, offset, until))
            offset = until
    return split


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               limit: int) -> OffsetMap:
    """End offsets that read at most about ``limit`` records in all: each partition's share is in proportion to
    its backlog, rounded down, but a partition with a share below one record still gets one so that small
    partitions are never starved (Spark's ``rateLimit``; the total can exceed ``limit`` by those few records)."""
    sizes = {tp: end - start[tp] for tp, end in latest.items() if tp in start and end - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    limited: OffsetMap = {}
    for tp, end in latest.items():
        if tp not in sizes:
            limited[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        limited[tp] = min(end, start[tp] + share)
    return limited


def to_stream_offset(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Spark's checkpointed offset JSON: ``{"topic": {"0": 42}}`` (string partition keys, as JSON requires)."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def from_stream_offset(offset: Mapping[str, Mapping[str, int]]) -> OffsetMap:
    return {(topic, int(partition)): int(value)
            for topic, by_partition in offset.items() for partition, value in by_partition.items()}


def _round_half_up(value: float) -> int:
    """Scala's ``math.round`` (half up), not Python's banker's rounding, so splits match Spark's."""
    return math.floor(value + 0.5)


def _check_same_partitions(given: Iterable[TopicPartition], subscribed: Iterable[TopicPartition], option: str) -> None:
    given_set, subscribed_set = set(given), set(subscribed)
    if given_set != subscribed_set:
        missing = sorted(subscribed_set - given_set)
        unknown = sorted(given_set - subscribed_set)
        raise OptionError(f"option '{option}' must name exactly the subscribed partitions: missing {_names(missing)}, "
                         f"not subscribed or not existing {_names(unknown)}")


def _names(partitions: Iterable[TopicPartition]) -> str:
    return "[" + ", ".join(f"{topic}-{partition}" for topic, partition in partitions) + "]"
