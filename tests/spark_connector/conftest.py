"""The Spark tests' one SparkSession (PySpark local mode, the fjord format registered), shared by every module of
this folder: a JVM start costs seconds, and the session holds no state a test leaves behind (queries stop, views
are per test)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

import spark_connector


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # The Python workers must run this venv's interpreter (they need pyarrow and the fjord package).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("fjord-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_connector.register(session)
    try:
        yield session
    finally:
        session.stop()
