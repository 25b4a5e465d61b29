"""The in-process StreamMetadata state machine: fencing, commit rules, compaction commits, lifecycle sweep,
record codec and replay (a restarted node rebuilds identical state from the records)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import pytest

from storage.errors import (
    CompactedObjectsNotFoundError,
    NodeEpochExpiredError,
    ObjectNotPreparedError,
    OffsetNotMatchedError,
    StorageError,
    StreamFencedError,
    StreamNotClosedError,
    StreamNotFoundError,
    StreamNotOpenedError,
)
from storage.metadata.api import (
    CommitStreamObjectRequest,
    CommitStreamSetObjectRequest,
    NodeIdentity,
    ObjectState,
    ObjectStreamRange,
    ObjectType,
    StreamClose,
    StreamObjectCommit,
    StreamState,
)
from storage.metadata.record_codec import (
    RECORD_TYPES,
    MetadataRecord,
    RecordDecodeError,
    decode_record,
    encode_record,
    register_record,
)
from storage.metadata.state_machine import StreamMetadataStateMachine
from storage.metadata.stream_records import STREAM_RECORD_TYPES, KVRecord, RangeRecord, StreamRecord

NODE = NodeIdentity(1, 100)
OTHER = NodeIdentity(2, 100)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


class Log:
    """A sink that keeps every record, encoded, as the controller's metadata log would."""

    def __init__(self) -> None:
        self.entries: list[bytes] = []

    async def __call__(self, records: Sequence[MetadataRecord]) -> None:
        self.entries += [encode_record(r) for r in records]

    def replay(self) -> StreamMetadataStateMachine:
        fresh = StreamMetadataStateMachine()
        for entry in self.entries:
            fresh.apply(decode_record(entry))
        return fresh


def commit(
    node: NodeIdentity, object_id: int, *ranges: tuple[int, int, int], epoch: int = -1
) -> CommitStreamSetObjectRequest:
    return CommitStreamSetObjectRequest(
        node=node,
        object_id=object_id,
        object_size=100,
        ranges=tuple(ObjectStreamRange(s, a, b, epoch) for s, a, b in ranges),
    )


async def opened(meta: StreamMetadataStateMachine, node: NodeIdentity = NODE, epoch: int = 0) -> int:
    stream_id = await meta.create_stream(node)
    await meta.open_stream(node, stream_id, epoch)
    return stream_id


async def test_create_open_close_reopen_follow_epoch_rules() -> None:
    meta = StreamMetadataStateMachine()
    stream_id = await meta.create_stream(NODE, [("topic", "orders")])
    assert stream_id == 0 and await meta.create_stream(NODE) == 1
    result = await meta.open_stream(NODE, stream_id, 5)
    assert (result.start_offset, result.next_offset) == (0, 0)
    assert await meta.open_stream(NODE, stream_id, 5) == result  # idempotent for the owner
    with pytest.raises(StreamFencedError, match="stream 0"):
        await meta.open_stream(NODE, stream_id, 4)
    with pytest.raises(StreamNotClosedError, match="node 1"):
        await meta.open_stream(OTHER, stream_id, 6)
    with pytest.raises(StreamFencedError):
        await meta.open_stream(OTHER, stream_id, 5)
    with pytest.raises(StreamFencedError):
        await meta.close_stream(OTHER, stream_id, 5)
    await meta.close_stream(NODE, stream_id, 5)
    await meta.close_stream(NODE, stream_id, 5)  # closing twice is fine
    result = await meta.open_stream(OTHER, stream_id, 6)
    [info] = await meta.get_streams([stream_id, 99])
    assert info.epoch == 6 and info.state == StreamState.OPENED and info.tags == (("topic", "orders"),)
    assert [(r.epoch, r.node_id) for r in info.ranges] == [(6, 2)]  # epoch 5 wrote nothing: its range went
    with pytest.raises(StreamNotFoundError):
        await meta.open_stream(NODE, 42, 0)


