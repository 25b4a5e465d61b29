"""The coordinator inside an in-process node: retention with aiokafka, failures of ``__consumer_offsets``.

The node runs in the test's event loop so the coordinator's wall clock can be moved eight days ahead instead of
waiting a week, and so a test can break the real ``__consumer_offsets`` partition under a live group; everything
else (listener, partitions, WAL, object store on disk) is the real thing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from kio.schema.errors import ErrorCode

from broker.groups.classic.group import Group, JoinRequest
from broker.groups.classic.state import JoinResult
from broker.groups.consumer.consumer_protocol import assignment_bytes, subscription_bytes
from broker.groups.consumer.group import ConsumerGroup, HeartbeatRequest
from broker.groups.coordinator import GroupCoordinator
from broker.groups.offset_commits import OffsetCommit
from broker.groups.offsets_topic import OFFSETS_TOPIC
from broker.groups.share.group import ShareHeartbeat
from broker.partition.manager import PartitionManager
from node.process import Node
from settings.server import ServerConfig
from testkit.node_process import default_overrides
from testkit.waiting import eventually_async
from tests.topics import create_topic
from wire.errors import KafkaError

DAY_S = 86_400.0


async def start_node(data_dir: Path) -> Node:
    overrides = {
        **default_overrides(data_dir),
        "group.initial.rebalance.delay.ms": "0",
        # The coordinator's clock moves eight days ahead; the tombstones it then writes must not be refused as
        # too far in the future (Kafka's default allows one hour).
        "log.message.timestamp.after.max.ms": str(int(9 * DAY_S * 1000)),
    }
    node = Node(ServerConfig.load(None, [f"{k}={v}" for k, v in overrides.items()]))
    await node.start()
    return node


@pytest.fixture
async def node_factory(tmp_path: Path) -> AsyncIterator[Callable[[], object]]:
    nodes: list[Node] = []

    async def factory() -> Node:
        node = await start_node(tmp_path / "node")
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        await node.stop()


def bootstrap(node: Node) -> str:
    return f"127.0.0.1:{node.broker.server.bound_port}"


async def committed(node: Node, group: str, tp: TopicPartition) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap(node), group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        return await consumer.committed(tp)
    finally:
        await consumer.stop()


async def test_offsets_of_empty_groups_expire_and_live_subscriptions_are_kept(node_factory: Callable) -> None:  # type: ignore[type-arg]
    node: Node = await node_factory()
    topic = f"retained-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    await asyncio.to_thread(create_topic, bootstrap(node), topic)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap(node))
    await producer.start()
    try:
        for i in range(5):
            await producer.send_and_wait(topic, f"r{i}".encode(), partition=0)
    finally:
        await producer.stop()

    # "live" keeps consuming; "left" consumed and left; "manual" only ever committed (no group management).
    live = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap(node),
        group_id="live",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=30_000,
        heartbeat_interval_ms=1_000,
    )
    await live.start()
    left = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap(node),
        group_id="left",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await left.start()
    manual = AIOKafkaConsumer(bootstrap_servers=bootstrap(node), group_id="manual", enable_auto_commit=False)
    await manual.start()
    try:
        for consumer in (live, left):
            record = await consumer.getone()
            assert record.offset == 0
            await consumer.commit({tp: 1})
        manual.assign([tp])
        await manual.commit({tp: 4})
        await left.stop()
        await manual.stop()
        assert {g: await committed(node, g, tp) for g in ("live", "left", "manual")} == {
            "live": 1,
            "left": 1,
            "manual": 4,
        }

        coordinator = node.broker.groups
        assert await coordinator.expire_offsets() == 0  # nothing is old enough yet
        real = coordinator.clock
        coordinator.clock = lambda: real() + 8 * DAY_S
        try:
            assert await coordinator.expire_offsets() == 2
        finally:
            coordinator.clock = real
        assert {g: await committed(node, g, tp) for g in ("live", "left", "manual")} == {
            "live": 1,
            "left": None,
            "manual": None,
        }
        listed = {group_id for group_id, _ in await list_groups(node)}
        assert "live" in listed and "left" not in listed and "manual" not in listed
    finally:
        await live.stop()

    # The expiry was written as tombstones: a restarted node agrees.
    await node.stop()
    restarted: Node = await node_factory()
    value = await eventually_async(lambda: committed(restarted, "live", tp), timeout=30,
                                   what="the live group's offset after the restart (lost across it?)")
    assert value == 1
    assert await committed(restarted, "left", tp) is None
    assert await committed(restarted, "manual", tp) is None


async def list_groups(node: Node) -> list[tuple[str, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap(node))
    await admin.start()
    try:
        return list(await admin.list_consumer_groups())
    finally:
        await admin.close()


async def loaded_coordinator(node: Node, group: str) -> GroupCoordinator:
    coordinator: GroupCoordinator = node.broker.groups
    error, node_id, _ = await coordinator.find_coordinator(group)
    assert (error, node_id) == (ErrorCode.none, node.node_id)
    await eventually_async(lambda: coordinator.coordinator_error(group), until=lambda error: error is ErrorCode.none,
                           timeout=30, what=f"the coordinator of group {group} to load")
    return coordinator


def join_request(
    member_id: str = "", protocol_type: str = "consumer", metadata: bytes = b"\x00\x00\x00\x00\x00\x00"
) -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        group_instance_id=None,
        client_id="in-process",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type=protocol_type,
        protocols=(("range", metadata),),
        require_known_member_id=False,
    )


async def join_and_sync(
    coordinator: GroupCoordinator, group: str, request: JoinRequest, assignment: bytes
) -> JoinResult:
    """The group's one member, its leader, joined and synced with ``assignment`` (nothing when empty)."""
    joined = await coordinator.join_group(group, request)
    synced = await coordinator.sync_group(
        group,
        member_id=joined.member_id,
        group_instance_id=None,
        generation_id=joined.generation_id,
        protocol_type=request.protocol_type,
        protocol_name="range",
        assignments={joined.member_id: assignment} if assignment else {},
    )
    assert synced.error is ErrorCode.none
    return joined


