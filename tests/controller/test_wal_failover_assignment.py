"""The controller's side of WAL failover: who gets a dead broker's S3 WAL, when, and that the assignment is durable
metadata (it survives a controller restart and a snapshot) and fences commits by anyone but the target."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.controller import Controller
from controller.decisions import brokers
from controller.shell import MetadataShell, build_tree
from metadata.cluster_records import NO_TARGET, WALFailoverRecord
from metadata.wal_failover import wal_location_key
from settings.endpoint import Endpoint
from settings.server import ServerConfig
from storage.errors import NodeEpochExpiredError, StreamFencedError
from storage.metadata.api import CommitStreamSetObjectRequest, NodeIdentity, ObjectStreamRange

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
SHARED = b"s3://wal-bucket at http://127.0.0.1:9000"


async def _start(tmp_path: Path) -> Controller:
    return await Controller.start(ServerConfig.load(None, [f"log.dirs={tmp_path}"]))


async def _register(controller: Controller, locations: dict[int, bytes | None]) -> dict[int, int]:
    client = controller
    epochs = {}
    for node_id, location in locations.items():
        epochs[node_id] = await client.register_broker(node_id, EP, None)
        if location is not None:
            await controller.stream_metadata.put_kv(wal_location_key(node_id), location)
    return epochs


async def test_only_a_session_expiry_of_an_s3_wal_broker_assigns_a_failover(tmp_path: Path) -> None:
    controller = await _start(tmp_path)
    epochs = await _register(controller, {1: SHARED, 2: None, 3: SHARED, 4: b"s3://another-bucket"})
    # A controlled shutdown uploaded and closed everything: nothing to take over.
    assert await controller.fence_broker(3, epochs[3])
    assert 3 not in controller.image.wal_failovers
    # A file-WAL broker's data returns when it restarts; no other broker can read it.
    assert await controller.fence_broker(2, epochs[2], session_expired=True)
    assert 2 not in controller.image.wal_failovers
    # Broker 1's WAL bucket is shared by no live broker (3 is fenced, 4 writes elsewhere): pending without target.
    assert await controller.fence_broker(1, epochs[1], session_expired=True)
    pending = controller.image.wal_failovers[1]
    assert (pending.target_id, pending.attempt, pending.done) == (NO_TARGET, 0, False)
    assert await controller.reconcile_wal_failovers() == 0

    # Broker 3 comes back: the failover goes to it.
    epochs[3] = await controller.register_broker(3, EP, None)
    assert await controller.reconcile_wal_failovers() == 1
    assigned = controller.image.wal_failovers[1]
    assert (assigned.target_id, assigned.target_epoch, assigned.attempt) == (3, epochs[3], 1)
    await controller.close()

    # The assignment is metadata: a restarted controller (log replay, then a snapshot) has it, and so does the shell.
    restarted = await _start(tmp_path)
    assert restarted.image.wal_failovers == {1: assigned}
    await restarted.take_snapshot()
    await restarted.close()
    again = await _start(tmp_path)
    assert again.image.wal_failovers == {1: assigned}
    shell = MetadataShell(build_tree(again.snapshot_records()))
    assert shell.run("ls /failovers").splitlines()[1].split() == ["1", str(epochs[1]), "3", str(epochs[3]), "1",
                                                                  "pending"]
    await again.close()


async def test_only_the_assigned_target_commits_for_the_dead_brokers_streams(tmp_path: Path) -> None:
    controller = await _start(tmp_path)
    epochs = await _register(controller, {1: SHARED, 2: SHARED, 3: SHARED})
    streams = controller.stream_metadata
    dead = NodeIdentity(1, epochs[1])
    stream_id = await streams.create_stream(dead)
    await streams.open_stream(dead, stream_id, 1)
    assert await controller.fence_broker(1, epochs[1], session_expired=True)
    target = controller.image.wal_failovers[1].target_id
    other = 5 - target  # of brokers 2 and 3, the one not assigned

    async def commit(node: NodeIdentity, end: int, start: int = 0) -> None:
        object_id = await streams.prepare_objects(node, 1, 60_000)
        await streams.commit_stream_set_object(CommitStreamSetObjectRequest(
            node, object_id, 100, (ObjectStreamRange(stream_id, start, end, 1),)))

    with pytest.raises(StreamFencedError):
        await commit(NodeIdentity(other, epochs[other]), 5)
    with pytest.raises(StreamFencedError):  # the target, but at an epoch that is not its registration
        await commit(NodeIdentity(target, epochs[target] + 1), 5)
    await commit(NodeIdentity(target, epochs[target]), 5)
    await controller.complete_wal_failover(NodeIdentity(target, epochs[target]), 1, epochs[1])
    # Done: the delegation ends with it.
    with pytest.raises(StreamFencedError):
        await commit(NodeIdentity(target, epochs[target]), 6, 5)
    await controller.close()


async def test_a_failover_nobody_took_ends_when_its_broker_comes_back(tmp_path: Path) -> None:
    controller = await _start(tmp_path)
    epochs = await _register(controller, {1: SHARED, 2: SHARED})
    client = controller
    # Broker 2 is gone too, so broker 1's failover has no target: its WAL is untouched.
    assert await controller.fence_broker(2, epochs[2])
    assert await controller.fence_broker(1, epochs[1], session_expired=True)
    assert controller.image.wal_failovers[1].target_id == NO_TARGET
    # The same incarnation resumes (it was only paused): nothing took its WAL, so it is unfenced and keeps it.
    assert await controller.unfence_broker(1, epochs[1])
    assert controller.image.wal_failovers[1].done

    # Fenced again, then assigned to broker 2 once it is back: now that incarnation stays fenced for good.
    assert await controller.fence_broker(1, epochs[1], session_expired=True)
    epochs[2] = await client.register_broker(2, EP, None)
    assert await controller.reconcile_wal_failovers() == 1
    assert not await controller.unfence_broker(1, epochs[1])
    # Broker 2 dies before finishing; broker 1 restarts (a new epoch) and takes the target-less failover back.
    assert await controller.fence_broker(2, epochs[2], session_expired=True)
    assert await controller.reconcile_wal_failovers() == 1
    assert controller.image.wal_failovers[1].target_id == NO_TARGET
    with pytest.raises(NodeEpochExpiredError):  # the old incarnation cannot
        await client.complete_wal_failover(NodeIdentity(1, epochs[1]), 1, epochs[1])
    restarted = await client.register_broker(1, EP, None)
    await client.complete_wal_failover(NodeIdentity(1, restarted), 1, epochs[1])
    assert controller.image.wal_failovers[1].done
    await controller.close()


async def test_a_broker_waiting_for_its_own_failover_is_given_no_other(tmp_path: Path) -> None:
    controller = await _start(tmp_path)
    epochs = await _register(controller, {1: SHARED, 2: SHARED, 3: SHARED})
    assert await controller.fence_broker(1, epochs[1], session_expired=True)
    assert controller.image.wal_failovers[1].target_id == 2
    # Broker 1 restarts: its join waits for broker 2's replay, and its failover runner starts only after it. It
    # leads and replays nothing, the least loaded, yet broker 3's WAL goes to broker 2, which can replay it now.
    await controller.register_broker(1, EP, None)
    assert await controller.fence_broker(3, epochs[3], session_expired=True)
    assert (controller.image.wal_failovers[3].target_id, controller.image.wal_failovers[3].target_epoch) == (
        2, epochs[2])
    await controller.close()


async def test_two_brokers_restarting_together_each_take_their_own_failover_back(tmp_path: Path) -> None:
    controller = await _start(tmp_path)
    epochs = await _register(controller, {1: SHARED, 2: SHARED})
    # Both crash; their sessions expire together: nobody is left to replay either WAL.
    assert await controller.fence_broker(1, epochs[1], session_expired=True)
    assert await controller.fence_broker(2, epochs[2], session_expired=True)
    assert await controller.reconcile_wal_failovers() == 1  # broker 1's, given to broker 2 a moment before
    restarted = {node: await controller.register_broker(node, EP, None) for node in (1, 2)}
    # The periodic check runs after both registered, before either took its own failover back: neither may be
    # given the other's, since neither can run a replay before its own failover ends.
    assert await controller.reconcile_wal_failovers() == 0
    assert {n: f.target_id for n, f in controller.image.wal_failovers.items()} == {1: NO_TARGET, 2: NO_TARGET}
    for node in (1, 2):
        await controller.complete_wal_failover(NodeIdentity(node, restarted[node]), node, epochs[node])
    assert all(f.done for f in controller.image.wal_failovers.values())
    await controller.close()


async def test_a_failover_assigned_to_a_broker_waiting_for_its_own_is_taken_back(tmp_path: Path) -> None:
    """A metadata log written before such brokers were left out can hold two restarted brokers each assigned the
    other's failover: each may take its own back, since the target cannot run it before its own failover ends."""
    controller = await _start(tmp_path)
    epochs = await _register(controller, {1: SHARED, 2: SHARED, 3: SHARED})
    assert await controller.fence_broker(1, epochs[1], session_expired=True)
    assert await controller.fence_broker(2, epochs[2], session_expired=True)
    restarted = {node: await controller.register_broker(node, EP, None) for node in (1, 2)}
    image = controller.image
    crossed = image.apply([WALFailoverRecord(1, epochs[1], 2, restarted[2], 2),
                           WALFailoverRecord(2, epochs[2], 1, restarted[1], 2)], image.offset + 2)
    done = brokers.wal_failover_done(crossed, NodeIdentity(1, restarted[1]), 1, epochs[1])
    assert done is not None
    taken = crossed.apply([done], crossed.offset + 1)
    # Broker 1 no longer waits: its failover runner starts after its join and replays broker 2's WAL, so broker 2
    # waits for that instead of taking it back behind its back. Neither broker's old incarnation may end either.
    with pytest.raises(NodeEpochExpiredError):
        brokers.wal_failover_done(taken, NodeIdentity(2, restarted[2]), 2, epochs[2])
    with pytest.raises(NodeEpochExpiredError):
        brokers.wal_failover_done(crossed, NodeIdentity(1, epochs[1]), 1, epochs[1])
    # A target that is not waiting for its own failover (broker 3) keeps the failover: it may be replaying it.
    kept = crossed.apply([WALFailoverRecord(1, epochs[1], 3, epochs[3], 3)], crossed.offset + 1)
    with pytest.raises(NodeEpochExpiredError):
        brokers.wal_failover_done(kept, NodeIdentity(1, restarted[1]), 1, epochs[1])
    await controller.close()


