"""Running a checked pipeline: the Spark session, the structured-streaming query, and its one-line failures.

``run(pipeline, spark)`` builds the query on a session the caller owns (the Python API); ``execute`` is what
``fjord pipeline run`` does around it: check the cluster and the classpath first (``preflight``, ``classpath``),
start a session (``local[*]`` unless told otherwise), run, and stop. The ``source`` view holds the decoded rows:
the value's fields (or ``value`` itself when it is raw or a string), ``key`` and the record's ``topic``,
``partition``, ``offset``, ``timestamp``, ``timestampType`` and ``headers``.

Everything that can go wrong ends as one :class:`PipelineError` line with an exit status: 2 for a mistake in the
pipeline (its SQL, schemas, watermark column), 1 for what the cluster, the classpath or the query ran into. Spark's
own errors are long (a Java or Python stack trace behind a summary); :func:`one_line` keeps the line that says
what happened.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence

from py4j.protocol import Py4JError
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter
from pyspark.sql.types import StructType

from spark_connector.fjord_format import register
from spark_connector.pipeline.classpath import REPOSITORY_ENV, ClasspathError, check_obtainable, packages_for
from spark_connector.pipeline.model import FILE_FORMATS, RECORD_COLUMNS, TOPIC_FORMATS, Decode, Pipeline, field_clashes
from spark_connector.pipeline.preflight import PreflightError, check_cluster

__all__ = ["PipelineError", "check_classpath", "execute", "one_line", "run", "session", "start"]

DEFAULT_MASTER = "local[*]"
#: Spark's own log lines (stack traces of a failed query included) are off unless ``spark.log.level`` is set: the
#: runner reports failures itself, in one line.
DEFAULT_LOG_LEVEL = "OFF"
_VALUE = "__fjord_value"
# The line of a Python or Java error inside Spark's report that says what happened.
_CAUSE = re.compile(
    r"\b((?:OptionError|ClusterLookupError|StorageLookupError|DataLossError|DeliveryError|KafkaException|"
    r"TimeoutError|SpecError)): (.+)"
)


class PipelineError(RuntimeError):
    """A pipeline that cannot start or failed; ``str()`` is one line, ``exit_status`` 2 for a mistake in the
    pipeline, 1 otherwise."""

    def __init__(self, message: str, exit_status: int = 1) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def one_line(exc: BaseException) -> str:
    """The line of Spark's (or a Python worker's) report that says what went wrong, without the stack."""
    text = str(exc)
    causes = _CAUSE.findall(text)
    if causes:
        return str(causes[-1][1]).strip()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("JVM stacktrace", "at ", "Traceback")):
            return str(re.sub(r"\s*SQLSTATE: \w+;?\s*$", "", line))
    return type(exc).__name__


def _settings(pipeline: Pipeline, conf: dict[str, str] | None) -> dict[str, str]:
    return {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": DEFAULT_LOG_LEVEL,
        **pipeline.spark_conf,
        **(conf or {}),
    }


def check_classpath(pipeline: Pipeline, jars: Sequence[str] = (), conf: dict[str, str] | None = None) -> dict[str, str]:
    """The packages the pipeline needs (coordinate -> why); raises PipelineError when one cannot be had."""
    needs = packages_for(pipeline)
    try:
        check_obtainable(needs, _settings(pipeline, conf), jars)
    except ClasspathError as exc:
        raise PipelineError(str(exc)) from None
    return needs


def session(
    pipeline: Pipeline, *, master: str | None = None, jars: Sequence[str] = (), conf: dict[str, str] | None = None
) -> SparkSession:
    """A session for ``pipeline``, with the packages it needs (checked obtainable first) or ``jars``."""
    settings = _settings(pipeline, conf)
    needs = check_classpath(pipeline, jars, conf)
    # Added to what the pipeline's spark.conf may already list, not instead of it.
    if jars:
        settings["spark.jars"] = _joined(settings.get("spark.jars"), [os.path.abspath(jar) for jar in jars])
    elif needs:
        settings["spark.jars.packages"] = _joined(settings.get("spark.jars.packages"), list(needs))
        if os.environ.get(REPOSITORY_ENV):
            settings.setdefault("spark.jars.repositories", os.environ[REPOSITORY_ENV])
    # Local Python workers run this interpreter, which has the fjord package; a cluster's need it installed too.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master or pipeline.master or DEFAULT_MASTER).appName(
        f"fjord-pipeline-{pipeline.name}"
    )
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except (PySparkException, Py4JError, OSError) as exc:
        raise PipelineError(
            f"could not start Spark (master {master or pipeline.master or DEFAULT_MASTER}; Java "
            f"17 or later must be installed): {one_line(exc)}"
        ) from None
    return spark


def _joined(existing: str | None, more: list[str]) -> str:
    return ",".join([*(item for item in (existing or "").split(",") if item.strip()), *more])


def run(pipeline: Pipeline, spark: SparkSession, *, wait: bool = True) -> StreamingQuery:
    """The Python API: checks the cluster, starts the pipeline's query on ``spark`` and, with ``wait``, returns
    when it ends (``availableNow``/``once``; other triggers run until stopped). Raises PipelineError."""
    try:
        check_cluster(pipeline)
    except PreflightError as exc:
        raise PipelineError(str(exc)) from None
    query = start(pipeline, spark)
    if wait:
        await_query(query)
    return query


def await_query(query: StreamingQuery) -> None:
    try:
        query.awaitTermination()
    except (PySparkException, Py4JError) as exc:
        raise PipelineError(f"the query failed: {one_line(exc)}") from None


def start(pipeline: Pipeline, spark: SparkSession) -> StreamingQuery:
    """Registers the ``fjord`` format, builds the query and starts it."""
    register(spark)
    source = pipeline.source
    try:
        raw = spark.readStream.format(source.format).options(**source.spark_options()).load()
    except (PySparkException, Py4JError) as exc:
        raise PipelineError(f"source: {one_line(exc)}") from None
    rows = _decoded(raw, pipeline)
    if pipeline.watermark is not None:
        mark = pipeline.watermark
        try:
            rows = rows.withWatermark(mark.column, mark.delay)
        except AnalysisException as exc:
            raise PipelineError(f"transform.watermark.column: {one_line(exc)}", 2) from None
    rows.createOrReplaceTempView("source")
    try:
        result = spark.sql(pipeline.sql)
    except AnalysisException as exc:
        raise PipelineError(f"transform.sql: {one_line(exc)}", 2) from None
    writer = _writer(result, pipeline)
    try:
        return writer.start()
    except AnalysisException as exc:
        raise PipelineError(f"sink: {one_line(exc)}", 2) from None
    except (PySparkException, Py4JError) as exc:
        raise PipelineError(f"sink: {one_line(exc)}") from None


def execute(
    pipeline: Pipeline, *, master: str | None = None, jars: Sequence[str] = (), conf: dict[str, str] | None = None
) -> StreamingQuery:
    """``fjord pipeline run``: classpath and cluster checks, a session, the query until it ends (or Ctrl-C)."""
    check_classpath(pipeline, jars, conf)
    try:
        check_cluster(pipeline)
    except PreflightError as exc:
        raise PipelineError(str(exc)) from None
    spark = session(pipeline, master=master, jars=jars, conf=conf)
    try:
        query = start(pipeline, spark)
        try:
            await_query(query)
        except KeyboardInterrupt:
            query.stop()
            raise
        return query
    finally:
        spark.stop()


def _decoded(raw: DataFrame, pipeline: Pipeline) -> DataFrame:
    try:
        frame = raw.select(
            _decode(F.col("value"), pipeline.value).alias(_VALUE),
            _decode(F.col("key"), pipeline.key).alias("key"),
            *[name for name in RECORD_COLUMNS if name != "key"],
        )
        value_type = frame.schema[_VALUE].dataType
    except (AnalysisException, Py4JError, PySparkException) as exc:
        key = "decode.value" if pipeline.value.format != "raw" else "decode.key"
        raise PipelineError(f"{key}: {one_line(exc)}", 2) from None
    if pipeline.value.structured and isinstance(value_type, StructType):
        clashes = field_clashes(value_type.fieldNames())
        if clashes:
            raise PipelineError(
                f"decode.value.schema: field {clashes[0]!r} has the name of a record column ("
                f"{', '.join(RECORD_COLUMNS)}); rename the field",
                2,
            )
        return frame.select(f"{_VALUE}.*", *RECORD_COLUMNS)
    return frame.withColumnRenamed(_VALUE, "value")


def _decode(column: Column, decode: Decode) -> Column:
    options = dict(decode.options)
    if decode.format == "string":
        return column.cast("string")
    if decode.format == "json":
        assert decode.schema is not None
        return F.from_json(column.cast("string"), decode.schema, options)
    if decode.format == "csv":
        assert decode.schema is not None
        return F.from_csv(column.cast("string"), decode.schema, options)
    if decode.format == "avro":
        assert decode.schema is not None
        return from_avro(column, decode.schema, options)
    return column


def _writer(result: DataFrame, pipeline: Pipeline) -> DataStreamWriter:
    sink = pipeline.sink
    writer = result.writeStream.outputMode(sink.output_mode).format(sink.format)
    if sink.format in FILE_FORMATS:
        assert sink.path is not None
        writer = writer.option("path", sink.path)
        if sink.partition_by:
            writer = writer.partitionBy(*sink.partition_by)
    elif sink.format in TOPIC_FORMATS:
        writer = writer.option("kafka.bootstrap.servers", sink.bootstrap or pipeline.source.bootstrap)
        if sink.topic is not None:
            writer = writer.option("topic", sink.topic)
    if sink.checkpoint is not None:
        writer = writer.option("checkpointLocation", sink.checkpoint)
    writer = writer.options(**sink.options)
    trigger = pipeline.trigger
    if trigger.kind == "availableNow":
        writer = writer.trigger(availableNow=True)
    elif trigger.kind == "once":
        writer = writer.trigger(once=True)
    elif trigger.kind == "processingTime":
        assert trigger.interval is not None
        writer = writer.trigger(processingTime=trigger.interval)
    return writer
