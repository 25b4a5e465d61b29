"""Time-index search start and leader-epoch answers (OffsetForLeaderEpoch semantics)."""

from __future__ import annotations

import pytest

from broker.partition.indexes import (
    EpochEntry,
    IndexFormatError,
    LeaderEpochCache,
    TimeIndex,
    TimeIndexEntry,
    decode_epoch_checkpoint,
    decode_time_entry,
    encode_epoch_checkpoint,
    encode_time_entry,
)


def test_time_index_search_starts_at_last_entry_below_target() -> None:
    index = TimeIndex()
    for ts, off in [(100, 0), (200, 10), (300, 25)]:
        assert index.add(TimeIndexEntry(ts, off))
    assert not index.add(TimeIndexEntry(250, 30))  # not newer: ignored
    assert index.scan_start(50, 0) == 0
    assert index.scan_start(200, 0) == 0  # a record at ts 200 may be anywhere from offset 0..10
    assert index.scan_start(201, 0) == 10
    assert index.scan_start(10_000, 0) == 25
    assert index.scan_start(201, 12) == 12  # never before the log start
    assert decode_time_entry(encode_time_entry(TimeIndexEntry(5, 6))) == TimeIndexEntry(5, 6)


def test_leader_epoch_end_offsets() -> None:
    cache = LeaderEpochCache()
    cache.assign(1, 0)
    cache.assign(3, 50)
    cache.assign(4, 50)  # epoch 3 wrote nothing: superseded
    cache.assign(6, 80)
    assert [e.epoch for e in cache.entries] == [1, 4, 6]
    # Below every known epoch: Kafka echoes the epoch with the first known epoch's start (its data is gone).
    assert cache.end_offset_for(0, 120) == (0, 0)
    assert cache.end_offset_for(1, 120) == (1, 50)
    assert cache.end_offset_for(3, 120) == (1, 50)
    assert cache.end_offset_for(5, 120) == (4, 80)
    assert cache.end_offset_for(6, 120) == (6, 120)
    # Undefined or newer than the leader's epoch: unknown, as Kafka answers.
    assert cache.end_offset_for(9, 120) == (-1, -1)
    assert cache.end_offset_for(-1, 120) == (-1, -1)
    assert LeaderEpochCache().end_offset_for(0, 0) == (-1, -1)
    cache.truncate_start(60)
    assert cache.entries == [EpochEntry(4, 60), EpochEntry(6, 80)]


def test_epoch_checkpoint_codec() -> None:
    entries = [EpochEntry(1, 0), EpochEntry(7, 1 << 40)]
    assert decode_epoch_checkpoint(encode_epoch_checkpoint(entries)) == entries
    with pytest.raises(IndexFormatError):
        decode_epoch_checkpoint(encode_epoch_checkpoint(entries)[:-1])
