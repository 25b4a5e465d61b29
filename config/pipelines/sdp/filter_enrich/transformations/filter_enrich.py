"""Topic to topic: the orders of 50 or more, enriched, written to another topic through the fjord sink.

The broker and topics are the project's configuration (fjord.bootstrap, fjord.topic, fjord.output.topic in
spark-pipeline.yml); the output topic must exist.
"""

from pyspark import pipelines as dp
from pyspark.sql import functions as F

import spark_connector

spark_connector.register(spark)  # noqa: F821 - spark-pipelines gives each definitions file its session

ORDER = "order_id STRING, customer STRING, amount DECIMAL(12,2), ts TIMESTAMP"
BOOTSTRAP = spark.conf.get("fjord.bootstrap", "127.0.0.1:9092")  # noqa: F821

dp.create_sink(
    "large_orders",
    format="fjord",
    options={"kafka.bootstrap.servers": BOOTSTRAP, "topic": spark.conf.get("fjord.output.topic", "large_orders")},  # noqa: F821
)


@dp.append_flow(target="large_orders")
def enriched_orders():
    records = (
        spark.readStream.format("fjord")  # noqa: F821
        .option("kafka.bootstrap.servers", BOOTSTRAP)
        .option("subscribe", spark.conf.get("fjord.topic", "orders"))  # noqa: F821
        .option("startingOffsets", "earliest")
        .load()
    )
    orders = records.select(
        F.col("key").cast("string").alias("key"),
        F.from_json(F.col("value").cast("string"), ORDER).alias("order"),
        "topic",
        "partition",
        "offset",
    ).where("order.amount >= 50")
    return orders.select(
        "key",
        F.to_json(
            F.struct(
                F.col("order.order_id").alias("order_id"),
                F.col("order.customer").alias("customer"),
                F.col("order.amount").alias("amount"),
                F.when(F.col("order.amount") >= 100, "large").otherwise("medium").alias("tier"),
                F.concat("topic", F.lit("-"), "partition", F.lit("@"), "offset").alias("source"),
            )
        ).alias("value"),
    )
