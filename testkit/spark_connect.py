"""A Spark Connect server on 127.0.0.1 from the installed PySpark, as an operator starts one: ``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` (what ``sbin/start-connect-server.sh`` runs, without its
daemon wrapper so that the process is this module's to stop), bound to port 0 (``spark.connect.grpc.binding.port``)
so that it takes a port nobody else can, which its log then names.

Clients reach it as ``url`` (``sc://127.0.0.1:PORT``). It is the driver: the Python its workers and the data
sources' planning run is the server's ``PYSPARK_PYTHON``, and what they import is the server's ``PYTHONPATH``
(``env``), never the client's. ``master`` places the executors (``local[2]``, or a standalone cluster's URL).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from testkit.spark_standalone import spark_home
from testkit.waiting import eventually

__all__ = ["ConnectServer", "start_connect_server"]

START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 30
_STARTED = re.compile(r"Spark Connect server started at: 127\.0\.0\.1:(\d+)")
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@dataclass
class ConnectServer:
    """A running Spark Connect server; ``url`` is what ``SparkSession.builder.remote`` and ``--remote`` take."""

    url: str
    folder: Path
    process: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        """SIGTERM to the process group (spark-submit execs java), then SIGKILL if it lingers."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def start_connect_server(folder: Path, *, master: str = "local[2]", conf: Mapping[str, str] | None = None,
                         env: Mapping[str, str] | None = None) -> ConnectServer:
    """Starts the server with its working directory (and so ``./spark-warehouse``) in ``folder`` and returns once
    it listens."""
    home = spark_home()
    folder.mkdir(parents=True, exist_ok=True)
    settings = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": "0",
                "spark.ui.enabled": "false", **(conf or {})}
    args = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--name", "Spark Connect server",
            "--master", master]
    for key, value in settings.items():
        args += ["--conf", f"{key}={value}"]
    environment = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
                   "PYSPARK_PYTHON": sys.executable, **(env or {})}
    log = folder / "connect-server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=environment, cwd=folder,
                                   start_new_session=True)
    server = ConnectServer(url="", folder=folder, process=process, log=log)

    def started() -> re.Match[str] | None:
        if process.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited with {process.returncode}:\n{server.log_text()}")
        return _STARTED.search(log.read_text(errors="replace"))

    try:
        port = eventually(started, timeout=START_TIMEOUT_S,
                          what=lambda: f"the Spark Connect server to start:\n{server.log_text()}").group(1)
    except BaseException:
        server.stop()
        raise
    server.url = f"sc://127.0.0.1:{port}"
    return server
