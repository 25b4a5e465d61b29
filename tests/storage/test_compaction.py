"""Object compaction and the object lifecycle over a real engine: real file WAL, real local bucket on disk, the
in-process metadata state machine (with a clock the test moves), and fault injection on top of real parts.

The invariant under test everywhere: compaction never changes what a reader sees. Every stream is read back
batch by batch (the encoded bytes, offsets and epochs) through a cold read path, in small pieces so reads
cross object boundaries, and compared with what was read before compaction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from storage.cache.block_cache import BlockCache
from storage.compaction.lifecycle import ObjectSweeper
from storage.compaction.plan import (
    plan_stream_object_compaction,
    plan_stream_set_compaction,
    select_merge_candidates,
)
from storage.compaction.stream_object import StreamObjectCompactor
from storage.compaction.stream_set import StreamSetCompactor
from storage.config import BucketURL, StorageConfig
from storage.engine import StorageEngine
from storage.errors import CompactionError, ObjectNotFoundError, ObjectStoreError, StorageError
from storage.metadata.api import (
    CommitStreamSetObjectRequest,
    ObjectState,
    ObjectStreamRange,
    ObjectType,
    S3ObjectMetadata,
)
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.objects.format import IndexEntry, object_key
from storage.objects.reader import ObjectReader
from storage.objectstore.base import ObjectStore
from storage.objectstore.factory import open_object_store
from storage.objectstore.faulty import FaultyObjectStore
from storage.objectstore.local import LocalObjectStore
from storage.opened_stream import StorageStream
from storage.read import ObjectReadPath
from storage.wal.file import FileWAL
from testkit.waiting import eventually_async
from tests.storage.engine_support import payload, small_config

HOUR_MS = 3_600_000
RETENTION_MS = 30_000
PREPARE_TTL_MS = 120_000
STREAMS = 4
ROUNDS = 24
BIG = 0  # the stream whose appends are big enough that its merged run is split into a stream object


class Clock:
    """Milliseconds the test advances by hand (deadlines, retention, data age)."""

    def __init__(self) -> None:
        self.now = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.now


class FailingCommits(StreamMetadataStateMachine):
    """The real state machine, with the next ``fail_commits`` compaction commits failing (fault injection)."""

    fail_commits = 0

    async def commit_stream_set_object(self, request: CommitStreamSetObjectRequest) -> None:
        if request.compacted_object_ids and self.fail_commits > 0:
            self.fail_commits -= 1
            raise StorageError(f"injected: commit of compaction into object {request.object_id} lost")
        await super().commit_stream_set_object(request)


@dataclasses.dataclass
class Rig:
    config: StorageConfig
    clock: Clock
    meta: FailingCommits
    store: ObjectStore
    engine: StorageEngine
    streams: list[StorageStream]

    @property
    def node_id(self) -> int:
        return self.config.node_id

    def stream_set(self, **overrides: Any) -> StreamSetCompactor:
        return StreamSetCompactor(
            config=dataclasses.replace(self.config, **overrides),
            metadata=self.meta,
            reader=ObjectReader(self.store, self.config.namespace),
            node=self.engine.node,
            clock=self.clock,
        )

    def stream_object(self, **overrides: Any) -> StreamObjectCompactor:
        return StreamObjectCompactor(
            config=dataclasses.replace(self.config, **overrides),
            metadata=self.meta,
            reader=ObjectReader(self.store, self.config.namespace),
            node=self.engine.node,
        )

    def sweeper(self) -> ObjectSweeper:
        return ObjectSweeper(self.meta, self.store, self.config.namespace, clock=self.clock)

    async def counts(self) -> tuple[int, dict[int, int]]:
        """(stream-set objects of the node, stream objects per stream)."""
        ssos = await self.meta.get_stream_set_objects(self.node_id)
        sos = {s.stream_id: len(await self.meta.get_stream_objects(s.stream_id)) for s in self.streams}
        return len(ssos), sos

    async def live_keys(self) -> set[str]:
        ids = {o.object_id for o in await self.meta.get_stream_set_objects(self.node_id)}
        for s in self.streams:
            ids |= {o.object_id for o in await self.meta.get_stream_objects(s.stream_id)}
        return {object_key(i, self.config.namespace) for i in ids}

    async def bucket_keys(self) -> set[str]:
        return {info.key for info in await self.store.list("") if f"/{self.config.namespace}/" in info.key}

    async def read(self, stream_id: int, max_bytes: int) -> list[bytes]:
        """Every batch from the stream's start offset, encoded, through a fresh (cold) read path, in reads of
        ``max_bytes`` (1: one batch per read)."""
        reader = ObjectReader(self.store, self.config.namespace)
        path = ObjectReadPath(
            self.meta, reader, BlockCache(64 * 1024), block_size=self.config.object_block_size, readahead_max=0
        )
        [meta] = await self.meta.get_streams([stream_id])
        out: list[bytes] = []
        offset = meta.start_offset
        for _ in range(10_000):
            if offset >= meta.end_offset:
                break
            batches = await path.read(stream_id, offset, meta.end_offset, max_bytes)
            assert batches, f"stream {stream_id}: nothing readable at offset {offset}"
            assert batches[0].base_offset <= offset < batches[0].last_offset
            out += [b.encode() for b in batches if b.last_offset > offset]
            offset = batches[-1].last_offset
        return out

    async def read_all(self) -> dict[int, list[bytes]]:
        """Each stream read from a cold cache batch by batch, in reads of a few KB that end mid-object and cross
        object boundaries, and in one read spanning every object: all three must agree."""
        out: dict[int, list[bytes]] = {}
        for stream in self.streams:
            one_by_one = await self.read(stream.stream_id, 1)
            assert await self.read(stream.stream_id, 2500) == one_by_one
            assert await self.read(stream.stream_id, 10**9) == one_by_one
            out[stream.stream_id] = one_by_one
        return out


async def make_rig(
    tmp_path: Path, *, store: ObjectStore | None = None, retention_ms: int = RETENTION_MS, **overrides: Any
) -> Rig:
    settings: dict[str, Any] = {
        "stream_object_split_size": 8 * 1024,
        "object_block_size": 2 * 1024,
        "stream_object_compaction_small_size": 8 * 1024,
        "object_prepare_ttl_ms": PREPARE_TTL_MS,
        "object_delete_retention_ms": 2 * HOUR_MS,  # keeps the engine's own lifecycle task idle (once a minute)
        "stream_set_object_compaction_interval_ms": HOUR_MS,
        "stream_object_compaction_interval_ms": HOUR_MS,
    }
    settings.update(overrides)
    config = small_config(tmp_path, **settings)
    clock = Clock()
    meta = FailingCommits(clock=clock, object_delete_retention_ms=retention_ms)
    store = store if store is not None else LocalObjectStore(tmp_path / "objects")
    wal = FileWAL(tmp_path / "wal", segment_size=256 * 1024, capacity=16 * 1024 * 1024, preallocate=False)
    engine = StorageEngine(config, meta, store=store, wal=wal)
    await engine.start()
    streams = [await engine.open_stream(await engine.create_stream(), epoch=3) for _ in range(STREAMS)]
    return Rig(config, clock, meta, store, engine, streams)


async def write_small_uploads(rig: Rig, rounds: int = ROUNDS, upload_every: int = 2) -> None:
    """Each round appends one batch to every stream (stream BIG's are 3000 bytes, the others' 250); every
    ``upload_every`` rounds a forced upload makes one small stream-set object holding every stream."""
    for r in range(rounds):
        appends = [
            s.append(payload(s.stream_id, r, 3000 if i == BIG else 250), 1 + (r + i) % 3)
            for i, s in enumerate(rig.streams)
        ]
        await asyncio.gather(*appends)
        if (r + 1) % upload_every == 0:
            await rig.engine.force_upload()
    await rig.engine.force_upload()


def suffix_from(batches: Sequence[bytes], others: Sequence[bytes]) -> bool:
    """Whether ``others`` is exactly the tail of ``batches`` (what a trimmed stream still shows)."""
    return len(others) <= len(batches) and list(batches[len(batches) - len(others) :]) == list(others)


async def test_merge_replaces_small_stream_set_objects_without_changing_a_byte(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    try:
        await write_small_uploads(rig)
        ssos, sos = await rig.counts()
        assert ssos == ROUNDS // 2 and sum(sos.values()) == 0
        before = await rig.read_all()
        old_objects = await rig.meta.get_objects(rig.streams[1].stream_id, 0, -1, 100)
        assert len(old_objects) == ROUNDS // 2  # the stream's data is spread over every upload

        result = await rig.stream_set().run_once()

        assert result.failures == [] and result.merged_objects == ROUNDS // 2
        ssos, sos = await rig.counts()
        # Stream BIG's merged run (24 x 3000 bytes) is past the 8 KiB split size: it gets its own stream object.
        assert ssos == 1
        assert sos == {s.stream_id: int(i == BIG) for i, s in enumerate(rig.streams)}
        assert await rig.read_all() == before
        # Small blocks were re-blocked rather than copied one by one: fewer, fuller blocks for the stream.
        stream_id = rig.streams[1].stream_id
        reader = ObjectReader(rig.store, rig.config.namespace)
        [sso] = await rig.meta.get_stream_set_objects(rig.node_id)
        new_blocks = [e for e in await reader.index(sso.object_id) if e.stream_id == stream_id]
        old_blocks = [e for o in old_objects for e in await reader.index(o.object_id) if e.stream_id == stream_id]
        assert len(new_blocks) < len(old_blocks)
        assert sum(e.record_count for e in new_blocks) == sum(e.record_count for e in old_blocks) == ROUNDS
        # A reader that looked the old objects up before the merge still reads them.
        rng = old_objects[-1].ranges[0]
        got = await reader.read_range(old_objects[-1].object_id, stream_id, rng.start_offset, rng.end_offset, 10**9)
        assert [b.encode() for b in got] == before[stream_id][-len(got) :]
        # The engine's own (warm) read path follows the new objects too.
        stream = rig.streams[2]
        fetched = await stream.fetch(0, stream.confirm_offset, 10**9)
        assert [b.encode() for b in fetched.batches] == before[stream.stream_id]
        # Nothing left to merge: another round changes nothing.
        again = await rig.stream_set().run_once()
        assert again.merged_objects == 0 and await rig.counts() == (ssos, sos)
    finally:
        await rig.engine.shutdown()


async def test_merge_rounds_are_bounded_by_object_count_and_memory(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    try:
        await write_small_uploads(rig)
        before = await rig.read_all()
        objects = await rig.meta.get_stream_set_objects(rig.node_id)
        budget = sum(o.object_size for o in objects[:5])  # room for exactly five source objects
        result = await rig.stream_set(stream_set_object_compaction_cache_size=budget).run_once()
        assert result.merged_objects == 5
        assert (await rig.counts())[0] == len(objects) - 5 + 1
        result = await rig.stream_set(stream_set_object_compaction_max_objects=3).run_once()
        assert result.merged_objects == 3
        assert (await rig.counts())[0] == len(objects) - 5 + 1 - 3 + 1
        assert await rig.read_all() == before
    finally:
        await rig.engine.shutdown()


async def test_force_split_then_stream_object_merge(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path, stream_set_object_compaction_force_split_ms=HOUR_MS)
    try:
        await write_small_uploads(rig)
        before = await rig.read_all()
        uploads = ROUNDS // 2

        assert (await rig.stream_set().run_once()).split_objects == 0  # young objects are merged, not split
        rig.clock.now += 2 * HOUR_MS  # well past the data time the uploads recorded (wall clock)
        result = await rig.stream_set().run_once()

        # The merged object inherited the oldest data time, so it is split too: only stream objects remain.
        assert result.split_objects == 1 and result.failures == []
        ssos, sos = await rig.counts()
        assert ssos == 0 and all(count >= 1 for count in sos.values())
        assert await rig.read_all() == before

        # Now split each upload's slice into its own stream object (a fresh set of uploads, split at once).
        await write_small_uploads(rig, rounds=ROUNDS)
        before = await rig.read_all()
        rig.clock.now += 2 * HOUR_MS  # well past the data time the uploads recorded (wall clock)
        # At most max_objects force splits per round; the rest wait for the next round.
        assert (await rig.stream_set(stream_set_object_compaction_max_objects=5).run_once()).split_objects == 5
        assert (await rig.counts())[0] == uploads - 5
        assert (await rig.stream_set().run_once()).split_objects == uploads - 5
        ssos, sos = await rig.counts()
        assert ssos == 0 and all(count >= uploads for count in sos.values())
        assert await rig.read_all() == before

        merge = await rig.stream_object().run_once([s.stream_id for s in rig.streams])

        assert merge.failures == [] and merge.merged_objects > 0
        _, merged = await rig.counts()
        small_size = rig.config.stream_object_compaction_small_size
        for stream in rig.streams:
            # Small neighbours were merged into objects of about the small size.
            total = sum(o.object_size for o in await rig.meta.get_stream_objects(stream.stream_id))
            assert merged[stream.stream_id] < sos[stream.stream_id]
            assert merged[stream.stream_id] <= total // small_size + 2
        assert await rig.read_all() == before
    finally:
        await rig.engine.shutdown()


async def test_trimmed_and_deleted_streams_disappear_from_compacted_objects(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    try:
        await write_small_uploads(rig)
        before = await rig.read_all()
        trimmed, deleted = rig.streams[1], rig.streams[2]
        cut = trimmed.confirm_offset // 2
        await trimmed.trim(cut)
        await rig.engine.delete_stream(deleted.stream_id, deleted.epoch)
        rig.streams.remove(deleted)

        result = await rig.stream_set().run_once()

        assert result.dropped_blocks > 0 and result.failures == []
        reader = ObjectReader(rig.store, rig.config.namespace)
        for key in await rig.live_keys():
            for entry in await reader.index(int(key.rsplit("/", 1)[1])):
                assert entry.stream_id != deleted.stream_id
                if entry.stream_id == trimmed.stream_id:
                    assert entry.end_offset > cut
        after = await rig.read_all()
        assert after[rig.streams[0].stream_id] == before[rig.streams[0].stream_id]
        assert suffix_from(before[trimmed.stream_id], after[trimmed.stream_id])
        assert len(after[trimmed.stream_id]) < len(before[trimmed.stream_id])

        # Stream objects holding only trimmed data are dropped by stream-object compaction.
        big = rig.streams[0]
        [so] = await rig.meta.get_stream_objects(big.stream_id)
        await big.trim(big.confirm_offset)
        result2 = await rig.stream_object().run_once([big.stream_id])
        assert result2.expired_objects == 1
        assert rig.meta.object_state(so.object_id) == ObjectState.MARK_DESTROYED
        assert await rig.meta.get_stream_objects(big.stream_id) == []
    finally:
        await rig.engine.shutdown()


async def test_lifecycle_deletes_replaced_and_expired_objects_only_after_the_retention(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    try:
        await write_small_uploads(rig)
        before = await rig.read_all()
        old_keys = await rig.bucket_keys()
        # An upload that crashed between PUT and commit: prepared, in the bucket, never committed.
        orphan = await rig.meta.prepare_objects(rig.engine.node, 1, PREPARE_TTL_MS)
        orphan_key = object_key(orphan, rig.config.namespace)
        await rig.store.put(orphan_key, b"half an upload")

        await rig.stream_set().run_once()
        live = await rig.live_keys()
        assert not live & old_keys and (await rig.bucket_keys()) == old_keys | live | {orphan_key}

        sweeper = rig.sweeper()
        assert (await sweeper.run_once()).deleted == []  # replaced, but within the retention
        rig.clock.now += RETENTION_MS - 1
        assert (await sweeper.run_once()).deleted == []
        assert await rig.bucket_keys() == old_keys | live | {orphan_key}

        rig.clock.now += 2
        swept = await sweeper.run_once()
        assert len(swept.deleted) == ROUNDS // 2
        assert await rig.bucket_keys() == live | {orphan_key}
        assert await rig.read_all() == before

        rig.clock.now += PREPARE_TTL_MS  # the orphan misses its deadline: marked now, deleted a retention later
        assert (await sweeper.run_once()).deleted == []
        rig.clock.now += RETENTION_MS
        assert (await sweeper.run_once()).deleted == [orphan]
        assert await rig.bucket_keys() == live
        assert rig.meta.object_state(orphan) is None
    finally:
        await rig.engine.shutdown()


async def test_reader_holding_a_replaced_object_fails_only_after_it_was_swept(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    try:
        await write_small_uploads(rig)
        stream_id = rig.streams[3].stream_id
        [first, *_] = await rig.meta.get_objects(stream_id, 0, -1, 1)
        reader = ObjectReader(rig.store, rig.config.namespace)
        await rig.stream_set().run_once()
        rig.clock.now += RETENTION_MS // 2
        await rig.sweeper().run_once()
        assert await reader.read_range(first.object_id, stream_id, 0, 10**9, 10**9)  # still there mid-retention
        rig.clock.now += RETENTION_MS
        await rig.sweeper().run_once()
        reader.invalidate(first.object_id)
        with pytest.raises(ObjectNotFoundError):
            await reader.read_range(first.object_id, stream_id, 0, 10**9, 10**9)
    finally:
        await rig.engine.shutdown()


@pytest.mark.parametrize("fault", ["commit", "put"])
async def test_failed_compaction_keeps_old_objects_and_its_uploads_are_swept(tmp_path: Path, fault: str) -> None:
    faulty = FaultyObjectStore(LocalObjectStore(tmp_path / "objects"))
    rig = await make_rig(tmp_path, store=faulty)
    try:
        await write_small_uploads(rig)
        before = await rig.read_all()
        objects = await rig.meta.get_stream_set_objects(rig.node_id)
        old_keys = await rig.bucket_keys()
        if fault == "commit":
            rig.meta.fail_commits = 1
        else:
            faulty.fail("put", ObjectStoreError("injected: PUT failed with 503"), after=faulty.calls["put"] + 1)

        result = await rig.stream_set().run_once()

        assert len(result.failures) == 1 and result.merged_objects == 0
        assert await rig.meta.get_stream_set_objects(rig.node_id) == objects
        assert await rig.read_all() == before
        stray = await rig.bucket_keys() - old_keys
        assert stray  # the new objects written before the failure are in the bucket, uncommitted
        faulty.heal()

        sweeper = rig.sweeper()
        rig.clock.now += PREPARE_TTL_MS + 1
        await sweeper.run_once()
        assert await rig.bucket_keys() == old_keys | stray  # marked, but kept for the retention
        rig.clock.now += RETENTION_MS
        deleted = (await sweeper.run_once()).deleted
        assert {object_key(i, rig.config.namespace) for i in deleted} >= stray
        assert await rig.bucket_keys() == old_keys
        assert await rig.read_all() == before

        # Healthy again, the next round succeeds.
        assert (await rig.stream_set().run_once()).merged_objects == len(objects)
        assert await rig.read_all() == before
    finally:
        await rig.engine.shutdown()


async def test_engine_runs_compaction_and_the_lifecycle_in_the_background(tmp_path: Path) -> None:
    # Compaction every 50 ms; the engine's sweeper runs every second (half the configured retention, at least 1 s)
    # against the metadata's 300 ms retention.
    rig = await make_rig(
        tmp_path,
        retention_ms=300,
        stream_set_object_compaction_interval_ms=50,
        stream_object_compaction_interval_ms=50,
        object_delete_retention_ms=2_000,
    )
    try:
        await write_small_uploads(rig)
        before = await rig.read_all()

        async def compacted_and_swept() -> bool:
            return (await rig.counts())[0] == 1 and await rig.bucket_keys() == await rig.live_keys()

        await eventually_async(compacted_and_swept, timeout=10, interval=0.02,
                               what="one stream-set object left and the replaced objects deleted from the bucket")
        assert await rig.read_all() == before
    finally:
        await rig.engine.shutdown()


async def test_compaction_and_lifecycle_against_the_s3_server(tmp_path: Path, s3_bucket_url: BucketURL) -> None:
    config = small_config(tmp_path, data_buckets=(s3_bucket_url,))
    rig = await make_rig(tmp_path, store=open_object_store(s3_bucket_url, config), data_buckets=(s3_bucket_url,))
    try:
        await write_small_uploads(rig, rounds=12)
        before = await rig.read_all()
        old_keys = await rig.bucket_keys()
        assert (await rig.stream_set().run_once()).merged_objects == 6
        assert await rig.read_all() == before
        rig.clock.now += RETENTION_MS
        assert len((await rig.sweeper().run_once()).deleted) == 6
        live = await rig.bucket_keys()
        assert live == await rig.live_keys() and not live & old_keys
    finally:
        await rig.engine.shutdown()


async def test_merge_around_a_stream_object_keeps_one_range_per_object(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path)
    try:
        await write_small_uploads(rig, rounds=8)
        middle = rig.streams[1]
        for i in range(12):  # one upload holding only this stream: it becomes a stream object
            await middle.append(payload(middle.stream_id, 100 + i, 1000), 1)
        await rig.engine.force_upload()
        await write_small_uploads(rig, rounds=8)
        before = await rig.read_all()
        [split_out] = await rig.meta.get_stream_objects(middle.stream_id)

        result = await rig.stream_set().run_once()

        assert result.failures == [] and result.merged_objects == 8
        # The stream's data in the merged objects has a hole (held by its stream object): the first run stays in
        # the new stream-set object, the run after the hole gets a stream object of its own.
        [sso] = await rig.meta.get_stream_set_objects(rig.node_id)
        [mine] = [r for r in sso.ranges if r.stream_id == middle.stream_id]
        assert mine.end_offset == split_out.ranges[0].start_offset
        after = [o.ranges[0] for o in await rig.meta.get_stream_objects(middle.stream_id)]
        assert after[0] == split_out.ranges[0]
        assert len(after) == 2 and after[1].start_offset == split_out.ranges[0].end_offset
        assert await rig.read_all() == before
    finally:
        await rig.engine.shutdown()


def _obj(object_id: int, size: int, *ranges: tuple[int, int, int]) -> S3ObjectMetadata:
    return S3ObjectMetadata(
        object_id, size, ObjectType.STREAM_SET, tuple(ObjectStreamRange(s, a, b) for s, a, b in ranges)
    )


def test_merge_candidates_share_streams_and_fit_the_round_budget() -> None:
    a = _obj(1, 100, (1, 0, 10), (2, 0, 10))
    b = _obj(2, 100, (2, 10, 20))
    loner = _obj(3, 100, (9, 0, 10))
    c = _obj(4, 100, (1, 10, 20))
    assert select_merge_candidates([a, b, loner, c], 10, 10_000) == [a, b, c]
    assert select_merge_candidates([a, b, loner, c], 2, 10_000) == [a, b]
    assert select_merge_candidates([a, b, loner, c], 10, 250) == [a, b]
    assert select_merge_candidates([a, b, loner, c], 10, 150) == []  # one object is nothing to merge
    assert select_merge_candidates([a, loner], 10, 10_000) == []  # nothing shared


def test_stream_object_plan_drops_trimmed_objects_and_groups_small_neighbours() -> None:
    objects = [
        _obj(1, 10, (7, 0, 10)),
        _obj(2, 10, (7, 10, 20)),  # both below the start offset 20
        _obj(3, 40, (7, 20, 30)),
        _obj(4, 40, (7, 30, 40)),
        _obj(5, 40, (7, 40, 50)),  # group closes at 120 >= 100
        _obj(6, 40, (7, 50, 60)),
        _obj(7, 500, (7, 60, 70)),  # big: not merged, breaks the group
        _obj(8, 40, (7, 70, 80)),
        _obj(9, 40, (7, 85, 90)),  # not contiguous with 8
        _obj(10, 40, (7, 90, 95)),
    ]
    plan = plan_stream_object_compaction(objects, 7, 20, 100)
    assert plan.expired == [1, 2]
    assert [[o.object_id for o in g] for g in plan.groups] == [[3, 4, 5], [9, 10]]


def test_overlapping_blocks_are_refused_not_guessed() -> None:
    entries = [IndexEntry(5, 0, 10, 1, 0, 100), IndexEntry(5, 10, 20, 1, 100, 100)]
    first = _obj(1, 300, (5, 0, 20))
    second = _obj(2, 300, (5, 15, 30))
    with pytest.raises(CompactionError, match="stream 5"):
        plan_stream_set_compaction([(first, entries), (second, [IndexEntry(5, 15, 30, 1, 0, 100)])], {5: 0}, 1000)
    # Blocks wholly below the start offset, of deleted streams, or outside the metadata range are dropped.
    plan = plan_stream_set_compaction([(first, [*entries, IndexEntry(6, 0, 5, 1, 200, 50)])], {5: 10, 6: 0}, 1000)
    assert plan.dropped_blocks == 2
    [out] = plan.outputs
    assert [(r.stream_id, r.start_offset, r.end_offset) for r in out.runs] == [(5, 10, 20)]
