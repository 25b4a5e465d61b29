"""``spark_connector.register(spark)`` in a user's own script, run with the venv's Python but without the venv
activated: PATH has no venv, PYSPARK_PYTHON is unset, so Spark would start its Python workers with ``python3`` from
PATH, which lacks this package (``No module named 'spark_connector'`` deep in a task). ``register`` gives a local
master's workers the script's own interpreter (``spark_connector.session_setup``), and the read works."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from confluent_kafka import Producer

from testkit.node_process import REPO, BrokerProcess
from tests.spark_connector.test_pipeline_run import kafka, new_topic

__all__ = ["kafka"]  # the module-scoped broker fixture, shared

SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[3])  # this checkout, for this process only: the workers' Python finds its own
    from pyspark.sql import SparkSession
    import spark_connector

    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    spark_connector.register(spark)
    rows = (spark.read.format("fjord").option("kafka.bootstrap.servers", sys.argv[1])
            .option("subscribe", sys.argv[2]).load().selectExpr("CAST(value AS STRING) AS v").collect())
    print("VALUES", ",".join(sorted(row.v for row in rows)))
    spark.stop()
    """
)


def test_register_runs_workers_with_the_scripts_python(kafka: BrokerProcess, tmp_path: Path) -> None:
    topic = new_topic(kafka.bootstrap, 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for n in range(6):
        producer.produce(topic, value=f"v{n}".encode(), partition=n % 2)
    assert producer.flush(30) == 0
    java = shutil.which("java")
    assert java is not None
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(
        part for part in os.environ.get("PATH", "").split(os.pathsep) if part and part != venv_bin
    )
    path = os.pathsep.join([path, str(Path(java).resolve().parent)])
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYSPARK_PYTHON", "VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = path
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script), kafka.bootstrap, topic, str(REPO)],
        capture_output=True, text=True, timeout=180, check=False, env=env, cwd=tmp_path,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    assert "VALUES v0,v1,v2,v3,v4,v5" in result.stdout
