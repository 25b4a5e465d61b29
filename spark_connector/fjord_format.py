"""The whole ``fjord`` format, read and write: the source of ``source`` with the sink of ``sink`` added.

Spark's Python Data Source API names one class per format, which answers both ``spark.read``/``readStream`` and
``df.write``/``writeStream``; keeping the sink's half here leaves the read path's modules about reading only.
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from spark_connector.session_setup import AnySession, prepare
from spark_connector.sink import FjordBatchWriter, FjordStreamWriter, sink_settings
from spark_connector.source import FjordDataSource

__all__ = ["FjordFormat", "register"]


class FjordFormat(FjordDataSource):
    """``format("fjord")`` for reading (see ``source``) and writing (see ``sink``). A write always appends:
    ``overwrite`` has no meaning for a topic, as with Spark's Kafka sink."""

    def writer(self, schema: StructType, overwrite: bool) -> FjordBatchWriter:
        return FjordBatchWriter(sink_settings(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> FjordStreamWriter:
        return FjordStreamWriter(sink_settings(self.options, schema))


def register(spark: AnySession) -> None:
    """Registers the ``fjord`` format, read and write, on ``spark``, a classic session or a Spark Connect one (a
    registration is per session, as Spark keeps it), after readying the session (``session_setup``: the workers'
    Python on a local master; on Spark Connect, a client that survives the end of a Declarative Pipelines run)."""
    prepare(spark)
    spark.dataSource.register(FjordFormat)
