"""DescribeQuorum asked of a combined single node (the embedded default): the node answers as the only voter and
leader of its metadata log (a cluster's brokers forward it: see test_cluster_basics)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.rpc import kafka_apis as m
from metadata.rpc.connection import ControllerConnection
from testkit.node_process import start_broker
from wire import codec, schema


async def _describe(port: int, topic_name: str = m.METADATA_TOPIC) -> Any:
    cls = codec.request_class(m.DESCRIBE_QUORUM, 2)
    topic = schema.build_nested(cls, "topics", topic_name=topic_name, partitions=(
        schema.build_nested(schema.field_entity(cls, "topics"), "partitions", partition_index=0),
    ))
    connection = ControllerConnection("127.0.0.1", port, client_id="describe-quorum-test")
    try:
        await connection.connect(timeout=2)
        return await connection.request(schema.build(cls, topics=(topic,)), timeout=10)
    finally:
        await connection.close()


def test_a_combined_node_describes_itself_as_the_quorum(tmp_path: Path) -> None:
    # Both listeners bind port 0: a single voter needs no peer to know its address, and start_broker returns once
    # the node serves, reading the port it bound from its log.
    node = start_broker(tmp_path, {"node.id": "7", "controller.quorum.voters": "7@127.0.0.1:0"})
    try:
        response = asyncio.run(_describe(node.port))
        other = asyncio.run(_describe(node.port, "other"))
    finally:
        code = node.stop()
    assert code == 0, node.log_text()
    assert response.error_code == ErrorCode.none
    partition = response.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    assert partition.leader_id == 7
    assert [v.replica_id for v in partition.current_voters] == [7]
    assert partition.high_watermark > 0, "the node registered itself, so its log is not empty"
    # v2 names its CONTROLLER listener, where the metadata is read (the Spark source's direct path).
    [me] = response.nodes
    assert me.node_id == 7
    assert [(lst.name, lst.host) for lst in me.listeners] == [("CONTROLLER", "127.0.0.1")]
    assert me.listeners[0].port not in (0, node.port)
    # Another topic is not the quorum's, as a quorum leader answers (Kafka's RaftUtil.hasValidTopicPartition).
    assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in other.topics] == [
        ("other", [(0, ErrorCode.unknown_topic_or_partition)])]
