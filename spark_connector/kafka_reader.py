"""Reading one offset range of one partition through the Kafka protocol: what a Spark task runs on an executor.

The reader is a confluent-kafka ``Consumer`` that is ``assign()``-ed the partition at the range's start and never
joins or commits to a group (the ``group.id`` librdkafka insists on is never used for coordination); progress lives
in Spark's checkpoint, not in Fjord. librdkafka decompresses every codec, skips transaction control records and
follows leader changes, which is why it reads rather than Fjord's own codec.

A range ends at its end offset or at the partition's end (partition EOF), whichever comes first: a compacted topic
has gaps in its offsets, and records up to the end offset may be gone, so the reader never waits for an offset that
is not there. A start below the partition's log start (retention, DeleteRecords) is data loss: with
``failOnDataLoss`` it raises :class:`DataLossError`, without it reading starts at the log start.

Rows have the shape of Spark's Kafka source: ``key, value, topic, partition, offset, timestamp, timestampType`` and,
when asked, ``headers`` (None when a record has none, as Spark gives null).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from spark_connector.offsets import DataLossError, OffsetRange, data_loss_message

__all__ = ["ReadSettings", "read_range", "to_row"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Records asked of librdkafka per call; it hands over what it has buffered, so this bounds memory, not latency.
BATCH = 1000
POLL_S = 1.0
WATERMARK_TIMEOUT_S = 30.0
#: Java's TimestampType ids, which Spark's Kafka source returns in ``timestampType``.
_SPARK_TIMESTAMP_TYPE = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}
_NO_TIMESTAMP_TYPE = -1
_OUT_OF_RANGE = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
#: What a watermark lookup meets while a partition's leader changes (a move, a failover, a restart).
_LEADER_MOVING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                  KafkaError.FENCED_LEADER_EPOCH, KafkaError.REPLICA_NOT_AVAILABLE, KafkaError._TRANSPORT,
                  KafkaError._ALL_BROKERS_DOWN}
_WATERMARK_BACKOFF_S = 0.2

Row = tuple[Any, ...]


@dataclass(frozen=True)
class ReadSettings:
    """What a task needs besides its range; pickled to executors with the reader."""

    client_config: dict[str, str | int | float | bool]
    read_uncommitted: bool
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int
    #: ``kafka.group.id``, else Spark's ``<groupIdPrefix>-<uuid>-executor`` (``options.FjordOptions``).
    group_id: str = "spark-kafka-source-executor"

    def consumer_config(self) -> dict[str, str | int | float | bool]:
        config = dict(self.client_config)
        config["group.id"] = self.group_id
        config.update({
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            # An out-of-range start must surface (as data loss), not be silently moved to either end.
            "auto.offset.reset": "error",
            "isolation.level": "read_uncommitted" if self.read_uncommitted else "read_committed",
        })
        return config


def read_range(settings: ReadSettings, offsets: OffsetRange) -> Iterator[Row]:
    """The rows of ``offsets``, in offset order; raises DataLossError or TimeoutError as described above."""
    if offsets.size <= 0:
        return
    consumer = Consumer(settings.consumer_config())
    try:
        start = _checked_start(consumer, settings, offsets, offsets.start)
        if start >= offsets.end:
            return
        consumer.assign([TopicPartition(offsets.topic, offsets.partition, start)])
        position = start
        last_progress = time.monotonic()
        while True:
            messages = consumer.consume(BATCH, timeout=POLL_S)
            if not messages and time.monotonic() - last_progress > settings.poll_timeout_ms / 1000:
                raise TimeoutError(f"no records from {offsets.topic}-{offsets.partition} at offset {position} within "
                                   f"{settings.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs); the range ends "
                                   f"at {offsets.end}")
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return
                    if error.code() in _OUT_OF_RANGE:
                        position = _checked_start(consumer, settings, offsets, position)
                        if position >= offsets.end:
                            return
                        consumer.assign([TopicPartition(offsets.topic, offsets.partition, position)])
                        break
                    if error.retriable():
                        continue
                    raise KafkaException(error)
                last_progress = time.monotonic()
                offset = message.offset()
                assert offset is not None
                if offset >= offsets.end:
                    return
                position = offset + 1
                yield to_row(message, settings.include_headers)
    finally:
        consumer.close()


def to_row(message: Message, include_headers: bool) -> Row:
    """One record as Spark's Kafka source gives it: the timestamp as a UTC datetime (Spark's TimestampType), its
    type as Java's id (0 create time, 1 log-append time, -1 none)."""
    timestamp_type, timestamp_ms = message.timestamp()
    row: Row = (
        message.key(),
        message.value(),
        message.topic(),
        message.partition(),
        message.offset(),
        EPOCH + timedelta(milliseconds=timestamp_ms),
        _SPARK_TIMESTAMP_TYPE.get(timestamp_type, _NO_TIMESTAMP_TYPE),
    )
    if include_headers:
        headers = message.headers()
        # A consumed record's headers are a list of (key, value) pairs; the dict form is only for producing.
        pairs = list(headers.items()) if isinstance(headers, dict) else headers
        row += (pairs or None,)
    return row


def _watermarks(consumer: Consumer, offsets: OffsetRange) -> tuple[int, int]:
    """The partition's log start and end, asked again while its leadership moves: librdkafka's one ListOffsets
    request fails with NOT_LEADER_FOR_PARTITION when it reaches the old leader of a partition that moved or failed
    over (its metadata then refreshes), which must not fail the task, as the Java consumer's lookup retries it."""
    deadline = time.monotonic() + WATERMARK_TIMEOUT_S
    partition = TopicPartition(offsets.topic, offsets.partition)
    while True:
        left = deadline - time.monotonic()
        try:
            low, high = consumer.get_watermark_offsets(partition, timeout=max(left, 0.1), cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None or not (error.retriable() or error.code() in _LEADER_MOVING) or left <= 0:
                raise
        time.sleep(min(_WATERMARK_BACKOFF_S, max(left, 0.0)))


def _checked_start(consumer: Consumer, settings: ReadSettings, offsets: OffsetRange, wanted: int) -> int:
    """``wanted``, or the partition's log start when the records from ``wanted`` on were deleted and
    ``failOnDataLoss`` is false."""
    low, _high = _watermarks(consumer, offsets)
    if wanted >= low:
        return wanted
    if settings.fail_on_data_loss:
        raise DataLossError(data_loss_message(
            f"cannot read {offsets.topic}-{offsets.partition} from offset {wanted}: the partition now starts at "
            f"{low}"))
    return low
