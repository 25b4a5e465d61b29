"""The ``fjord`` source and sink from a Spark Connect client (``SparkSession.builder.remote``), which is how SDP and
hosted Spark run Python code: a batch read, the batch sink, and a streaming query through the sink that a second
run resumes from its checkpoint, reading only what came after, all through one Spark Connect server reached as
``sc://127.0.0.1:PORT`` (``testkit/spark_connect.py``; the local server ``remote("local[*]")`` starts is what
``spark-pipelines run`` uses, in test_sdp_pipelines.py). Each run is ``connect_job.py`` in its own process; what it
read and wrote is checked against what was produced, record by record, with a plain Kafka consumer.

The server is set up as README tells a user: it runs the Python workers, so it is started with ``PYSPARK_PYTHON``
naming a Python that has the ``fjord`` package (here this venv's, with this checkout on its ``PYTHONPATH``); the
clients' environment says nothing about them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from testkit.node_process import REPO, BrokerProcess, start_broker
from testkit.spark_connect import ConnectServer, start_connect_server
from tests.spark_connector.test_pipeline_run import consume_all, new_topic

JOB = Path(__file__).with_name("connect_job.py")
RUN_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("connect-broker"))
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    server = start_connect_server(
        tmp_path_factory.mktemp("connect-server"),
        conf={"spark.sql.shuffle.partitions": "2"},
        env={"PYSPARK_PYTHON": sys.executable,
             "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))},
    )
    try:
        yield server
    finally:
        server.stop()


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for n in range(first, first + count):
        producer.produce(topic, key=f"k{n}".encode(), value=f"v{n}".encode(), partition=n % 2,
                         headers=[("n", str(n).encode())])
    assert producer.flush(30) == 0


def job(kafka: BrokerProcess, server: ConnectServer, source: str, sink: str, checkpoint: Path, *, step: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    # The server's workers are the server's: nothing in the client's environment reaches them.
    env.pop("PYSPARK_PYTHON", None)
    result = subprocess.run(
        [sys.executable, str(JOB), server.url, kafka.bootstrap, source, sink, str(checkpoint), step],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False, env=env, cwd=checkpoint.parent,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return result.stdout


def marker(output: str, name: str) -> object:
    line = next(line for line in output.splitlines() if line.startswith(f"{name} "))
    return json.loads(line[len(name) + 1 :])


Written = list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]


def written(kafka: BrokerProcess, topic: str) -> Written:
    return sorted((key, value, headers or []) for _p, key, value, headers in consume_all(kafka.bootstrap, topic, 1))


def test_batch_read_and_sink_through_a_spark_connect_server(
    kafka: BrokerProcess, connect_server: ConnectServer, tmp_path: Path
) -> None:
    source, sink = new_topic(kafka.bootstrap, 2), new_topic(kafka.bootstrap, 1)
    produce(kafka.bootstrap, source, 0, 40)
    output = job(kafka, connect_server, source, sink, tmp_path / "unused", step="batch")
    expected = sorted([n % 2, n // 2, f"k{n}", f"v{n}", [["n", str(n)]]] for n in range(40))
    assert marker(output, "ROWS") == expected
    assert written(kafka, sink) == sorted((f"k{n}".encode(), f"v{n}".encode(), [("n", str(n).encode())])
                                          for n in range(40))


def test_streaming_through_spark_connect_resumes_from_its_checkpoint(
    kafka: BrokerProcess, connect_server: ConnectServer, tmp_path: Path
) -> None:
    source, sink = new_topic(kafka.bootstrap, 2), new_topic(kafka.bootstrap, 1)
    checkpoint = tmp_path / "checkpoint"
    produce(kafka.bootstrap, source, 0, 30)
    assert marker(job(kafka, connect_server, source, sink, checkpoint, step="stream"), "STREAMED") == 30
    produce(kafka.bootstrap, source, 30, 20)
    # The second run reads only the 20 new records: the checkpoint holds where the first one ended.
    assert marker(job(kafka, connect_server, source, sink, checkpoint, step="stream"), "STREAMED") == 20
    assert written(kafka, sink) == sorted((f"k{n}".encode(), f"v{n}".encode(), [("n", str(n).encode())])
                                          for n in range(50))
