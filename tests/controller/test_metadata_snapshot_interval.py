"""``metadata.log.max.snapshot.interval.ms`` (KIP-876): a metadata log holding records older than the interval is
snapshotted, across restarts too, so that a restart replays the state instead of every record since the node began
(thousands of upload commits for a long-lived partition)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from kio.schema.errors import ErrorCode

from controller.controller import Controller
from metadata.controller_api import NewTopic
from metadata.log import LOG_DIR_NAME, SnapshotPolicy, read_metadata
from settings.endpoint import Endpoint
from settings.server import ServerConfig

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
HOUR_S = 3600


def _config(tmp_path: Path, *extra: str) -> ServerConfig:
    return ServerConfig.load(None, [f"log.dirs={tmp_path}", *extra])


def _age(path: Path, seconds: float) -> None:
    """Makes ``path`` look written ``seconds`` ago (what the log knows of its last snapshot's time)."""
    then = time.time() - seconds
    os.utime(path, (then, then))


async def _history(tmp_path: Path, topics: int) -> Controller:
    """A node's history: ``topics`` topics created one write at a time, then stopped (its log kept, no snapshot)."""
    controller = await Controller.start(_config(tmp_path))
    await controller.register_broker(0, EP, None)
    for i in range(topics):
        [result] = await controller.create_topics([NewTopic(f"t{i}", 2)], False)
        assert result.error is ErrorCode.none
    return controller


async def test_a_log_older_than_the_interval_is_snapshotted_after_a_restart(tmp_path: Path) -> None:
    first = await _history(tmp_path, 30)
    await first.close()
    log_dir = tmp_path / LOG_DIR_NAME
    history = read_metadata(log_dir)
    assert len(history.batches) > 30 and not list(log_dir.glob("*.snapshot"))
    _age(log_dir, 2 * HOUR_S)  # the node began two hours ago and never reached the size trigger

    second = await Controller.start(_config(tmp_path))  # the default interval: one hour
    await second.register_broker(0, EP, None)  # the first write after the restart finds the snapshot due
    image = second.image
    await second.close()  # waits for the snapshot it started
    assert len(list(log_dir.glob("*.snapshot"))) == 1

    replayed = read_metadata(log_dir)
    # The snapshot holds the whole history; after it at most the restart's own few writes (the registration's
    # second one may be written before the snapshot takes the log).
    assert replayed.snapshot_offset >= history.last_offset + 1 and replayed.last_offset == image.offset
    assert len(replayed.batches) <= 1
    third = await Controller.start(_config(tmp_path))
    assert set(third.image.topics_by_name) == {f"t{i}" for i in range(30)}
    assert third.image.brokers == image.brokers and third.image.offset == image.offset
    await third.close()


async def test_the_interval_counts_from_the_last_snapshot(tmp_path: Path) -> None:
    first = await _history(tmp_path, 3)
    taken = await first.take_snapshot()
    [result] = await first.create_topics([NewTopic("after")], False)
    assert result.error is ErrorCode.none
    await first.close()
    [snapshot] = (tmp_path / LOG_DIR_NAME).glob("*.snapshot")

    second = await Controller.start(_config(tmp_path))
    await second.create_topics([NewTopic("young")], False)
    await second.close()
    assert read_metadata(tmp_path / LOG_DIR_NAME).snapshot_offset == taken  # written just now: not due

    _age(snapshot, 2 * HOUR_S)
    third = await Controller.start(_config(tmp_path))
    await third.create_topics([NewTopic("old")], False)
    image = third.image
    await third.close()
    replayed = read_metadata(tmp_path / LOG_DIR_NAME)
    assert replayed.snapshot_offset == image.offset > taken and replayed.batches == []
    fourth = await Controller.start(_config(tmp_path))
    assert {"after", "young", "old"} <= set(fourth.image.topics_by_name)
    await fourth.close()


async def test_zero_turns_the_interval_off(tmp_path: Path) -> None:
    first = await _history(tmp_path, 3)
    await first.close()
    _age(tmp_path / LOG_DIR_NAME, 2 * HOUR_S)
    second = await Controller.start(_config(tmp_path, "metadata.log.max.snapshot.interval.ms=0"))
    await second.create_topics([NewTopic("more")], False)
    await second.close()
    assert not list((tmp_path / LOG_DIR_NAME).glob("*.snapshot"))


def test_policy_snapshots_by_size_or_by_age_only_with_records_since_the_last() -> None:
    policy = SnapshotPolicy(max_bytes=1000, max_interval_ms=60_000)
    assert not policy.due(0, last_snapshot_ms=0, now_ms=10**9)  # nothing new: never due
    assert policy.due(1000, last_snapshot_ms=0, now_ms=1)
    assert not policy.due(10, last_snapshot_ms=0, now_ms=59_999)
    assert policy.due(10, last_snapshot_ms=0, now_ms=60_000)
    assert not SnapshotPolicy(max_bytes=1000, max_interval_ms=0).due(10, last_snapshot_ms=0, now_ms=10**9)
