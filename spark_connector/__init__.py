"""Spark pipelines over Fjord: the ``fjord`` PySpark data source (Spark's Python Data Source API, Spark >= 4.0).

``register(spark)`` makes ``format("fjord")`` available on a session, for ``spark.read`` and ``spark.readStream``,
with the options and output schema of Spark's Kafka source. It is pure Python: nothing is added to the classpath.
This first slice reads through the Kafka protocol (``kafka_reader``); the modules are ``options`` (parsing),
``offset_lookup`` (asking the cluster), ``offsets`` (planning ranges) and ``source`` (the Spark classes).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from spark_connector.source import FjordDataSource

__all__ = ["FjordDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Registers the ``fjord`` format on ``spark`` (a registration is per session, as Spark keeps it)."""
    spark.dataSource.register(FjordDataSource)