async def test_a_broken_offsets_partition_fails_sync_and_commit_with_not_coordinator(node_factory: Callable) -> None:  # type: ignore[type-arg]
    node: Node = await node_factory()
    group = "fragile"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "input")
    joined = await coordinator.join_group(group, join_request())
    assert joined.error is ErrorCode.none and joined.generation_id == 1
    # Fault: the partition holding this group is closed underneath the coordinator.
    log = node.broker.partitions.get(OFFSETS_TOPIC, coordinator.partition_for(group))
    await log.close()
    synced = await coordinator.sync_group(
        group,
        member_id=joined.member_id,
        group_instance_id=None,
        generation_id=joined.generation_id,
        protocol_type=None,
        protocol_name=None,
        assignments={joined.member_id: b"A"},
    )
    assert synced.error is ErrorCode.not_coordinator
    # The member may still commit during the rebalance this caused, but the write cannot land.
    commit = await coordinator.commit_offsets(
        group,
        member_id=joined.member_id,
        group_instance_id=None,
        generation_id=joined.generation_id,
        offsets={("input", 0): OffsetCommit(offset=1, leader_epoch=-1, metadata=None)},
    )
    assert commit == {("input", 0): ErrorCode.not_coordinator}
    error, fetched = coordinator.fetch_offsets(group, [("input", 0)])
    assert error is ErrorCode.none
    assert [(f.offset, f.error) for f in fetched] == [(-1, ErrorCode.none)]  # nothing half-applied


async def test_non_consumer_groups_keep_their_offsets(node_factory: Callable) -> None:  # type: ignore[type-arg]
    """A live group of another protocol type (Kafka Connect, Schema Registry) cannot lose offsets to OffsetDelete
    or to retention: its subscriptions are opaque to the broker."""
    node: Node = await node_factory()
    group = "connect-cluster"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "configs")
    joined = await join_and_sync(coordinator, group, join_request(protocol_type="connect"), b"")
    commit = await coordinator.commit_offsets(
        group,
        member_id=joined.member_id,
        group_instance_id=None,
        generation_id=joined.generation_id,
        offsets={("configs", 0): OffsetCommit(offset=3, leader_epoch=-1, metadata="m")},
    )
    assert commit == {("configs", 0): ErrorCode.none}
    error, _ = await coordinator.delete_offsets(group, [("configs", 0)])
    assert error is ErrorCode.non_empty_group
    real = coordinator.clock
    coordinator.clock = lambda: real() + 30 * DAY_S
    try:
        assert await coordinator.expire_offsets() == 0
    finally:
        coordinator.clock = real
    error, fetched = coordinator.fetch_offsets(group, None)
    assert error is ErrorCode.none
    assert [(f.topic, f.partition, f.offset, f.metadata) for f in fetched] == [("configs", 0, 3, "m")]


