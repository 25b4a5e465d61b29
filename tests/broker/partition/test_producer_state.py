"""Idempotence rules of a partition's producer state, on real batch headers built by build_batch."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from broker.partition.producer_state import (
    ProducerStateManager,
    SnapshotFormatError,
    decode_snapshot,
    encode_snapshot,
)
from wire.errors import KafkaError
from wire.record_batch import BatchHeader, Record, build_batch, parse_header


def _header(pid: int, epoch: int, seq: int, n: int = 2, ts: int = 1000) -> BatchHeader:
    records = [Record(None, b"v", (), ts + i) for i in range(n)]
    return parse_header(build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq))


def _append(state: ProducerStateManager, header: BatchHeader, offset: int) -> None:
    assert state.check(header) is None
    state.record(header, offset)


def test_retried_batch_is_a_duplicate_with_original_offsets() -> None:
    state = ProducerStateManager("t-0")
    _append(state, _header(7, 0, 0), 100)
    _append(state, _header(7, 0, 2), 102)
    dup = state.check(_header(7, 0, 0))
    assert dup is not None and (dup.first_offset, dup.last_offset) == (100, 101)


def test_only_the_last_five_batches_are_remembered() -> None:
    state = ProducerStateManager("t-0")
    for i in range(6):
        _append(state, _header(7, 0, 2 * i), 10 * i)
    assert state.check(_header(7, 0, 2)) is not None
    with pytest.raises(KafkaError) as info:
        state.check(_header(7, 0, 0))  # evicted: no longer recognisable as a duplicate
    assert info.value.code == ErrorCode.out_of_order_sequence_number


def test_sequence_gap_is_out_of_order() -> None:
    state = ProducerStateManager("orders-3")
    _append(state, _header(7, 0, 0), 0)
    with pytest.raises(KafkaError, match="orders-3") as info:
        state.check(_header(7, 0, 5))
    assert info.value.code == ErrorCode.out_of_order_sequence_number


def test_stale_epoch_is_rejected_and_new_epoch_must_start_at_zero() -> None:
    state = ProducerStateManager("t-0")
    _append(state, _header(7, 3, 0), 0)
    with pytest.raises(KafkaError) as info:
        state.check(_header(7, 2, 2))
    assert info.value.code == ErrorCode.invalid_producer_epoch
    with pytest.raises(KafkaError) as info:
        state.check(_header(7, 4, 9))
    assert info.value.code == ErrorCode.out_of_order_sequence_number
    _append(state, _header(7, 4, 0), 2)
    assert state.check(_header(7, 4, 2)) is None


def test_unknown_producer_accepts_any_sequence() -> None:
    state = ProducerStateManager("t-0")
    assert state.check(_header(9, 0, 77)) is None


def test_a_log_start_move_keeps_the_producer_and_its_sequence() -> None:
    """As Kafka since KIP-360: deleting all of a producer's records (DeleteRecords, retention) does not forget it,
    so its next batch continues its sequence and a gap is still refused."""
    state = ProducerStateManager("t-0")
    _append(state, _header(9, 0, 0, n=6), 0)
    state.on_log_start_advanced(6)
    assert state.get(9) is not None
    assert state.check(_header(9, 0, 6)) is None
    with pytest.raises(KafkaError) as info:
        state.check(_header(9, 0, 8))
    assert info.value.code == ErrorCode.out_of_order_sequence_number


def test_the_last_timestamp_is_the_last_batchs_and_idleness_counts_from_it() -> None:
    """As Kafka's ProducerStateEntry: each batch (or marker) sets lastTimestamp, even to an earlier time than a
    previous batch's (DescribeProducers reports it; find-hanging ages transactions by it), and a producer expires
    once producer.id.expiration.ms has passed since it."""
    state = ProducerStateManager("t-0")
    _append(state, _header(7, 0, 0, ts=5000), 0)
    _append(state, _header(7, 0, 2, ts=1000), 2)
    entry = state.get(7)
    assert entry is not None and entry.last_timestamp == 1001  # the batch's max timestamp
    assert not state.any_expired(1000 + 1000, 1000)
    assert state.expire(1001 + 1000, 1000) == [7]
    _append(state, _header(8, 0, 0, ts=9000), 4)
    state.complete_txn(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=True, marker_offset=6,
                       timestamp=3000)
    marked = state.get(8)
    assert marked is not None and marked.last_timestamp == 3000


def test_sequence_wraps_at_int32_max() -> None:
    state = ProducerStateManager("t-0")
    _append(state, _header(7, 0, 0x7FFFFFFF, n=1), 0)
    assert state.check(_header(7, 0, 0)) is None


def test_snapshot_round_trip_and_corruption() -> None:
    state = ProducerStateManager("t-0")
    _append(state, _header(1, 0, 0), 0)
    _append(state, _header(2, 5, 10, ts=5000), 2)
    data = encode_snapshot(4, state)
    offset, entries = decode_snapshot(data)
    restored = ProducerStateManager("t-0")
    restored.replace(entries)
    assert offset == 4
    dup = restored.check(_header(2, 5, 10, ts=5000))
    assert dup is not None and dup.first_offset == 2
    with pytest.raises(SnapshotFormatError):
        decode_snapshot(data[:-1] + bytes([data[-1] ^ 1]))
