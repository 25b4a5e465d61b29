"""Restarting the controller from its metadata log and snapshots: nothing acknowledged is lost or changed."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from controller.controller import Controller
from metadata.cluster_records import TopicRecord
from metadata.controller_api import ConfigResource, IncrementalOp, NewTopic
from metadata.image import MetadataImage
from metadata.log import LOG_DIR_NAME, LOG_FILE, LocalMetadataLog, MetadataLogError, read_metadata
from settings.endpoint import Endpoint
from settings.server import ServerConfig
from storage.errors import NodeEpochExpiredError
from storage.metadata.api import CommitStreamSetObjectRequest, NodeIdentity, ObjectStreamRange

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
REPO = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, *extra: str) -> ServerConfig:
    return ServerConfig.load(None, [f"log.dirs={tmp_path}", *extra])


def _log_file(tmp_path: Path) -> Path:
    return tmp_path / LOG_DIR_NAME / LOG_FILE


async def _populate(controller: Controller) -> tuple[int, int]:
    """Topics, configs and stream metadata (a stream with a committed object and a KV entry)."""
    client = controller
    epoch = await client.register_broker(0, EP, "rack-1")
    created = await client.create_topics(
        [NewTopic("a", 3, configs={"retention.ms": "1000"}), NewTopic("b", 1)], validate_only=False
    )
    assert all(r.error is ErrorCode.none for r in created)
    await client.delete_topics(names=["b"])
    await client.alter_configs(
        ConfigResource(ConfigResource.BROKER, ""),
        {"log.retention.ms": "99"},
        incremental_ops=None,
        validate_only=False,
    )
    node = NodeIdentity(0, epoch)
    streams = controller.stream_metadata
    stream_id = await streams.create_stream(node, (("topic", "a"),))
    await streams.open_stream(node, stream_id, 1)
    object_id = await streams.prepare_objects(node, 1, 60_000)
    await streams.commit_stream_set_object(
        CommitStreamSetObjectRequest(node, object_id, 4096, (ObjectStreamRange(stream_id, 0, 10, 1),))
    )
    await streams.put_kv("fjord/a/0", b"\x00\x00\x00\x00\x00\x00\x00\x07")
    return epoch, stream_id


def _leader_epoch(image: MetadataImage, topic: str, partition: int) -> int:
    part = image.partition(topic, partition)
    assert part is not None
    return part.leader_epoch


def _same_image(a: MetadataImage, b: MetadataImage) -> None:
    assert a.cluster_id == b.cluster_id
    assert a.topics_by_name == b.topics_by_name
    assert a.brokers == b.brokers
    assert a.broker_configs == b.broker_configs
    assert a.node_configs == b.node_configs
    assert a.offset == b.offset


async def test_restart_from_the_log_restores_everything(tmp_path: Path) -> None:
    first = await Controller.start(_config(tmp_path))
    _, stream_id = await _populate(first)
    image, streams = first.image, first.stream_metadata.snapshot()
    await first.close()

    second = await Controller.start(_config(tmp_path))
    _same_image(second.image, image)
    assert second.stream_metadata.snapshot() == streams
    [stream] = await second.stream_metadata.get_streams([stream_id])
    assert stream.end_offset == 10
    assert await second.stream_metadata.get_kv("fjord/a/0") == b"\x00" * 7 + b"\x07"
    objects = await second.stream_metadata.get_objects(stream_id, 0, -1, 10)
    assert [o.object_size for o in objects] == [4096]
    await second.close()


async def test_reregistration_bumps_node_and_leader_epochs_once(tmp_path: Path) -> None:
    first = await Controller.start(_config(tmp_path))
    old_epoch, _ = await _populate(first)
    leader_epochs = {p: _leader_epoch(first.image, "a", p) for p in range(3)}
    topic_id = first.image.topics_by_name["a"].topic_id
    await first.close()

    second = await Controller.start(_config(tmp_path))
    assert second.image.topics_by_name["a"].topic_id == topic_id
    assert {p: _leader_epoch(second.image, "a", p) for p in range(3)} == leader_epochs
    new_epoch = await second.register_broker(0, EP, "rack-1")
    assert new_epoch > old_epoch
    for p in range(3):
        part = second.image.partition("a", p)
        assert part is not None and part.leader == 0 and part.leader_epoch == leader_epochs[p] + 1
    # The old incarnation can no longer change stream metadata.
    with pytest.raises(NodeEpochExpiredError):
        await second.stream_metadata.create_stream(NodeIdentity(0, old_epoch))
    await second.close()

    third = await Controller.start(_config(tmp_path))
    assert third.image.brokers[0].epoch == new_epoch
    assert _leader_epoch(third.image, "a", 0) == leader_epochs[0] + 1
    await third.close()


async def test_restart_from_a_snapshot_and_the_log_after_it(tmp_path: Path) -> None:
    first = await Controller.start(_config(tmp_path))
    await _populate(first)
    offset = await first.take_snapshot()
    assert offset == first.image.offset
    assert _log_file(tmp_path).stat().st_size == 0
    client = first
    await client.create_topics([NewTopic("after", 2)], False)
    image, streams = first.image, first.stream_metadata.snapshot()
    await first.close()

    second = await Controller.start(_config(tmp_path))
    _same_image(second.image, image)
    assert second.stream_metadata.snapshot() == streams
    assert "after" in second.image.topics_by_name
    await second.close()


async def test_snapshots_are_taken_automatically_and_bound_the_log(tmp_path: Path) -> None:
    config = _config(tmp_path, "metadata.log.max.record.bytes.between.snapshots=4000")
    controller = await Controller.start(config)
    client = controller
    await client.register_broker(0, EP, None)
    for i in range(40):
        [result] = await client.create_topics([NewTopic(f"t{i}", 2)], False)
        assert result.error is ErrorCode.none
    image = controller.image
    await controller.close()
    snapshots = list((tmp_path / LOG_DIR_NAME).glob("*.snapshot"))
    assert len(snapshots) == 1
    assert _log_file(tmp_path).stat().st_size < 4000 + 2000

    again = await Controller.start(config)
    _same_image(again.image, image)
    await again.close()


async def test_torn_tail_is_cut_and_appends_continue(tmp_path: Path) -> None:
    first = await Controller.start(_config(tmp_path))
    client = first
    await client.register_broker(0, EP, None)
    await client.create_topics([NewTopic("kept")], False)
    size_kept = _log_file(tmp_path).stat().st_size
    await client.create_topics([NewTopic("torn")], False)
    await first.close()
    os.truncate(_log_file(tmp_path), _log_file(tmp_path).stat().st_size - 5)  # the last batch was half written
    torn_size = _log_file(tmp_path).stat().st_size

    offline = read_metadata(tmp_path / LOG_DIR_NAME)  # what a metadata shell sees: no file is changed
    names = {r.name for b in offline.batches for r in b.records if isinstance(r, TopicRecord)}
    assert names == {"kept"} and _log_file(tmp_path).stat().st_size == torn_size

    second = await Controller.start(_config(tmp_path))
    assert set(second.image.topics_by_name) == {"kept"}
    assert _log_file(tmp_path).stat().st_size == size_kept
    [result] = await second.create_topics([NewTopic("later")], False)
    assert result.error is ErrorCode.none
    await second.close()

    third = await Controller.start(_config(tmp_path))
    assert set(third.image.topics_by_name) == {"kept", "later"}
    await third.close()


async def test_corrupt_batch_ends_recovery_at_the_last_good_one(tmp_path: Path) -> None:
    first = await Controller.start(_config(tmp_path))
    client = first
    await client.register_broker(0, EP, None)
    await client.create_topics([NewTopic("good")], False)
    good_size = _log_file(tmp_path).stat().st_size
    await client.create_topics([NewTopic("flipped")], False)
    await first.close()
    data = bytearray(_log_file(tmp_path).read_bytes())
    data[good_size + 20] ^= 0xFF
    _log_file(tmp_path).write_bytes(bytes(data))

    second = await Controller.start(_config(tmp_path))
    assert set(second.image.topics_by_name) == {"good"}
    await second.close()


async def test_crash_between_snapshot_and_log_truncation(tmp_path: Path) -> None:
    first = await Controller.start(_config(tmp_path))
    await _populate(first)
    saved = _log_file(tmp_path).read_bytes()
    await first.take_snapshot()
    image, streams = first.image, first.stream_metadata.snapshot()
    await first.close()
    _log_file(tmp_path).write_bytes(saved)  # as if the truncation never happened

    second = await Controller.start(_config(tmp_path))
    _same_image(second.image, image)
    assert second.stream_metadata.snapshot() == streams
    await second.close()


async def test_damaged_snapshot_is_refused(tmp_path: Path) -> None:
    first = await Controller.start(_config(tmp_path))
    await _populate(first)
    await first.take_snapshot()
    await first.close()
    [snapshot] = (tmp_path / LOG_DIR_NAME).glob("*.snapshot")
    snapshot.write_bytes(snapshot.read_bytes()[:-3])
    with pytest.raises(MetadataLogError, match="snapshot"):
        await Controller.start(_config(tmp_path))


async def test_log_append_after_close_is_a_clear_error(tmp_path: Path) -> None:
    log = LocalMetadataLog.open(tmp_path)
    log.recover()
    assert await log.append([TopicRecord("x", "00000000-0000-0000-0000-000000000001")]) == 0
    log.close()
    with pytest.raises(MetadataLogError, match="not open"):
        await log.append([TopicRecord("y", "00000000-0000-0000-0000-000000000002")])


_CRASHER = """
import asyncio, sys
from metadata.controller_api import NewTopic
from settings.server import ServerConfig
from controller.controller import Controller
from settings.endpoint import Endpoint

