"""The local metadata log's replay trigger (``SnapshotPolicy``, issue 25): a node that never appends Kafka's 20 MB
between snapshots, as one in a crash loop, still snapshots once the log since its snapshot outweighs the snapshot,
so a restart replays about twice its state at most instead of a log growing with every restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

import metadata.log
from controller.controller import Controller
from metadata.controller_api import NewTopic
from metadata.log import LOG_DIR_NAME, REPLAY_FLOOR_BYTES, SnapshotPolicy, read_metadata
from settings.endpoint import Endpoint
from settings.server import ServerConfig

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
#: A smaller floor for the test, so that a few restarts' records cross it.
FLOOR = 4096


def test_the_replay_trigger_weighs_the_log_against_the_snapshot() -> None:
    policy = SnapshotPolicy(max_bytes=10**9, max_interval_ms=0)
    assert not policy.due(REPLAY_FLOOR_BYTES - 1, 0, 0, snapshot_bytes=0)
    assert policy.due(REPLAY_FLOOR_BYTES, 0, 0, snapshot_bytes=0)  # no snapshot yet: the floor
    assert not policy.due(199_999, 0, 0, snapshot_bytes=200_000)
    assert policy.due(200_000, 0, 0, snapshot_bytes=200_000)
    assert not policy.due(10**8, 0, 0, snapshot_bytes=None)  # a log that does not know its snapshot: Kafka's two
    assert not policy.due(0, 0, 0, snapshot_bytes=0)


async def test_a_restart_loop_replays_at_most_about_twice_the_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metadata.log, "REPLAY_FLOOR_BYTES", FLOOR)
    config = ServerConfig.load(None, [f"log.dirs={tmp_path}"])  # Kafka's 20 MB and one hour: neither is reached
    log_dir = tmp_path / LOG_DIR_NAME
    controller = await Controller.start(config)
    await controller.register_broker(0, EP, None)
    for i in range(20):  # the state: 20 topics
        [created] = await controller.create_topics([NewTopic(f"kept-{i}", 2)], False)
        assert created.error is ErrorCode.none
    await controller.close()

    churn = 0
    snapshots_seen = set()
    for restart in range(12):
        before = read_metadata(log_dir).log_valid_bytes
        controller = await Controller.start(config)
        await controller.register_broker(0, EP, None)
        # Each life appends records that change no lasting state: topics created and deleted again.
        names = [f"passing-{restart}-{i}" for i in range(3)]
        await controller.create_topics([NewTopic(name, 1) for name in names], False)
        await controller.delete_topics(names)
        topics = sorted(controller.image.topics_by_name)
        await controller.close()  # waits for a snapshot it started
        replay = read_metadata(log_dir)
        snapshots_seen.add(replay.snapshot_offset)
        churn = max(churn, replay.log_valid_bytes - before)
        # What the next restart replays after its snapshot never outweighs the snapshot (or the floor) by more
        # than one life's records.
        assert replay.log_valid_bytes <= max(FLOOR, replay.snapshot_bytes) + churn, restart
        assert topics == sorted(f"kept-{i}" for i in range(20))
    assert len(snapshots_seen) >= 3  # the loop snapshotted again and again, not once
    restarted = await Controller.start(config)  # and the state survives the snapshots
    assert sorted(restarted.image.topics_by_name) == sorted(f"kept-{i}" for i in range(20))
    await restarted.close()
