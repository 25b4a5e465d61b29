"""KIP-932 share session rules, sans-I/O (``broker.share_session_cache``): epoch 0 opens with the full partition
list, n > 0 must match and adds / forgets partitions, -1 closes; Kafka's codes for an unknown session, a wrong
epoch, acknowledgements while opening, and a full cache; incremental responses carry only partitions with news; a
closed connection takes its sessions with it. Nothing changes when a request is refused."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from broker.share_session_cache import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    ContextKind,
    PartitionKey,
    ShareSessionCache,
    next_epoch,
)
from wire.errors import KafkaError

A, B = uuid.uuid4(), uuid.uuid4()
A0: PartitionKey = (A, "a", 0)
A1: PartitionKey = (A, "a", 1)
B0: PartitionKey = (B, "b", 0)
CONN = 1


def _code(call: object) -> ErrorCode:
    assert isinstance(call, pytest.ExceptionInfo)
    assert isinstance(call.value, KafkaError)
    return call.value.code


def _open(cache: ShareSessionCache, member: str = "m1", parts: tuple[PartitionKey, ...] = (A0, A1)) -> None:
    cache.new_context("g", member, INITIAL_EPOCH, parts, (), acknowledging=False, connection=CONN)


def test_epochs_open_move_on_and_close() -> None:
    cache = ShareSessionCache(10)
    opened = cache.new_context("g", "m1", 0, [A0, A1], [], acknowledging=False, connection=CONN)
    assert opened.kind is ContextKind.INITIAL and opened.partitions == (A0, A1)
    session = cache.get("g", "m1")
    assert session is not None and session.epoch == 1

    inc = cache.new_context("g", "m1", 1, [B0], [A1], acknowledging=True, connection=CONN)
    assert inc.kind is ContextKind.SUBSEQUENT and inc.partitions == (A0, B0)
    assert session.epoch == 2 and cache.still_current(inc)

    final = cache.new_context("g", "m1", FINAL_EPOCH, [A0], [], acknowledging=True, connection=CONN)
    assert final.kind is ContextKind.FINAL and final.partitions == ()
    assert cache.get("g", "m1") is session  # the handler closes it once the acknowledgements are applied
    assert cache.remove("g", "m1") is session and len(cache) == 0


def test_epoch_wraps_and_final_stays_final() -> None:
    assert next_epoch(0) == 1 and next_epoch(0x7FFFFFFF) == 1 and next_epoch(-1) == -1


def test_unknown_session_and_wrong_epoch_change_nothing() -> None:
    cache = ShareSessionCache(10)
    with pytest.raises(KafkaError) as missing:
        cache.new_context("g", "m1", 3, [A0], [], acknowledging=False, connection=CONN)
    assert _code(missing) == ErrorCode.share_session_not_found
    with pytest.raises(KafkaError) as closing:
        cache.new_context("g", "m1", FINAL_EPOCH, [], [], acknowledging=True, connection=CONN)
    assert _code(closing) == ErrorCode.share_session_not_found
    assert len(cache) == 0

    _open(cache)
    for wrong in (2, 0x7FFFFFFF, -7):
        with pytest.raises(KafkaError) as info:
            cache.new_context("g", "m1", wrong, [B0], [A0], acknowledging=False, connection=CONN)
        assert _code(info) == ErrorCode.invalid_share_session_epoch
    session = cache.get("g", "m1")
    assert session is not None and session.epoch == 1 and session.partition_keys() == [A0, A1]
    # Another member of the group, or the member in another group, has no session.
    with pytest.raises(KafkaError) as other:
        cache.new_context("g", "m2", 1, [], [], acknowledging=False, connection=CONN)
    assert _code(other) == ErrorCode.share_session_not_found
    with pytest.raises(KafkaError) as other_group:
        cache.new_context("h", "m1", 1, [], [], acknowledging=False, connection=CONN)
    assert _code(other_group) == ErrorCode.share_session_not_found


def test_acknowledgements_cannot_open_a_session() -> None:
    cache = ShareSessionCache(10)
    with pytest.raises(KafkaError) as info:
        cache.new_context("g", "m1", INITIAL_EPOCH, [A0], [], acknowledging=True, connection=CONN)
    assert _code(info) == ErrorCode.invalid_request
    assert len(cache) == 0
    _open(cache)
    with pytest.raises(KafkaError) as reopen:
        cache.new_context("g", "m1", INITIAL_EPOCH, [B0], [], acknowledging=True, connection=CONN)
    assert _code(reopen) == ErrorCode.invalid_request
    session = cache.get("g", "m1")
    assert session is not None and session.partition_keys() == [A0, A1]


def test_share_acknowledge_epochs() -> None:
    cache = ShareSessionCache(10)
    with pytest.raises(KafkaError) as missing:
        cache.acknowledge_update("g", "m1", 1)
    assert _code(missing) == ErrorCode.share_session_not_found
    _open(cache)
    with pytest.raises(KafkaError) as opening:
        cache.acknowledge_update("g", "m1", INITIAL_EPOCH)
    assert _code(opening) == ErrorCode.invalid_share_session_epoch
    with pytest.raises(KafkaError) as wrong:
        cache.acknowledge_update("g", "m1", 5)
    assert _code(wrong) == ErrorCode.invalid_share_session_epoch
    session = cache.get("g", "m1")
    assert session is not None and session.epoch == 1
    cache.acknowledge_update("g", "m1", 1)
    assert session.epoch == 2
    cache.acknowledge_update("g", "m1", FINAL_EPOCH)  # allowed; the handler closes it after the acknowledgements
    assert session.epoch == 2
    with pytest.raises(KafkaError) as stale:
        cache.new_context("g", "m1", 1, [], [], acknowledging=False, connection=CONN)
    assert _code(stale) == ErrorCode.invalid_share_session_epoch


def test_session_limit_counts_other_members_only() -> None:
    cache = ShareSessionCache(2)
    _open(cache, "m1")
    _open(cache, "m2")
    with pytest.raises(KafkaError) as info:
        _open(cache, "m3")
    assert _code(info) == ErrorCode.share_session_limit_reached
    assert len(cache) == 2 and cache.get("g", "m3") is None
    # A member re-opening its own session replaces it, full cache or not.
    cache.new_context("g", "m1", INITIAL_EPOCH, [B0], [], acknowledging=False, connection=CONN)
    session = cache.get("g", "m1")
    assert session is not None and session.partition_keys() == [B0] and session.epoch == 1
    cache.remove("g", "m2")
    _open(cache, "m3")
    assert len(cache) == 2 and cache.partitions_count() == 3


def test_incremental_response_carries_news_only() -> None:
    cache = ShareSessionCache(10)
    full = cache.new_context("g", "m1", 0, [A0, A1], [], acknowledging=False, connection=CONN)
    assert all(full.include(k, has_records=False, error=0) for k in (A0, A1))

    inc = cache.new_context("g", "m1", 1, [B0], [], acknowledging=False, connection=CONN)
    # A0: records; A1: nothing new; B0: just added, sent once.
    assert inc.include(A0, has_records=True, error=0)
    assert not inc.include(A1, has_records=False, error=0)
    assert inc.include(B0, has_records=False, error=0)

    nxt = cache.new_context("g", "m1", 2, [], [], acknowledging=False, connection=CONN)
    assert not nxt.include(B0, has_records=False, error=0)
    # An error is always sent, and its clearing is sent once afterwards.
    assert nxt.include(A1, has_records=False, error=int(ErrorCode.not_leader_or_follower))
    after = cache.new_context("g", "m1", 3, [], [], acknowledging=False, connection=CONN)
    assert after.include(A1, has_records=False, error=0)
    last = cache.new_context("g", "m1", 4, [], [], acknowledging=False, connection=CONN)
    assert not last.include(A1, has_records=False, error=0)


def test_a_duplicate_request_that_raced_is_no_longer_current() -> None:
    cache = ShareSessionCache(10)
    _open(cache)
    first = cache.new_context("g", "m1", 1, [], [], acknowledging=False, connection=CONN)
    assert cache.still_current(first)
    cache.acknowledge_update("g", "m1", 2)  # a ShareAcknowledge moved the epoch while the fetch waited
    assert not cache.still_current(first)
    reopened = cache.new_context("g", "m1", 3, [], [], acknowledging=False, connection=CONN)
    _open(cache)  # replaced by a new session
    assert not cache.still_current(reopened)


def test_closed_connection_takes_its_sessions_only() -> None:
    cache = ShareSessionCache(10)
    cache.new_context("g", "m1", 0, [A0], [], acknowledging=False, connection="c1")
    cache.new_context("g", "m2", 0, [A0], [], acknowledging=False, connection="c2")
    cache.new_context("h", "m1", 0, [B0], [], acknowledging=False, connection="c1")
    gone = cache.connection_closed("c1")
    assert sorted(s.key for s in gone) == [("g", "m1"), ("h", "m1")]
    assert len(cache) == 1 and cache.get("g", "m2") is not None
    # A member that re-opened its session on a new connection keeps it when the old connection goes.
    cache.new_context("g", "m2", 0, [A0], [], acknowledging=False, connection="c3")
    assert cache.connection_closed("c2") == []
    assert cache.get("g", "m2") is not None