async def test_an_open_keeps_the_ranges_of_epochs_that_wrote_and_drops_the_empty_ones() -> None:
    """A stream reopened again and again (a crash loop, an idle partition moved) keeps one range per epoch that
    wrote, not one per open; the log and a snapshot replay to the same ranges."""
    log = Log()
    meta = StreamMetadataStateMachine(sink=log)
    await meta.register_node(1, 100)
    a = await opened(meta, epoch=0)
    for epoch in range(1, 30):  # 29 reopens, records written in epochs 10 and 20 only
        if epoch in (10, 20):
            [sa] = await meta.get_streams([a])
            first = await meta.prepare_objects(NODE, 1, 60_000)
            await meta.commit_stream_set_object(commit(NODE, first, (a, sa.end_offset, sa.end_offset + 5)))
        await meta.close_stream(NODE, a, epoch - 1)
        await meta.open_stream(NODE, a, epoch)
    [info] = await meta.get_streams([a])
    assert [(r.epoch, r.start_offset, r.end_offset) for r in info.ranges] == [(9, 0, 5), (19, 5, 10), (29, 10, 10)]
    assert (info.start_offset, info.end_offset) == (0, 10)
    assert await log.replay().get_streams([a]) == [info]
    from_snapshot = StreamMetadataStateMachine()
    for record in meta.snapshot():
        from_snapshot.apply(record)
    assert await from_snapshot.get_streams([a]) == [info]


async def test_node_epoch_fences_older_incarnations() -> None:
    meta = StreamMetadataStateMachine()
    await meta.register_node(1, 100)
    stream_id = await opened(meta)
    await meta.register_node(1, 200)
    with pytest.raises(NodeEpochExpiredError, match="node 1"):
        await meta.prepare_objects(NODE, 1, 1000)
    with pytest.raises(NodeEpochExpiredError):
        await meta.close_stream(NODE, stream_id, 0)
    with pytest.raises(NodeEpochExpiredError):
        await meta.register_node(1, 150)
    await meta.close_stream(NodeIdentity(1, 200), stream_id, 0)


async def test_commits_must_continue_the_committed_end_and_are_idempotent() -> None:
    meta = StreamMetadataStateMachine()
    a, b = await opened(meta), await opened(meta)
    first = await meta.prepare_objects(NODE, 2, 60_000)
    await meta.commit_stream_set_object(commit(NODE, first, (a, 0, 10), (b, 0, 5), epoch=0))
    again = commit(NODE, first, (a, 0, 10), (b, 0, 5), epoch=0)
    await meta.commit_stream_set_object(again)  # re-commit of a committed object: success, no change
    with pytest.raises(OffsetNotMatchedError, match=f"stream {a}"):
        await meta.commit_stream_set_object(commit(NODE, first + 1, (a, 11, 20)))
    with pytest.raises(StreamFencedError):
        await meta.commit_stream_set_object(commit(OTHER, first + 1, (a, 10, 20)))
    with pytest.raises(StreamFencedError):
        await meta.commit_stream_set_object(commit(NODE, first + 1, (a, 10, 20), epoch=7))
    with pytest.raises(ObjectNotPreparedError, match="object 99"):
        await meta.commit_stream_set_object(commit(NODE, 99, (a, 10, 20)))
    await meta.commit_stream_set_object(
        CommitStreamSetObjectRequest(
            node=NODE,
            object_id=-1,
            object_size=0,
            ranges=(),
            stream_objects=(StreamObjectCommit(first + 1, 300, a, 10, 20, 0),),
        )
    )
    [sa, sb] = await meta.get_streams([a, b])
    assert (sa.end_offset, sb.end_offset) == (20, 5)
    objects = await meta.get_objects(a, 0, -1, 10)
    assert [(o.object_id, o.object_type) for o in objects] == [
        (first, ObjectType.STREAM_SET),
        (first + 1, ObjectType.STREAM),
    ]
    assert objects[0].ranges == (ObjectStreamRange(a, 0, 10),)
    assert [o.object_id for o in await meta.get_objects(a, 12, 15, 10)] == [first + 1]
    assert [o.object_id for o in await meta.get_objects(a, 0, 5, 10)] == [first]
    assert await meta.get_objects(a, 20, -1, 10) == []
    await meta.close_stream(NODE, a, 0)
    late = await meta.prepare_objects(NODE, 1, 60_000)
    with pytest.raises(StreamNotOpenedError):
        await meta.commit_stream_set_object(commit(NODE, late, (a, 20, 30)))