async def test_requests_during_load_get_coordinator_load_in_progress(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    node: Node = await node_factory()
    group = "slow-to-load"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "input")
    commit = await coordinator.commit_offsets(
        group,
        member_id="",
        group_instance_id=None,
        generation_id=-1,
        offsets={("input", 0): OffsetCommit(offset=9, leader_epoch=-1, metadata=None)},
    )
    assert commit == {("input", 0): ErrorCode.none}
    await node.stop()

    # Fault: __consumer_offsets partitions open only when the test says so.
    gate = asyncio.Event()
    original = PartitionManager.wait_open

    async def slow_wait_open(self: PartitionManager, topic: str, partition: int, timeout: float) -> object:
        if topic == OFFSETS_TOPIC:
            await gate.wait()
        return await original(self, topic, partition, timeout)

    monkeypatch.setattr(PartitionManager, "wait_open", slow_wait_open)
    restarted: Node = await node_factory()
    loading: GroupCoordinator = restarted.broker.groups
    assert loading.coordinator_error(group) is ErrorCode.coordinator_load_in_progress
    assert (await loading.join_group(group, join_request())).error is ErrorCode.coordinator_load_in_progress
    assert loading.heartbeat(group, "m", None, 1) is ErrorCode.coordinator_load_in_progress
    assert loading.fetch_offsets(group, None) == (ErrorCode.coordinator_load_in_progress, [])
    assert loading.list_groups()[0] is ErrorCode.coordinator_load_in_progress
    gate.set()
    await loaded_coordinator(restarted, group)
    error, fetched = loading.fetch_offsets(group, None)
    assert error is ErrorCode.none
    assert [(f.topic, f.partition, f.offset) for f in fetched] == [("input", 0, 9)]
    assert loading.list_groups()[0] is ErrorCode.none


