"""JSON orders from a Fjord topic -> revenue per minute per key (the record key, e.g. a store).

An order is {"order_id": "o-1", "customer": "c-7", "amount": 12.50, "ts": "2026-01-01T12:00:03Z"}. The broker and
topic are the project's configuration (fjord.bootstrap, fjord.topic in spark-pipeline.yml).
"""

from pyspark import pipelines as dp
from pyspark.sql import functions as F

import spark_connector

spark_connector.register(spark)  # noqa: F821 - spark-pipelines gives each definitions file its session

ORDER = "order_id STRING, customer STRING, amount DECIMAL(12,2), ts TIMESTAMP"


@dp.table(comment="Every order of the topic, decoded; read incrementally from where the last run stopped.")
def orders():
    conf = spark.conf  # noqa: F821
    records = (
        spark.readStream.format("fjord")  # noqa: F821
        .option("kafka.bootstrap.servers", conf.get("fjord.bootstrap", "127.0.0.1:9092"))
        .option("subscribe", conf.get("fjord.topic", "orders"))
        .option("startingOffsets", "earliest")
        .load()
    )
    return records.select(
        F.col("key").cast("string").alias("key"),
        F.from_json(F.col("value").cast("string"), ORDER).alias("order"),
        "topic",
        "partition",
        "offset",
    ).select("key", "order.*", "topic", "partition", "offset")


@dp.materialized_view(comment="Revenue and order count per minute of ts and key.")
def revenue_per_minute():
    return (
        spark.read.table("orders")  # noqa: F821
        .groupBy(F.window("ts", "1 minute"), "key")
        .agg(F.sum("amount").alias("revenue"), F.count("*").alias("orders"))
        .select(F.col("window.start").alias("minute"), "key", "revenue", "orders")
    )
