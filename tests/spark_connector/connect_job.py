"""A Spark Connect client's job for test_connect_source.py, run as its own process (a Connect session cannot share
a process with the suite's classic session): ``python connect_job.py REMOTE BOOTSTRAP SOURCE SINK CHECKPOINT STEP``.

``SparkSession.builder.remote(REMOTE)`` talks to a Spark Connect server over gRPC, as SDP and hosted Spark run
Python code: ``local[2]`` starts one in this process's JVM, ``sc://HOST:PORT`` reaches one already running. STEP is
``batch`` (a batch read of SOURCE, its rows printed as JSON, then the rows written to SINK with
``df.write.format("fjord")``) or ``stream`` (a streaming read of SOURCE with ``trigger(availableNow=True)`` into
SINK through ``writeStream.format("fjord")``, checkpointed in CHECKPOINT, so a second ``stream`` resumes where the
first ended).
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

import spark_connector


def main() -> None:
    remote, bootstrap, source, sink, checkpoint, step = sys.argv[1:7]
    spark = SparkSession.builder.remote(remote).config("spark.sql.session.timeZone", "UTC").getOrCreate()
    try:
        spark_connector.register(spark)
        reader = spark.read if step == "batch" else spark.readStream
        rows = (
            reader.format("fjord")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .load()
        )
        if step == "batch":
            found = [
                [row.partition, row.offset, row.key.decode(), row.value.decode(),
                 [[h.key, h.value.decode()] for h in row.headers or []]]
                for row in rows.collect()
            ]
            print("ROWS " + json.dumps(sorted(found)), flush=True)
            rows.selectExpr("key", "value", "headers").write.format("fjord").mode("append").option(
                "kafka.bootstrap.servers", bootstrap
            ).option("topic", sink).save()
        else:
            query = (
                rows.selectExpr("key", "value", "headers")
                .writeStream.format("fjord")
                .option("kafka.bootstrap.servers", bootstrap)
                .option("topic", sink)
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            counts = [getattr(p, "numInputRows", None) or p["numInputRows"] for p in query.recentProgress]
            print("STREAMED " + json.dumps(sum(counts)), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
