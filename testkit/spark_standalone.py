"""A Spark standalone cluster on 127.0.0.1 from the installed PySpark: one master and some workers, each a
``spark-class`` process (``org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), as an operator starts
them, with every port chosen here and every directory under one temporary folder.

The workers pass their environment to the executors they launch, so ``env`` (``PYTHONPATH``, say) reaches the
executors' Python workers; which interpreter those run is the driver's to say (``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from testkit.waiting import eventually
from wire.ports import free_port

__all__ = ["StandaloneCluster", "spark_home", "start_standalone"]

START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30
_REGISTERED = re.compile(r"Successfully registered with master")


def spark_home() -> Path:
    """The installed PySpark's own directory: it holds ``bin/spark-class`` and ``jars/``."""
    return Path(pyspark.__file__).parent


@dataclass
class StandaloneCluster:
    """A running master and its workers; ``url`` is what ``--master`` takes."""

    url: str
    folder: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def log_text(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}" for log in self.logs)

    def stop(self) -> None:
        """SIGTERM to each process group (a spark-class process execs java), then SIGKILL what is left."""
        for process in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def start_standalone(folder: Path, workers: int = 2, *, cores: int = 1, memory: str = "1g",
                     env: Mapping[str, str] | None = None) -> StandaloneCluster:
    """Starts a master and ``workers`` workers and returns once every worker has registered with the master."""
    home = spark_home()
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    cluster = StandaloneCluster(url=f"spark://127.0.0.1:{port}", folder=folder)
    environment = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
                   "SPARK_LOG_DIR": str(folder / "logs"), "PYSPARK_PYTHON": sys.executable, **(env or {})}
    spark_class = str(home / "bin" / "spark-class")

    def launch(name: str, args: list[str]) -> Path:
        log = folder / f"{name}.log"
        with open(log, "wb") as out:
            cluster.processes.append(subprocess.Popen([spark_class, *args], stdout=out, stderr=subprocess.STDOUT,
                                                      env=environment, cwd=folder, start_new_session=True))
        cluster.logs.append(log)
        return log

    try:
        launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                          "--webui-port", str(free_port())])
        eventually(lambda: "Starting Spark master at" in cluster.logs[0].read_text(errors="replace") or None,
                   timeout=START_TIMEOUT_S, what=lambda: f"the Spark master to start:\n{cluster.log_text()}")
        worker_logs = [
            launch(f"worker-{index}", ["org.apache.spark.deploy.worker.Worker", cluster.url, "--host", "127.0.0.1",
                                       "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                                       "--work-dir", str(folder / f"work-{index}")])
            for index in range(workers)
        ]
        for log in worker_logs:
            eventually(lambda log=log: _REGISTERED.search(log.read_text(errors="replace")),  # type: ignore[misc]
                       timeout=START_TIMEOUT_S, what=lambda: f"a Spark worker to register:\n{cluster.log_text()}")
    except BaseException:
        cluster.stop()
        raise
    return cluster
