"""The ``fjord`` source's options, parsed and checked once on the driver.

The option names and their meaning are Spark's Kafka source's (``kafka.bootstrap.servers``, ``subscribe``,
``startingOffsets``, ...), so that a pipeline moves from ``format("kafka")`` to ``format("fjord")`` by changing the
format name only. Every check happens here, before anything connects, and a mistake raises one
:class:`OptionError` naming the option and what it accepts; the readers then work with typed values only.

Offsets in the per-partition JSON follow Spark's convention: ``-2`` is the earliest offset, ``-1`` the latest.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from spark_connector.errors import OptionError
from spark_connector.kafka_settings import kafka_client_params
from storage.config import ConfigError, parse_bucket_url

logger = logging.getLogger(__name__)

__all__ = [
    "EARLIEST",
    "LATEST",
    "READ_AUTO",
    "READ_BROKER",
    "READ_DIRECT",
    "Assign",
    "FjordOptions",
    "OptionError",
    "Subscribe",
    "SubscribePattern",
    "parse_options",
]

#: ``fjord.read`` values.
READ_AUTO = "auto"
READ_DIRECT = "direct"
READ_BROKER = "broker"

#: Spark's markers in per-partition offset JSON.
EARLIEST = -2
LATEST = -1

TopicPartition = tuple[str, int]

DEFAULT_POLL_TIMEOUT_MS = 120_000

#: Spark's default ``groupIdPrefix`` for a streaming query and for a batch read (KafkaSourceProvider).
STREAM_GROUP_PREFIX = "spark-kafka-source"
BATCH_GROUP_PREFIX = "spark-kafka-relation"

# The options a stream's triggers take and a batch read ignores (lower-cased -> as documented).
_TRIGGER_OPTIONS = {"minoffsetspertrigger": "minOffsetsPerTrigger", "maxtriggerdelay": "maxTriggerDelay"}
#: Spark's default ``maxTriggerDelay``: 15 minutes.
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000
#: The units of Spark's time strings (``JavaUtils.timeStringAsMs``: ``15m``, ``30s``, ``500ms``; a bare number is
#: milliseconds), in milliseconds.
_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_TIME_STRING = re.compile(r"(-?[0-9]+)([a-z]+)?")

# Consumer settings the source owns: letting a user set them would change which records a range returns (Spark's
# Kafka source refuses the same ones).
_OWNED_KAFKA_PARAMS = {
    "auto.offset.reset": "set startingOffsets instead",
    "enable.auto.commit": "the source never commits offsets; progress lives in Spark's checkpoint",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "enable.partition.eof": "the source needs partition EOF events to end a range early",
}


@dataclass(frozen=True)
class Subscribe:
    """``subscribe``: a fixed list of topics, all their partitions."""

    topics: tuple[str, ...]


@dataclass(frozen=True)
class SubscribePattern:
    """``subscribePattern``: every topic whose whole name matches the regular expression (Java-style ``matches``)."""

    pattern: str

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True)
class Assign:
    """``assign``: exactly these partitions."""

    partitions: tuple[TopicPartition, ...]


Subscription = Subscribe | SubscribePattern | Assign


@dataclass(frozen=True)
class FjordOptions:
    """Every option of one ``fjord`` read, typed. ``starting``/``ending`` are ``"earliest"``, ``"latest"`` or a
    per-partition map (Spark's JSON, ``-2``/``-1`` markers kept); ``starting_timestamp`` wins over
    ``starting_by_timestamp``, which wins over ``starting``, as in Spark, and likewise ``ending_timestamp`` and
    ``ending_by_timestamp`` over ``ending`` (batch reads only)."""

    bootstrap_servers: str
    subscription: Subscription
    starting: str | dict[TopicPartition, int]
    ending: str | dict[TopicPartition, int]
    starting_by_timestamp: dict[TopicPartition, int] | None = None
    starting_timestamp: int | None = None
    by_timestamp_strategy: str = "error"
    ending_by_timestamp: dict[TopicPartition, int] | None = None
    ending_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    #: ``minOffsetsPerTrigger`` and ``maxTriggerDelay``: a stream's trigger is held back until that many new
    #: records or that long since the last batch (``spark_connector.trigger_delay``).
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    #: The ``kafka.*`` options without their prefix, Java settings translated (``kafka_settings``), checked.
    kafka_params: dict[str, str] = field(default_factory=dict)
    #: ``fjord.read``: ``auto`` (direct when ``fjord.object.store`` is set), ``direct`` or ``broker``.
    read_path: str = READ_AUTO
    #: ``fjord.object.store``: the cluster's ``s3.data.buckets`` URL, which executors read uploaded data from.
    object_store: str | None = None
    #: The group id the executors' consumers carry (they never join it: ``assign`` only, no commits): the user's
    #: ``kafka.group.id``, else Spark's ``<groupIdPrefix>-<uuid>-executor``, unique to this query or read, so that
    #: ACLs and broker logs see the names Spark's Kafka source would give.
    executor_group_id: str = ""


def parse_options(options: Mapping[str, str], *, streaming: bool) -> FjordOptions:
    """Checks ``options`` (case-insensitive names, as Spark passes them) for a batch or a streaming read."""
    opts = {key.lower(): str(value) for key, value in options.items()}
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise OptionError("option 'kafka.bootstrap.servers' is required (host:port[,host:port...])")
    kafka_params = kafka_client_params(opts, consumer=True, owned=_OWNED_KAFKA_PARAMS, enforced={})

    subscription = _subscription(opts)
    default_start = "latest" if streaming else "earliest"
    starting = _offsets_option(opts, "startingoffsets", "startingOffsets", default_start)
    if not streaming and (starting == "latest" or (isinstance(starting, dict) and LATEST in starting.values())):
        raise OptionError("option 'startingOffsets': 'latest' (or -1) is not allowed for batch queries")
    max_per_trigger = _positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger")
    min_per_trigger, max_delay_ms = _trigger_options(opts, max_per_trigger, streaming=streaming)
    if streaming and "endingoffsets" in opts:
        raise OptionError("option 'endingOffsets' is not valid in streaming queries")
    # Spark refuses endingOffsetsByTimestamp in a stream with these words; endingTimestamp, which Spark's stream
    # passes over without a word, is refused alike rather than ignored: a stream has no end to give it.
    for key, name in (("endingoffsetsbytimestamp", "endingOffsetsByTimestamp"), ("endingtimestamp", "endingTimestamp")):
        if streaming and key in opts:
            raise OptionError(f"option '{name}': ending timestamp not valid in streaming queries")
    ending = _offsets_option(opts, "endingoffsets", "endingOffsets", "latest")
    if ending == "earliest" or (isinstance(ending, dict) and EARLIEST in ending.values()):
        raise OptionError("option 'endingOffsets': 'earliest' (or -2) is not allowed")

    by_timestamp = _timestamps_option(opts, "startingoffsetsbytimestamp", "startingOffsetsByTimestamp")
    starting_timestamp = None
    if "startingtimestamp" in opts:
        starting_timestamp = _non_negative_int(opts, "startingtimestamp", "startingTimestamp")
    ending_by_timestamp = _timestamps_option(opts, "endingoffsetsbytimestamp", "endingOffsetsByTimestamp")
    ending_timestamp = None
    if "endingtimestamp" in opts:
        ending_timestamp = _non_negative_int(opts, "endingtimestamp", "endingTimestamp")
    if starting_timestamp is None and ending_timestamp is None:
        _check_timestamp_bounds(by_timestamp, ending_by_timestamp)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got {strategy!r}")

    read_path, object_store = _read_path(opts)
    default_prefix = STREAM_GROUP_PREFIX if streaming else BATCH_GROUP_PREFIX
    prefix = opts.get("groupidprefix", default_prefix).strip() or default_prefix
    return FjordOptions(
        bootstrap_servers=bootstrap,
        subscription=subscription,
        starting=starting,
        ending=ending,
        starting_by_timestamp=by_timestamp,
        starting_timestamp=starting_timestamp,
        by_timestamp_strategy=strategy,
        ending_by_timestamp=ending_by_timestamp,
        ending_timestamp=ending_timestamp,
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=max_delay_ms,
        min_partitions=_positive_int(opts, "minpartitions", "minPartitions"),
        include_headers=_boolean(opts, "includeheaders", "includeHeaders", False),
        fail_on_data_loss=_boolean(opts, "failondataloss", "failOnDataLoss", True),
        poll_timeout_ms=_positive_int(opts, "kafkaconsumer.polltimeoutms", "kafkaConsumer.pollTimeoutMs")
        or DEFAULT_POLL_TIMEOUT_MS,
        kafka_params=kafka_params,
        read_path=read_path,
        object_store=object_store,
        executor_group_id=kafka_params.get("group.id") or f"{prefix}-{uuid.uuid4()}-executor",
    )


def _trigger_options(
    opts: Mapping[str, str], max_records: int | None, *, streaming: bool
) -> tuple[int | None, int]:
    """``minOffsetsPerTrigger`` and ``maxTriggerDelay``, checked as Spark's Kafka source checks them. A batch read
    ignores them with a warning, as Spark's Kafka source ignores every per-trigger option in batch queries."""
    given = [name for key, name in _TRIGGER_OPTIONS.items() if key in opts]
    if not streaming:
        for name in given:
            logger.warning("%s option ignored in batch queries", name)
        return None, DEFAULT_MAX_TRIGGER_DELAY_MS
    min_records = _positive_int(opts, "minoffsetspertrigger", "minOffsetsPerTrigger")
    if min_records is not None and max_records is not None and min_records > max_records:
        raise OptionError(f"The value of minOffsetPerTrigger({min_records}) is higher than the "
                          f"maxOffsetsPerTrigger({max_records}).")
    delay = opts.get("maxtriggerdelay")
    return min_records, DEFAULT_MAX_TRIGGER_DELAY_MS if delay is None else _time_string_ms(delay, "maxTriggerDelay")


def _time_string_ms(text: str, name: str) -> int:
    """A Spark time string (``15m``, ``30s``, ``500ms``, ``1h``; a bare number is milliseconds) in milliseconds."""
    match = _TIME_STRING.fullmatch(text.strip().lower())
    unit = match.group(2) or "ms" if match is not None else None
    if match is None or unit not in _TIME_UNITS_MS or int(match.group(1)) < 0:
        raise OptionError(f"option '{name}' must be a time such as '15m', '30s' or '500ms', got {text!r}")
    return int(int(match.group(1)) * _TIME_UNITS_MS[unit])


def _read_path(opts: Mapping[str, str]) -> tuple[str, str | None]:
    """``fjord.read`` and ``fjord.object.store``: reading directly needs the bucket, so ``direct`` without it is a
    mistake, and ``auto`` without it reads through the brokers."""
    read_path = opts.get("fjord.read", READ_AUTO).strip().lower()
    if read_path not in (READ_AUTO, READ_DIRECT, READ_BROKER):
        raise OptionError(f"option 'fjord.read' must be 'auto', 'direct' or 'broker', got {opts['fjord.read']!r}")
    object_store = opts.get("fjord.object.store", "").strip() or None
    if object_store is not None:
        try:
            url = parse_bucket_url(object_store, "fjord.object.store")
        except ConfigError as exc:
            raise OptionError(f"option 'fjord.object.store': {exc}") from exc
        if url.scheme not in ("file", "s3"):
            raise OptionError(f"option 'fjord.object.store' must be a file:// or s3:// URL, got {url.describe()}")
    elif read_path == READ_DIRECT:
        raise OptionError("option 'fjord.read=direct' needs 'fjord.object.store', the cluster's s3.data.buckets URL "
                          "(e.g. s3://bucket?region=R&endpoint=URL or file:///path)")
    return read_path, object_store


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribepattern", "assign") if name in opts]
    if len(given) != 1:
        raise OptionError("exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be set, got "
                          f"{len(given)}")
    if "subscribe" in opts:
        topics = tuple(topic.strip() for topic in opts["subscribe"].split(",") if topic.strip())
        if not topics:
            raise OptionError("option 'subscribe' must list at least one topic (comma-separated)")
        return Subscribe(topics)
    if "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise OptionError("option 'subscribePattern' must not be empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regular expression: {exc}") from exc
        return SubscribePattern(pattern)
    return Assign(_assign_json(opts["assign"]))


def _assign_json(text: str) -> tuple[TopicPartition, ...]:
    """``{"topicA":[0,1],"topicB":[2,4]}``."""
    expected = """a JSON object of topic -> list of partitions, e.g. {"topicA":[0,1]}"""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option 'assign' must be {expected}: {exc}") from exc
    if not isinstance(value, dict) or not value:
        raise OptionError(f"option 'assign' must be {expected}")
    partitions: list[TopicPartition] = []
    for topic, numbers in value.items():
        if not isinstance(numbers, list) or not all(isinstance(n, int) and n >= 0 for n in numbers):
            raise OptionError(f"option 'assign': topic {topic!r} must map to a list of partition numbers >= 0")
        partitions.extend((topic, n) for n in numbers)
    return tuple(sorted(set(partitions)))


def _offsets_option(opts: Mapping[str, str], key: str, name: str, default: str) -> str | dict[TopicPartition, int]:
    text = opts.get(key, default).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    offsets = _partition_json(text, name)
    if any(offset < EARLIEST for offset in offsets.values()):
        raise OptionError(f"option '{name}': offsets must be >= 0, or -2 (earliest) or -1 (latest)")
    return offsets


def _partition_json(text: str, name: str) -> dict[TopicPartition, int]:
    """Spark's per-partition JSON, ``{"topicA":{"0":23,"1":-1}}``, as ``{("topicA", 0): 23, ...}``."""
    expected = """'earliest', 'latest' or JSON like {"topicA":{"0":23,"1":-1}}"""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option '{name}' must be {expected}: {exc}") from exc
    if not isinstance(value, dict) or not value:
        raise OptionError(f"option '{name}' must be {expected}")
    result: dict[TopicPartition, int] = {}
    for topic, by_partition in value.items():
        if not isinstance(by_partition, dict):
            raise OptionError(f"option '{name}': topic {topic!r} must map to an object of partition -> number")
        for partition, number in by_partition.items():
            if not str(partition).isdigit() or isinstance(number, bool) or not isinstance(number, int):
                raise OptionError(f"option '{name}': topic {topic!r} partition {partition!r} must be a partition "
                                  f"number mapping to an integer, got {number!r}")
            result[(topic, int(partition))] = number
    return result


def _timestamps_option(opts: Mapping[str, str], key: str, name: str) -> dict[TopicPartition, int] | None:
    """``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: per-partition milliseconds since the epoch."""
    if key not in opts:
        return None
    timestamps = _partition_json(opts[key], name)
    if any(ts < 0 for ts in timestamps.values()):
        raise OptionError(f"option '{name}': timestamps must be milliseconds >= 0")
    return timestamps


def _check_timestamp_bounds(start: Mapping[TopicPartition, int] | None,
                            end: Mapping[TopicPartition, int] | None) -> None:
    """Both per-partition timestamp maps given (and not overridden by a global timestamp): they must name the same
    partitions, and no start may be after its end, as Spark's checkOffsetLimitValidity refuses before any lookup."""
    if start is None or end is None:
        return
    if set(start) != set(end):
        raise OptionError("options 'startingOffsetsByTimestamp' and 'endingOffsetsByTimestamp' must name the same "
                          f"partitions, got {sorted(start)} and {sorted(end)}")
    for tp in sorted(start):
        if start[tp] > end[tp]:
            raise OptionError(f"option 'startingOffsetsByTimestamp': the starting timestamp {start[tp]} of "
                              f"{tp[0]}-{tp[1]} is after its ending timestamp {end[tp]} in 'endingOffsetsByTimestamp'")


def _positive_int(opts: Mapping[str, str], key: str, name: str) -> int | None:
    if key not in opts:
        return None
    try:
        value = int(opts[key])
    except ValueError:
        value = 0
    if value <= 0:
        raise OptionError(f"option '{name}' must be a positive integer, got {opts[key]!r}")
    return value


def _non_negative_int(opts: Mapping[str, str], key: str, name: str) -> int:
    try:
        value = int(opts[key])
    except ValueError:
        value = -1
    if value < 0:
        raise OptionError(f"option '{name}' must be milliseconds since the epoch (>= 0), got {opts[key]!r}")
    return value


def _boolean(opts: Mapping[str, str], key: str, name: str, default: bool) -> bool:
    if key not in opts:
        return default
    text = opts[key].strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option '{name}' must be 'true' or 'false', got {opts[key]!r}")
    return text == "true"


def client_config(options: FjordOptions) -> dict[str, str | int | float | bool]:
    """The settings every Kafka client of one read shares: the bootstrap servers and the user's ``kafka.*``
    options (security, timeouts, ...). Each client adds the settings it owns on top."""
    config: dict[str, str | int | float | bool] = dict(options.kafka_params)
    config["bootstrap.servers"] = options.bootstrap_servers
    return config


def read_uncommitted(options: FjordOptions) -> bool:
    """Spark's Kafka source reads uncommitted records unless ``kafka.isolation.level=read_committed`` says
    otherwise (librdkafka's own default is the opposite)."""
    return options.kafka_params.get("isolation.level", "read_uncommitted") != "read_committed"
