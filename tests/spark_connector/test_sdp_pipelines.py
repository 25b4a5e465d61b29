"""The two example pipelines as Spark Declarative Pipelines projects (config/pipelines/sdp/), run as a user runs them:
``spark-pipelines run`` in the project's folder (a copy, its configuration pointed at this test's node and topics
and its storage at a temporary directory), over the Spark Connect server that command starts.

Each run must end with exit status 0 (the ``fjord`` source's Python workers report accumulators, which PySpark's
SDP client took for an unknown response: ``spark_connector.session_setup``), and its tables and topics are checked
row by row against what was produced, computed here without Spark. ``orders_revenue`` runs twice: the second run
reads only what was produced since the first (its streaming table resumes from its checkpoint) and the
materialized view is recomputed over everything. Tables outlive a run only in a persistent catalog, so its runs
pass ``--conf spark.sql.catalogImplementation=hive`` as README says (a Derby metastore in the folder): Spark's
default in-memory catalog starts each run with no tables and refuses to create one over the last run's files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from testkit.node_process import REPO, BrokerProcess, start_broker
from tests.spark_connector.test_pipeline_run import (
    assert_filter_enrich_output,
    expected_revenue,
    new_topic,
    order,
    positions,
    produce,
)

PROJECTS = REPO / "config" / "pipelines" / "sdp"
VENV_BIN = Path(sys.executable).parent
RUN_TIMEOUT_S = 300
HIVE = ("--conf", "spark.sql.catalogImplementation=hive")


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("sdp-broker"))
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


def project(name: str, tmp_path: Path, configuration: dict[str, str]) -> Path:
    """A copy of the shipped project with its configuration and storage changed, nothing else."""
    folder = tmp_path / name
    shutil.copytree(PROJECTS / name, folder)
    spec_path = folder / "spark-pipeline.yml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["configuration"].update(configuration)
    spec["storage"] = (tmp_path / "storage").as_uri()
    spec_path.write_text(yaml.safe_dump(spec))
    return folder


def spark_pipelines_run(folder: Path, *args: str, timeout: float = RUN_TIMEOUT_S) -> str:
    """``spark-pipelines run ARGS`` in ``folder`` with the venv on PATH, as after ``. .venv/bin/activate``."""
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYSPARK_PYTHON", None)
    # This checkout's spark_connector, whatever the venv has installed.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [str(VENV_BIN / "spark-pipelines"), "run", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    assert "Run is COMPLETED" in output, output[-8000:]
    assert "Traceback" not in output, output[-8000:]
    return output


def table(folder: Path, name: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(folder / "spark-warehouse" / name).to_pylist()
    return rows


def utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def test_orders_revenue_project_streams_orders_and_recomputes_revenue(kafka: BrokerProcess, tmp_path: Path) -> None:
    topic = new_topic(kafka.bootstrap)
    first = [order(i) for i in range(120)]
    produce(kafka.bootstrap, topic, first)
    folder = project("orders_revenue", tmp_path, {"fjord.bootstrap": kafka.bootstrap, "fjord.topic": topic})
    spark_pipelines_run(folder, *HIVE)

    def check(orders: list[tuple[str, dict[str, Any]]]) -> None:
        where = positions(topic, len(orders))
        expected_orders = sorted(
            (key, value["order_id"], value["customer"], Decimal(value["amount"]),
             utc(datetime.fromisoformat(value["ts"])), position)
            for (key, value), position in zip(orders, where, strict=True)
        )
        written = sorted(
            (row["key"], row["order_id"], row["customer"], row["amount"], utc(row["ts"]),
             f"{row['topic']}-{row['partition']}@{row['offset']}")
            for row in table(folder, "orders")
        )
        assert written == expected_orders
        revenue = {(utc(row["minute"]), row["key"]): (row["revenue"], row["orders"])
                   for row in table(folder, "revenue_per_minute")}
        assert revenue == expected_revenue(orders)

    check(first)
    # The second run reads only the new orders (the streaming table's checkpoint) and recomputes the view.
    more = [order(i) for i in range(120, 200)]
    produce(kafka.bootstrap, topic, more)
    # produce() spreads records round-robin from partition 0, and 120 is a multiple of 3: the positions of the
    # whole sequence are those of one 200-record produce.
    spark_pipelines_run(folder, *HIVE)
    check(first + more)


def run_filter_enrich(bootstrap: str, tmp_path: Path, *args: str, timeout: float = RUN_TIMEOUT_S) -> None:
    """Produces 150 orders, runs the shipped filter_enrich project on them with ``spark-pipelines run ARGS`` and
    checks its output topic record by record."""
    source, target = new_topic(bootstrap), new_topic(bootstrap, 2)
    orders = [order(i) for i in range(150)]
    produce(bootstrap, source, orders)
    folder = project(
        "filter_enrich", tmp_path, {"fjord.bootstrap": bootstrap, "fjord.topic": source, "fjord.output.topic": target}
    )
    spark_pipelines_run(folder, *args, timeout=timeout)
    assert_filter_enrich_output(bootstrap, orders, source, target)


def test_filter_enrich_project_writes_through_the_fjord_sink(kafka: BrokerProcess, tmp_path: Path) -> None:
    run_filter_enrich(kafka.bootstrap, tmp_path)
