"""The producer state side of transactions (KIP-98), without storage: open transactions in a
``ProducerStateManager`` and the markers that close them, fencing by epoch and coordinator, expiry, its snapshot,
the producers a stale snapshot drops, and the aborted-transaction index and filter.
"""

from __future__ import annotations

import dataclasses
import struct
import time

import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode

from broker.partition.producer_state import ProducerStateManager, decode_snapshot, encode_snapshot
from broker.partition.txn_index import (
    AbortedFilter,
    AbortedTxn,
    AbortedTxnEntry,
    TxnIndex,
    decode_entry,
    encode_entry,
)
from tests.broker.partition.txn_log import (
    append_header,
    complete_marker,
    txn_header,
)
from wire.errors import KafkaError
from wire.record_batch import (
    Record,
    build_batch,
    parse_header,
)


def test_transactional_batches_open_a_transaction_that_a_marker_closes() -> None:
    state = ProducerStateManager("orders-0")
    append_header(state, txn_header(7, 0, 0, transactional=False), 0)  # idempotent writes first: no transaction
    assert state.first_unstable_offset(2) == 2 and not state.has_ongoing_txn(7)
    append_header(state, txn_header(7, 0, 2), 2)
    append_header(state, txn_header(8, 0, 0), 4)
    append_header(state, txn_header(7, 0, 4), 6)  # a later batch of the same transaction keeps its first offset
    assert state.ongoing_txn_start_offsets() == {7: 2, 8: 4}
    assert state.first_unstable_offset(8) == 2
    done = complete_marker(state, 7, 0, 8, commit=False)
    assert (done.producer_id, done.first_offset, done.last_offset, done.aborted) == (7, 2, 8, True)
    assert state.stable_offset_after(done) == 4  # producer 8's transaction is still undecided
    # The marker at 8 is not below the high watermark yet: the aborted transaction is still undecided too.
    assert state.first_unstable_offset(8) == 2
    assert state.first_unstable_offset(9) == 4
    done = complete_marker(state, 8, 0, 9, commit=True)
    assert done is not None and not done.aborted and state.stable_offset_after(done) == 10
    assert state.first_unstable_offset(10) == 10 and state.ongoing_txn_start_offsets() == {}


def test_marker_without_an_open_transaction_completes_nothing() -> None:
    state = ProducerStateManager("orders-0")
    assert complete_marker(state, 5, 3, 0, commit=True) is None
    entry = state.get(5)
    assert entry is not None and entry.producer_epoch == 3 and entry.coordinator_epoch == 0
    state.on_log_start_advanced(100)  # a log-start move forgets no producer: its epoch still fences
    with pytest.raises(KafkaError) as info:
        state.check(txn_header(5, 2, 0))
    assert info.value.code == ErrorCode.invalid_producer_epoch


def test_non_transactional_batch_inside_an_open_transaction_is_invalid_txn_state() -> None:
    state = ProducerStateManager("orders-0")
    append_header(state, txn_header(7, 0, 0), 10)
    with pytest.raises(KafkaError, match="orders-0") as info:
        state.check(txn_header(7, 0, 2, transactional=False))
    assert info.value.code == ErrorCode.invalid_txn_state


def test_stale_marker_epoch_and_stale_coordinator_are_fenced() -> None:
    state = ProducerStateManager("orders-0")
    append_header(state, txn_header(7, 2, 0), 0)
    with pytest.raises(KafkaError) as info:
        state.check_marker(7, 1, 0)
    assert info.value.code == ErrorCode.invalid_producer_epoch
    state.complete_txn(producer_id=7, producer_epoch=2, coordinator_epoch=5, commit=True, marker_offset=2, timestamp=1)
    with pytest.raises(KafkaError) as info:
        state.check_marker(7, 2, 4)
    assert info.value.code == ErrorCode.transaction_coordinator_fenced


def test_after_an_epoch_bump_by_the_coordinator_the_producer_starts_at_sequence_zero() -> None:
    state = ProducerStateManager("orders-0")
    append_header(state, txn_header(7, 0, 0), 0)
    append_header(state, txn_header(7, 0, 2), 2)
    # The coordinator aborts a timed-out transaction with the bumped epoch 1.
    assert complete_marker(state, 7, 1, 4, commit=False) is not None
    with pytest.raises(KafkaError) as info:
        state.check(txn_header(7, 0, 4))  # the zombie at the old epoch
    assert info.value.code == ErrorCode.invalid_producer_epoch
    with pytest.raises(KafkaError) as info:
        state.check(txn_header(7, 1, 4))
    assert info.value.code == ErrorCode.out_of_order_sequence_number
    append_header(state, txn_header(7, 1, 0), 5)
    assert state.ongoing_txn_start_offsets() == {7: 5}


def test_the_brokers_own_transactional_writes_get_the_epoch_check_only() -> None:
    """The group coordinator writes every TxnOffsetCommit at sequence 0 (as Kafka does): no sequence checks."""
    state = ProducerStateManager("__consumer_offsets-3")
    state.record(txn_header(7, 1, 0), 10)
    assert state.check(txn_header(7, 1, 0), client=False) is None  # a client retry would be a duplicate
    state.record(txn_header(7, 1, 0), 12)
    with pytest.raises(KafkaError) as info:
        state.check(txn_header(7, 0, 0), client=False)
    assert info.value.code == ErrorCode.invalid_producer_epoch
    assert state.ongoing_txn_start_offsets() == {7: 10}