async def test_a_batch_of_commits_continues_within_itself_and_commits_all_or_none() -> None:
    """Object k+1 of a batch may start where object k ends; one range that does not continue rejects the whole
    batch with nothing changed; a retried batch, also one whose first part was committed, commits only the rest."""
    log = Log()
    meta = StreamMetadataStateMachine(sink=log)
    a, b = await opened(meta), await opened(meta)
    first = await meta.prepare_objects(NODE, 4, 60_000)
    appended = len(log.entries)
    for bad, error in (
        ([commit(NODE, first, (a, 0, 10)), commit(NODE, first + 1, (a, 10, 20), (b, 0, 5)),
          commit(NODE, first + 2, (a, 21, 30))], OffsetNotMatchedError),  # a gap in stream a at the third
        ([commit(NODE, first, (a, 0, 10)), commit(NODE, first + 1, (b, 0, 5), epoch=3)], StreamFencedError),
        ([commit(NODE, first, (a, 0, 10)), commit(NODE, first, (a, 10, 20))], ValueError),  # an object twice
    ):
        with pytest.raises(error):
            await meta.commit_stream_set_objects(bad)
    assert len(log.entries) == appended
    assert [s.end_offset for s in await meta.get_streams([a, b])] == [0, 0]
    assert {meta.object_state(first + i) for i in range(4)} == {ObjectState.PREPARED}

    batch = [commit(NODE, first, (a, 0, 10)), commit(NODE, first + 1, (a, 10, 20), (b, 0, 5)),
             commit(NODE, first + 2, (a, 20, 30))]
    await meta.commit_stream_set_objects(batch)
    assert [s.end_offset for s in await meta.get_streams([a, b])] == [30, 5]
    assert [o.object_id for o in await meta.get_objects(a, 0, -1, 10)] == [first, first + 1, first + 2]
    appended = len(log.entries)
    await meta.commit_stream_set_objects(batch)  # a retry after a lost answer: nothing to do
    assert len(log.entries) == appended
    await meta.commit_stream_set_objects([batch[2], commit(NODE, first + 3, (a, 30, 40), (b, 5, 8))])
    assert [s.end_offset for s in await meta.get_streams([a, b])] == [40, 8]
    assert await log.replay().get_streams([a, b]) == await meta.get_streams([a, b])


async def test_prepared_objects_expire_and_unreferenced_objects_are_reclaimed() -> None:
    clock = Clock()
    meta = StreamMetadataStateMachine(clock=clock, object_delete_retention_ms=500)
    a, b = await opened(meta), await opened(meta)
    first = await meta.prepare_objects(NODE, 3, ttl_ms=1_000)
    await meta.commit_stream_set_object(commit(NODE, first, (a, 0, 10), (b, 0, 10)))
    await meta.commit_stream_set_object(
        CommitStreamSetObjectRequest(
            node=NODE,
            object_id=-1,
            object_size=0,
            ranges=(),
            stream_objects=(StreamObjectCommit(first + 1, 9, a, 10, 20),),
        )
    )
    # first+2 is never committed: past its deadline it is marked, then after the retention it may be deleted.
    clock.now += 1_001
    assert await meta.sweep_objects(clock.now) == []
    assert meta.object_state(first + 2) == ObjectState.MARK_DESTROYED
    with pytest.raises(ObjectNotPreparedError):
        await meta.commit_stream_set_object(commit(NODE, first + 2, (a, 20, 30)))
    clock.now += 500
    assert await meta.sweep_objects(clock.now) == [first + 2]
    await meta.remove_objects([first + 2])
    assert meta.object_state(first + 2) is None
    # Trimming stream a past the stream object's end unreferences it; the SSO still holds stream b.
    await meta.trim_stream(NODE, a, 0, 20)
    await meta.sweep_objects(clock.now)
    assert meta.object_state(first + 1) == ObjectState.MARK_DESTROYED
    assert meta.object_state(first) == ObjectState.COMMITTED
    await meta.close_stream(NODE, b, 0)
    await meta.delete_stream(NODE, b, 0)
    await meta.sweep_objects(clock.now)
    assert meta.object_state(first) == ObjectState.MARK_DESTROYED
    clock.now += 500
    assert await meta.sweep_objects(clock.now) == [first, first + 1]


