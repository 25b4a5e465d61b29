"""Which offsets a failover in place commits from each WAL object, from their indexes alone: the same filter as the
record-by-record replay (the dead node's opened streams, from each one's committed end on, no gaps)."""

from __future__ import annotations

from storage.failover_copy import IndexedObject, plan_in_place
from storage.metadata.api import OpeningStream
from storage.objects.format import IndexEntry
from storage.wal.s3_format import object_key


def _wal_object(start: int, *blocks: tuple[int, int, int, int]) -> IndexedObject:
    """A WAL object whose index holds ``(stream, start, end, batches)`` blocks, in that order."""
    entries, position = [], 100
    for stream, first, end, count in blocks:
        entries.append(IndexEntry(stream, first, end, count, position, 1000))
        position += 1000
    return IndexedObject(object_key("_fjord_t", 1, 5, start, start + 10), position + 84, entries)


def test_each_object_commits_each_stream_from_its_committed_end_on_in_wal_order() -> None:
    first = _wal_object(0, (1, 0, 10, 10), (2, 0, 4, 4), (3, 0, 5, 5), (9, 0, 3, 3))
    second = _wal_object(10, (1, 10, 20, 10), (2, 4, 8, 4), (3, 7, 9, 2))
    opening = [OpeningStream(1, 4, 0, 6), OpeningStream(2, 4, 0, 4), OpeningStream(3, 4, 0, 5)]

    plan = plan_in_place([first, second], opening, {(first.obj.key, 1): 4})

    ranges = [[(r.stream_id, r.start_offset, r.end_offset, r.stream_epoch) for r in o.ranges] for o in plan.objects]
    # Stream 1 from its committed end 6 (inside the block, whose batches from 6 on are counted as read: 4); stream 2
    # from exactly its end 4 in the second object only; stream 3 stops at its gap (5 -> 7); stream 9 is not ours.
    assert ranges == [[(1, 6, 10, 4)], [(1, 10, 20, 4), (2, 4, 8, 4)]]
    assert [o.batches for o in plan.objects] == [4, 14]
    assert [(s.entry.stream_id, s.offset) for s in plan.straddles] == [(1, 6)]
    assert plan.skipped == 4 + 5 + 3 + 2


def test_a_stream_whose_committed_end_starts_no_batch_commits_nothing() -> None:
    first = _wal_object(0, (1, 0, 10, 10), (2, 0, 5, 5))
    second = _wal_object(10, (1, 10, 20, 10))
    opening = [OpeningStream(1, 4, 0, 6), OpeningStream(2, 4, 0, 0)]
    plan = plan_in_place([first, second], opening, {}, refused=frozenset({1}))
    assert [[(r.stream_id, r.start_offset, r.end_offset) for r in o.ranges] for o in plan.objects] == [[(2, 0, 5)]]
