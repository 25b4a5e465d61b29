"""The ``fjord`` data source for Spark's Python Data Source API: a batch reader and a micro-batch stream reader.

Both plan on the driver (options → partitions and offsets → :class:`OffsetRange` tasks, see ``offsets``) and read on
executors. With ``fjord.object.store`` set (and ``fjord.read`` not ``broker``), planning also locates each range's
uploaded part (``storage_lookup``), which executors read straight from the bucket (``direct_reader``); the rest goes
through the broker (``kafka_reader``); a compacted topic's cleaned prefix is read directly too. A ``read_committed``
read ends at the LSO (ListOffsets with isolation level 1) and drops aborted transactions on the direct path too. The
stream's offset, the one Spark checkpoints, is the next offset to read in every partition (Spark's Kafka JSON
shape), so a restarted query resumes exactly where the last committed batch ended.
Partitions that appear while a query runs are read from their earliest offset; one whose earliest offset is not 0,
partitions that disappear, or whose offsets went backwards, are data loss (an error, or logged and skipped with
``failOnDataLoss=false``), as Spark's Kafka source reports them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from settings.host_port import split_host_port
from spark_connector.direct_plan import DirectRange
from spark_connector.direct_reader import DirectSettings, read_direct
from spark_connector.kafka_reader import ReadSettings, read_range
from spark_connector.offset_lookup import ClusterLookupError, OffsetLookup
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
from spark_connector.options import (
    READ_BROKER,
    READ_DIRECT,
    FjordOptions,
    OptionError,
    client_config,
    parse_options,
    read_uncommitted,
)
from spark_connector.storage_lookup import ClusterFacts, StorageLookupError, locate_ranges
from spark_connector.trigger_delay import TriggerDelay

__all__ = ["FjordDataSource", "schema"]

logger = logging.getLogger(__name__)

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
                        poll_timeout_ms=options.poll_timeout_ms, group_id=options.executor_group_id)


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


def ending_offsets(options: FjordOptions, lookup: OffsetLookup, partitions: list[tuple[str, int]],
                   earliest: OffsetMap, latest: OffsetMap) -> OffsetMap:
    """Where a batch read ends: ``endingTimestamp`` wins over ``endingOffsetsByTimestamp``, which wins over
    ``endingOffsets`` (Spark's precedence). A timestamp ends a partition before its first record at or after that
    time; a partition with no record that recent ends at its latest offset, whatever
    ``startingOffsetsByTimestampStrategy`` says (Spark's readTimestampOffsets for ending offsets)."""
    if options.ending_timestamp is not None:
        found = lookup.for_timestamps({tp: options.ending_timestamp for tp in partitions})
        return resolve_timestamp_offsets(found, latest, strategy="latest")
    if options.ending_by_timestamp is not None:
        timestamps = resolve_offsets(options.ending_by_timestamp, partitions, earliest, latest,
                                     option="endingOffsetsByTimestamp")
        found = lookup.for_timestamps(timestamps)
        return resolve_timestamp_offsets(found, latest, strategy="latest")
    return resolve_offsets(options.ending, partitions, earliest, latest, option="endingOffsets")


def direct_settings(options: FjordOptions) -> DirectSettings | None:
    """The direct path's settings when this read may use it: a bucket is given and the broker path is not forced."""
    if options.object_store is None or options.read_path == READ_BROKER:
        return None
    return DirectSettings(read_settings(options), options.object_store)


def _tasks(options: FjordOptions, lookup: OffsetLookup | None,
           ranges: list[OffsetRange]) -> list[InputPartition]:
    """The planned ranges as Spark tasks; with the direct path, those whose uploaded part was located become
    :class:`DirectRange` tasks. With ``fjord.read=auto`` a cluster whose storage cannot be located is read through
    the brokers (logged); ``direct`` makes it an error."""
    if lookup is None or direct_settings(options) is None or not ranges:
        return [InputPartition(offsets) for offsets in ranges]
    try:
        planned = _locate(options, lookup, ranges)
    except (StorageLookupError, ClusterLookupError) as exc:
        if options.read_path == READ_DIRECT:
            raise
        logger.warning("reading through the brokers: %s", exc)
        planned = list(ranges)
    return [InputPartition(task) for task in planned]


def _locate(options: FjordOptions, lookup: OffsetLookup,
            ranges: list[OffsetRange]) -> list[OffsetRange | DirectRange]:
    assert options.object_store is not None
    ranges = _checked_heads(options, lookup, ranges)
    if not ranges:
        return []
    facts = ClusterFacts(_addresses(options.bootstrap_servers), lookup.cluster_id(),
                         lookup.topic_ids({r.topic for r in ranges}))
    return locate_ranges(facts, options.object_store, ranges, read_committed=not read_uncommitted(options))


def _checked_heads(options: FjordOptions, lookup: OffsetLookup, ranges: list[OffsetRange]) -> list[OffsetRange]:
    """Ranges starting below their partition's log start (retention, DeleteRecords) are data loss: an error with
    ``failOnDataLoss``, else they start at the log start, as the broker path does."""
    earliest = lookup.earliest({(r.topic, r.partition) for r in ranges})
    checked: list[OffsetRange] = []
    for r in ranges:
        low = earliest[(r.topic, r.partition)]
        if r.start >= low:
            checked.append(r)
        elif options.fail_on_data_loss:
            raise DataLossError(data_loss_message(
                f"cannot read {r.topic}-{r.partition} from offset {r.start}: the partition now starts at {low}"))
        elif low < r.end:
            checked.append(OffsetRange(r.topic, r.partition, low, r.end))
    return checked


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    return [split for split in map(split_host_port, bootstrap.split(",")) if split is not None]


def _read(settings: ReadSettings, direct: DirectSettings | None,
          partition: InputPartition | None) -> Iterator[tuple[Any, ...]] | Iterator[pa.RecordBatch]:
    """The rows of one planned task. When planning found nothing to read, Spark still runs one task, with no
    partition value (or none at all), which reads nothing."""
    task: OffsetRange | DirectRange | None = getattr(partition, "value", None)
    if isinstance(task, DirectRange) and direct is not None:
        return read_direct(direct, task)
    if isinstance(task, DirectRange):
        task = task.offsets
    return iter(()) if task is None else read_range(settings, task)


class FjordBatchReader(DataSourceReader):
    """A batch read: the offsets between ``startingOffsets`` (default earliest) and ``endingOffsets`` (default
    latest), or those the by-timestamp options resolve to, as they are when the query is planned."""

    def __init__(self, options: FjordOptions) -> None:
        self._options = options
        self._settings = read_settings(options)
        self._direct = direct_settings(options)

    def partitions(self) -> Sequence[InputPartition]:
        lookup = OffsetLookup(self._options)
        partitions = lookup.partitions()
        earliest, latest = lookup.earliest(partitions), lookup.latest(partitions)
        start = starting_offsets(self._options, lookup, partitions, earliest, latest)
        end = ending_offsets(self._options, lookup, partitions, earliest, latest)
        check_batch_bounds(start, end)
        return _tasks(self._options, lookup, plan_ranges(start, end, self._options.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]] | Iterator[pa.RecordBatch]:
        return _read(self._settings, self._direct, partition)


class FjordStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A micro-batch stream: each batch reads from the previous batch's end offsets up to the latest offsets,
    capped by ``maxOffsetsPerTrigger`` and held back while fewer than ``minOffsetsPerTrigger`` have come (until
    ``maxTriggerDelay``); with ``trigger(availableNow=True)`` no further than the latest offsets seen when the query
    started, and never held (no more records would come to end the wait)."""

    def __init__(self, options: FjordOptions) -> None:
        self._options = options
        self._settings = read_settings(options)
        self._direct = direct_settings(options)
        self._target: OffsetMap | None = None
        self._lookup_client: OffsetLookup | None = None
        minimum = options.min_offsets_per_trigger
        self._delay = TriggerDelay(minimum, options.max_trigger_delay_ms) if minimum is not None else None

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
        """What Spark passes to :meth:`latestOffset` on a trigger that is not ``once``: ``maxOffsetsPerTrigger``'s
        cap, else ``minOffsetsPerTrigger``'s floor, else all. The floor is enforced by ``self._delay`` whatever the
        limit (Python's limits compose no two), except when Spark asks for all (``Trigger.Once``)."""
        if self._options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self._options.max_offsets_per_trigger)
        if self._options.min_offsets_per_trigger is not None:
            return ReadMinRows(self._options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        lookup = self._lookup()
        begin = from_stream_offset(start)
        latest = self._target if self._target is not None else lookup.latest(lookup.partitions())
        gone = sorted(set(begin) - set(latest))
        if gone:
            self._data_loss(f"partitions {gone} are gone (topic deleted?)")
            begin = {tp: offset for tp, offset in begin.items() if tp in latest}
        held = (self._delay is not None and self._target is None and not isinstance(limit, ReadAllAvailable)
                and self._delay.holds(begin, latest, time.time() * 1000))
        if held:  # fewer than minOffsetsPerTrigger new records, and maxTriggerDelay not over: no batch yet
            return start
        new = [tp for tp in latest if tp not in begin]
        begin.update(lookup.earliest(new))
        end = rate_limit(begin, latest, limit.max_rows) if isinstance(limit, ReadMaxRows) else dict(latest)
        return to_stream_offset(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, until = from_stream_offset(start), from_stream_offset(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            added = self._lookup().earliest(new)
            # A partition added since the last batch should start at 0; a later start means records were deleted
            # (retention, DeleteRecords) before the query saw them (Spark's getOffsetRangesFromResolvedOffsets).
            for tp, offset in sorted(added.items()):
                if offset != 0:
                    self._data_loss(f"added partition {tp[0]}-{tp[1]} starts from {offset} instead of 0")
            begin.update(added)
        for tp in sorted(until):
            if until[tp] < begin[tp]:
                self._data_loss(f"the offset of {tp[0]}-{tp[1]} went back from {begin[tp]} to {until[tp]}")
                until[tp] = begin[tp]
        return _tasks(self._options, self._lookup(), plan_ranges(begin, until, self._options.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]] | Iterator[pa.RecordBatch]:
        return _read(self._settings, self._direct, partition)

    def _data_loss(self, message: str) -> None:
        """Spark's reportDataLoss: fails the query with ``failOnDataLoss``, else logs the loss and goes on."""
        if self._options.fail_on_data_loss:
            raise DataLossError(data_loss_message(message))
        logger.warning("%s; some data may have been lost (failOnDataLoss=false, going on)", message)
