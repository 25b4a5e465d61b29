"""A broker process killed with SIGKILL after a share group acknowledged records: restarted on the same data, it
has the group's share state back from the partition's share stream. Acknowledged and rejected records never come
back; the records that were only acquired are handed out again.

The first incarnation is ``share_crash_node.py`` in its own process (nothing of it is closed: the kill is real); the
restarted node runs in the test's event loop so the test can ask its ``share_partitions`` directly.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from broker.share.partition_state import AcquiredRange
from testkit.waiting import eventually_async
from tests.broker.share.share_crash_node import GROUP, start_node
from tests.topics import create_topic
from wire.errors import KafkaError
from wire.record_batch import Record, build_batch

ROOT = Path(__file__).resolve().parents[3]
READY_TIMEOUT_S = 60.0


def _run_until_ready(data_dir: Path, topic: str) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.broker.share.share_crash_node", str(data_dir), topic],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.strip())
            if line.strip() == "READY":
                ready.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(READY_TIMEOUT_S), f"the node never got ready: {lines}"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    assert process.returncode == -signal.SIGKILL
    result: dict[str, object] = json.loads(lines[-2])
    return result


async def test_share_state_survives_kill_9(tmp_path: Path) -> None:
    topic = f"kill9-{int(time.time() * 1000)}"
    before = _run_until_ready(tmp_path / "node", topic)
    assert before == {"acquired": [[0, 9]], "code": 0}

    node = start_node(tmp_path / "node")
    await node.start()
    try:
        assert node.broker is not None
        log = await node.broker.partitions.wait_open(topic, 0, 30)
        assert log is not None
        shares = node.broker.share_partitions
        summary = await shares.summary(GROUP, log.topic_id, 0)
        assert summary is not None and summary[:2] == (5, 0)
        share = await shares.get(GROUP, log.topic_id, 0)
        again = await share.fetch("m2", 1 << 20, 100, int(time.time() * 1000))
        assert again.acquired == [AcquiredRange(5, 5, 1), AcquiredRange(8, 9, 1)]
    finally:
        await node.stop()


async def test_appends_wake_long_polls_and_a_deleted_topic_drops_its_share_partitions(tmp_path: Path) -> None:
    node = start_node(tmp_path / "node")
    await node.start()
    try:
        assert node.broker is not None
        bootstrap = f"127.0.0.1:{node.broker.server.bound_port}"
        topic = "woken"
        await asyncio.to_thread(create_topic, bootstrap, topic)
        log = await node.broker.partitions.wait_open(topic, 0, 30)
        assert log is not None
        shares = node.broker.share_partitions
        with pytest.raises(KafkaError) as unknown:
            await shares.get(GROUP, uuid.uuid4(), 0)
        assert unknown.value.code == ErrorCode.unknown_topic_id
        share = await shares.get(GROUP, log.topic_id, 0)
        assert not share.available()
        woken = shares.wait_for_change()
        await log.append(build_batch([Record(b"k", b"v")]))
        await asyncio.wait_for(woken, 10)
        assert share.available()
        assert shares.groups_on(log.topic_id, 0) == [GROUP]

        admin = AdminClient({"bootstrap.servers": bootstrap})
        await asyncio.to_thread(lambda: admin.delete_topics([topic])[topic].result(30))
        await eventually_async(lambda: shares.groups_on(log.topic_id, 0) == [], timeout=30,
                               what="the deleted partition's share partitions to be dropped")
        with pytest.raises(KafkaError) as gone:
            await shares.get(GROUP, log.topic_id, 0)
        assert gone.value.code == ErrorCode.unknown_topic_id
        assert (await share.fetch("m", 1 << 20, 10, 0)).error == ErrorCode.not_leader_or_follower
    finally:
        await node.stop()
