"""The ``fjord`` data source for Spark's Python Data Source API: a batch reader and a micro-batch stream reader.

Both plan on the driver (options → partitions and offsets → :class:`OffsetRange` tasks, see ``offsets``) and read
on executors (``kafka_reader``). The stream's offset, the one Spark checkpoints, is the next offset to read in every
partition (Spark's Kafka JSON shape), so a restarted query resumes exactly where the last committed batch ended.
Partitions that appear while a query runs are read from their earliest offset; partitions that disappear, or whose
offsets went backwards, are data loss (an error, or skipped with ``failOnDataLoss=false``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from spark_connector.kafka_reader import ReadSettings, read_range
from spark_connector.offset_lookup import OffsetLookup
from spark_connector.offsets import (
    DataLossError,
    OffsetMap,
    OffsetRange,
    check_batch_bounds,
    data_loss_message,
    from_stream_offset,
    plan_ranges,
    rate_limit,
    resolve_offsets,
    resolve_timestamp_offsets,
    to_stream_offset,
)
from spark_connector.options import FjordOptions, OptionError, client_config, parse_options, read_uncommitted

__all__ = ["FjordDataSource", "schema"]

_COLUMNS = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
            "timestampType int")
_HEADERS = "headers array<struct<key:string,value:binary>>"


def schema(include_headers: bool) -> str:
    """Spark's Kafka source schema, with ``headers`` only when ``includeHeaders`` is true."""
    return f"{_COLUMNS}, {_HEADERS}" if include_headers else _COLUMNS


class FjordDataSource(DataSource):
    """``spark.read.format("fjord")`` and ``spark.readStream.format("fjord")`` with Spark's Kafka source options."""

    @classmethod
    def name(cls) -> str:
        return "fjord"

    def schema(self) -> str:
        value = str(self.options.get("includeHeaders", "false")).strip().lower()
        if value not in ("true", "false"):
            raise OptionError(f"option 'includeHeaders' must be 'true' or 'false', got {value!r}")
        return schema(value == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return FjordBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FjordStreamReader(parse_options(self.options, streaming=True))


def read_settings(options: FjordOptions) -> ReadSettings:
    return ReadSettings(client_config=client_config(options), read_uncommitted=read_uncommitted(options),
                        include_headers=options.include_headers, fail_on_data_loss=options.fail_on_data_loss,
                        poll_timeout_ms=options.poll_timeout_ms)


def starting_offsets(options: FjordOptions, lookup: OffsetLookup, partitions: list[tuple[str, int]],
                     earliest: OffsetMap, latest: OffsetMap) -> OffsetMap:
    """Where a read starts: ``startingTimestamp`` wins over ``startingOffsetsByTimestamp``, which wins over
    ``startingOffsets`` (Spark's precedence)."""
    if options.starting_timestamp is not None:
        found = lookup.for_timestamps({tp: options.starting_timestamp for tp in partitions})
        return resolve_timestamp_offsets(found, latest, strategy=options.by_timestamp_strategy)
    if options.starting_by_timestamp is not None:
        # Resolving with the timestamps as "offsets" checks that they name exactly the subscribed partitions.
        timestamps = resolve_offsets(options.starting_by_timestamp, partitions, earliest, latest,
                                     option="startingOffsetsByTimestamp")
        found = lookup.for_timestamps(timestamps)
        return resolve_timestamp_offsets(found, latest, strategy=options.by_timestamp_strategy)
    return resolve_offsets(options.starting, partitions, earliest, latest, option="startingOffsets")


def _tasks(ranges: list[OffsetRange]) -> list[InputPartition]:
    return [InputPartition(offsets) for offsets in ranges]


def _read(settings: ReadSettings, partition: InputPartition | None) -> Iterator[tuple[Any, ...]]:
    """The rows of one planned task. When planning found nothing to read, Spark still runs one task, with no
    partition value (or none at all), which reads nothing."""
    offsets: OffsetRange | None = getattr(partition, "value", None)
    return iter(()) if offsets is None else read_range(settings, offsets)


class FjordBatchReader(DataSourceReader):
    """A batch read: the offsets between ``startingOffsets`` (default earliest) and ``endingOffsets`` (default
    latest) as they are when the query is planned."""

    def __init__(self, options: FjordOptions) -> None:
        self._options = options
        self._settings = read_settings(options)

    def partitions(self) -> Sequence[InputPartition]:
        lookup = OffsetLookup(self._options)
        partitions = lookup.partitions()
        earliest, latest = lookup.earliest(partitions), lookup.latest(partitions)
        start = starting_offsets(self._options, lookup, partitions, earliest, latest)
        end = resolve_offsets(self._options.ending, partitions, earliest, latest, option="endingOffsets")
        check_batch_bounds(start, end)
        return _tasks(plan_ranges(start, end, self._options.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return _read(self._settings, partition)


class FjordStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A micro-batch stream: each batch reads from the previous batch's end offsets up to the latest offsets,
    capped by ``maxOffsetsPerTrigger``; with ``trigger(availableNow=True)`` no further than the latest offsets seen
    when the query started."""

    def __init__(self, options: FjordOptions) -> None:
        self._options = options
        self._settings = read_settings(options)
        self._target: OffsetMap | None = None
        self._lookup_client: OffsetLookup | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader to executors for read(); the driver's admin client stays behind.
        state = dict(self.__dict__)
        state["_lookup_client"] = None
        return state

    def _lookup(self) -> OffsetLookup:
        """One admin client for the life of the query on the driver, rather than a new connection per trigger."""
        if self._lookup_client is None:
            self._lookup_client = OffsetLookup(self._options)
        return self._lookup_client

    def initialOffset(self) -> dict[str, Any]:
        lookup = self._lookup()
        partitions = lookup.partitions()
        earliest, latest = lookup.earliest(partitions), lookup.latest(partitions)
        return to_stream_offset(starting_offsets(self._options, lookup, partitions, earliest, latest))

    def prepareForTriggerAvailableNow(self) -> None:
        lookup = self._lookup()
        self._target = lookup.latest(lookup.partitions())

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self._options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit is not None else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        lookup = self._lookup()
        begin = from_stream_offset(start)
        latest = self._target if self._target is not None else lookup.latest(lookup.partitions())
        gone = sorted(set(begin) - set(latest))
        if gone:
            self._data_loss(f"partitions {gone} are gone (topic deleted?)")
            begin = {tp: offset for tp, offset in begin.items() if tp in latest}
        new = [tp for tp in latest if tp not in begin]
        begin.update(lookup.earliest(new))
        end = rate_limit(begin, latest, limit.max_rows) if isinstance(limit, ReadMaxRows) else dict(latest)
        return to_stream_offset(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, until = from_stream_offset(start), from_stream_offset(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self._lookup().earliest(new))
        for tp in sorted(until):
            if until[tp] < begin[tp]:
                self._data_loss(f"the offset of {tp[0]}-{tp[1]} went back from {begin[tp]} to {until[tp]}")
                until[tp] = begin[tp]
        return _tasks(plan_ranges(begin, until, self._options.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return _read(self._settings, partition)

    def _data_loss(self, message: str) -> None:
        if self._options.fail_on_data_loss:
            raise DataLossError(data_loss_message(message))
