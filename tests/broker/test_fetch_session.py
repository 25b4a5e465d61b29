"""KIP-227 session rules: creation, incremental updates, forgotten topics, epoch and id errors, and responses
that carry only changed partitions."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from broker.fetch_session import FetchSessionCache, PartitionOutcome, PartitionRequest
from wire.errors import KafkaError

A0 = ("id-a", "a", 0)
A1 = ("id-a", "a", 1)
B0 = ("id-b", "b", 0)


def _outcome(key: tuple[object, str, int], hw: int, records: bool = False) -> PartitionOutcome:
    return PartitionOutcome(key, ErrorCode.none, hw, 0, hw, records)


def test_full_then_incremental_fetch_returns_only_changes() -> None:
    cache = FetchSessionCache()
    full = cache.resolve(0, 0, [PartitionRequest(k, 0, 1000) for k in (A0, A1, B0)], [])
    assert full.session_id != 0 and not full.incremental
    assert full.filter([_outcome(A0, 5, True), _outcome(A1, 0), _outcome(B0, 0)]) == [A0, A1, B0]

    inc = cache.resolve(full.session_id, 1, [PartitionRequest(A0, 5, 1000)], [B0])
    assert inc.incremental and [k for k, _ in inc.partitions] == [A0, A1]
    assert dict(inc.partitions)[A0].fetch_offset == 5
    # A1's high watermark moved, A0 has nothing new: only A1 goes back.
    assert inc.filter([_outcome(A0, 5), _outcome(A1, 3)]) == [A1]
    assert cache.resolve(full.session_id, 2, [], []).incremental


def test_session_errors() -> None:
    cache = FetchSessionCache()
    full = cache.resolve(0, 0, [PartitionRequest(A0, 0, 10)], [])
    with pytest.raises(KafkaError) as info:
        cache.resolve(full.session_id, 7, [], [])
    assert info.value.code == ErrorCode.invalid_fetch_session_epoch
    with pytest.raises(KafkaError) as info:
        cache.resolve(full.session_id + 1, 1, [], [])
    assert info.value.code == ErrorCode.fetch_session_id_not_found
    closed = cache.resolve(full.session_id, -1, [PartitionRequest(A0, 0, 10)], [])
    assert closed.session_id == 0 and len(cache) == 0


def test_cache_is_bounded() -> None:
    cache = FetchSessionCache(max_sessions=2)
    ids = [cache.resolve(0, 0, [PartitionRequest(A0, 0, 10)], []).session_id for _ in range(3)]
    assert len(cache) == 2
    with pytest.raises(KafkaError):
        cache.resolve(ids[0], 1, [], [])
