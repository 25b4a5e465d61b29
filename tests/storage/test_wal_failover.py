"""WAL failover in process: a real controller (local metadata log) assigns a dead broker's S3 WAL to a live one,
which replays it with the storage engine's recovery; the new owner then reads every acknowledged append.

Two storage engines share one object store for data and one for WALs (a shared WAL bucket, as in a cluster). Fault
injection sits on top of the real parts only: a failover WAL whose reset fails stands for a target that dies after
committing, before it could reset the WAL and close the streams.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from broker.wal_failover import WALFailoverRunner
from broker.wal_ownership import wait_for_wal_failover
from controller.controller import Controller
from metadata.cluster_records import failover_wal_epoch
from metadata.wal_failover import wal_location_key
from settings.endpoint import Endpoint
from settings.server import ServerConfig
from storage import failover_copy
from storage.config import BucketURL, ConfigError
from storage.engine import StorageEngine
from storage.errors import (
    ObjectNotPreparedError,
    ObjectStoreError,
    StorageError,
    StreamFencedError,
    StreamNotClosedError,
    WALError,
)
from storage.metadata.api import CommitStreamSetObjectRequest, NodeIdentity, ObjectStreamRange, OpeningStream
from storage.namespace import namespace_for
from storage.objects.format import build_object, object_key
from storage.objectstore.faulty import FaultyObjectStore
from storage.objectstore.memory import MemoryObjectStore
from storage.stream_api import Stream
from storage.stream_record_batch import StreamRecordBatch
from storage.wal.s3 import S3WAL
from tests.storage.engine_support import payload, small_config

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
WAL_URL = BucketURL(0, "mem", "shared-wal")
APPENDS = 12


class _ResetFails(S3WAL):
    """A failover WAL whose target "dies" after uploading and committing, before the reset."""

    async def reset(self) -> None:
        raise WALError(f"{self.failover and 'failover'} WAL: injected failure before the reset")


@dataclasses.dataclass
class _Cluster:
    controller: Controller
    client: Controller
    data: MemoryObjectStore
    wals: MemoryObjectStore
    tmp_path: Path
    epochs: dict[int, int]

    def wal(self, node_id: int, epoch: int, *, failover: bool = False, cls: type[S3WAL] = S3WAL,
            version: int = 2, interval_ms: int = 10) -> S3WAL:
        return cls(self.wals, namespace="_fjord_test", node_id=node_id, node_epoch=epoch,
                   batch_interval_ms=interval_ms, failover=failover, object_version=version)

    def engine(self, node_id: int, *, wal_version: int = 2, wal_interval_ms: int = 10,
               **overrides: int) -> StorageEngine:
        epoch = self.epochs[node_id]
        config = small_config(self.tmp_path / f"node-{node_id}", node_id=node_id, node_epoch=epoch, wal_url=WAL_URL,
                              **overrides)
        wal = self.wal(node_id, epoch, version=wal_version, interval_ms=wal_interval_ms)
        return StorageEngine(config, self.controller.stream_metadata, store=self.data, wal=wal)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[_Cluster]:
    controller = await Controller.start(ServerConfig.load(None, [f"log.dirs={tmp_path / 'controller'}"]))
    client = controller
    epochs = {}
    for node_id in (1, 2, 3):
        epochs[node_id] = await client.register_broker(node_id, EP, None)
        await controller.stream_metadata.put_kv(wal_location_key(node_id), WAL_URL.describe().encode())
    try:
        yield _Cluster(controller, client, MemoryObjectStore("data"), MemoryObjectStore("wal"), tmp_path, epochs)
    finally:
        await controller.close()


async def _write(engine: StorageEngine, count: int) -> tuple[int, Stream, list[bytes]]:
    stream_id = await engine.create_stream((("topic", "t"),))
    stream = await engine.open_stream(stream_id, epoch=1)
    payloads = [payload(stream_id, i, 700) for i in range(count)]
    for data in payloads:
        await stream.append(data, 1)  # acknowledged: durable in the S3 WAL only (no upload yet)
    return stream_id, stream, payloads


async def _read_all(engine: StorageEngine, stream_id: int, epoch: int) -> list[bytes]:
    stream = await engine.open_stream(stream_id, epoch)
    out: list[bytes] = []
    offset = stream.start_offset
    while offset < stream.confirm_offset:
        result = await stream.fetch(offset, stream.confirm_offset, 1 << 20)
        for batch in result.batches:
            if batch.base_offset >= offset:
                out.append(batch.payload)
                offset = batch.last_offset
    return out


async def test_a_live_broker_replays_a_dead_brokers_wal_and_fences_its_late_append(cluster: _Cluster) -> None:
    dead, live = cluster.engine(1), cluster.engine(2)
    await dead.start()
    await live.start()
    stream_id, zombie_stream, payloads = await _write(dead, APPENDS)

    # The dead broker is fenced by its session timeout: its WAL goes to the least loaded live broker.
    assert await cluster.controller.fence_broker(1, cluster.epochs[1], session_expired=True)
    failover = cluster.controller.image.wal_failovers[1]
    assert (failover.target_id, failover.target_epoch, failover.attempt, failover.done) == (
        2, cluster.epochs[2], 1, False)
    with pytest.raises(StreamNotClosedError):  # the new leader cannot open before the replay closes the stream
        await live.open_stream(stream_id, 2)

    runner = WALFailoverRunner(cluster.client, live,
                               open_wal=lambda node, epoch: cluster.wal(node, epoch, failover=True))
    assert await runner.replay(failover) == APPENDS
    assert cluster.controller.image.wal_failovers[1].done
    # The "dead" broker was only paused: its next append reaches its WAL after the failover took the reservation.
    with pytest.raises(StorageError):
        await asyncio.wait_for(zombie_stream.append(b"late", 1), 10)  # fenced at the reservation check: no ack

    assert await _read_all(live, stream_id, 2) == payloads  # every acknowledged append, nothing else

    # The paused broker's own commit of its old epoch is refused, and its incarnation is never unfenced.
    node = NodeIdentity(1, cluster.epochs[1])
    first = await cluster.controller.stream_metadata.prepare_objects(node, 1, 60_000)
    with pytest.raises(StreamFencedError):
        await cluster.controller.stream_metadata.commit_stream_set_object(CommitStreamSetObjectRequest(
            node, first, 10, (ObjectStreamRange(stream_id, APPENDS, APPENDS + 1, 1),)))
    assert not await cluster.controller.unfence_broker(1, cluster.epochs[1])

    # The restarted broker starts cleanly on its emptied WAL: nothing is replayed twice.
    await dead.halt()
    cluster.epochs[1] = await cluster.client.register_broker(1, EP, None)
    restarted = cluster.engine(1)
    await restarted.start()
    assert restarted.stats().recovered_batches == 0
    await live.shutdown()
    assert await _read_all(restarted, stream_id, 3) == payloads
    await restarted.shutdown()


async def test_replay_is_idempotent_when_a_target_dies_after_committing(cluster: _Cluster) -> None:
    dead, first_target, second_target = cluster.engine(1), cluster.engine(2), cluster.engine(3)
    for engine in (dead, first_target, second_target):
        await engine.start()
    stream_id, _stream, payloads = await _write(dead, APPENDS)
    await dead.halt()
    assert await cluster.controller.fence_broker(1, cluster.epochs[1], session_expired=True)
    failover = cluster.controller.image.wal_failovers[1]
    assert failover.target_id == 2

    # The first target commits everything, then dies before resetting the WAL and closing the stream.
    broken = WALFailoverRunner(cluster.client, first_target,
                               open_wal=lambda node, epoch: cluster.wal(node, epoch, failover=True, cls=_ResetFails))
    with pytest.raises(WALError):
        await broken.replay(failover)
    committed = (await cluster.controller.stream_metadata.get_streams([stream_id]))[0].end_offset
    assert committed == APPENDS
    await first_target.halt()

    # Only the assigned target may finish it; once its session expires the controller reassigns the failover.
    with pytest.raises(StorageError):
        await cluster.client.complete_wal_failover(NodeIdentity(3, cluster.epochs[3]), 1, cluster.epochs[1])
    assert await cluster.controller.fence_broker(2, cluster.epochs[2], session_expired=True)
    assert await cluster.controller.reconcile_wal_failovers() == 1
    second = cluster.controller.image.wal_failovers[1]
    assert (second.target_id, second.attempt) == (3, 2)
    assert failover_wal_epoch(second.node_epoch, second.attempt) > failover_wal_epoch(failover.node_epoch, 1)

    # The second attempt replays the same records: all below the committed end, so nothing is committed twice.
    runner = WALFailoverRunner(cluster.client, second_target,
                               open_wal=lambda node, epoch: cluster.wal(node, epoch, failover=True))
    assert await runner.replay(second) == 0
    assert cluster.controller.image.wal_failovers[1].done
    assert await _read_all(second_target, stream_id, 2) == payloads
    for engine in (second_target,):
        await engine.shutdown()


async def test_a_broker_restarted_during_its_failover_waits_for_it_or_takes_back_a_targetless_one(
    cluster: _Cluster,
) -> None:

    assert await cluster.controller.fence_broker(1, cluster.epochs[1], session_expired=True)
    cluster.epochs[1] = await cluster.client.register_broker(1, EP, None)  # the dead broker is back, on a new epoch
    waiting = asyncio.ensure_future(wait_for_wal_failover(cluster.client, 1, cluster.epochs[1]))
    await asyncio.sleep(0.5)  # time in which the wait would (wrongly) end while the failover is still running
    assert not waiting.done()  # broker 2 still replays broker 1's WAL: opening it now would race the replay
    await cluster.client.complete_wal_failover(NodeIdentity(2, cluster.epochs[2]), 1, cluster.controller.image
                                               .wal_failovers[1].node_epoch)
    await asyncio.wait_for(waiting, 5)

    # A failover that does not finish in time is a clear error naming who holds the WAL, not a hang.
    assert await cluster.controller.fence_broker(1, cluster.epochs[1], session_expired=True)
    cluster.epochs[1] = await cluster.client.register_broker(1, EP, None)
    with pytest.raises(ConfigError, match="broker 2 is still replaying"):
        await wait_for_wal_failover(cluster.client, 1, cluster.epochs[1], wait_s=0.3)

    # Its target died and no other broker shares the WAL bucket: the restarted broker takes the failover back,
    # since its own recovery replays the same WAL.
    assert await cluster.controller.fence_broker(3, cluster.epochs[3])
    assert await cluster.controller.fence_broker(2, cluster.epochs[2], session_expired=True)
    assert await cluster.controller.reconcile_wal_failovers() == 1
    await asyncio.wait_for(wait_for_wal_failover(cluster.client, 1, cluster.epochs[1]), 5)
    assert cluster.controller.image.wal_failovers[1].done


async def test_a_replay_through_a_slow_down_storm_replays_everything(cluster: _Cluster) -> None:
    """Half of the failover's WAL requests fail (S3 throttling the dead broker's prefix): the replay waits them out
    instead of giving up, and the new leader reads every acknowledged append."""
    dead, live = cluster.engine(1), cluster.engine(2)
    await dead.start()
    await live.start()
    stream_id, _stream, payloads = await _write(dead, APPENDS)
    await dead.halt()
    assert await cluster.controller.fence_broker(1, cluster.epochs[1], session_expired=True)
    failover = cluster.controller.image.wal_failovers[1]
    storm = FaultyObjectStore(cluster.wals, seed=11)
    storm.fail(None, ObjectStoreError("injected 503 SlowDown"), probability=0.5)

    def open_wal(node: int, epoch: int) -> S3WAL:
        return S3WAL(storm, namespace="_fjord_test", node_id=node, node_epoch=epoch, batch_interval_ms=10,
                     failover=True)

    runner = WALFailoverRunner(cluster.client, live, open_wal=open_wal)
    assert await asyncio.wait_for(runner.replay(failover), 60) == APPENDS
    assert sum(storm.injected.values()) > 0
    assert await _read_all(live, stream_id, 2) == payloads
    await live.shutdown()


async def test_a_wal_of_many_upload_blocks_is_replayed_whole(
    cluster: _Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """A WAL of v1 objects (an older Fjord's, which cannot be copied in place) several times the upload threshold
    (16 KiB here) is replayed in blocks whose uploads overlap the reading of the next ones: the new owner reads every
    acknowledged append of both streams, in order. The replay says where its time went, naming the dead broker, in
    the log (what ``bench/failover.py`` reads)."""
    caplog.set_level(logging.INFO)
    # The dead broker uploads nothing itself (its threshold is far above what it writes).
    dead = cluster.engine(1, wal_version=1, wal_upload_threshold=1 << 20, wal_cache_size=2 << 20)
    live = cluster.engine(2)
    await dead.start()
    await live.start()
    written = await asyncio.gather(_write(dead, 60), _write(dead, 60))  # ~84 KiB, interleaved in the WAL
    await dead.halt()
    assert await cluster.controller.fence_broker(1, cluster.epochs[1], session_expired=True)
    failover = cluster.controller.image.wal_failovers[1]
    runner = WALFailoverRunner(cluster.client, live,
                               open_wal=lambda node, epoch: cluster.wal(node, epoch, failover=True))
    assert await runner.replay(failover) == 120
    assert live.stats().recovered_batches == 120
    for stream_id, _stream, payloads in written:
        assert await _read_all(live, stream_id, 2) == payloads
    await live.shutdown()
    timing = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("replay timing of node 1 "))
    blocks = re.search(r"(\d+) batches in (\d+) blocks, [\d.]+ s wall: .*read [\d.]+ s.*streams closed", timing)
    assert blocks is not None and blocks.group(1) == "120" and int(blocks.group(2)) > 1, timing
    assert "CPU" in timing and "PUT" in timing, timing


def _timing(caplog: pytest.LogCaptureFixture) -> str:
    return next(r.getMessage() for r in caplog.records if r.getMessage().startswith("replay timing of node 1 "))


async def test_a_failover_commits_v2_wal_objects_in_place_without_moving_their_bytes(
    cluster: _Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The dead broker's WAL objects are copied inside the store and committed as they are: the replay PUTs
    nothing, and the new owner reads every acknowledged append of both streams, once and in order."""
    caplog.set_level(logging.INFO)
    dead = cluster.engine(1, wal_upload_threshold=1 << 20, wal_cache_size=2 << 20)
    live = cluster.engine(2)
    await dead.start()
    await live.start()
    written = await asyncio.gather(_write(dead, 30), _write(dead, 30))
    await dead.halt()
    assert await cluster.controller.fence_broker(1, cluster.epochs[1], session_expired=True)
    failover = cluster.controller.image.wal_failovers[1]
    puts = cluster.data.stats.puts
    runner = WALFailoverRunner(cluster.client, live,
                               open_wal=lambda node, epoch: cluster.wal(node, epoch, failover=True))
    assert await runner.replay(failover) == 60
    assert cluster.data.stats.puts == puts
    assert cluster.data.stats.copies > 0
    for stream_id, _stream, payloads in written:
        assert await _read_all(live, stream_id, 2) == payloads
    await live.shutdown()
    assert f"60 batches in {cluster.data.stats.copies} WAL objects copied in place" in _timing(caplog)


async def test_a_stream_committed_up_to_the_middle_of_a_wal_object_reads_back_exactly_once(
    cluster: _Cluster,
) -> None:
    """The dead broker had committed the first 5 of the 12 records one WAL object holds (an upload it finished
    just before dying): the failover commits that object from offset 5 on, and the new owner reads records 0..19
    exactly once each, in order, from three objects whose ranges meet end to start."""
    dead = cluster.engine(1, wal_upload_threshold=1 << 20, wal_cache_size=2 << 20, wal_interval_ms=300)
    live = cluster.engine(2)
    await dead.start()
    await live.start()
    stream_id = await dead.create_stream((("topic", "t"),))
    stream = await dead.open_stream(stream_id, epoch=1)
    payloads = [payload(stream_id, i, 700) for i in range(20)]
    await asyncio.gather(*(stream.append(p, 1) for p in payloads[:12]))  # one WAL object (one 300 ms batch)
    await asyncio.gather(*(stream.append(p, 1) for p in payloads[12:]))

    # The dead broker's own upload of offsets [0, 5), committed before it died.
    node = NodeIdentity(1, cluster.epochs[1])
    metadata = cluster.controller.stream_metadata
    first = await metadata.prepare_objects(node, 1, 60_000)
    data = build_object(StreamRecordBatch(stream_id, 1, i, 1, p) for i, p in enumerate(payloads[:5]))
    await cluster.data.put(object_key(first, namespace_for("test")), data)
    await metadata.commit_stream_set_object(CommitStreamSetObjectRequest(
        node, first, len(data), (ObjectStreamRange(stream_id, 0, 5, 1),)))
    await dead.halt()

    assert await cluster.controller.fence_broker(1, cluster.epochs[1], session_expired=True)
    runner = WALFailoverRunner(cluster.client, live,
                               open_wal=lambda node, epoch: cluster.wal(node, epoch, failover=True))
    assert await runner.replay(cluster.controller.image.wal_failovers[1]) == 15
    assert cluster.data.stats.copies == 2
    assert await _read_all(live, stream_id, 2) == payloads
    objects = await metadata.get_objects(stream_id, 0, -1, 10)
    assert [(r.start_offset, r.end_offset) for o in objects for r in o.ranges] == [(0, 5), (5, 12), (12, 20)]
    await live.shutdown()


async def test_a_failover_in_place_that_fails_between_batched_commits_is_retried_and_commits_the_rest(
    cluster: _Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first target commits the dead broker's WAL objects a few per controller call and loses its second call;
    the failover's next target commits only what lies beyond each stream's committed end, and the new owner reads
    every acknowledged append exactly once, from objects whose ranges meet end to start."""
    monkeypatch.setattr(failover_copy, "COMMIT_BATCH_OBJECTS", 2)
    metadata = cluster.controller.stream_metadata
    real_commit, calls = metadata.commit_stream_set_objects, [0]

    async def second_call_lost(requests: Sequence[CommitStreamSetObjectRequest]) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise ObjectNotPreparedError("injected: the commit's prepare deadline passed")
        await real_commit(requests)

    monkeypatch.setattr(metadata, "commit_stream_set_objects", second_call_lost)
    dead, first_target, second_target = cluster.engine(1), cluster.engine(2), cluster.engine(3)
    for engine in (dead, first_target, second_target):
        await engine.start()
    written = await asyncio.gather(_write(dead, 20), _write(dead, 20))
    await dead.halt()
    assert await cluster.controller.fence_broker(1, cluster.epochs[1], session_expired=True)
    runner = WALFailoverRunner(cluster.client, first_target,
                               open_wal=lambda node, epoch: cluster.wal(node, epoch, failover=True))
    with pytest.raises(StorageError, match="injected"):
        await runner.replay(cluster.controller.image.wal_failovers[1])
    stream_ids = [stream_id for stream_id, _stream, _payloads in written]
    committed = sum(s.end_offset for s in await metadata.get_streams(stream_ids))
    assert 0 < committed < 40
    await first_target.halt()

    assert await cluster.controller.fence_broker(2, cluster.epochs[2], session_expired=True)
    assert await cluster.controller.reconcile_wal_failovers() == 1
    runner = WALFailoverRunner(cluster.client, second_target,
                               open_wal=lambda node, epoch: cluster.wal(node, epoch, failover=True))
    assert await runner.replay(cluster.controller.image.wal_failovers[1]) == 40 - committed
    for stream_id, _stream, payloads in written:
        assert await _read_all(second_target, stream_id, 2) == payloads
        objects = await metadata.get_objects(stream_id, 0, -1, 100)
        ranges = [(r.start_offset, r.end_offset) for o in objects for r in o.ranges]
        assert ranges[0][0] == 0 and ranges[-1][1] == 20
        assert all(end == start for (_s, end), (start, _e) in itertools.pairwise(ranges))
    await second_target.shutdown()


@pytest.mark.parametrize("wal_version", [1, 2])
async def test_a_dead_brokers_commit_landing_after_the_failover_read_its_streams_loses_nothing(
    cluster: _Cluster, monkeypatch: pytest.MonkeyPatch, wal_version: int
) -> None:
    """The dead broker's last upload, of offsets [0, 5), was past the controller's node check when the fence came
    and lands just after the failover read the streams to replay (committed end 0). The failover's range from 0
    then no longer continues the committed end (5 falls inside it, inside one WAL object): only its part from 5 on
    is committed, with every range after it, and the new owner reads all 20 acknowledged records exactly once,
    replayed record by record (a v1 WAL) or committed in place (v2)."""
    dead = cluster.engine(1, wal_version=wal_version, wal_upload_threshold=1 << 20, wal_cache_size=2 << 20,
                          wal_interval_ms=300)
    live = cluster.engine(2)
    await dead.start()
    await live.start()
    stream_id = await dead.create_stream((("topic", "t"),))
    stream = await dead.open_stream(stream_id, epoch=1)
    payloads = [payload(stream_id, i, 700) for i in range(20)]
    await asyncio.gather(*(stream.append(p, 1) for p in payloads[:12]))  # one WAL object (one 300 ms batch)
    await asyncio.gather(*(stream.append(p, 1) for p in payloads[12:]))
    await dead.halt()
    assert await cluster.controller.fence_broker(1, cluster.epochs[1], session_expired=True)

    node = NodeIdentity(1, cluster.epochs[1])
    metadata = cluster.controller.stream_metadata
    real_opening = metadata.get_opening_streams

    async def then_the_late_commit_lands(owner: NodeIdentity) -> list[OpeningStream]:
        opening = await real_opening(owner)
        first = await metadata.prepare_objects(node, 1, 60_000)
        data = build_object(StreamRecordBatch(stream_id, 1, i, 1, p) for i, p in enumerate(payloads[:5]))
        await cluster.data.put(object_key(first, namespace_for("test")), data)
        await metadata.commit_stream_set_object(CommitStreamSetObjectRequest(
            node, first, len(data), (ObjectStreamRange(stream_id, 0, 5, 1),)))
        return opening

    monkeypatch.setattr(metadata, "get_opening_streams", then_the_late_commit_lands)
    runner = WALFailoverRunner(cluster.client, live,
                               open_wal=lambda node, epoch: cluster.wal(node, epoch, failover=True))
    await runner.replay(cluster.controller.image.wal_failovers[1])
    assert (await metadata.get_streams([stream_id]))[0].end_offset == 20
    assert await _read_all(live, stream_id, 2) == payloads
    objects = await metadata.get_objects(stream_id, 0, -1, 10)
    ranges = [(r.start_offset, r.end_offset) for o in objects for r in o.ranges]
    assert ranges[0] == (0, 5) and ranges[1][0] == 5 and ranges[-1][1] == 20
    assert all(end == start for (_s, end), (start, _e) in itertools.pairwise(ranges))
    await live.shutdown()


async def test_a_failover_upload_that_fails_does_not_fail_the_live_brokers_own_uploads(
    cluster: _Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replayed blocks of a dead broker's v1 WAL go through the live broker's own upload queue. Their commit
    is refused for good (the failover's delegation withdrawn, say): the failover fails, and runs again, but the live
    broker's own uploads (and a wait for all uploads, as shutdown's and a restart's recovered tail's) and appends
    carry on; they are not failed with the dead broker's error."""
    dead, live = cluster.engine(1, wal_version=1), cluster.engine(2)
    await dead.start()
    await live.start()
    dead_stream, _zombie, _payloads = await _write(dead, APPENDS)
    await dead.halt()
    assert await cluster.controller.fence_broker(1, cluster.epochs[1], session_expired=True)
    own_id = await live.create_stream((("topic", "own"),))
    own = await live.open_stream(own_id, epoch=1)
    assert await own.append(b"before", 1) == 0
    await live.force_upload(own_id)

    metadata = cluster.controller.stream_metadata
    real_commit = metadata.commit_stream_set_object

    async def refuse_the_failovers(request: CommitStreamSetObjectRequest) -> None:
        if any(r.stream_id == dead_stream for r in (*request.ranges, *request.stream_objects)):
            raise StreamFencedError(f"injected: node 2 may no longer commit stream {dead_stream}")
        await real_commit(request)

    monkeypatch.setattr(metadata, "commit_stream_set_object", refuse_the_failovers)
    runner = WALFailoverRunner(cluster.client, live,
                               open_wal=lambda node, epoch: cluster.wal(node, epoch, failover=True, version=1))
    with pytest.raises(StreamFencedError):
        await asyncio.wait_for(runner.replay(cluster.controller.image.wal_failovers[1]), 30)

    await asyncio.wait_for(live.force_upload(), 10)  # the last block is the replay's: waited for, not failed with
    assert await asyncio.wait_for(own.append(b"after", 1), 10) == 1
    await asyncio.wait_for(live.force_upload(own_id), 10)
    assert (await metadata.get_streams([own_id]))[0].end_offset == 2
    assert await asyncio.wait_for(own.append(b"and later", 1), 10) == 2
    await live.shutdown()


async def test_two_brokers_restarting_together_both_join(cluster: _Cluster) -> None:
    """Brokers 1 and 2 die together (3 stops cleanly first) and restart together: the periodic check between their
    registrations and their joins gives neither the other's WAL (neither could replay it before its join ends), so
    each takes its own back instead of both waiting on each other until the joins fail."""
    assert await cluster.controller.fence_broker(3, cluster.epochs[3])
    for node in (1, 2):
        assert await cluster.controller.fence_broker(node, cluster.epochs[node], session_expired=True)
    await cluster.controller.reconcile_wal_failovers()
    for node in (1, 2):
        cluster.epochs[node] = await cluster.client.register_broker(node, EP, None)
    await cluster.controller.reconcile_wal_failovers()
    await asyncio.wait_for(asyncio.gather(*(wait_for_wal_failover(cluster.client, node, cluster.epochs[node],
                                                                  wait_s=1.0) for node in (1, 2))), 5)
    assert all(f.done for f in cluster.controller.image.wal_failovers.values())
