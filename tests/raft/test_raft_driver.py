"""Three real asyncio drivers with real disks over the in-process transport: commit, lose the leader, recover."""

from __future__ import annotations

import asyncio
import errno
import json
import random
import shutil
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from raft.core import RaftConfig
from raft.driver import NotLeaderError, RaftDriver
from raft.effects import Role
from raft.log import SnapshotId
from raft.transport import InProcessNetwork
from testkit.waiting import eventually_async

CONFIG = RaftConfig(
    election_timeout_ms=100,
    election_backoff_max_ms=100,
    fetch_timeout_ms=300,
    fetch_max_wait_ms=100,
    request_timeout_ms=200,
    begin_quorum_resend_ms=100,
    snapshot_chunk_bytes=64,
)
VOTERS = [1, 2, 3]


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.network = InProcessNetwork()
        self.drivers: dict[int, RaftDriver] = {}
        self.applied: dict[int, list[bytes]] = {}
        self.snapshots: dict[int, list[tuple[SnapshotId, bytes]]] = {}

    async def start(self, node_id: int) -> RaftDriver:
        self.applied[node_id] = []
        self.snapshots[node_id] = []

        def load(snapshot_id: SnapshotId, data: bytes) -> None:
            self.snapshots[node_id].append((snapshot_id, data))
            self.applied[node_id] = [item.encode() for item in json.loads(data)]

        driver = RaftDriver(
            node_id,
            VOTERS,
            self.root / f"node-{node_id}",
            self.network.transport(node_id),
            apply=lambda entries: self.applied[node_id].extend(e.data for e in entries),
            load_snapshot=load,
            config=CONFIG,
            rng=random.Random(node_id),
        )
        await driver.start()
        self.drivers[node_id] = driver
        return driver

    async def leader(self, timeout: float = 5.0) -> RaftDriver:
        def agreed_leader() -> RaftDriver | None:
            leaders = [d for d in self.drivers.values() if d.role is Role.LEADER]
            if len(leaders) == 1 and all(d.leader_id == leaders[0].node_id for d in self.drivers.values()):
                return leaders[0]
            return None

        return await eventually_async(
            agreed_leader, timeout=timeout, interval=0.01,
            what=lambda: "one leader that every driver follows; roles and leaders: "
            + str({n: (d.role.name, d.leader_id) for n, d in self.drivers.items()}),
        )

    async def until(self, condition: Callable[[], bool], timeout: float = 5.0, what: str = "the condition") -> None:
        await eventually_async(condition, timeout=timeout, interval=0.01, what=what)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path)
    for node_id in VOTERS:
        await c.start(node_id)
    yield c
    for driver in list(c.drivers.values()):
        await driver.stop(resign=False)


async def test_quorum_commits_and_survives_losing_its_leader(cluster: Cluster) -> None:
    leader = await cluster.leader()
    first = [f"m{i}".encode() for i in range(20)]
    offsets = await asyncio.gather(*(leader.propose([m]) for m in first))
    assert sorted(offsets) == offsets and len(set(offsets)) == 20
    await cluster.until(lambda: all(len(a) == 20 for a in cluster.applied.values()))
    assert all(a == first for a in cluster.applied.values())

    old = leader.node_id
    await leader.crash()
    del cluster.drivers[old]
    new = await cluster.leader()
    assert new.node_id != old and new.epoch > leader.epoch - 1
    await new.propose([b"after-failover"])

    # The crashed node restarts from its own disk and catches up, applying everything in order again.
    await cluster.start(old)
    await cluster.until(lambda: cluster.applied[old] == [*first, b"after-failover"])
    assert (await cluster.leader()).node_id == new.node_id


async def test_follower_refuses_proposals_and_names_the_leader(cluster: Cluster) -> None:
    leader = await cluster.leader()
    follower = next(d for d in cluster.drivers.values() if d is not leader)
    assert await follower.wait_for_leader(timeout=5) == leader.node_id
    with pytest.raises(NotLeaderError, match=f"leader is {leader.node_id}") as info:
        await follower.propose([b"nope"])
    assert info.value.leader_id == leader.node_id


async def test_describe_reports_wall_clock_timestamps(cluster: Cluster) -> None:
    """DescribeQuorum's timestamps are the leader's wall clock (ms since the epoch), as Kafka reports them and
    kafka-metadata-quorum prints them, not the core's clock counted from the node's start."""
    leader = await cluster.leader()
    await leader.propose([b"x"])
    await cluster.until(lambda: all(v.last_fetch_timestamp >= 0 for v in leader.describe().current_voters),
                        what="every voter fetched from the leader")
    before = int(time.time() * 1000) - 60_000
    described = leader.describe()
    after = int(time.time() * 1000)
    for voter in described.current_voters:
        assert before <= voter.last_fetch_timestamp <= after, voter
        assert before <= voter.last_caught_up_timestamp <= after, voter


async def test_graceful_stop_hands_leadership_over(cluster: Cluster) -> None:
    leader = await cluster.leader()
    await leader.propose([b"x"])
    loop = asyncio.get_running_loop()
    started = loop.time()
    await leader.stop()
    del cluster.drivers[leader.node_id]
    new = await cluster.leader()
    # EndQuorumEpoch lets the successor run at once instead of waiting out the fetch timeout.
    assert loop.time() - started < CONFIG.fetch_timeout_ms / 1000
    await new.propose([b"y"])
    await cluster.until(lambda: all(cluster.applied[n] == [b"x", b"y"] for n in cluster.drivers))


