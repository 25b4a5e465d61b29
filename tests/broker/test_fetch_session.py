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


def test_a_full_cache_evicts_only_an_idle_or_a_smaller_session_else_answers_without_one() -> None:
    """Kafka's FetchSessionCache: a flood of small sessions cannot push the consumers' sessions out; the new
    request is served as a sessionless full fetch (session id 0), which clients go on with."""
    cache = FetchSessionCache(max_sessions=2)
    big = cache.resolve(0, 0, [PartitionRequest(k, 0, 10) for k in (A0, A1)], []).session_id
    small = cache.resolve(0, 0, [PartitionRequest(A0, 0, 10)], []).session_id
    flood = cache.resolve(0, 0, [PartitionRequest(B0, 0, 10)], [])
    assert flood.session_id == 0 and not flood.incremental and [k for k, _ in flood.partitions] == [B0]
    assert len(cache) == 2 and cache.resolve(big, 1, [], []).incremental and cache.resolve(small, 1, [], [])
    # A larger session takes the smallest one's place.
    larger = cache.resolve(0, 0, [PartitionRequest(k, 0, 10) for k in (A0, A1, B0)], []).session_id
    assert larger != 0 and len(cache) == 2
    with pytest.raises(KafkaError) as info:
        cache.resolve(small, 2, [], [])
    assert info.value.code == ErrorCode.fetch_session_id_not_found
    # An idle session goes whatever its size.
    idle = FetchSessionCache(max_sessions=1, idle_timeout_s=0.0)
    idle.resolve(0, 0, [PartitionRequest(k, 0, 10) for k in (A0, A1)], [])
    assert idle.resolve(0, 0, [PartitionRequest(B0, 0, 10)], []).session_id != 0


def test_a_cache_of_no_slots_serves_every_fetch_without_a_session() -> None:
    """``max.incremental.fetch.session.cache.slots=0``, as Kafka reads it."""
    full = FetchSessionCache(max_sessions=0).resolve(0, 0, [PartitionRequest(A0, 0, 10)], [])
    assert full.session_id == 0 and [k for k, _ in full.partitions] == [A0]


def test_an_incremental_fetch_without_a_session_id_is_session_not_found() -> None:
    with pytest.raises(KafkaError) as info:
        FetchSessionCache().resolve(0, 3, [], [])
    assert info.value.code == ErrorCode.fetch_session_id_not_found


def test_partitions_that_returned_records_are_read_last_next_time() -> None:
    """Kafka's IncrementalFetchContext: with the response's byte budget filled by the first partitions, the others
    would otherwise never be read."""
    cache = FetchSessionCache()
    full = cache.resolve(0, 0, [PartitionRequest(k, 0, 10) for k in (A0, A1, B0)], [])
    full.filter([_outcome(A0, 5, True), _outcome(A1, 5, True), _outcome(B0, 5)])
    first = cache.resolve(full.session_id, 1, [], [])
    assert [k for k, _ in first.partitions] == [A0, A1, B0]  # a full fetch keeps the client's order
    first.filter([_outcome(A0, 9, True), _outcome(A1, 5), _outcome(B0, 5)])
    second = cache.resolve(full.session_id, 2, [], [])
    assert [k for k, _ in second.partitions] == [A1, B0, A0]
