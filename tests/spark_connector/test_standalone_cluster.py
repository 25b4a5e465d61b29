"""Both example pipelines on a real Spark standalone cluster (a master and two workers started from the installed
PySpark through ``spark-class``, on 127.0.0.1), run as a user runs them (``fjord pipeline run ... --master
spark://...``), give exactly what the same pipelines give on ``local[2]``: the same parquet rows, the same records
in the output topic. The executors run the source's reads and the sink's writes in the workers' processes.

A Spark Declarative Pipelines project runs there too: ``spark-pipelines`` always talks to a Spark Connect server
(it refuses ``--master`` next to the local server it starts), so, as README tells, a Connect server is started
with ``--master spark://...`` and the project runs with ``spark-pipelines run --remote sc://...``. The server is
the cluster's driver and starts last (only its test asks for it), taking one of the two cores."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from testkit.node_process import REPO, BrokerProcess
from testkit.spark_connect import ConnectServer, start_connect_server
from testkit.spark_standalone import StandaloneCluster, start_standalone
from tests.spark_connector.test_pipeline_run import (
    EXAMPLES,
    consume_all,
    fjord,
    kafka,
    new_topic,
    order,
    produce,
)
from tests.spark_connector.test_sdp_pipelines import run_filter_enrich

__all__ = ["kafka"]  # the module-scoped broker fixture, shared

ENV = {"PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    started = start_standalone(tmp_path_factory.mktemp("spark-standalone"), workers=2, env={"PYTHONPATH": str(REPO)})
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def connect_server(cluster: StandaloneCluster) -> Iterator[ConnectServer]:
    """A Spark Connect server whose executors are the cluster's; its Python (``PYSPARK_PYTHON``) is the one the
    executors' Python workers run, and the workers' environment gives them this checkout (``PYTHONPATH``)."""
    server = start_connect_server(
        cluster.folder / "connect-server",
        master=cluster.url,
        conf={"spark.executor.memory": "512m", "spark.cores.max": "1", "spark.sql.shuffle.partitions": "2"},
        env=ENV,
    )
    try:
        yield server
    finally:
        server.stop()


def run(example: str, master: str, overrides: list[str]) -> None:
    # Executors fit the workers' memory (Spark's default asks 1 GiB each).
    args = [str(EXAMPLES / example), "--master", master, "--conf", "spark.executor.memory=512m"]
    for item in overrides:
        args += ["--set", item]
    result = fjord(*args, env=ENV, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]


def parquet_rows(path: Path) -> list[tuple[Any, ...]]:
    return sorted(tuple(row.values()) for row in pq.read_table(path).to_pylist())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_orders_revenue_on_a_standalone_cluster_equals_the_local_run(
    kafka: BrokerProcess, cluster: StandaloneCluster, tmp_path: Path
) -> None:
    topic = new_topic(kafka.bootstrap)
    late = {"order_id": "o-late", "customer": "c-0", "amount": "1.00", "ts": "2026-01-01T12:10:00+00:00"}
    closing = ("store-0", late)  # moves the watermark past every earlier minute
    produce(kafka.bootstrap, topic, [*(order(i) for i in range(240)), closing])
    outputs = {}
    for name, master in (("local", "local[2]"), ("cluster", cluster.url)):
        run("orders_revenue.yaml", master, [f"source.bootstrap={kafka.bootstrap}", f"source.subscribe={topic}",
                                            f"sink.path={tmp_path / name}", f"sink.checkpoint={tmp_path / name}.ckpt"])
        outputs[name] = parquet_rows(tmp_path / name)
    assert len(outputs["local"]) == 20
    assert outputs["cluster"] == outputs["local"]
    # The cluster's executors did the work: each worker launched one for the application.
    assert any((cluster.folder / f"work-{index}").glob("app-*/*/stderr") for index in range(2))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_filter_enrich_on_a_standalone_cluster_equals_the_local_run(
    kafka: BrokerProcess, cluster: StandaloneCluster, tmp_path: Path
) -> None:
    source = new_topic(kafka.bootstrap)
    produce(kafka.bootstrap, source, [order(i) for i in range(150)])
    outputs = {}
    for name, master in (("local", "local[2]"), ("cluster", cluster.url)):
        target = new_topic(kafka.bootstrap, 2)
        run("filter_enrich.yaml", master, [f"source.bootstrap={kafka.bootstrap}", f"source.subscribe={source}",
                                           f"sink.topic={target}", f"sink.checkpoint={tmp_path / name}.ckpt"])
        outputs[name] = sorted((key, json.loads(value or b"null")["order_id"], value)
                               for _p, key, value, _h in consume_all(kafka.bootstrap, target, 2))
    assert 0 < len(outputs["local"]) < 150
    assert outputs["cluster"] == outputs["local"]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_sdp_project_on_a_standalone_cluster_through_spark_connect(
    kafka: BrokerProcess, connect_server: ConnectServer, cluster: StandaloneCluster, tmp_path: Path
) -> None:
    # Starting the client's own JVM and Python, then executors' Python workers, is slower than a local run.
    run_filter_enrich(kafka.bootstrap, tmp_path, "--remote", connect_server.url, timeout=600)
    # The flow ran on the cluster: the server's application has an executor in a worker's work directory.
    application = re.search(r"Connected to Spark cluster with app ID (app-\S+)", connect_server.log.read_text())
    assert application is not None, connect_server.log_text()
    assert any((cluster.folder / f"work-{index}" / application.group(1)).is_dir() for index in range(2))
