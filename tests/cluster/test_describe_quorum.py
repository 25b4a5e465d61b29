"""DescribeQuorum asked of a combined single node (the embedded default): the node answers as the only voter and
leader of its metadata log (a cluster's brokers forward it: see test_cluster_basics)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from controller.rpc import messages as m
from controller.rpc.connection import ControllerConnection
from node.local_cluster import REPO_ROOT, free_port
from wire import codec


async def _describe(port: int, deadline: float) -> Any:
    cls = codec.request_class(m.DESCRIBE_QUORUM, 2)
    topic = codec.build_nested(cls, "topics", topic_name=m.METADATA_TOPIC, partitions=(
        codec.build_nested(codec.field_entity(cls, "topics"), "partitions", partition_index=0),
    ))
    while True:
        connection = ControllerConnection("127.0.0.1", port, client_id="describe-quorum-test")
        try:
            await connection.connect(timeout=2)
            return await connection.request(codec.build(cls, topics=(topic,)), timeout=10)
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
        finally:
            await connection.close()


def test_a_combined_node_describes_itself_as_the_quorum(tmp_path: Path) -> None:
    port, controller_port = free_port(), free_port()
    overrides = {
        "node.id": "7",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.quorum.voters": f"7@127.0.0.1:{controller_port}",
        "log.dirs": str(tmp_path / "kraft"),
        "s3.data.buckets": f"0@file://{tmp_path / 'objects'}",
        "s3.wal.path": f"0@file://{tmp_path / 'wal'}",
    }
    argv = [sys.executable, "-m", "node.cli", "server", "start"]
    for key, value in overrides.items():
        argv += ["--override", f"{key}={value}"]
    log_path = tmp_path / "node.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        response = asyncio.run(_describe(port, time.monotonic() + 30))
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, log_path.read_text()
    assert response.error_code == ErrorCode.none
    partition = response.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    assert partition.leader_id == 7
    assert [v.replica_id for v in partition.current_voters] == [7]
    assert partition.high_watermark > 0, "the node registered itself, so its log is not empty"
