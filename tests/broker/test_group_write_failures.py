"""Failed writes of a group to ``__consumer_offsets``, in an in-process node (:mod:`tests.broker.inprocess_groups`)
whose coordinator's appends a fault makes fail: a request answered after one is answered on written state, and
what a failed write removed (a fenced member, a deleted group, a consumer group's records after a downgrade) is
written with the group's next write, or written again by the coordinator when nothing else writes the group, so
that a restart never brings it back.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest
from kio.schema.errors import ErrorCode

from broker.groups.classic.group import Group
from broker.groups.consumer.consumer_protocol import assignment_bytes, subscription_bytes
from broker.groups.coordinator import GroupCoordinator
from broker.groups.offset_commits import OffsetCommit
from broker.groups.share.group import ShareHeartbeat
from node.process import Node
from tests.broker.inprocess_groups import (
    consumer_join,
    coordinating,
    join_and_sync,
    join_request,
    loaded_coordinator,
)
from wire.errors import KafkaError


@dataclass
class AppendFault:
    """The coordinator's appends to ``__consumer_offsets`` failing: ``struck`` is set once the first failed,
    ``recovered`` once one went through after the last failure."""

    struck: asyncio.Event = field(default_factory=asyncio.Event)
    recovered: asyncio.Event = field(default_factory=asyncio.Event)


def _fail_the_next_append(
    coordinator: GroupCoordinator, monkeypatch: pytest.MonkeyPatch, times: int = 1
) -> AppendFault:
    """Fault: the coordinator's next ``times`` appends to ``__consumer_offsets`` time out; the ones after them go
    through."""
    append = coordinator._append
    failures = [KafkaError(ErrorCode.request_timed_out, "the fault: the append timed out") for _ in range(times)]
    fault = AppendFault()

    async def failing(group_id: str, records: object, **kwargs: int) -> int:
        if failures:
            fault.struck.set()
            raise failures.pop()
        offset = await append(group_id, records, **kwargs)  # type: ignore[arg-type]
        fault.recovered.set()
        return offset

    monkeypatch.setattr(coordinator, "_append", failing)
    return fault


async def _time_out(
    coordinator: GroupCoordinator, group: str, monkeypatch: pytest.MonkeyPatch, after_s: float, failures: int = 1
) -> AppendFault:
    """Moves the coordinator's clock ``after_s`` ahead and fires the group's timer now (the loop's timer would
    fire at the real deadline), with the coordinator's next ``failures`` appends failing; returns once the fault
    struck and the failed write's task has finished."""
    real = coordinator.clock
    monkeypatch.setattr(coordinator, "clock", lambda: real() + after_s)
    fault = _fail_the_next_append(coordinator, monkeypatch, failures)
    coordinator._on_timer(coordinator._groups[group])
    await asyncio.wait_for(fault.struck.wait(), timeout=10)
    for _ in range(10):  # the failed write's task finishes in a few steps of the loop (no I/O after the fault)
        await asyncio.sleep(0)
    return fault


async def test_a_heartbeat_after_a_failed_write_is_answered_on_written_state(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A join whose records could not be appended is answered with the error, but the group moved in memory; the
    member's retry finds nothing new to write. Its answer must still rest on written state (Kafka's coordinator
    undoes a failed write): after a restart the member is there at the epoch it was told, with its partitions."""
    group = "write-failed"
    node, coordinator = await coordinating(node_factory, group, "input", 2)
    _fail_the_next_append(coordinator, monkeypatch)
    member = str(uuid.uuid4())
    join = consumer_join(member)
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
    group = "share-write-failed"
    node, coordinator = await coordinating(node_factory, group, "jobs", 2)
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
    group = "fence-write-failed"
    node, coordinator = await coordinating(node_factory, group, "input", 2)
    fenced, successor = str(uuid.uuid4()), str(uuid.uuid4())
    first = await coordinator.consumer_group_heartbeat(group, consumer_join(fenced))
    assert first.error is ErrorCode.none and first.assignment
    await _time_out(coordinator, group, monkeypatch, coordinator.consumer_config.session_timeout_ms / 1000 + 1)
    assert fenced not in coordinator._groups[group].members
    joined = await coordinator.consumer_group_heartbeat(group, consumer_join(successor))
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
    group = "share-fence-write-failed"
    node, coordinator = await coordinating(node_factory, group, "jobs", 2)
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


async def _rewritten(fault: AppendFault, group: str) -> None:
    """Waits for the coordinator's first append after the fault's last failure: nothing else writes the group in
    these tests, so it is what the failed writes removed, written again (two failures and their retries: about
    one second)."""
    try:
        await asyncio.wait_for(fault.recovered.wait(), timeout=10)
    except TimeoutError:
        raise AssertionError(f"what the failed writes of group {group} removed was not written again in 10 s") from None


async def test_a_member_fenced_by_its_session_stays_gone_when_nothing_else_writes_its_group(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The group's timer fences its only member; the fence's write fails, and so does the first retry of it. No
    other member comes to write the group again, so the coordinator must: after a restart the fenced member is not
    back holding its partitions for another session, and the group's epoch is the one the fence moved it to."""
    group = "fence-rewritten"
    node, coordinator = await coordinating(node_factory, group, "input", 2)
    fenced = str(uuid.uuid4())
    first = await coordinator.consumer_group_heartbeat(group, consumer_join(fenced))
    assert first.error is ErrorCode.none and first.assignment
    session_s = coordinator.consumer_config.session_timeout_ms / 1000
    fault = await _time_out(coordinator, group, monkeypatch, session_s + 1, failures=2)
    _, _, fenced_in_memory = coordinator.describe_consumer_group(group)
    assert fenced_in_memory is not None and not fenced_in_memory.members
    await _rewritten(fault, group)
    await node.stop()

    restarted: Node = await node_factory()
    reloaded = await loaded_coordinator(restarted, group)
    error, _, found = reloaded.describe_consumer_group(group)
    assert error is ErrorCode.none and found is not None
    assert not found.members
    assert found.group_epoch == fenced_in_memory.group_epoch


