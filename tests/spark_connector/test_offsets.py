"""Offset resolution and range planning, without Spark or a broker: the arithmetic of Spark's Kafka source."""

from __future__ import annotations

import pytest

from spark_connector.offsets import (
    OffsetRange,
    check_batch_bounds,
    from_stream_offset,
    plan_ranges,
    rate_limit,
    resolve_offsets,
    resolve_timestamp_offsets,
    to_stream_offset,
)
from spark_connector.options import EARLIEST, LATEST, OptionError

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)
EARLY = {A0: 10, A1: 0, B0: 5}
LATE = {A0: 100, A1: 40, B0: 5}


def test_resolve_names_and_markers() -> None:
    assert resolve_offsets("earliest", [A0, A1, B0], EARLY, LATE, option="startingOffsets") == EARLY
    assert resolve_offsets("latest", [A0, A1, B0], EARLY, LATE, option="startingOffsets") == LATE
    spec = {A0: 20, A1: EARLIEST, B0: LATEST}
    assert resolve_offsets(spec, [A0, A1, B0], EARLY, LATE, option="startingOffsets") == {A0: 20, A1: 0, B0: 5}


def test_per_partition_offsets_must_cover_exactly_the_subscription() -> None:
    with pytest.raises(OptionError, match=r"startingOffsets.*missing \[a-1, b-0\].*\[c-0\]"):
        resolve_offsets({A0: 1, ("c", 0): 2}, [A0, A1, B0], EARLY, LATE, option="startingOffsets")


def test_by_timestamp_strategies() -> None:
    found = {A0: 50, A1: None}
    with pytest.raises(OptionError, match="startingOffsetsByTimestampStrategy"):
        resolve_timestamp_offsets(found, LATE, strategy="error")
    assert resolve_timestamp_offsets(found, LATE, strategy="latest") == {A0: 50, A1: 40}


def test_batch_start_after_end_is_an_error() -> None:
    check_batch_bounds({A0: 5}, {A0: 5})
    with pytest.raises(OptionError, match="a-0"):
        check_batch_bounds({A0: 6}, {A0: 5})


def test_one_range_per_partition_with_records() -> None:
    assert plan_ranges(EARLY, LATE, None) == [OffsetRange("a", 0, 10, 100), OffsetRange("a", 1, 0, 40)]
    assert plan_ranges(EARLY, LATE, 2) == plan_ranges(EARLY, LATE, None)


def test_min_partitions_splits_in_proportion_to_size() -> None:
    ranges = plan_ranges({A0: 0, A1: 0}, {A0: 90, A1: 10}, 10)
    assert [(r.partition, r.start, r.end) for r in ranges] == [
        (0, 0, 10), (0, 10, 20), (0, 20, 30), (0, 30, 40), (0, 40, 50), (0, 50, 60), (0, 60, 70), (0, 70, 80),
        (0, 80, 90), (1, 0, 10)]
    uneven = plan_ranges({A0: 0}, {A0: 10}, 3)
    assert [(r.start, r.end) for r in uneven] == [(0, 3), (3, 6), (6, 10)]
    assert sum(r.size for r in plan_ranges({A0: 0, A1: 0}, {A0: 7, A1: 1}, 5)) == 8


def test_rate_limit_is_pro_rata_and_never_starves_a_small_partition() -> None:
    start = {A0: 0, A1: 0, B0: 7}
    latest = {A0: 1000, A1: 1, B0: 7}
    assert rate_limit(start, latest, 100) == {A0: 99, A1: 1, B0: 7}
    assert rate_limit(start, latest, 10_000) == latest
    assert rate_limit({A0: 5}, {A0: 5}, 10) == {A0: 5}


def test_stream_offset_json_round_trip() -> None:
    offsets = {A0: 3, A1: 4, B0: 0}
    assert to_stream_offset(offsets) == {"a": {"0": 3, "1": 4}, "b": {"0": 0}}
    assert from_stream_offset(to_stream_offset(offsets)) == offsets
