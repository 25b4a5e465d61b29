"""The whole ``fjord`` format, read and write: the source of ``source`` with the sink of ``sink`` added.

Spark's Python Data Source API names one class per format, which answers both ``spark.read``/``readStream`` and
``df.write``/``writeStream``; keeping the sink's half here leaves the read path's modules about reading only.
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from spark_connector.options import OptionError
from spark_connector.session_setup import AnySession, prepare
from spark_connector.sink import FjordBatchWriter, FjordStreamWriter, sink_settings
from spark_connector.source import FjordDataSource

__all__ = ["FjordFormat", "register"]


class FjordFormat(FjordDataSource):
    """``format("fjord")`` for reading (see ``source``) and writing (see ``sink``). A write always appends: a topic
    cannot be overwritten, so a batch ``mode("overwrite")`` is refused, as Spark's Kafka sink refuses it, rather than
    appending behind the user's back (``ignore`` and the default ``errorifexists`` Spark refuses itself for every
    Python data source). A streaming query in complete mode also asks to overwrite; Spark's Kafka sink takes it
    (its truncate is a no-op) and appends each result, and so does this one."""

    def writer(self, schema: StructType, overwrite: bool) -> FjordBatchWriter:
        if overwrite:
            raise OptionError(
                'save mode Overwrite not allowed for the fjord format, as for Kafka: a topic is only appended to; '
                'use mode("append")'
            )
        return FjordBatchWriter(sink_settings(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> FjordStreamWriter:
        return FjordStreamWriter(sink_settings(self.options, schema))


def register(spark: AnySession) -> None:
    """Registers the ``fjord`` format, read and write, on ``spark``, a classic session or a Spark Connect one (a
    registration is per session, as Spark keeps it), after readying the session (``session_setup``: the workers'
    Python on a local master; on Spark Connect, a client that survives the end of a Declarative Pipelines run)."""
    prepare(spark)
    spark.dataSource.register(FjordFormat)
