"""A checked pipeline: what ``spec`` reads a pipeline file into and what ``plan``, ``preflight``, ``classpath`` and
``run`` work from, as frozen dataclasses, with the formats each part may have.

Kept apart from the file's parsing so the code that builds and runs the query depends on what a pipeline is, not on
how YAML spells it; a pipeline built in code (``spark_connector.run``) is the same objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

SOURCE_FORMATS = ("fjord", "kafka")
DECODE_FORMATS = ("json", "csv", "avro", "raw", "string")
FILE_FORMATS = ("parquet", "json", "csv")
TOPIC_FORMATS = ("fjord", "kafka")
SINK_FORMATS = (*FILE_FORMATS, *TOPIC_FORMATS, "console")
OUTPUT_MODES = ("append", "update", "complete")
#: The columns every decoded row has besides the value's fields (Spark's Kafka source's, ``key`` decoded).
RECORD_COLUMNS = ("key", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


@dataclass(frozen=True)
class Source:
    """Where records come from; ``starting_offsets`` is ``earliest``, ``latest`` or Spark's per-partition JSON."""

    format: str
    bootstrap: str
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    starting_offsets: str = "earliest"
    starting_timestamp: int | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    def spark_options(self) -> dict[str, str]:
        """The options of the Spark source, the same for ``fjord`` and ``kafka`` (they share option names)."""
        options = {"kafka.bootstrap.servers": self.bootstrap, "includeHeaders": "true"}
        if self.subscribe:
            options["subscribe"] = ",".join(self.subscribe)
        elif self.subscribe_pattern is not None:
            options["subscribePattern"] = self.subscribe_pattern
        else:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in self.assign:
                by_topic.setdefault(topic, []).append(partition)
            options["assign"] = json.dumps(by_topic, sort_keys=True)
        if self.starting_timestamp is not None:
            options["startingTimestamp"] = str(self.starting_timestamp)
        else:
            options["startingOffsets"] = self.starting_offsets
        options.update(self.options)
        return options


@dataclass(frozen=True)
class Decode:
    """How a key or value is decoded: ``schema`` is Spark DDL (json, csv) or the Avro schema's JSON text (avro)."""

    format: str
    schema: str | None = None
    schema_file: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def structured(self) -> bool:
        return self.format in ("json", "csv", "avro")


@dataclass(frozen=True)
class Watermark:
    column: str
    delay: str


@dataclass(frozen=True)
class Sink:
    """Where results go: files at ``path``, a topic (``topic`` or a ``topic`` column), or the console."""

    format: str
    checkpoint: str | None
    output_mode: str = "append"
    path: str | None = None
    partition_by: tuple[str, ...] = ()
    topic: str | None = None
    bootstrap: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Trigger:
    """``availableNow``, ``once``, ``processingTime`` (with ``interval``) or ``default`` (Spark's: each
    micro-batch as soon as the previous one is done, forever)."""

    kind: str
    interval: str | None = None

    def describe(self) -> str:
        if self.kind == "default":
            return "default (each micro-batch as soon as the previous one is done, until stopped)"
        return f"processingTime {self.interval}" if self.interval else self.kind


@dataclass(frozen=True)
class Pipeline:
    name: str
    source: Source
    value: Decode
    key: Decode
    sql: str
    watermark: Watermark | None
    sink: Sink
    trigger: Trigger
    master: str | None = None
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    #: Where the pipeline was read from, for messages (empty for a pipeline built in code).
    origin: str = ""



def field_clashes(fields: Iterable[str]) -> list[str]:
    """The value's fields that have a record column's name (they cannot both be columns of ``source``)."""
    record = {name.lower() for name in RECORD_COLUMNS}
    return [name for name in fields if name.lower() in record]
