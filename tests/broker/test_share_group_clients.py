"""confluent-kafka's ``ShareConsumer`` (librdkafka's KIP-932 client) against a real node: it joins a share group
with ShareGroupHeartbeat, is assigned the subscribed partitions (two consumers on a one-partition topic are both
given that partition: share groups share partitions), and leaves the group on close.

ShareFetch is not part of this change, so the consumers' polls return nothing; the membership is checked through
ShareGroupDescribe, as ``kafka-share-groups.sh --describe --members`` would show it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import ShareConsumer

from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker import share_wire
from tests.broker.cg_clients import unique
from tests.topics import create_topic


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    quick = {"group.share.heartbeat.interval.ms": "300", "group.share.min.heartbeat.interval.ms": "300"}
    process = start_broker(tmp_path_factory.mktemp("share-clients"), quick)
    try:
        yield process
    finally:
        assert process.stop() == 0, process.log_text()


def _described(node: BrokerProcess, group: str) -> Any:
    with WireClient(node.port) as client:
        return share_wire.describe(client, group)


def test_share_consumers_join_and_are_both_assigned_the_one_partition(node: BrokerProcess) -> None:
    topic, group = unique("share-client-topic"), unique("share-client-group")
    topic_id = create_topic(node.bootstrap, topic, 1).topic_id
    consumers = [
        ShareConsumer({"bootstrap.servers": node.bootstrap, "group.id": group, "client.id": f"share-{i}"})
        for i in range(2)
    ]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])

        def members() -> list[Any]:
            for consumer in consumers:
                consumer.poll(0.2)
            described = _described(node, group)
            return list(described.members) if described.error_code == 0 else []

        def both_assigned(found: list[Any]) -> bool:
            return len(found) == 2 and all(
                [(tp.topic_id, tuple(tp.partitions)) for tp in m.assignment.topic_partitions] == [(topic_id, (0,))]
                for m in found
            )

        found = eventually(members, until=both_assigned, timeout=30, interval=0.2, what="both consumers assigned")
        assert sorted(m.client_id for m in found) == ["share-0", "share-1"]
        assert all(m.subscribed_topic_names == (topic,) for m in found)
        assert _described(node, group).group_state == "Stable"
        consumers.pop().close()
        eventually(lambda: len(_described(node, group).members), until=lambda n: n == 1, timeout=15, interval=0.2,
                   what="the closed consumer to leave the group")
    finally:
        for consumer in consumers:
            consumer.close()
    eventually(lambda: _described(node, group).group_state, until=lambda s: s == "Empty", timeout=15, interval=0.2,
               what="the group to be empty")
