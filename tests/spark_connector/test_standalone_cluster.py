"""Both example pipelines on a real Spark standalone cluster (a master and two workers started from the installed
PySpark through ``spark-class``, on 127.0.0.1), run as a user runs them (``fjord pipeline run ... --master
spark://...``), give exactly what the same pipelines must give on ``local[2]`` (test_pipeline_run.py checks those
runs against the same expectations): the same parquet rows, the same records in the output topic. The executors run
the source's reads and the sink's writes in the workers' processes.

A Spark Declarative Pipelines project runs there too: ``spark-pipelines`` always talks to a Spark Connect server
(it refuses ``--master`` next to the local server it starts), so, as README tells, a Connect server is started
with ``--master spark://...`` and the project runs with ``spark-pipelines run --remote sc://...``. The server is
the cluster's driver and starts last (only its test asks for it), taking one of the two cores."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from testkit.node_process import REPO, BrokerProcess
from testkit.spark_connect import ConnectServer, start_connect_server
from testkit.spark_standalone import StandaloneCluster, start_standalone
from tests.spark_connector.test_pipeline_run import (
    BASE,
    EXAMPLES,
    assert_filter_enrich_output,
    expected_revenue,
    fjord,
    kafka,
    new_topic,
    order,
    produce,
)
from tests.spark_connector.test_sdp_pipelines import run_filter_enrich, utc

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


def revenue_rows(path: Path) -> dict[tuple[datetime, str], tuple[Decimal, int]]:
    """The orders_revenue example's parquet output as :func:`expected_revenue` gives it."""
    rows = pq.read_table(path).to_pylist()
    return {(utc(row["minute"]), row["key"]): (row["revenue"], row["orders"]) for row in rows}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_orders_revenue_on_a_standalone_cluster_writes_every_minutes_revenue(
    kafka: BrokerProcess, cluster: StandaloneCluster, tmp_path: Path
) -> None:
    topic = new_topic(kafka.bootstrap)
    orders = [order(i) for i in range(240)]
    late = {"order_id": "o-late", "customer": "c-0", "amount": "1.00", "ts": (BASE + timedelta(minutes=10)).isoformat()}
    closing = ("store-0", late)  # moves the watermark past every earlier minute
    produce(kafka.bootstrap, topic, [*orders, closing])
    run("orders_revenue.yaml", cluster.url, [f"source.bootstrap={kafka.bootstrap}", f"source.subscribe={topic}",
                                             f"sink.path={tmp_path / 'out'}", f"sink.checkpoint={tmp_path / 'ckpt'}"])
    expected = expected_revenue(orders)
    assert len(expected) == 20
    assert revenue_rows(tmp_path / "out") == expected
    # The cluster's executors did the work: each worker launched one for the application.
    assert any((cluster.folder / f"work-{index}").glob("app-*/*/stderr") for index in range(2))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_filter_enrich_on_a_standalone_cluster_writes_the_enriched_orders(
    kafka: BrokerProcess, cluster: StandaloneCluster, tmp_path: Path
) -> None:
    source, target = new_topic(kafka.bootstrap), new_topic(kafka.bootstrap, 2)
    orders = [order(i) for i in range(150)]
    produce(kafka.bootstrap, source, orders)
    run("filter_enrich.yaml", cluster.url, [f"source.bootstrap={kafka.bootstrap}", f"source.subscribe={source}",
                                            f"sink.topic={target}", f"sink.checkpoint={tmp_path / 'ckpt'}"])
    assert_filter_enrich_output(kafka.bootstrap, orders, source, target)


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
