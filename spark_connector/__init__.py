"""Spark pipelines over Fjord: the ``fjord`` PySpark data source (Spark's Python Data Source API, Spark >= 4.2:
the stream reader takes read limits, ``latestOffset(start, limit)``, from ``pyspark.sql.streaming.datasource``).

``register(spark)`` makes ``format("fjord")`` available on a session, for ``spark.read`` and ``spark.readStream``,
with the options and output schema of Spark's Kafka source. It is pure Python: nothing is added to the classpath.
The modules are ``options`` (parsing; ``kafka_settings`` checks and translates the ``kafka.*`` client settings
for the source and the sink), ``offset_lookup`` (asking the cluster), ``offsets`` (planning ranges),
``source`` (the Spark classes), ``kafka_reader`` (a range through the Kafka protocol) and, for the direct path that
reads uploaded data straight from object storage, ``storage_lookup`` (locating it on the driver), ``direct_plan``
(the split, no I/O) and ``direct_reader`` (reading it on executors). ``sink``
writes (``df.write``/``writeStream.format("fjord")``), ``fjord_format`` joins both halves into the registered
format, and ``pipeline`` runs declarative pipelines (``run(spec, spark)``, ``fjord pipeline run``).
"""

from __future__ import annotations

from spark_connector.fjord_format import FjordFormat, register
from spark_connector.pipeline import Pipeline, PipelineError, SpecError, load_pipeline, run
from spark_connector.source import FjordDataSource

__all__ = [
    "FjordDataSource",
    "FjordFormat",
    "Pipeline",
    "PipelineError",
    "SpecError",
    "load_pipeline",
    "register",
    "run",
]