async def main() -> None:
    overrides = [f"log.dirs={sys.argv[1]}", "metadata.log.max.record.bytes.between.snapshots=3000"]
    config = ServerConfig.load(None, overrides)
    client = await Controller.start(config)
    await client.register_broker(0, (Endpoint("PLAINTEXT", "127.0.0.1", 9092),), None)
    for i in range(100000):
        [result] = await client.create_topics([NewTopic(f"topic-{i}", 1)], False)
        assert result.error == 0, result
        print(f"topic-{i}", flush=True)

asyncio.run(main())
"""


def _create_topics_until_killed(tmp_path: Path, count: int) -> list[str]:
    """Runs the crasher, reads ``count`` acknowledged topic names, then SIGKILLs it."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-c", _CRASHER, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
        text=True,
    )
    acknowledged: list[str] = []
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    try:
        while len(acknowledged) < count and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acknowledged.append(line.strip())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        stderr = proc.stderr.read() if proc.stderr else ""
    assert len(acknowledged) == count, stderr
    return acknowledged


async def test_kill_9_loses_no_acknowledged_topic(tmp_path: Path) -> None:
    """A real process creating topics is SIGKILLed mid-stream: every topic it reported as created survives."""
    acknowledged = _create_topics_until_killed(tmp_path, 60)
    controller = await Controller.start(_config(tmp_path))
    assert set(acknowledged) <= set(controller.image.topics_by_name)
    await controller.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_histories_replay_identically(tmp_path: Path, seed: int) -> None:
    """Random mixes of topic, config, broker and stream operations, with snapshots (manual and size-triggered)
    and restarts at random points: every restart rebuilds exactly the state that was acknowledged."""
    rng = random.Random(seed)
    config = _config(tmp_path, "metadata.log.max.record.bytes.between.snapshots=6000")
    controller = await Controller.start(config)
    client = controller
    epoch = await client.register_broker(0, EP, None)
    streams: list[int] = []
    for step in range(120):
        action = rng.randrange(9)
        names = sorted(client.image.topics_by_name)
        if action == 0:
            await client.create_topics([NewTopic(f"t{step}", rng.randint(1, 4))], False)
        elif action == 1 and names:
            await client.delete_topics(names=[rng.choice(names)])
        elif action == 2 and names:
            await client.alter_configs(
                ConfigResource(ConfigResource.TOPIC, rng.choice(names)),
                {"retention.ms": str(rng.randint(1, 10**6))},
                incremental_ops={"retention.ms": IncrementalOp.SET},
                validate_only=False,
            )
        elif action == 3 and names:
            name = rng.choice(names)
            await client.create_partitions(name, len(client.image.topics_by_name[name].partitions) + 1, None, False)
        elif action == 4:
            streams.append(await controller.stream_metadata.create_stream(NodeIdentity(0, epoch)))
        elif action == 5:
            await controller.stream_metadata.put_kv(f"k{rng.randrange(5)}", rng.randbytes(8))
        elif action == 6:
            await controller.take_snapshot()
        elif action == 7:
            epoch = await client.register_broker(0, EP, None)
        else:
            image, state = controller.image, controller.stream_metadata.snapshot()
            await controller.close()
            controller = await Controller.start(config)
            client = controller
            _same_image(controller.image, image)
            assert controller.stream_metadata.snapshot() == state
    image, state = controller.image, controller.stream_metadata.snapshot()
    await controller.close()
    final = await Controller.start(config)
    _same_image(final.image, image)
    assert final.stream_metadata.snapshot() == state
    assert len(list((tmp_path / LOG_DIR_NAME).glob("*.snapshot"))) <= 1
    await final.close()


async def test_failed_fsync_fails_the_write_and_stops_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    controller = await Controller.start(_config(tmp_path))
    client = controller
    await client.register_broker(0, EP, None)
    await client.create_topics([NewTopic("before")], False)

    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("metadata.log.os.fsync", failing_fsync)
    with pytest.raises(MetadataLogError, match="Input/output error"):
        await client.create_topics([NewTopic("during")], False)
    assert "during" not in controller.image.topics_by_name  # never acknowledged, never visible
    monkeypatch.setattr("metadata.log.os.fsync", real_fsync)
    with pytest.raises(MetadataLogError, match="accepts no writes"):
        await client.create_topics([NewTopic("after")], False)
    with pytest.raises(MetadataLogError):
        await controller.stream_metadata.put_kv("k", b"v")
    assert await controller.stream_metadata.get_kv("k") is None
    await controller.close()

    restarted = await Controller.start(_config(tmp_path))
    assert "before" in restarted.image.topics_by_name and "after" not in restarted.image.topics_by_name
    await restarted.close()
