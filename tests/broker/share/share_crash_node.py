"""A node process for ``test_share_kill9.py``: it starts a real node on a data directory, creates a topic, gives a
share group the partition's records and acknowledges some of them, prints what it did and waits to be killed."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from broker.share.partition_state import AckBatch
from node.process import Node
from settings.server import ServerConfig
from testkit.node_process import default_overrides
from tests.topics import create_topic
from wire.record_batch import Record, build_batch

GROUP = "kill9-workers"


def start_node(data_dir: Path) -> Node:
    overrides = default_overrides(data_dir)
    return Node(ServerConfig.load(None, [f"{k}={v}" for k, v in overrides.items()]))


async def main(data_dir: Path, topic: str) -> None:
    node = start_node(data_dir)
    await node.start()
    assert node.broker is not None
    bootstrap = f"127.0.0.1:{node.broker.server.bound_port}"
    await asyncio.to_thread(create_topic, bootstrap, topic)
    log = await node.broker.partitions.wait_open(topic, 0, 30)
    assert log is not None
    shares = node.broker.share_partitions
    share = await shares.get(GROUP, log.topic_id, 0)  # the group's start: "latest", the empty log's 0
    now = int(time.time() * 1000)
    for base in (0, 5):
        await log.append(build_batch([Record(b"k", b"v%d" % (base + i), (), now) for i in range(5)]))
    got = await share.fetch("m1", 1 << 20, 100, now)
    code = await share.acknowledge(
        "m1", [AckBatch(0, 3, (1,)), AckBatch(4, 4, (3,)), AckBatch(6, 7, (1,))], now
    )
    print(json.dumps({"acquired": [[r.first_offset, r.last_offset] for r in got.acquired], "code": code}))
    print("READY", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