async def test_wiped_follower_is_rebuilt_from_the_leaders_snapshot(cluster: Cluster) -> None:
    leader = await cluster.leader()
    items = [f"s{i}".encode() for i in range(10)]
    for item in items:
        await leader.propose([item])
    state = cluster.applied[leader.node_id]
    snapshot_id = await leader.take_snapshot(leader.high_watermark, json.dumps([s.decode() for s in state]).encode())
    assert snapshot_id is not None
    await leader.propose([b"tail"])

    victim = next(n for n in cluster.drivers if n != leader.node_id)
    await cluster.drivers.pop(victim).stop()
    shutil.rmtree(cluster.root / f"node-{victim}")
    await cluster.start(victim)
    await cluster.until(lambda: cluster.applied[victim] == [*items, b"tail"])
    assert cluster.snapshots[victim] and cluster.snapshots[victim][-1][0] == snapshot_id
    # The rebuilt node persisted the snapshot: a restart loads it from its own disk.
    await cluster.drivers.pop(victim).stop()
    await cluster.start(victim)
    assert cluster.snapshots[victim][0][0] == snapshot_id
    await cluster.until(lambda: cluster.applied[victim] == [*items, b"tail"])


async def test_an_observer_applies_a_commit_while_it_still_writes_the_one_before(tmp_path: Path) -> None:
    """A broker (an observer) learns two metadata changes in a row (a closed stream, then its partition's new
    leader) without waiting in between for its own log write: its next fetch does not wait for the fsync."""
    network = InProcessNetwork()
    applied: dict[int, list[bytes]] = {1: [], 9: []}
    drivers = {
        node_id: RaftDriver(
            node_id, [1], tmp_path / f"node-{node_id}", network.transport(node_id),
            apply=lambda entries, node_id=node_id: applied[node_id].extend(e.data for e in entries),  # type: ignore[misc]
            config=CONFIG, rng=random.Random(node_id),
        )
        for node_id in (1, 9)
    }
    for driver in drivers.values():
        await driver.start()
    leader, observer = drivers[1], drivers[9]
    try:
        # The single voter elects itself after its election timeout; the observer learns of it by fetching.
        assert await leader.wait_for_leader(timeout=5) == 1
        assert await observer.wait_for_leader(timeout=5) == 1
        await leader.propose([b"warm-up"])
        await eventually_async(lambda: b"warm-up" in applied[9], timeout=5, interval=0.01,
                               what="the observer to follow the leader")
        slow_s = 2.0
        real_flush = observer.storage.flush

        def slow_flush() -> int:  # fault injection: the observer's disk takes seconds per fsync
            time.sleep(slow_s)
            return real_flush()

        observer.storage.flush = slow_flush  # type: ignore[method-assign]
        await leader.propose([b"stream closed"])
        await eventually_async(lambda: b"stream closed" in applied[9], timeout=slow_s / 2, interval=0.01,
                               what="the first change applied while its write is under way")
        started = time.monotonic()
        await leader.propose([b"new leader"])
        await eventually_async(lambda: b"new leader" in applied[9], timeout=slow_s / 2, interval=0.01,
                               what="the second change applied before the first one's write is done")
        assert time.monotonic() - started < slow_s / 2
    finally:
        for driver in drivers.values():
            await driver.stop(resign=False)
    # What it applied is on its disk all the same once its writes are done.
    restarted = RaftDriver(9, [1], tmp_path / "node-9", network.transport(9), apply=lambda entries: None,
                           config=CONFIG, rng=random.Random(9))
    recovered = restarted.storage.recover()
    assert recovered.log.end_offset >= 3
    restarted.storage.close()


async def test_an_observer_whose_log_cannot_be_written_fails_for_its_node_to_stop(tmp_path: Path) -> None:
    """A broker's observer whose disk is full: its write behind the turns fails, and ``failed()`` says so with the
    directory (the node then stops, ``node.process``) instead of following no more in silence. It stops without
    trying the write again, and started again on the same directory it catches up. The voter goes on."""
    network = InProcessNetwork()
    applied: list[bytes] = []

    def observer_driver() -> RaftDriver:
        return RaftDriver(9, [1], tmp_path / "node-9", network.transport(9),
                          apply=lambda entries: applied.extend(e.data for e in entries), config=CONFIG,
                          rng=random.Random(9))

    leader = RaftDriver(1, [1], tmp_path / "node-1", network.transport(1), apply=lambda entries: None,
                        config=CONFIG, rng=random.Random(1))
    observer = observer_driver()
    for driver in (leader, observer):
        await driver.start()
    try:
        assert await leader.wait_for_leader(timeout=5) == 1
        await leader.propose([b"before"])
        await eventually_async(lambda: b"before" in applied, timeout=5, interval=0.01, what="the observer to follow")

        def full_disk() -> int:  # fault injection: every write of the observer's log now finds the disk full
            raise OSError(errno.ENOSPC, "No space left on device")

        observer.storage.flush = full_disk  # type: ignore[method-assign]
        await leader.propose([b"unwritable"])
        async with asyncio.timeout(5):
            failure = await observer.failed()
        assert str(tmp_path / "node-9") in str(failure) and "No space left on device" in str(failure)
        await observer.stop(resign=False)
        await leader.propose([b"after"])  # the voter is not held up by its observer

        observer = observer_driver()
        applied.clear()
        await observer.start()
        await eventually_async(lambda: b"after" in applied, timeout=5, interval=0.01,
                               what="the restarted observer to catch up")
    finally:
        for driver in (leader, observer):
            await driver.stop(resign=False)
