"""The sans-I/O share-partition state machine (broker/share/partition_state.py): Kafka's record-state rules."""

from __future__ import annotations

import tracemalloc

import pytest
from kio.schema.errors import ErrorCode

from broker.share.partition_state import (
    AckBatch,
    AckError,
    AcquiredRange,
    Limits,
    LogBatch,
    PartitionShareState,
    StateBatch,
)
from broker.share.record_states import AcknowledgeType, RecordState

ACCEPT, RELEASE = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE
REJECT, GAP = AcknowledgeType.REJECT, AcknowledgeType.GAP


def log(*ranges: tuple[int, int], skip: bool = False) -> list[LogBatch]:
    return [LogBatch(a, b, skip) for a, b in ranges]


def one(first: int, last: int, kind: int) -> AckBatch:
    return AckBatch(first, last, (int(kind),))


def test_acquire_hands_out_records_once_and_counts_the_delivery() -> None:
    state = PartitionShareState(0)
    assert state.acquire("a", log((0, 4), (5, 9)), 100, now_ms=0) == [AcquiredRange(0, 9, 1)]
    assert state.acquire("b", log((0, 4), (5, 9)), 100, now_ms=0) == []
    assert state.acquired_count == 10
    assert state.state_of(3) == (RecordState.ACQUIRED, 1, "a")
    assert state.fetch_offset() == 10


def test_max_records_limits_one_acquisition() -> None:
    state = PartitionShareState(0)
    assert state.acquire("a", log((0, 9)), 3, now_ms=0) == [AcquiredRange(0, 2, 1)]
    assert state.acquire("b", log((0, 9)), 3, now_ms=0) == [AcquiredRange(3, 5, 1)]


def test_whole_batches_complete_the_batch_past_max_records_and_the_window() -> None:
    """Batch-optimized acquisition: the limits are checked between batches, the batch holding them is taken whole."""
    state = PartitionShareState(0, Limits(max_record_locks=7))
    assert state.acquire("a", log((0, 4), (5, 9)), 3, now_ms=0, whole_batches=True) == [AcquiredRange(0, 4, 1)]
    # 5 in flight leaves room for 2 of the window's 7, and the batch 5-9 is completed past it; 10-14 is not begun.
    assert state.acquire("b", log((5, 9), (10, 14)), 100, now_ms=0, whole_batches=True) == [AcquiredRange(5, 9, 1)]
    assert state.in_flight() == 10 and not state.can_acquire(log_end=15)
    # Given back, the records of a batch come again together, each at its next delivery count.
    state.acknowledge("a", [AckBatch(0, 4, (RELEASE, ACCEPT, RELEASE, RELEASE, RELEASE))])
    assert state.acquire("c", log((0, 4), (5, 9)), 1, now_ms=0, whole_batches=True) == [
        AcquiredRange(0, 0, 2), AcquiredRange(2, 4, 2)
    ]


def test_whole_batches_cut_fresh_ranges_every_batch_size_records() -> None:
    state = PartitionShareState(0)
    batches = log((0, 3), (4, 7), (8, 11), (12, 15))
    assert state.acquire("a", batches, 10, now_ms=0, whole_batches=True, batch_size=5) == [
        AcquiredRange(0, 7, 1), AcquiredRange(8, 11, 1)
    ]


def test_accept_advances_the_start_offset_and_persists_it() -> None:
    state = PartitionShareState(0)
    state.acquire("a", log((0, 9)), 100, now_ms=0)
    assert state.take_update() is None  # acquisitions are not persisted
    state.acknowledge("a", [one(0, 4, ACCEPT)])
    assert state.start_offset == 5
    update = state.take_update()
    assert update is not None and update.start_offset == 5
    state.acknowledge("a", [AckBatch(5, 9, (ACCEPT, ACCEPT, REJECT, ACCEPT, ACCEPT))])
    assert state.start_offset == 10 and state.in_flight() == 0


