"""The plan ``fjord pipeline run --dry-run`` prints: what the pipeline will read, decode, compute and write.

Pure text from a checked :class:`Pipeline`, so it needs neither Spark nor a broker: a user checks a file (and the
effect of ``--set`` overrides) before starting anything.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from spark_connector.pipeline.model import Decode, Pipeline

__all__ = ["describe"]

_WIDTH = 11


def describe(pipeline: Pipeline, *, master: str, packages: tuple[str, ...], jars: tuple[str, ...]) -> str:
    """The plan, one labelled line per part (the SQL indented under its label)."""
    return "\n".join(_lines(pipeline, master, packages, jars)) + "\n"


def _lines(pipeline: Pipeline, master: str, packages: tuple[str, ...], jars: tuple[str, ...]) -> Iterator[str]:
    source, sink = pipeline.source, pipeline.sink
    yield _row("pipeline", pipeline.name + (f" ({pipeline.origin})" if pipeline.origin else ""))
    if source.subscribe:
        topics = "subscribe " + ", ".join(source.subscribe)
    elif source.subscribe_pattern is not None:
        topics = f"subscribePattern {source.subscribe_pattern}"
    else:
        topics = "assign " + ", ".join(f"{topic}-{partition}" for topic, partition in source.assign)
    start = (
        f"startingTimestamp {source.starting_timestamp}"
        if source.starting_timestamp is not None
        else f"startingOffsets {source.starting_offsets}"
    )
    yield _row("source", f"{source.format} source, {topics} on {source.bootstrap}, {start}{_options(source.options)}")
    yield _row(
        "decode",
        f"value {_decode(pipeline.value)}; key {_decode(pipeline.key)}; also topic, partition, "
        "offset, timestamp, timestampType, headers",
    )
    if pipeline.watermark is not None:
        yield _row("watermark", f"{pipeline.watermark.column}, delay {pipeline.watermark.delay}")
    sql = [line.rstrip() for line in pipeline.sql.strip().splitlines() if line.strip()]
    yield _row("transform", sql[0] if sql else "")
    for line in sql[1:]:
        yield " " * _WIDTH + line
    if sink.path is not None:
        target = f"{sink.format} files at {sink.path}"
        if sink.partition_by:
            target += f" partitioned by {', '.join(sink.partition_by)}"
    elif sink.format == "console":
        target = "the console"
    else:
        topic = f"topic {sink.topic}" if sink.topic else "the topic in each row's topic column"
        target = f"{sink.format} sink, {topic} on {sink.bootstrap or source.bootstrap}"
    yield _row("sink", f"{target}, output mode {sink.output_mode}{_options(sink.options)}")
    yield _row("checkpoint", sink.checkpoint or "(a temporary directory)")
    yield _row("trigger", pipeline.trigger.describe())
    classpath = (
        ("jars " + ", ".join(jars))
        if jars
        else ("packages " + ", ".join(packages))
        if packages
        else ("nothing added to Spark's classpath")
    )
    yield _row("spark", f"master {master}; {classpath}{_options(pipeline.spark_conf)}")


def _row(label: str, text: str) -> str:
    return f"{label:<{_WIDTH}}{text}"


def _decode(decode: Decode) -> str:
    if decode.format in ("json", "csv"):
        return f"{decode.format} ({decode.schema}){_options(decode.options)}"
    if decode.format == "avro":
        return f"avro (schema from {decode.schema_file}){_options(decode.options)}"
    return "raw (binary)" if decode.format == "raw" else "string (UTF-8)"


def _options(options: Mapping[str, str]) -> str:
    return "".join(f", {key}={value}" for key, value in sorted(options.items()))
