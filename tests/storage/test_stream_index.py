"""A stream's index of its objects by offset (``storage.metadata.state.StreamIndex``) after removals: what
``get_objects`` reads once compactions and retention removed objects, live or replayed on a restart."""

from __future__ import annotations

from storage.metadata.state import Placement, StreamIndex


def _ids(index: StreamIndex, offset: int) -> list[int]:
    """The objects holding offsets from ``offset`` on, which must come ordered by their end offset (objects ending
    at the same offset in either order, so sorted here by id among themselves)."""
    placements = list(index.from_offset(offset))
    assert [p.end for p in placements] == sorted(p.end for p in placements)
    return [p.object_id for p in sorted(placements, key=lambda p: (p.end, p.object_id))]


def test_removing_objects_keeps_the_others_in_offset_order() -> None:
    index = StreamIndex()
    # Object 3 (a compacted stream object) covers what 1 and 2 did and ends where 2 ends; 4 and 5 share an end too.
    for placement in (Placement(0, 10, 1), Placement(10, 20, 2), Placement(0, 20, 3), Placement(20, 30, 4),
                      Placement(25, 30, 5), Placement(30, 40, 6)):
        index.add(placement)
    assert _ids(index, 0) == [1, 2, 3, 4, 5, 6]

    index.remove(2)
    index.remove(1)
    assert _ids(index, 0) == [3, 4, 5, 6] and _ids(index, 19) == [3, 4, 5, 6] and _ids(index, 20) == [4, 5, 6]
    index.remove(5)
    assert _ids(index, 0) == [3, 4, 6] and len(index) == 3
    index.remove(5)  # already gone: nothing changes
    index.remove(99)  # never there
    assert _ids(index, 29) == [4, 6] and _ids(index, 30) == [6]
    for object_id in (3, 4, 6):
        index.remove(object_id)
    assert _ids(index, 0) == [] and len(index) == 0


def test_an_object_placed_twice_in_a_stream_is_removed_entirely() -> None:
    index = StreamIndex()
    for placement in (Placement(0, 5, 7), Placement(5, 10, 8), Placement(10, 15, 7)):
        index.add(placement)
    index.remove(7)
    assert _ids(index, 0) == [8]