def test_start_offset_waits_for_the_oldest_unacknowledged_record() -> None:
    state = PartitionShareState(0)
    state.acquire("a", log((0, 0)), 100, now_ms=0)
    state.acquire("b", log((1, 5)), 100, now_ms=0)
    state.acknowledge("b", [one(1, 5, ACCEPT)])
    assert state.start_offset == 0
    update = state.take_update()
    assert update is not None
    assert update.batches == (StateBatch(1, 5, RecordState.ACKNOWLEDGED, 1),)
    state.acknowledge("a", [one(0, 0, ACCEPT)])
    assert state.start_offset == 6


def test_released_records_come_back_with_a_higher_delivery_count() -> None:
    state = PartitionShareState(0)
    state.acquire("a", log((0, 4)), 100, now_ms=0)
    state.acknowledge("a", [one(0, 1, ACCEPT), one(2, 4, RELEASE)])
    assert state.fetch_offset() == 2
    assert state.acquire("b", log((0, 4)), 100, now_ms=0) == [AcquiredRange(2, 4, 2)]


def test_rejected_records_never_come_back() -> None:
    state = PartitionShareState(0)
    state.acquire("a", log((0, 4)), 100, now_ms=0)
    state.acknowledge("a", [one(0, 0, REJECT), one(1, 4, RELEASE)])
    assert state.acquire("b", log((0, 4)), 100, now_ms=0) == [AcquiredRange(1, 4, 2)]
    assert state.state_of(0) is None and state.start_offset == 1


def test_renew_keeps_the_record_with_a_fresh_lock() -> None:
    state = PartitionShareState(0, Limits(record_lock_duration_ms=1000))
    state.acquire("a", log((0, 1)), 100, now_ms=0)
    state.acknowledge("a", [AckBatch(0, 1, (AcknowledgeType.RENEW, ACCEPT))], now_ms=900)
    assert state.take_update() is not None  # for the ACCEPT; a renewal alone writes nothing
    assert state.expire_locks(1000) == (0, 0)
    assert state.state_of(0) == (RecordState.ACQUIRED, 1, "a")
    assert state.expire_locks(1900) == (1, 0)


def test_a_renewed_record_can_be_settled_by_the_next_batch() -> None:
    """Only a renewal leaves the shared offset acquired, so the next batch may settle it."""
    state = PartitionShareState(0)
    state.acquire("a", log((0, 2)), 100, now_ms=0)
    state.acknowledge("a", [AckBatch(0, 1, (AcknowledgeType.RENEW,)), one(1, 2, ACCEPT)], now_ms=10)
    assert state.state_of(0) == (RecordState.ACQUIRED, 1, "a")
    assert state.state_of(2) == (RecordState.ACKNOWLEDGED, 1, None)


def test_gap_acknowledgements_archive() -> None:
    state = PartitionShareState(0)
    state.acquire("a", log((0, 2)), 100, now_ms=0)
    state.acknowledge("a", [AckBatch(0, 2, (ACCEPT, GAP, ACCEPT))])
    assert state.start_offset == 3


def test_delivery_limit_archives_a_record_released_that_often() -> None:
    state = PartitionShareState(0, Limits(delivery_count_limit=3))
    for delivery in (1, 2, 3):
        assert state.acquire("a", log((0, 0), (1, 1)), 1, now_ms=0) == [AcquiredRange(0, 0, delivery)]
        counted = state.acknowledge("a", [one(0, 0, RELEASE)])
    assert counted == {REJECT: 1}  # the third release archived it
    assert state.start_offset == 1
    assert state.acquire("a", log((0, 0), (1, 1)), 5, now_ms=0) == [AcquiredRange(1, 1, 1)]


def test_locks_time_out_with_the_clock() -> None:
    state = PartitionShareState(0, Limits(record_lock_duration_ms=1000, delivery_count_limit=2))
    state.acquire("a", log((0, 4)), 100, now_ms=10_000)
    assert state.next_deadline() == 11_000
    assert state.expire_locks(10_999) == (0, 0)
    assert state.expire_locks(11_000) == (5, 0)
    assert state.acquired_count == 0
    # A late acknowledgement of a timed-out lock is refused and changes nothing.
    with pytest.raises(AckError) as refused:
        state.acknowledge("a", [one(0, 4, ACCEPT)])
    assert refused.value.code == ErrorCode.invalid_record_state
    assert state.acquire("b", log((0, 4)), 100, now_ms=20_000) == [AcquiredRange(0, 4, 2)]
    assert state.expire_locks(21_000) == (0, 5)  # second delivery timed out: the limit archives them
    assert state.start_offset == 5


