"""The ``fjord`` sink: ``df.write.format("fjord")`` and ``df.writeStream.format("fjord")`` produce rows to Fjord.

The rows have the shape Spark's Kafka sink takes, so a job moves between ``format("kafka")`` and ``format("fjord")``
by the format's name: ``value`` (string or binary, required), and optionally ``key`` (string or binary), ``topic``
(string; the ``topic`` option wins over it), ``partition`` (int; otherwise murmur2 of the key picks one, as the
Java producer's default partitioner does, and a null key a random one) and ``headers``
(``array<struct<key:string,value:binary>>``). Other columns are ignored, as Spark's sink
does. The schema is checked on the driver, before any task runs, and a mistake is one :class:`OptionError`.

Each task produces its rows with its own confluent-kafka producer, idempotent (``enable.idempotence``,
``acks=all``: no duplicate and no reordering from the producer's own retries), and flushes before it returns its
commit message, so a micro-batch is committed to Spark's checkpoint only once every record of it is acknowledged.
A record that cannot be delivered fails the task with :class:`DeliveryError`, naming the topic and partition. Like
Spark's Kafka sink this is at least once across failures: a task or micro-batch that Spark runs again after a
crash produces its records again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message, Producer
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, DataType, IntegerType, StringType, StructType

from spark_connector.kafka_settings import kafka_client_params
from spark_connector.options import OptionError

__all__ = ["DeliveryError", "FjordBatchWriter", "FjordStreamWriter", "SinkSettings", "sink_settings"]

#: How long a task waits for its records to be acknowledged before it fails (librdkafka retries within it).
DELIVERY_TIMEOUT_MS = 120_000
#: librdkafka's partitioner that places a keyed record as the Java producer's default partitioner does.
JAVA_PARTITIONER = "murmur2_random"
_POLL_S = 0.5
_UNASSIGNED = -1

# Producer settings the sink owns, as Spark's Kafka sink owns the serializers.
_OWNED_PRODUCER_PARAMS = {
    "key.serializer": "keys are written as the bytes of the key column",
    "value.serializer": "values are written as the bytes of the value column",
}

# Settings the sink enforces: a job may still say them (Java's spelling, any case), as a Spark Kafka job often
# does, but a weaker value would give up the idempotent, fully acknowledged writes, so it is refused.
_ENFORCED_VALUES = {
    "enable.idempotence": (("true",), "the sink always produces idempotently"),
    "acks": (("all", "-1"), "the sink always waits for acks=all"),
}

#: What the sink sets over the user's settings, whatever they say.
_ENFORCED_PRODUCER_PARAMS: dict[str, str | int | float | bool] = {"enable.idempotence": True, "acks": "all"}

_BYTES_TYPES = (StringType, BinaryType)
_HEADERS_TYPE = "array<struct<key:string,value:binary>>"


class DeliveryError(RuntimeError):
    """A record (or a whole task's records) could not be delivered to Fjord."""


@dataclass(frozen=True)
class SinkSettings:
    """What a write task needs, checked on the driver and pickled to executors: the producer settings, the fixed
    topic if any, and the positions of the Kafka columns in the rows (None when absent)."""

    producer_config: dict[str, str | int | float | bool]
    topic: str | None
    value: int
    key: int | None
    topic_column: int | None
    partition: int | None
    headers: int | None


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """One task's commit message: how many records it delivered."""

    records: int


def sink_settings(options: Mapping[str, str], schema: StructType) -> SinkSettings:
    """Checks the options and the schema of the rows to write (Spark's Kafka sink's rules)."""
    opts = {key.lower(): str(value) for key, value in options.items()}
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise OptionError("option 'kafka.bootstrap.servers' is required (host:port[,host:port...])")
    for name, (accepted, why) in _ENFORCED_VALUES.items():
        given = opts.get(f"kafka.{name}")
        if given is not None and given.strip().lower() not in accepted:
            raise OptionError(f"option 'kafka.{name}' is not supported with the value {given!r}: {why}")
    params: dict[str, str | int | float | bool] = dict(
        kafka_client_params(opts, consumer=False, owned=_OWNED_PRODUCER_PARAMS, enforced=_ENFORCED_PRODUCER_PARAMS)
    )
    params.setdefault("delivery.timeout.ms", DELIVERY_TIMEOUT_MS)
    # Spark's Kafka sink produces with the Java producer, which puts a keyed record in murmur2(key) % partitions;
    # librdkafka's own default (consistent_random, CRC32) would put the same key elsewhere, so a topic written by
    # both (or read by a job that relies on key -> partition) would disagree. NULL keys go to a random partition.
    params.setdefault("partitioner", JAVA_PARTITIONER)
    params.update({"bootstrap.servers": bootstrap, **_ENFORCED_PRODUCER_PARAMS})

    fields = {field.name.lower(): (index, field.dataType) for index, field in enumerate(schema.fields)}
    topic = opts.get("topic", "").strip() or None
    if "value" not in fields:
        raise OptionError(
            f"the rows to write need a 'value' column (string or binary); they have "
            f"{', '.join(schema.fieldNames()) or 'no columns'}"
        )
    _check_type(fields, "value", _BYTES_TYPES, "string or binary")
    _check_type(fields, "key", _BYTES_TYPES, "string or binary")
    _check_type(fields, "topic", (StringType,), "string")
    _check_type(fields, "partition", (IntegerType,), "int")
    if "headers" in fields and fields["headers"][1].simpleString() != _HEADERS_TYPE:
        raise OptionError(f"column 'headers' must be {_HEADERS_TYPE}, got {fields['headers'][1].simpleString()}")
    if topic is None and "topic" not in fields:
        raise OptionError("the topic to write to is missing: set the option 'topic' or give the rows a 'topic' column")
    return SinkSettings(
        producer_config=params,
        topic=topic,
        value=fields["value"][0],
        key=_index(fields, "key"),
        topic_column=_index(fields, "topic"),
        partition=_index(fields, "partition"),
        headers=_index(fields, "headers"),
    )


def _check_type(
    fields: Mapping[str, tuple[int, DataType]], name: str, allowed: tuple[type[DataType], ...], what: str
) -> None:
    if name in fields and not isinstance(fields[name][1], allowed):
        raise OptionError(f"column '{name}' must be {what}, got {fields[name][1].simpleString()}")


def _index(fields: Mapping[str, tuple[int, DataType]], name: str) -> int | None:
    return fields[name][0] if name in fields else None


def _bytes(value: object) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    assert isinstance(value, bytes | bytearray | memoryview)
    return bytes(value)


def produce_rows(settings: SinkSettings, rows: Iterator[Row]) -> SinkCommit:
    """Produces ``rows`` and returns once every one is acknowledged; raises DeliveryError on the first failure."""
    failures: list[str] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None and not failures:
            partition = message.partition()
            where = f"{message.topic()}-{partition}" if partition is not None and partition >= 0 else message.topic()
            failures.append(f"could not deliver a record to {where}: {error.str()}")

    producer = Producer(settings.producer_config)
    count = 0
    for row in rows:
        topic = settings.topic or (row[settings.topic_column] if settings.topic_column is not None else None)
        if not topic:
            raise DeliveryError("a row has no topic: its 'topic' column is null and the option 'topic' is not set")
        partition = row[settings.partition] if settings.partition is not None else None
        headers = row[settings.headers] if settings.headers is not None else None
        value = _bytes(row[settings.value])
        key = _bytes(row[settings.key]) if settings.key is not None else None
        pairs: list[tuple[str, str | bytes | None]] | None = (
            [(str(header[0]), _bytes(header[1])) for header in headers] if headers else None
        )
        while True:
            try:
                # PARTITION_UA (-1) lets the producer's partitioner choose from the key.
                producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=_UNASSIGNED if partition is None else partition,
                    on_delivery=delivered,
                    headers=pairs,
                )
                break
            except BufferError:
                # The local queue is full: serve delivery reports until there is room again.
                producer.poll(_POLL_S)
        count += 1
        producer.poll(0)
        if failures:
            raise DeliveryError(failures[0])
    timeout_s = float(settings.producer_config["delivery.timeout.ms"]) / 1000 + 5
    deadline = time.monotonic() + timeout_s
    remaining = producer.flush(timeout_s)
    while remaining and not failures and time.monotonic() < deadline:
        remaining = producer.flush(_POLL_S)
    if failures:
        raise DeliveryError(failures[0])
    if remaining:
        raise DeliveryError(
            f"{remaining} records were not acknowledged within {timeout_s:.0f} s "
            f"(bootstrap servers {settings.producer_config['bootstrap.servers']})"
        )
    return SinkCommit(count)


class FjordBatchWriter(DataSourceWriter):
    """``df.write.format("fjord")``: each task produces its rows; nothing is left to do on the driver."""

    def __init__(self, settings: SinkSettings) -> None:
        self._settings = settings

    def write(self, iterator: Iterator[Row]) -> SinkCommit:
        return produce_rows(self._settings, iterator)


class FjordStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("fjord")``: a micro-batch commits once every task has flushed its records."""

    def __init__(self, settings: SinkSettings) -> None:
        self._settings = settings

    def write(self, iterator: Iterator[Row]) -> SinkCommit:
        return produce_rows(self._settings, iterator)
