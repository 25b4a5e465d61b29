"""Checks against the cluster before a pipeline starts: the brokers answer, the topics exist, the offsets fit.

Spark would find the same problems later, deep in a query, as a Java or Python stack trace (or, for a topic that
does not exist, by reading nothing forever). Asking first, with the source's own option parsing and offset
lookup, turns each into one :class:`PreflightError` line naming the key of the pipeline file it concerns.
"""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from spark_connector.offset_lookup import ClusterLookupError, OffsetLookup
from spark_connector.offsets import resolve_offsets
from spark_connector.options import OptionError, client_config, parse_options
from spark_connector.pipeline.model import TOPIC_FORMATS, Pipeline

__all__ = ["PreflightError", "check_cluster"]

METADATA_TIMEOUT_S = 10.0


class PreflightError(RuntimeError):
    """The cluster does not hold what the pipeline asks for; ``str()`` is one line."""


def check_cluster(pipeline: Pipeline) -> None:
    """Raises PreflightError when the source's brokers, topics, partitions or starting offsets are wrong, or the
    sink's topic does not exist."""
    source = pipeline.source
    try:
        options = parse_options(source.spark_options(), streaming=True)
    except OptionError as exc:
        raise PreflightError(f"source: {exc}") from None
    config = {**client_config(options), "log_level": 0}
    topics = _topics(config, "source.bootstrap", source.bootstrap)
    missing = [topic for topic in source.subscribe if topic not in topics]
    if missing:
        raise PreflightError(f"source.subscribe: topic {', '.join(missing)} does not exist on {source.bootstrap}")
    lookup = OffsetLookup(options)
    try:
        partitions = lookup.partitions()
        if isinstance(options.starting, dict):
            earliest, latest = lookup.earliest(partitions), lookup.latest(partitions)
            start = resolve_offsets(options.starting, partitions, earliest, latest, option="startingOffsets")
            for (topic, partition), offset in sorted(start.items()):
                if not earliest[(topic, partition)] <= offset <= latest[(topic, partition)]:
                    raise PreflightError(
                        f"source.startingOffsets: offset {offset} of {topic}-{partition} is outside the partition's "
                        f"offsets [{earliest[(topic, partition)]}, {latest[(topic, partition)]}]"
                    )
    except ClusterLookupError as exc:
        raise PreflightError(f"source: {exc}") from None
    except OptionError as exc:
        raise PreflightError(f"source.startingOffsets: {exc}") from None
    sink = pipeline.sink
    if sink.format in TOPIC_FORMATS and sink.topic is not None:
        bootstrap = sink.bootstrap or source.bootstrap
        sink_topics = (
            topics
            if bootstrap == source.bootstrap
            else _topics({"bootstrap.servers": bootstrap, "log_level": 0}, "sink.bootstrap", bootstrap)
        )
        if sink.topic not in sink_topics:
            raise PreflightError(f"sink.topic: topic {sink.topic} does not exist on {bootstrap}")


def _topics(config: dict[str, str | int | float | bool], key: str, bootstrap: str) -> set[str]:
    admin = AdminClient(config)
    try:
        metadata = admin.list_topics(timeout=METADATA_TIMEOUT_S)
    except KafkaException as exc:
        raise PreflightError(
            f"{key}: cannot reach the brokers at {bootstrap} within {METADATA_TIMEOUT_S:.0f} s "
            f"({exc.args[0].str() if exc.args else exc})"
        ) from None
    return {name for name, topic in metadata.topics.items() if topic.error is None}
