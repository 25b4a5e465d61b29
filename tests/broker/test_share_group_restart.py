"""A share group survives its coordinator being killed (SIGKILL) and restarted on the same data: the coordinator
rebuilds it from Kafka's share-group records in ``__consumer_offsets``, at the same group and assignment epochs,
with the same members and assignments, so members heartbeating at their epochs go on without a reassignment; their
sessions start afresh, so a member that never comes back is still removed. A deleted group stays deleted.

Its own module: the node is killed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker import cg_wire, share_wire
from tests.broker.cg_clients import unique
from tests.topics import create_topic
from wire import codec, schema

OVERRIDES = {
    "group.share.session.timeout.ms": "4000",
    "group.share.min.session.timeout.ms": "4000",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.min.heartbeat.interval.ms": "500",
}


@pytest.fixture
def nodes() -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    yield started
    for node in started:
        node.kill()


def _snapshot(described: Any) -> tuple[Any, ...]:
    return (
        described.group_state,
        described.group_epoch,
        described.assignment_epoch,
        sorted(
            (m.member_id, m.member_epoch, [(tp.topic_id, tuple(tp.partitions)) for tp in m.assignment.topic_partitions])
            for m in described.members
        ),
    )


def _on(node: BrokerProcess, action: Callable[[WireClient], Any]) -> Any:
    with WireClient(node.port) as client:
        return action(client)


def test_share_group_survives_a_killed_coordinator(tmp_path: Path, nodes: list[BrokerProcess]) -> None:
    first = start_broker(tmp_path / "node", OVERRIDES)
    nodes.append(first)
    topic, group, gone = unique("share-durable"), unique("share-durable-group"), unique("share-deleted-group")
    epochs: dict[str, int] = {}
    with WireClient(first.port) as client:
        create_topic(client, topic, 3)
        for name in (group, gone):
            cg_wire.await_coordinator(client, name)
        for _ in range(2):
            member = str(uuid.uuid4())
            epochs[member] = share_wire.heartbeat(client, group, member, 0, topics=(topic,)).member_epoch
        for member, epoch in list(epochs.items()):  # the first member catches up with the second's join
            epochs[member] = share_wire.heartbeat(client, group, member, epoch).member_epoch
        alter_cls = codec.request_class(91, 0)  # AlterShareGroupOffsets makes the group, empty
        topic_cls = schema.field_entity(alter_cls, "topics")
        reset = schema.build_nested(topic_cls, "partitions", partition_index=0, start_offset=0)
        client.request(schema.build(alter_cls, group_id=gone, topics=(
            schema.build(topic_cls, topic_name=topic, partitions=(reset,)),
        )))
        assert share_wire.describe(client, gone).group_state == "Empty"
        delete = schema.build(codec.request_class(42, 2), groups_names=(gone,))
        assert client.request(delete).results[0].error_code == ErrorCode.none
        before = _snapshot(share_wire.describe(client, group))
    assert before[0] == "Stable" and before[1] == before[2] == 2
    first.kill()

    second = start_broker(tmp_path / "node", OVERRIDES)
    nodes.append(second)
    with WireClient(second.port) as client:
        cg_wire.await_coordinator(client, group)
        assert _snapshot(share_wire.describe(client, group)) == before
        assert share_wire.describe(client, gone).error_code == ErrorCode.group_id_not_found
        staying, silent = sorted(epochs)
        answer = share_wire.heartbeat(client, group, staying, epochs[staying])
        assert (answer.error_code, answer.member_epoch, answer.assignment) == (ErrorCode.none, 2, None)

        def members() -> list[str]:
            response = share_wire.heartbeat(client, group, staying, epochs[staying])
            assert response.error_code == ErrorCode.none, response
            epochs[staying] = response.member_epoch
            return [m.member_id for m in share_wire.describe(client, group).members]

        eventually(members, until=lambda ms: ms == [staying], timeout=15, interval=0.3,
                   what="the member that never came back to be removed")
        assert share_wire.heartbeat(client, group, silent, epochs[silent]).error_code == ErrorCode.unknown_member_id