async def test_close_streams_closes_and_trims_all_of_them_in_one_commit_or_none() -> None:
    commits: list[int] = []

    async def sink(records: Sequence[MetadataRecord]) -> None:
        commits.append(len(records))

    meta = StreamMetadataStateMachine(sink=sink)
    a, b = await opened(meta), await opened(meta)
    commits.clear()
    for bad, error in (
        ([StreamClose(a, 0, 5), StreamClose(b, 1)], StreamFencedError),  # b is not at epoch 1
        ([StreamClose(a, 0, 5), StreamClose(42, 0)], StreamNotFoundError),
        ([StreamClose(a, 0), StreamClose(a, 0, 5)], ValueError),  # named twice
    ):
        with pytest.raises(error):
            await meta.close_streams(NODE, bad)
    with pytest.raises(StreamFencedError):
        await meta.close_streams(OTHER, [StreamClose(a, 0)])
    assert commits == [] and all(s.state == StreamState.OPENED for s in await meta.get_streams([a, b]))
    await meta.close_streams(NODE, [StreamClose(a, 0, 5), StreamClose(b, 0)])
    assert len(commits) == 1
    info_a, info_b = await meta.get_streams([a, b])
    assert (info_a.state, info_a.start_offset) == (StreamState.CLOSED, 5)
    assert (info_b.state, info_b.start_offset) == (StreamState.CLOSED, 0)
    await meta.close_streams(NODE, [StreamClose(b, 0)])  # closing twice is fine
    with pytest.raises(StreamNotOpenedError):
        await meta.close_streams(NODE, [StreamClose(a, 0, 6)])  # no trim once closed


async def test_an_upload_commit_closes_its_streams_with_its_ranges_or_commits_nothing() -> None:
    commits: list[int] = []

    async def sink(records: Sequence[MetadataRecord]) -> None:
        commits.append(len(records))

    meta = StreamMetadataStateMachine(sink=sink)
    a, b = await opened(meta), await opened(meta)
    first = await meta.prepare_objects(NODE, 1, 60_000)
    commits.clear()
    upload = commit(NODE, first, (a, 0, 10), (b, 0, 5), epoch=0)
    with pytest.raises(StreamFencedError):  # b is not at epoch 1: neither the ranges nor a close
        await meta.commit_stream_set_object(dataclasses.replace(upload, closes=(StreamClose(a, 0), StreamClose(b, 1))))
    assert commits == [] and meta.object_state(first) != ObjectState.COMMITTED
    # The trim may reach into the ranges this commit adds (a meta stream trimmed to its closing entries).
    await meta.commit_stream_set_object(dataclasses.replace(upload, closes=(StreamClose(a, 0, 8), StreamClose(b, 0))))
    assert len(commits) == 1 and meta.object_state(first) == ObjectState.COMMITTED
    info_a, info_b = await meta.get_streams([a, b])
    assert (info_a.state, info_a.start_offset, info_a.end_offset) == (StreamState.CLOSED, 8, 10)
    assert (info_b.state, info_b.start_offset, info_b.end_offset) == (StreamState.CLOSED, 0, 5)


async def test_delete_requires_a_closed_stream() -> None:
    meta = StreamMetadataStateMachine()
    stream_id = await opened(meta, epoch=2)
    with pytest.raises(StreamNotClosedError):
        await meta.delete_stream(NODE, stream_id, 2)
    await meta.close_stream(NODE, stream_id, 2)
    with pytest.raises(StreamFencedError):
        await meta.delete_stream(NODE, stream_id, 1)
    await meta.delete_stream(NODE, stream_id, 2)
    assert await meta.get_streams([stream_id]) == []


