"""An OffsetFetch pipelined behind an OffsetCommit on the same connection reads the offset just committed.

Kafka applies a connection's requests in order; the broker runs them concurrently and a commit reaches the
group's offsets only once it is durable, so the fetch used to answer with the previous offset.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient
from tests.broker.coordinator import find_coordinator
from tests.topics import create_topic
from wire import codec, schema

ROUNDS = 8


def _commit(group: str, topic: str, offset: int) -> Any:
    cls = codec.request_class(8, 8)
    topic_cls = schema.field_entity(cls, "topics")
    part = schema.build_nested(topic_cls, "partitions", partition_index=0, committed_offset=offset)
    entry = schema.build(topic_cls, name=topic, partitions=(part,))
    return schema.build(cls, group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=(entry,))


def _fetch(group: str, topic: str, version: int) -> Any:
    cls = codec.request_class(9, version)
    if version >= 8:
        group_cls = schema.field_entity(cls, "groups")
        entry = schema.build_nested(group_cls, "topics", name=topic, partition_indexes=(0,))
        return schema.build(
            cls, groups=(schema.build(group_cls, group_id=group, topics=(entry,)),), require_stable=True
        )
    entry = schema.build_nested(cls, "topics", name=topic, partition_indexes=(0,))
    return schema.build(cls, group_id=group, topics=(entry,), require_stable=True)


def _fetched_offset(body: Any, version: int) -> int:
    topics = body.groups[0].topics if version >= 8 else body.topics
    return int(topics[0].partitions[0].committed_offset)


def test_offset_fetch_pipelined_behind_a_commit_sees_it(
    shared_broker: BrokerProcess, wire: Callable[[int], WireClient]
) -> None:
    client = wire(shared_broker.port)
    topic = f"commit-order-{uuid.uuid4().hex[:8]}"
    group = f"commit-order-{uuid.uuid4().hex[:8]}"
    create_topic(client, topic, 1)
    find_coordinator(client, group)
    for i in range(ROUNDS):
        version = 8 if i % 2 else 7
        offset = 100 + i
        client.send(_commit(group, topic, offset))
        client.send(_fetch(group, topic, version))
        _, committed = client.receive(8, 8)
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none, committed
        _, fetched = client.receive(9, version)
        assert _fetched_offset(fetched, version) == offset, f"round {i} (OffsetFetch v{version})"