async def test_a_commit_under_way_while_the_group_upgrades_lands_in_the_consumer_group(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A classic member's commit acknowledged while a KIP-848 member's join turned the group into a consumer group
    is the offset the next owner of the partition reads (a lost one made it receive the record again)."""
    node: Node = await node_factory()
    group = "upgrading"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "input")
    request = join_request(metadata=subscription_bytes(["input"]))
    joined = await join_and_sync(coordinator, group, request, assignment_bytes({"input": frozenset({0})}, 0))

    # Fault: the commit's append waits until the test lets it finish.
    appending, finish = asyncio.Event(), asyncio.Event()
    append = coordinator._append

    async def held_append(group_id: str, records: object, **kwargs: int) -> int:
        if not appending.is_set():
            appending.set()
            await finish.wait()
        return await append(group_id, records, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(coordinator, "_append", held_append)
    commit = asyncio.create_task(
        coordinator.commit_offsets(
            group,
            member_id=joined.member_id,
            group_instance_id=None,
            generation_id=joined.generation_id,
            offsets={("input", 0): OffsetCommit(offset=70, leader_epoch=-1, metadata=None)},
        )
    )
    await asyncio.wait_for(appending.wait(), timeout=10)
    upgrade = await coordinator.consumer_group_heartbeat(
        group,
        HeartbeatRequest(
            member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=10_000, subscribed_topic_names=("input",)
        ),
    )
    assert upgrade.error is ErrorCode.none
    assert isinstance(coordinator.describe_consumer_group(group)[2], ConsumerGroup)
    finish.set()
    assert await asyncio.wait_for(commit, timeout=10) == {("input", 0): ErrorCode.none}
    error, fetched = coordinator.fetch_offsets(group, [("input", 0)])
    assert error is ErrorCode.none
    assert [(f.offset, f.error) for f in fetched] == [(70, ErrorCode.none)]


def _fail_the_next_append(coordinator: GroupCoordinator, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Fault: the coordinator's next append to ``__consumer_offsets`` times out; the ones after it go through.
    Returns an event set once the fault has struck."""
    append = coordinator._append
    failures = [KafkaError(ErrorCode.request_timed_out, "the fault: the append timed out")]
    struck = asyncio.Event()

    async def failing_once(group_id: str, records: object, **kwargs: int) -> int:
        if failures:
            struck.set()
            raise failures.pop()
        return await append(group_id, records, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(coordinator, "_append", failing_once)
    return struck


async def _time_out(coordinator: GroupCoordinator, group: str, monkeypatch: pytest.MonkeyPatch, after_s: float) -> None:
    """Moves the coordinator's clock ``after_s`` ahead and fires the group's timer now (the loop's timer would
    fire at the real deadline), with the coordinator's next append failing; returns once the fault struck and the
    failed write's task has finished."""
    real = coordinator.clock
    monkeypatch.setattr(coordinator, "clock", lambda: real() + after_s)
    struck = _fail_the_next_append(coordinator, monkeypatch)
    coordinator._on_timer(coordinator._groups[group])
    await asyncio.wait_for(struck.wait(), timeout=10)
    for _ in range(10):  # the failed write's task finishes in a few steps of the loop (no I/O after the fault)
        await asyncio.sleep(0)


async def test_a_heartbeat_after_a_failed_write_is_answered_on_written_state(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A join whose records could not be appended is answered with the error, but the group moved in memory; the
    member's retry finds nothing new to write. Its answer must still rest on written state (Kafka's coordinator
    undoes a failed write): after a restart the member is there at the epoch it was told, with its partitions."""
    node: Node = await node_factory()
    group = "write-failed"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "input", 2)
    _fail_the_next_append(coordinator, monkeypatch)
    member = str(uuid.uuid4())
    join = HeartbeatRequest(
        member_id=member, member_epoch=0, rebalance_timeout_ms=10_000, subscribed_topic_names=("input",)
    )
    assert (await coordinator.consumer_group_heartbeat(group, join)).error is not ErrorCode.none
    retried = await coordinator.consumer_group_heartbeat(group, join)
    assert retried.error is ErrorCode.none and retried.member_epoch >= 1
    await node.stop()

    restarted: Node = await node_factory()
    reloaded = await loaded_coordinator(restarted, group)
    error, _, found = reloaded.describe_consumer_group(group)
    assert error is ErrorCode.none and found is not None
    assert found.members[member].member_epoch == retried.member_epoch
    assert found.members[member].assigned == retried.assignment


async def test_a_share_heartbeat_after_a_failed_write_is_answered_on_written_state(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same for a share group (KIP-932): the retried join's member and epoch are there after a restart."""
    node: Node = await node_factory()
    group = "share-write-failed"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "jobs", 2)
    _fail_the_next_append(coordinator, monkeypatch)
    member = str(uuid.uuid4())
    join = ShareHeartbeat(member_id=member, member_epoch=0, subscribed_topic_names=("jobs",))
    assert (await coordinator.share_group_heartbeat(group, join)).error is not ErrorCode.none
    retried = await coordinator.share_group_heartbeat(group, join)
    assert retried.error is ErrorCode.none and retried.member_epoch >= 1
    await node.stop()

    restarted: Node = await node_factory()
    reloaded = await loaded_coordinator(restarted, group)
    error, _, found = reloaded.describe_share_group(group)
    assert error is ErrorCode.none and found is not None
    assert found.members[member].member_epoch == retried.member_epoch


async def test_a_member_fenced_by_its_session_stays_gone_when_the_fence_write_failed(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The group's timer fences a member whose session expired; the fence's write fails and the coordinator stays.
    Another member then gets the fenced member's partitions, and that is written. The fence's tombstones must be
    written too (with that next write): after a restart the fenced member is not back holding the same partitions."""
    node: Node = await node_factory()
    group = "fence-write-failed"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "input", 2)
    fenced, successor = str(uuid.uuid4()), str(uuid.uuid4())
    first = await coordinator.consumer_group_heartbeat(
        group,
        HeartbeatRequest(
            member_id=fenced, member_epoch=0, rebalance_timeout_ms=10_000, subscribed_topic_names=("input",)
        ),
    )
    assert first.error is ErrorCode.none and first.assignment
    await _time_out(coordinator, group, monkeypatch, coordinator.consumer_config.session_timeout_ms / 1000 + 1)
    assert fenced not in coordinator._groups[group].members
    joined = await coordinator.consumer_group_heartbeat(
        group,
        HeartbeatRequest(
            member_id=successor, member_epoch=0, rebalance_timeout_ms=10_000, subscribed_topic_names=("input",)
        ),
    )
    assert joined.error is ErrorCode.none and joined.assignment == first.assignment
    await node.stop()

    restarted: Node = await node_factory()
    reloaded = await loaded_coordinator(restarted, group)
    error, _, found = reloaded.describe_consumer_group(group)
    assert error is ErrorCode.none and found is not None
    assert sorted(found.members) == [successor]
    assert found.members[successor].assigned == joined.assignment


async def test_a_share_member_fenced_by_its_session_stays_gone_when_the_fence_write_failed(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same for a share group: the member its timer fenced is not back after a restart."""
    node: Node = await node_factory()
    group = "share-fence-write-failed"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "jobs", 2)
    fenced, successor = str(uuid.uuid4()), str(uuid.uuid4())
    first = await coordinator.share_group_heartbeat(
        group, ShareHeartbeat(member_id=fenced, member_epoch=0, subscribed_topic_names=("jobs",))
    )
    assert first.error is ErrorCode.none
    await _time_out(coordinator, group, monkeypatch, coordinator.share_config.session_timeout_ms / 1000 + 1)
    assert fenced not in coordinator._groups[group].members
    joined = await coordinator.share_group_heartbeat(
        group, ShareHeartbeat(member_id=successor, member_epoch=0, subscribed_topic_names=("jobs",))
    )
    assert joined.error is ErrorCode.none
    await node.stop()

    restarted: Node = await node_factory()
    reloaded = await loaded_coordinator(restarted, group)
    error, _, found = reloaded.describe_share_group(group)
    assert error is ErrorCode.none and found is not None
    assert sorted(found.members) == [successor]


async def test_a_downgrade_whose_write_failed_reloads_as_a_classic_group(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last consumer-protocol member of a mixed group is fenced by its session and the group becomes a classic
    group, but the conversion's write fails. Once the classic group's next generation is written, a restart finds
    the classic group, not the consumer group whose records the conversion should have tombstoned."""
    node: Node = await node_factory()
    group = "downgrade-write-failed"
    coordinator = await loaded_coordinator(node, group)
    await asyncio.to_thread(create_topic, bootstrap(node), "input", 2)
    # The classic member's session outlives the consumer member's, which the test's clock move expires.
    request = replace(join_request(metadata=subscription_bytes(["input"])), session_timeout_ms=300_000)
    classic = await join_and_sync(coordinator, group, request, assignment_bytes({"input": frozenset({0, 1})}, 0))
    upgrade = await coordinator.consumer_group_heartbeat(
        group,
        HeartbeatRequest(
            member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=10_000, subscribed_topic_names=("input",)
        ),
    )
    assert upgrade.error is ErrorCode.none
    await _time_out(coordinator, group, monkeypatch, coordinator.consumer_config.session_timeout_ms / 1000 + 1)
    error, downgraded = coordinator.describe_group(group)
    assert error is ErrorCode.none and isinstance(downgraded, Group)
    rejoin = replace(request, member_id=classic.member_id)
    rejoined = await join_and_sync(coordinator, group, rejoin, assignment_bytes({"input": frozenset({0, 1})}, 0))
    assert rejoined.error is ErrorCode.none
    await node.stop()

    restarted: Node = await node_factory()
    reloaded = await loaded_coordinator(restarted, group)
    error, found = reloaded.describe_group(group)
    assert error is ErrorCode.none and isinstance(found, Group)
    assert sorted(found.members) == [classic.member_id] and found.generation_id == rejoined.generation_id