async def test_trim_rules() -> None:
    meta = StreamMetadataStateMachine()
    stream_id = await opened(meta)
    with pytest.raises(StreamFencedError):
        await meta.trim_stream(OTHER, stream_id, 0, 5)
    await meta.trim_stream(NODE, stream_id, 0, 5)
    await meta.trim_stream(NODE, stream_id, 0, 3)  # never moves backwards
    assert (await meta.get_streams([stream_id]))[0].start_offset == 5
    await meta.close_stream(NODE, stream_id, 0)
    with pytest.raises(StreamNotOpenedError):
        await meta.trim_stream(NODE, stream_id, 0, 6)


async def test_stream_set_compaction_replaces_objects_atomically() -> None:
    clock = Clock()
    meta = StreamMetadataStateMachine(clock=clock)
    a, b = await opened(meta), await opened(meta)
    ids = await meta.prepare_objects(NODE, 2, 60_000)
    await meta.commit_stream_set_object(commit(NODE, ids, (a, 0, 10), (b, 0, 10)))
    await meta.commit_stream_set_object(commit(NODE, ids + 1, (a, 10, 20), (b, 10, 20)))
    new = await meta.prepare_objects(NODE, 2, 60_000)
    compaction = CommitStreamSetObjectRequest(
        node=NODE,
        object_id=new,
        object_size=500,
        ranges=(ObjectStreamRange(b, 0, 20),),
        stream_objects=(StreamObjectCommit(new + 1, 400, a, 0, 20),),
        compacted_object_ids=(ids, ids + 1),
    )
    await meta.commit_stream_set_object(compaction)
    assert [o.object_id for o in await meta.get_objects(a, 0, -1, 10)] == [new + 1]
    assert [o.object_id for o in await meta.get_objects(b, 5, -1, 10)] == [new]
    [sso] = await meta.get_stream_set_objects(NODE.node_id)
    assert sso.object_id == new and sso.order_id == ids  # keeps the smallest order id
    assert meta.object_state(ids) == ObjectState.MARK_DESTROYED
    assert [s.end_offset for s in await meta.get_streams([a, b])] == [20, 20]  # ends unchanged
    await meta.commit_stream_set_object(compaction)  # redundant retry succeeds
    other = await meta.prepare_objects(NODE, 1, 60_000)
    with pytest.raises(CompactedObjectsNotFoundError):
        await meta.commit_stream_set_object(
            CommitStreamSetObjectRequest(NODE, other, 1, (ObjectStreamRange(b, 0, 20),), compacted_object_ids=(ids,))
        )


async def test_stream_object_compaction_replaces_sources() -> None:
    meta = StreamMetadataStateMachine()
    a = await opened(meta)
    first = await meta.prepare_objects(NODE, 3, 60_000)
    for i in range(2):
        await meta.commit_stream_set_object(
            CommitStreamSetObjectRequest(
                NODE, -1, 0, (), stream_objects=(StreamObjectCommit(first + i, 10, a, i * 10, i * 10 + 10),)
            )
        )
    merged = CommitStreamObjectRequest(NODE, first + 2, 20, a, 0, 20, (first, first + 1))
    await meta.commit_stream_object(merged)
    assert [o.object_id for o in await meta.get_stream_objects(a)] == [first + 2]
    assert [o.object_id for o in await meta.get_objects(a, 0, -1, 10)] == [first + 2]
    await meta.commit_stream_object(merged)  # idempotent
    again = await meta.prepare_objects(NODE, 1, 60_000)
    with pytest.raises(CompactedObjectsNotFoundError):
        await meta.commit_stream_object(CommitStreamObjectRequest(NODE, again, 20, a, 0, 20, (first,)))


async def test_sink_sees_records_before_they_apply_and_failures_change_nothing() -> None:
    class Failing:
        fail = False

        async def __call__(self, records: Sequence[MetadataRecord]) -> None:
            if self.fail:
                raise OSError("metadata log unavailable")

    sink = Failing()
    meta = StreamMetadataStateMachine(sink=sink)
    stream_id = await opened(meta)
    sink.fail = True
    with pytest.raises(OSError):
        await meta.close_stream(NODE, stream_id, 0)
    assert (await meta.get_streams([stream_id]))[0].state == StreamState.OPENED