async def test_a_failover_goes_to_no_broker_in_controlled_shutdown(tmp_path: Path) -> None:
    controller = await _start(tmp_path)
    epochs = await _register(controller, {1: SHARED, 2: SHARED, 3: SHARED})
    # Broker 2 is stopping: it would stop in the middle of the replay once its partitions moved.
    assert await controller.controlled_shutdown(2, epochs[2]) == 0
    assert await controller.fence_broker(1, epochs[1], session_expired=True)
    assert (controller.image.wal_failovers[1].target_id, controller.image.wal_failovers[1].target_epoch) == (
        3, epochs[3])
    await controller.close()


async def test_a_broker_replaying_a_failover_may_shut_down_once_the_replay_is_done(tmp_path: Path) -> None:
    controller = await _start(tmp_path)
    epochs = await _register(controller, {1: SHARED, 2: SHARED, 3: SHARED})
    assert await controller.fence_broker(1, epochs[1], session_expired=True)
    assert controller.image.wal_failovers[1].target_id == 2
    # Broker 2 asks to shut down while it replays broker 1's WAL: it leads nothing, yet it may not stop yet, and the
    # replay stays with it (no second broker runs it alongside).
    assert await controller.controlled_shutdown(2, epochs[2]) == 1
    assert await controller.reconcile_wal_failovers() == 0
    assert controller.image.wal_failovers[1].delegated_to(2, epochs[2])
    await controller.complete_wal_failover(NodeIdentity(2, epochs[2]), 1, epochs[1])
    assert await controller.controlled_shutdown(2, epochs[2]) == 0
    await controller.close()