async def test_a_share_member_fenced_by_its_session_stays_gone_when_nothing_else_writes_its_group(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same for a share group's only member."""
    group = "share-fence-rewritten"
    node, coordinator = await coordinating(node_factory, group, "jobs", 2)
    fenced = str(uuid.uuid4())
    first = await coordinator.share_group_heartbeat(
        group, ShareHeartbeat(member_id=fenced, member_epoch=0, subscribed_topic_names=("jobs",))
    )
    assert first.error is ErrorCode.none
    session_s = coordinator.share_config.session_timeout_ms / 1000
    fault = await _time_out(coordinator, group, monkeypatch, session_s + 1, failures=2)
    assert fenced not in coordinator._groups[group].members
    await _rewritten(fault, group)
    await node.stop()

    restarted: Node = await node_factory()
    reloaded = await loaded_coordinator(restarted, group)
    error, _, found = reloaded.describe_share_group(group)
    assert error is ErrorCode.none and found is not None
    assert not found.members


async def test_a_deleted_group_stays_deleted_when_its_deletion_write_failed(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DeleteGroups of a group with only committed offsets, whose tombstones fail to append: the request answers
    the error and the group is gone from the coordinator. Its tombstones are written again, so a restart does not
    bring the group and its offsets back."""
    group = "deletion-rewritten"
    node, coordinator = await coordinating(node_factory, group, "input", 1)
    offsets = {("input", 0): OffsetCommit(offset=42, leader_epoch=-1, metadata=None)}
    stored = await coordinator.commit_offsets(
        group, member_id="", group_instance_id=None, generation_id=-1, offsets=offsets
    )
    assert stored == {("input", 0): ErrorCode.none}
    fault = _fail_the_next_append(coordinator, monkeypatch)
    assert (await coordinator.delete_groups([group]))[group] is not ErrorCode.none
    await _rewritten(fault, group)
    await node.stop()

    restarted: Node = await node_factory()
    reloaded = await loaded_coordinator(restarted, group)
    assert reloaded.describe_group(group) == (ErrorCode.none, None)
    error, fetched = reloaded.fetch_offsets(group, [("input", 0)])
    assert error is ErrorCode.none
    assert [f.offset for f in fetched] == [-1]


async def test_a_downgrade_whose_write_failed_reloads_as_a_classic_group(
    node_factory: Callable,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last consumer-protocol member of a mixed group is fenced by its session and the group becomes a classic
    group, but the conversion's write fails. Once the classic group's next generation is written, a restart finds
    the classic group, not the consumer group whose records the conversion should have tombstoned."""
    group = "downgrade-write-failed"
    node, coordinator = await coordinating(node_factory, group, "input", 2)
    # The classic member's session outlives the consumer member's, which the test's clock move expires.
    request = replace(join_request(metadata=subscription_bytes(["input"])), session_timeout_ms=300_000)
    classic = await join_and_sync(coordinator, group, request, assignment_bytes({"input": frozenset({0, 1})}, 0))
    upgrade = await coordinator.consumer_group_heartbeat(group, consumer_join(str(uuid.uuid4())))
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