async def test_replaying_the_log_and_the_snapshot_rebuild_identical_state() -> None:
    clock = Clock()
    log = Log()
    meta = StreamMetadataStateMachine(sink=log, clock=clock)
    await meta.register_node(1, 100)
    a, b = await opened(meta), await opened(meta)
    ids = await meta.prepare_objects(NODE, 3, 60_000)
    await meta.commit_stream_set_object(commit(NODE, ids, (a, 0, 10), (b, 0, 7)))
    await meta.commit_stream_set_object(
        CommitStreamSetObjectRequest(NODE, -1, 0, (), stream_objects=(StreamObjectCommit(ids + 1, 5, a, 10, 30),))
    )
    await meta.trim_stream(NODE, a, 0, 12)
    await meta.close_stream(NODE, b, 0)
    await meta.put_kv("ns/topic/0", b"\x00\x01")
    await meta.put_kv("gone", b"x")
    await meta.delete_kv("gone")

    replayed = log.replay()
    from_snapshot = StreamMetadataStateMachine()
    for record in meta.snapshot():
        from_snapshot.apply(decode_record(encode_record(record)))
    for other in (replayed, from_snapshot):
        assert other.snapshot() == meta.snapshot()
        assert await other.get_streams([a, b]) == await meta.get_streams([a, b])
        assert await other.get_objects(a, 0, -1, 10) == await meta.get_objects(a, 0, -1, 10)
        assert await other.get_kv("ns/topic/0") == b"\x00\x01" and await other.get_kv("gone") is None
        assert await other.create_stream(NODE) == 2  # id counters survive
        assert await other.prepare_objects(NODE, 1, 1000) == ids + 3
        with pytest.raises(NodeEpochExpiredError):
            await other.prepare_objects(NodeIdentity(1, 99), 1, 1000)


def test_record_codec_round_trips_and_rejects_bad_input() -> None:
    record = StreamRecord(7, 3, 2, 100, StreamState.OPENED, (("topic", "t"),))
    assert decode_record(encode_record(record)) == record
    assert len(STREAM_RECORD_TYPES) == 16
    assert all(RECORD_TYPES[cls.TYPE] is cls for cls in STREAM_RECORD_TYPES)
    with pytest.raises(RecordDecodeError, match="unknown"):
        decode_record(b"\x7f\x00\x00\x00[]")
    with pytest.raises(RecordDecodeError, match="version"):
        decode_record(b"\x01\xf5\x00\x09[]")
    with pytest.raises(RecordDecodeError, match="malformed"):
        decode_record(encode_record(KVRecord("k", b"v"))[:-3])
    with pytest.raises(RecordDecodeError, match="shorter"):
        decode_record(b"\x01")
    # An older version without the trailing (defaulted) field still decodes.
    assert decode_record(b"\x01\xf5\x00\x00[7,3,2,100,1]") == StreamRecord(7, 3, 2, 100, StreamState.OPENED)


def test_registry_is_extensible_but_rejects_collisions() -> None:
    # A type id no module registers: ids 0-9 belong to metadata.cluster_records, which other tests may have imported.
    free = 4000
    assert free not in RECORD_TYPES

    @register_record
    @dataclass(frozen=True, slots=True)
    class ExtensionRecord(MetadataRecord):
        TYPE: ClassVar[int] = free
        name: str
        partitions: int

    try:
        assert decode_record(encode_record(ExtensionRecord("t", 3))) == ExtensionRecord("t", 3)
        with pytest.raises(ValueError, match="already registered"):

            @register_record
            @dataclass(frozen=True)
            class Clash(MetadataRecord):
                TYPE: ClassVar[int] = free
    finally:
        del RECORD_TYPES[free]


def test_applying_a_record_for_an_unknown_stream_names_it() -> None:
    with pytest.raises(StorageError, match="stream 42"):
        StreamMetadataStateMachine().apply(RangeRecord(42, 0, 0, 1, 0, 0))