def test_producers_with_open_transactions_do_not_expire() -> None:
    state = ProducerStateManager("orders-0")
    append_header(state, txn_header(7, 0, 0), 0)
    append_header(state, txn_header(8, 0, 0, transactional=False), 2)
    now = int(time.time() * 1000) + 10_000_000
    assert state.any_expired(now, 1000) and not state.any_expired(now - 10_000_000, 1000)
    assert state.expire(now, 1000) == [8]
    assert state.has_ongoing_txn(7) and not state.any_expired(now, 1000)


def test_snapshot_round_trip_keeps_open_transactions_and_version_1_still_decodes() -> None:
    state = ProducerStateManager("orders-0")
    append_header(state, txn_header(7, 1, 0), 40)
    append_header(state, txn_header(8, 0, 0, transactional=False), 42)
    state.complete_txn(producer_id=9, producer_epoch=4, coordinator_epoch=3, commit=True, marker_offset=44, timestamp=1)
    offset, entries = decode_snapshot(encode_snapshot(45, state))
    restored = ProducerStateManager("orders-0")
    restored.replace(entries)
    assert offset == 45
    assert restored.ongoing_txn_start_offsets() == {7: 40}
    assert restored.first_unstable_offset(45) == 40
    nine = restored.get(9)
    assert nine is not None and (nine.producer_epoch, nine.coordinator_epoch, len(nine.batches)) == (4, 3, 0)
    # A version-1 snapshot (written before transactions): producer 8 with one batch.
    body = (
        struct.pack(">bqi", 1, 12, 1) + struct.pack(">qhqb", 8, 0, 1000, 1) + struct.pack(">iiqiq", 0, 1, 10, 1, 1000)
    )
    offset, entries = decode_snapshot(body + struct.pack(">I", crc32c(body)))
    assert offset == 12 and entries[0].producer_id == 8 and entries[0].current_txn_first_offset == -1
    assert entries[0].batches[0].last_offset == 11


def test_index_collects_overlapping_aborted_transactions_and_trims_below_the_log_start() -> None:
    index = TxnIndex()
    for i, entry in enumerate(
        [AbortedTxnEntry(1, 0, 5, 6), AbortedTxnEntry(3, 10, 12, 13), AbortedTxnEntry(2, 3, 20, 21)]
    ):
        assert decode_entry(encode_entry(entry)) == entry
        index.add(entry, stream_offset=i)
    assert not index.add(AbortedTxnEntry(4, 1, 12, 13))  # not newer than the last marker: a replay's duplicate
    assert index.collect(0, 3) == [AbortedTxn(1, 0)]
    assert index.collect(6, 11) == [AbortedTxn(3, 10), AbortedTxn(2, 3)]  # in marker order
    assert index.collect(13, 30) == [AbortedTxn(2, 3)]
    assert index.collect(21, 30) == []
    assert index.drop_before(6) == 1  # the first entry's marker (5) is below 6: the stream trims to entry 1
    assert index.collect(0, 30) == [AbortedTxn(3, 10), AbortedTxn(2, 3)]
    assert index.drop_before(100) == 3 and len(index) == 0


def test_aborted_filter_hides_a_producer_from_its_first_offset_to_its_abort_marker() -> None:
    filt = AbortedFilter([AbortedTxn(7, 2)])
    # Offsets as a log would hold them: producer 7 at 0 (committed earlier), producer 8 at 2, producer 7 at 4.
    headers = [
        dataclasses.replace(txn_header(pid, 0, seq), base_offset=offset)
        for pid, seq, offset in [(7, 0, 0), (8, 0, 2), (7, 2, 4)]
    ]
    assert [filt.is_aborted(h) for h in headers] == [False, False, True]
    marker = parse_header(
        build_batch([Record(b"\0\0\0\0", b"\0\0\0\0\0\0")], producer_id=7, is_control=True, is_transactional=True)
    )
    assert not filt.is_aborted(dataclasses.replace(marker, base_offset=6), abort_marker=True)
    assert not filt.is_aborted(dataclasses.replace(headers[2], base_offset=7))  # the producer's next transaction


def test_a_stale_snapshot_drops_producers_below_the_log_start_but_not_a_fencing_epoch() -> None:
    state = ProducerStateManager("orders-0")
    append_header(state, txn_header(5, 0, 0, n=6), 0)  # open, its marker deleted with it
    assert complete_marker(state, 6, 3, 2, commit=False) is None  # known only from a marker: its epoch fences
    append_header(state, txn_header(9, 0, 0), 20)  # above the log start: stays
    state.drop_stale(10)
    assert state.get(5) is None and not state.has_ongoing_txn(5)
    assert state.get(6) is not None and state.get(9) is not None
    assert state.first_unstable_offset(30) == 20


def test_a_marker_after_the_transactions_records_were_deleted_keeps_the_producers_sequence() -> None:
    """The EndTxn answer comes before the markers are written, so a DeleteRecords of a just-committed transaction
    can move the log start before its marker lands (librdkafka's 0103 does this). The producer's next batch
    continues its sequence, as on Kafka."""
    state = ProducerStateManager("orders-0")
    append_header(state, txn_header(5, 0, 0, n=6), 0)
    state.on_log_start_advanced(6)
    assert complete_marker(state, 5, 0, 6, commit=True) is not None
    assert state.check(txn_header(5, 0, 6)) is None
