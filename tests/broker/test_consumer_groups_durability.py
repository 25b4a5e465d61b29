"""A KIP-848 consumer group survives its coordinator being killed (SIGKILL) and restarted on the same data: the
coordinator restores the group from ``__consumer_offsets`` (epochs, members, assignments), so the members that kept
running go on with the partitions they had, at the same group epoch, and consumption continues.

Its own module: the broker is killed, and it listens on a fixed port so the running clients find it again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Message
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.ports import free_port
from testkit.waiting import eventually
from tests.broker import cg_wire
from tests.broker.test_consumer_groups_clients import commit, partitions_of, poll_until, produce, unique
from tests.topics import create_topic

#: A 10 s session: a restart of the node (a few seconds) fits in it, so no member's session ends meanwhile.
OVERRIDES = {
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "300",
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.session.timeout.ms": "10000",
}


@pytest.fixture
def overrides() -> dict[str, str]:
    return {**OVERRIDES, "listeners": f"PLAINTEXT://127.0.0.1:{free_port()},CONTROLLER://127.0.0.1:0"}


def consumer(node: BrokerProcess, group: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": node.bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "reconnect.backoff.max.ms": 500,
    })


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    yield started
    for node in started:
        node.kill()


def described(node: BrokerProcess, group: str) -> object:
    with WireClient(node.port) as client:
        return cg_wire.describe(client, group)


def test_group_survives_a_killed_coordinator_with_its_epoch_and_assignments(
    tmp_path: Path, overrides: dict[str, str], nodes: list[BrokerProcess]
) -> None:
    first = start_broker(tmp_path / "node", overrides)
    nodes.append(first)
    topic, group = unique("cg-durable"), unique("cg-durable-group")
    create_topic(first.bootstrap, topic, 4)
    produce(first.bootstrap, topic, range(40), 4)
    members = [consumer(first, group), consumer(first, group)]
    seen: dict[int, int] = {}

    def process(c: Consumer, m: Message) -> None:
        seen[int(m.value())] = seen.get(int(m.value()), 0) + 1
        commit(c, m)

    try:
        for c in members:
            c.subscribe([topic])
        poll_until(members, lambda: len(seen) == 40 and all(len(partitions_of(c)) == 2 for c in members), process)
        before = described(first, group)
        assignments = [partitions_of(c) for c in members]
        first.kill()

        second = start_broker(tmp_path / "node", overrides)
        nodes.append(second)
        assert second.port == first.port

        def restored() -> object | None:
            group_now = described(second, group)
            return group_now if group_now.error_code == ErrorCode.none else None

        after = eventually(restored, timeout=20, interval=0.1, retry_on=(OSError,),
                           what=f"group {group} restored from __consumer_offsets")
        assert after.group_epoch == before.group_epoch
        assert sorted(m.member_id for m in after.members) == sorted(m.member_id for m in before.members)
        produce(second.bootstrap, topic, range(40, 80), 4)
        poll_until(members, lambda: len(seen) == 80, process, timeout=30,
                   what=lambda: f"the members to read on after the restart: {len(seen)} of 80")
        assert [partitions_of(c) for c in members] == assignments
        assert {k: n for k, n in seen.items() if n != 1} == {}
        final = described(second, group)
        assert final.group_epoch == before.group_epoch
        assert sorted((m.member_id, m.member_epoch) for m in final.members) == sorted(
            (m.member_id, m.member_epoch) for m in before.members
        )
    finally:
        for c in members:
            c.close()
    assert second.stop() == 0, second.log_text()