def test_release_member_gives_back_only_that_members_records() -> None:
    state = PartitionShareState(0)
    state.acquire("a", log((0, 2)), 100, now_ms=0)
    state.acquire("b", log((3, 5)), 100, now_ms=0)
    assert state.release_member("a") == (3, 0)
    assert state.state_of(4) == (RecordState.ACQUIRED, 1, "b")
    assert state.acquire("c", log((0, 5)), 100, now_ms=0) == [AcquiredRange(0, 2, 2)]


def test_max_record_locks_bounds_fresh_acquisitions() -> None:
    state = PartitionShareState(0, Limits(max_record_locks=4))
    assert state.acquire("a", log((0, 9)), 100, now_ms=0) == [AcquiredRange(0, 3, 1)]
    assert not state.can_acquire(log_end=10)
    assert state.acquire("b", log((4, 9)), 100, now_ms=0) == []
    state.acknowledge("a", [one(0, 1, ACCEPT)])
    assert state.can_acquire(log_end=10)
    assert state.acquire("b", log((4, 9)), 100, now_ms=0) == [AcquiredRange(4, 5, 1)]


def test_max_record_locks_does_not_archive_records_left_behind() -> None:
    """A batch cut by the limit must not make its tail look like a log gap before the next batch."""
    state = PartitionShareState(0, Limits(max_record_locks=3))
    state.acquire("a", log((0, 4), (5, 9)), 100, now_ms=0)
    state.acknowledge("a", [one(0, 2, ACCEPT)])
    assert state.acquire("a", log((0, 4), (5, 9)), 100, now_ms=0) == [AcquiredRange(3, 5, 1)]


def test_one_acquisition_mixes_records_given_back_with_fresh_ones() -> None:
    """Released records in the middle of the window come back at their own delivery count, records another member
    holds are passed over, and fresh records follow in the same acquisition, as ranges a consumer can read."""
    state = PartitionShareState(0)
    assert state.acquire("a", log((0, 9)), 100, now_ms=0) == [AcquiredRange(0, 9, 1)]
    state.acknowledge("a", [AckBatch(2, 5, (RELEASE, RELEASE, ACCEPT, RELEASE)), one(7, 7, RELEASE)])
    state.acquire("c", log((7, 7)), 1, now_ms=0)
    state.acknowledge("c", [one(7, 7, RELEASE)])
    assert state.acquire("b", log((0, 14)), 100, now_ms=0) == [
        AcquiredRange(2, 3, 2), AcquiredRange(5, 5, 2), AcquiredRange(7, 7, 3), AcquiredRange(10, 14, 1),
    ]
    assert state.state_of(4) == (RecordState.ACKNOWLEDGED, 1, None)
    assert state.state_of(6) == (RecordState.ACQUIRED, 1, "a")
    with pytest.raises(AckError) as refused:
        state.acknowledge("b", [one(5, 6, ACCEPT)])
    assert refused.value.code == ErrorCode.invalid_record_state and "offset 6" in str(refused.value)
    assert state.acknowledge("b", [one(10, 14, ACCEPT)]) == {ACCEPT: 5}
    assert state.acquired_count == 5 + 4  # a: 0, 1, 6, 8, 9; b: 2, 3, 5, 7


def test_skipped_batches_are_archived_not_handed_out() -> None:
    state = PartitionShareState(0)
    got = state.acquire("a", [LogBatch(0, 2, True), LogBatch(3, 3, True), LogBatch(4, 6, False)], 100, now_ms=0)
    assert got == [AcquiredRange(4, 6, 1)]
    assert state.start_offset == 4
    update = state.take_update()
    assert update is not None and update.start_offset == 4


