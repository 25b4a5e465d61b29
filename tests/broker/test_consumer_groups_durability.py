"""A KIP-848 consumer group survives its coordinator being killed (SIGKILL) and restarted on the same data: the
coordinator restores the group from ``__consumer_offsets`` (epochs, members, assignments), so the members that kept
running go on with the partitions they had, at the same group epoch, and consumption continues.

Its own module: the broker is killed, and it listens on a fixed port so the running clients find it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from testkit.node_process import BrokerProcess, WireClient, start_broker
from testkit.waiting import eventually
from tests.broker import cg_wire
from tests.broker.cg_clients import commit, consumer_factory, partitions_of, poll_until, produce, unique
from tests.topics import create_topic
from wire.ports import free_port

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


@pytest.fixture
def new_consumer() -> Iterator[Callable[..., Consumer]]:
    yield from consumer_factory()


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    yield started
    for node in started:
        node.kill()


def described(node: BrokerProcess, group: str) -> Any:
    with WireClient(node.port) as client:
        return cg_wire.describe(client, group)


def test_group_survives_a_killed_coordinator_with_its_epoch_and_assignments(
    tmp_path: Path, overrides: dict[str, str], nodes: list[BrokerProcess], new_consumer: Callable[..., Consumer]
) -> None:
    first = start_broker(tmp_path / "node", overrides)
    nodes.append(first)
    topic, group = unique("cg-durable"), unique("cg-durable-group")
    create_topic(first.bootstrap, topic, 4)
    produce(first.bootstrap, topic, range(40), 4)
    quick_reconnect = {"reconnect.backoff.max.ms": 500}
    members = [new_consumer(first.bootstrap, group, **quick_reconnect) for _ in range(2)]
    seen: dict[int, int] = {}

    def process(c: Consumer, m: Message) -> None:
        seen[int(m.value())] = seen.get(int(m.value()), 0) + 1
        commit(c, m)

    for c in members:
        c.subscribe([topic])
    poll_until(members, lambda: len(seen) == 40 and all(len(partitions_of(c)) == 2 for c in members), process)
    before = described(first, group)
    assignments = [partitions_of(c) for c in members]
    first.kill()

    second = start_broker(tmp_path / "node", overrides)
    nodes.append(second)
    assert second.port == first.port

    def restored() -> Any:
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
    for c in members:
        c.close()
    assert second.stop() == 0, second.log_text()


def test_a_revocation_in_progress_resumes_after_the_coordinator_restarts(
    tmp_path: Path, overrides: dict[str, str], nodes: list[BrokerProcess]
) -> None:
    """Member a owns both partitions; b joins, so a must give one up. The broker is killed before a acknowledges:
    after the restart a is still asked to revoke it, and b gets it only once a let it go."""
    first = start_broker(tmp_path / "node", overrides)
    nodes.append(first)
    topic, group = unique("cg-revoking"), unique("cg-revoking-group")
    create_topic(first.bootstrap, topic, 2)
    a, b = "member-a-" + uuid.uuid4().hex, "member-b-" + uuid.uuid4().hex
    with WireClient(first.port) as client:
        cg_wire.await_coordinator(client, group)
        joined = cg_wire.heartbeat(client, group, a, 0, topics=(topic,), owned={})
        a_epoch, a_owned = joined.member_epoch, cg_wire.assigned(joined)
        assert cg_wire.heartbeat(client, group, a, a_epoch, owned=a_owned).error_code == ErrorCode.none
        b_joined = cg_wire.heartbeat(client, group, b, 0, topics=(topic,), owned={})
        assert (b_joined.error_code, cg_wire.assigned(b_joined)) == (ErrorCode.none, {})
        revoking = cg_wire.heartbeat(client, group, a, a_epoch, owned=a_owned)
        assert revoking.member_epoch == a_epoch  # a keeps its epoch until it has revoked
        [(topic_id, kept)] = cg_wire.assigned(revoking).items()
        assert len(kept) == 1
    first.kill()

    second = start_broker(tmp_path / "node", overrides)
    nodes.append(second)
    with WireClient(second.port) as client:
        def restored() -> Any:
            group_now = cg_wire.describe(client, group)
            return group_now if group_now.error_code == ErrorCode.none else None

        eventually(restored, timeout=20, interval=0.1, what=f"group {group} restored")
        # b heartbeats first: the partition a has not released yet is not b's.
        b_waiting = cg_wire.heartbeat(client, group, b, b_joined.member_epoch, owned={})
        assert b_waiting.error_code == ErrorCode.none
        assert sum(len(p) for p in cg_wire.assigned(b_waiting).values()) == 0
        again = cg_wire.heartbeat(client, group, a, a_epoch, owned=a_owned)
        assert (again.error_code, again.member_epoch) == (ErrorCode.none, a_epoch)
        assert cg_wire.assigned(again) in ({}, {topic_id: kept})  # the revocation stands
        done = cg_wire.heartbeat(client, group, a, a_epoch, owned={topic_id: kept})
        assert done.error_code == ErrorCode.none and done.member_epoch > a_epoch
        b_now = cg_wire.heartbeat(client, group, b, b_joined.member_epoch, owned={})
        released = set(a_owned[topic_id]) - set(kept)
        assert cg_wire.assigned(b_now) == {topic_id: tuple(sorted(released))}
    assert second.stop() == 0, second.log_text()


def test_groups_that_are_gone_stay_gone_after_a_restart(
    tmp_path: Path, overrides: dict[str, str], nodes: list[BrokerProcess], new_consumer: Callable[..., Consumer]
) -> None:
    """A consumer group and a classic group deleted with DeleteGroups are not listed before the restart and do not
    come back after it (their records were tombstoned); a consumer group whose one member left without committing
    stays, Empty, as in Kafka (until the offsets' retention check deletes it), before and after the restart."""
    first = start_broker(tmp_path / "node", overrides)
    nodes.append(first)
    topic = unique("cg-gone")
    left, deleted, classic = unique("cg-left"), unique("cg-deleted"), unique("cg-classic-deleted")
    create_topic(first.bootstrap, topic, 2)
    for group, protocol in ((left, "consumer"), (deleted, "consumer"), (classic, "classic")):
        member = new_consumer(first.bootstrap, group, **{"group.protocol": protocol})
        member.subscribe([topic])
        poll_until([member], lambda m=member: len(partitions_of(m)) == 2)  # type: ignore[misc]
        if group != left:
            member.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
        member.close()
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    for group in (deleted, classic):
        admin.delete_consumer_groups([group])[group].result(timeout=20)

    def listed(node_admin: AdminClient) -> set[str]:
        groups = node_admin.list_consumer_groups().result(timeout=20)
        assert not groups.errors, groups.errors
        return {g.group_id for g in groups.valid} & {left, deleted, classic}

    assert eventually(lambda: listed(admin), until=lambda found: found == {left}, timeout=10, interval=0.1,
                      what="the deleted groups to be gone") == {left}
    assert first.stop() == 0, first.log_text()
    second = start_broker(tmp_path / "node", overrides)
    nodes.append(second)
    loading = (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator, ErrorCode.coordinator_not_available)
    with WireClient(second.port) as client:
        for group in (left, deleted, classic):
            cg_wire.await_coordinator(client, group)
            eventually(lambda g=group: cg_wire.describe(client, g).error_code,  # type: ignore[misc]
                       until=lambda code: code not in loading, timeout=20, interval=0.1,
                       what=f"the coordinator of {group} to have loaded its groups")
    assert listed(AdminClient({"bootstrap.servers": second.bootstrap})) == {left}
    with WireClient(second.port) as client:
        restored = cg_wire.describe(client, left)
        assert (restored.error_code, restored.group_state, restored.members) == (ErrorCode.none, "Empty", ())
    assert second.stop() == 0, second.log_text()


def test_static_and_regex_members_are_restored_as_they_were(
    tmp_path: Path, overrides: dict[str, str], nodes: list[BrokerProcess]
) -> None:
    """After a restart, a static member restarting with a new member id under its instance id takes its partitions
    back without a new group epoch, and a regex member goes on at its epoch and still gets a new matching topic."""
    first = start_broker(tmp_path / "node", overrides)
    nodes.append(first)
    prefix = unique("rx")
    static_topic, regex_topic, later = unique("cg-static"), f"{prefix}-a", f"{prefix}-b"
    static_group, regex_group = unique("cg-static-group"), unique("cg-regex-group")
    for topic in (static_topic, regex_topic):
        create_topic(first.bootstrap, topic, 2)
    with WireClient(first.port) as client:
        cg_wire.await_coordinator(client, static_group)
        cg_wire.await_coordinator(client, regex_group)
        static = cg_wire.heartbeat(client, static_group, "static-1", 0, topics=(static_topic,), owned={},
                                   instance_id="instance-1")
        static_owned = cg_wire.assigned(static)
        assert cg_wire.heartbeat(client, static_group, "static-1", static.member_epoch, owned=static_owned,
                                 instance_id="instance-1").error_code == ErrorCode.none
        other = cg_wire.heartbeat(client, static_group, "static-2", 0, topics=(static_topic,), owned={},
                                  instance_id="instance-2")
        assert other.error_code == ErrorCode.none
        # The group settles: instance-1 gives one partition up, instance-2 gets it.
        revoked = cg_wire.heartbeat(client, static_group, "static-1", static.member_epoch, owned=static_owned,
                                    instance_id="instance-1")
        static_owned = cg_wire.assigned(revoked)
        settled = cg_wire.heartbeat(client, static_group, "static-1", static.member_epoch, owned=static_owned,
                                    instance_id="instance-1")
        assert settled.member_epoch == other.member_epoch
        got = cg_wire.heartbeat(client, static_group, "static-2", other.member_epoch, owned={},
                                instance_id="instance-2")
        assert sum(len(p) for p in cg_wire.assigned(got).values()) == 1
        regex = cg_wire.heartbeat(client, regex_group, "regex-1", 0, regex=f"{prefix}-.*", owned={})
        regex_owned = cg_wire.assigned(regex)
        assert sum(len(p) for p in regex_owned.values()) == 2
        # instance-1's process shuts down: a static leave (epoch -2) keeps its partitions for its return.
        left = cg_wire.heartbeat(client, static_group, "static-1", -2, owned=static_owned, instance_id="instance-1")
        assert left.error_code == ErrorCode.none, left
        before = cg_wire.describe(client, static_group)
    first.kill()

    second = start_broker(tmp_path / "node", overrides)
    nodes.append(second)
    with WireClient(second.port) as client:
        loading = (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator)
        for group in (static_group, regex_group):
            cg_wire.await_coordinator(client, group)
            eventually(lambda g=group: cg_wire.describe(client, g).error_code,  # type: ignore[misc]
                       until=lambda code: code not in loading, timeout=20, interval=0.1, what=f"{group} loaded")
        # ... and comes back after the restart: a new member id, epoch 0, the same instance id.
        back = cg_wire.heartbeat(client, static_group, "static-1-restarted", 0, topics=(static_topic,), owned={},
                                 instance_id="instance-1")
        assert back.error_code == ErrorCode.none, back
        after = cg_wire.describe(client, static_group)
        assert after.group_epoch == before.group_epoch
        assert sorted(m.instance_id for m in after.members) == ["instance-1", "instance-2"]
        assert "static-1-restarted" in {m.member_id for m in after.members}
        assert cg_wire.assigned(back) == static_owned  # the partition instance-1 had before it left

        again = cg_wire.heartbeat(client, regex_group, "regex-1", regex.member_epoch, owned=regex_owned)
        assert (again.error_code, again.member_epoch) == (ErrorCode.none, regex.member_epoch)
        create_topic(second.bootstrap, later, 3)

        def sees_later() -> int | None:
            answer = cg_wire.heartbeat(client, regex_group, "regex-1", current[0], owned=current[1])
            assert answer.error_code == ErrorCode.none, answer
            if answer.assignment is not None:
                current[1] = cg_wire.assigned(answer)
            current[0] = answer.member_epoch
            total = sum(len(p) for p in current[1].values())
            return total if total == 5 else None

        current: list[Any] = [regex.member_epoch, regex_owned]
        eventually(sees_later, timeout=15, interval=0.2, what="the regex member to get the new topic")
    assert second.stop() == 0, second.log_text()