def test_log_gaps_are_archived() -> None:
    state = PartitionShareState(0)
    state.acquire("a", log((0, 1), (5, 6)), 100, now_ms=0)
    assert state.state_of(3) == (RecordState.ARCHIVED, 0, None)
    state.acknowledge("a", [one(0, 1, ACCEPT)])
    assert state.start_offset == 5


def test_a_gap_past_an_empty_window_moves_the_start_without_holding_its_offsets() -> None:
    """A compacted log's gap may span millions of offsets: with nothing in flight the start moves past it at once
    (and is persisted), holding no per-offset state for it."""
    state = PartitionShareState(0)
    assert state.acquire("a", log((0, 1)), 100, now_ms=0) == [AcquiredRange(0, 1, 1)]
    state.acknowledge("a", [one(0, 1, ACCEPT)])
    state.take_update()
    far = 5_000_000
    tracemalloc.start()
    try:
        assert state.acquire("a", log((far, far + 2)), 100, now_ms=0) == [AcquiredRange(far, far + 2, 1)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated to pass a gap"  # per-offset state would be about 100 MB
    assert (state.start_offset, state.in_flight()) == (far, 3)
    update = state.take_update()
    assert update is not None and update.start_offset == far


def test_a_gap_wider_than_the_windows_room_waits_for_the_records_before_it() -> None:
    state = PartitionShareState(0, Limits(max_record_locks=10))
    assert state.acquire("a", log((0, 1), (50, 52)), 100, now_ms=0) == [AcquiredRange(0, 1, 1)]
    assert state.in_flight() == 2  # the gap 2-49 was neither archived nor passed
    state.acknowledge("a", [one(0, 1, ACCEPT)])
    assert state.acquire("a", log((50, 52)), 100, now_ms=0) == [AcquiredRange(50, 52, 1)]
    assert state.start_offset == 50


def test_a_batch_claiming_more_records_than_two_windows_is_cut() -> None:
    """Batch-optimized acquisition completes a batch past the window, but a batch claiming far more records (a
    hostile producer's compressed batch may claim two billion) gets at most a second window's worth of per-offset
    state, the rest at the next fetches."""
    state = PartitionShareState(0, Limits(max_record_locks=100))
    huge = log((0, 9_999))
    assert state.acquire("a", huge, 500, now_ms=0, whole_batches=True) == [AcquiredRange(0, 199, 1)]
    assert state.in_flight() == 200
    state.acknowledge("a", [one(0, 199, ACCEPT)])
    assert state.acquire("a", huge, 500, now_ms=0, whole_batches=True) == [AcquiredRange(200, 399, 1)]


@pytest.mark.parametrize(
    ("acks", "code"),
    [
        ([one(0, 2, ACCEPT), one(1, 3, ACCEPT)], ErrorCode.invalid_request),  # overlapping
        # Sharing one offset passes Kafka's order check; the record was settled by the first batch.
        ([one(0, 2, ACCEPT), one(2, 3, ACCEPT)], ErrorCode.invalid_record_state),
        ([one(3, 4, ACCEPT), one(0, 1, ACCEPT)], ErrorCode.invalid_request),  # out of order
        ([one(4, 3, ACCEPT)], ErrorCode.invalid_request),  # last before first
        ([AckBatch(0, 3, (1, 1))], ErrorCode.invalid_request),  # wrong number of types
        ([AckBatch(0, 0, (7,))], ErrorCode.invalid_request),  # unknown type
        ([AckBatch(0, 0, (-1,))], ErrorCode.invalid_request),  # unknown type
        ([one(0, 9, ACCEPT)], ErrorCode.invalid_request),  # past the acquired records (8-9 never fetched)
        ([one(5, 5, ACCEPT)], ErrorCode.invalid_record_state),  # another member's record
        ([one(0, 1, ACCEPT), one(5, 6, ACCEPT)], ErrorCode.invalid_record_state),  # valid batch first, then not
        ([one(100, 101, ACCEPT)], ErrorCode.invalid_request),  # beyond anything fetched
    ],
)
def test_hostile_acknowledgements_are_refused_and_change_nothing(acks: list[AckBatch], code: ErrorCode) -> None:
    state = PartitionShareState(0)
    state.acquire("a", log((0, 4)), 100, now_ms=0)
    state.acquire("b", log((5, 7)), 100, now_ms=0)
    before = [state.state_of(o) for o in range(0, 10)], state.start_offset, state.acquired_count
    with pytest.raises(AckError) as refused:
        state.acknowledge("a", acks)
    assert refused.value.code == code
    assert ([state.state_of(o) for o in range(0, 10)], state.start_offset, state.acquired_count) == before
    assert state.take_update() is None


def test_acknowledging_twice_is_refused() -> None:
    state = PartitionShareState(0)
    state.acquire("a", log((0, 4)), 100, now_ms=0)
    state.acknowledge("a", [one(1, 1, ACCEPT)])
    with pytest.raises(AckError) as refused:
        state.acknowledge("a", [one(1, 1, ACCEPT)])
    assert refused.value.code == ErrorCode.invalid_record_state


def test_log_start_moving_past_the_start_offset_drops_those_records() -> None:
    state = PartitionShareState(0)
    state.acquire("a", log((0, 9)), 100, now_ms=0)
    state.move_start(6)
    assert state.start_offset == 6 and state.acquired_count == 4
    state.move_start(3)  # never backwards
    assert state.start_offset == 6


def test_snapshot_and_updates_replay_to_the_same_state() -> None:
    live = PartitionShareState(0, Limits(delivery_count_limit=5))
    live.acquire("a", log((0, 9)), 100, now_ms=0)
    live.acknowledge("a", [one(2, 3, ACCEPT), one(4, 5, RELEASE), one(6, 6, REJECT)])
    first = live.take_update()
    live.acquire("b", log((0, 9)), 100, now_ms=0)  # takes 4-5 again (count 2)
    snapshot = live.state_batches()
    live.acknowledge("a", [one(0, 1, ACCEPT)])
    second = live.take_update()
    assert first is not None and second is not None

    replayed = PartitionShareState(0)
    replayed.apply(0, snapshot)
    replayed.apply(second.start_offset, second.batches)
    assert replayed.start_offset == live.start_offset == 4
    # Nothing is acquired after a replay: what was locked is AVAILABLE at the count it had before that delivery,
    # as Kafka persists it (nothing is written on acquisition), so it goes out again at that delivery's count.
    assert replayed.acquire("c", log((0, 9)), 100, now_ms=0) == [AcquiredRange(4, 5, 2), AcquiredRange(7, 9, 1)]


def test_a_record_in_its_last_delivery_when_the_broker_died_goes_out_at_the_limit_again() -> None:
    live = PartitionShareState(0, Limits(delivery_count_limit=2))
    live.acquire("a", log((0, 0)), 1, now_ms=0)
    live.acknowledge("a", [one(0, 0, RELEASE)])
    assert live.acquire("b", log((0, 0)), 1, now_ms=0) == [AcquiredRange(0, 0, 2)]  # its last delivery
    snapshot = live.state_batches()

    replayed = PartitionShareState(0, Limits(delivery_count_limit=2))
    replayed.apply(0, snapshot)
    # Delivered once more at the limit's count (Kafka's KIP-932: the in-flight delivery is not remembered), not
    # at a count past the limit; released then, it is archived.
    assert replayed.acquire("c", log((0, 0)), 1, now_ms=0) == [AcquiredRange(0, 0, 2)]
    assert replayed.acknowledge("c", [one(0, 0, RELEASE)]) == {REJECT: 1}


def test_reset_starts_over_with_a_new_state_epoch() -> None:
    state = PartitionShareState(0)
    state.acquire("a", log((0, 9)), 100, now_ms=0)
    state.reset(42)
    assert (state.start_offset, state.state_epoch, state.acquired_count, state.in_flight()) == (42, 1, 0, 0)
    with pytest.raises(AckError):
        state.acknowledge("a", [one(0, 0, ACCEPT)])
