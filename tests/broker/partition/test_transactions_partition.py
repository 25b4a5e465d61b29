"""A PartitionLog over the real storage engine (file WAL + local objects on tmp_path, in-memory stream metadata)
taking transaction markers (KIP-98): the last stable offset, read_committed reads, fencing, the txn stream across a
clean close, an unclean crash and DeleteRecords. The producer state alone is ``test_txn_producer_state.py``, the
log cleaner next to aborted transactions ``test_txn_marker_compaction.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.partition.cleaner import clean_partition
from broker.partition.log_config import LogConfig
from broker.partition.meta_stream import KEY_LOG
from broker.partition.partition_log.checkpoints import start_checkpoint
from broker.partition.txn_index import (
    AbortedTxn,
)
from tests.broker.partition.txn_log import (
    TXN_ID,
    committed_values,
    open_log,
    txn_batch,
)
from wire.control_records import decode_marker
from wire.errors import KafkaError
from wire.record_batch import (
    Record,
    build_batch,
    decode_records,
    iter_batches,
)


async def test_markers_move_the_lso_and_read_committed_stops_at_it(storage: dict[str, Any]) -> None:
    log = await open_log(storage, 0)
    try:
        await log.append(txn_batch(0, 0, 0, transactional=False), transactional_id=None)  # 0-1 plain idempotent
        first = await log.append(txn_batch(7, 0, 0), transactional_id=TXN_ID)  # 2-3 open
        assert first.base_offset == 2 and log.has_ongoing_txn(7) and not log.has_ongoing_txn(0)
        assert log.ongoing_txn_start_offsets() == {7: 2}
        assert log.high_watermark == 4 and log.last_stable_offset == 2
        read = await log.read(0, 1 << 20, read_committed=True)
        assert [h.base_offset for h, _ in iter_batches(read.records)] == [0]
        assert (read.high_watermark, read.last_stable_offset, read.aborted_transactions) == (4, 2, ())
        uncommitted = await log.read(0, 1 << 20)
        assert [h.base_offset for h, _ in iter_batches(uncommitted.records)] == [0, 2]
        assert uncommitted.last_stable_offset == 2  # reported at both isolation levels, as Kafka does
        assert (await log.read(2, 1 << 20, read_committed=True)).records == b""
        latest = await log.offset_for_timestamp(-1, read_committed=True)
        assert latest is not None and latest.offset == 2
        marker = await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=1, commit=True)
        assert marker == 4 and log.last_stable_offset == log.high_watermark == 5
        assert not log.has_ongoing_txn(7)
        stored = await log.read(4, 1 << 20)
        header, batch = next(iter(iter_batches(stored.records)))
        assert header.is_control and header.is_transactional and header.producer_id == 7
        assert header.base_sequence == -1
        record = decode_records(batch)[0]
        assert decode_marker(record.key, record.value) == decode_marker(b"\0\0\0\1", b"\0\0\0\0\0\1")
        assert await committed_values(log) == [b"value-0", b"value-1", b"value-0", b"value-1"]
    finally:
        await log.close()


async def test_aborted_transactions_are_listed_and_survive_close_and_reopen(storage: dict[str, Any]) -> None:
    log = await open_log(storage, 0)
    try:
        await log.append(txn_batch(7, 0, 0), transactional_id=TXN_ID)  # 0-1, aborted below
        await log.append(txn_batch(8, 0, 0), transactional_id=TXN_ID)  # 2-3, committed
        await log.append(txn_batch(7, 0, 2), transactional_id=TXN_ID)  # 4-5, aborted
        assert await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False) == 6
        assert log.last_stable_offset == 2  # producer 8 is still open
        assert await log.write_txn_marker(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=True) == 7
        await log.append(txn_batch(8, 0, 2), transactional_id=TXN_ID)  # 8-9 stays open across the reopen
        assert log.aborted_transactions(0, 10) == [AbortedTxn(7, 0)]
        assert log.txn_index.entries[0].last_stable_offset == 2
        read = await log.read(0, 1 << 20, read_committed=True)
        assert read.aborted_transactions == (AbortedTxn(7, 0),)
        assert await committed_values(log) == [b"value-0", b"value-1"]
    finally:
        await log.close()
    log = await open_log(storage, 1)
    try:
        info = json.loads(log._state.meta.get(KEY_LOG) or b"{}")
        assert info["streamMap"]["txn"] >= 0  # created on the first abort
        assert log.aborted_transactions(0, 10) == [AbortedTxn(7, 0)]
        assert log.ongoing_txn_start_offsets() == {8: 8} and log.last_stable_offset == 8
        # The open transaction goes on after the reopen and is aborted with a bumped epoch by the coordinator.
        assert await log.write_txn_marker(producer_id=8, producer_epoch=1, coordinator_epoch=1, commit=False) == 10
        assert log.aborted_transactions(0, 11) == [AbortedTxn(7, 0), AbortedTxn(8, 8)]
        assert await committed_values(log) == [b"value-0", b"value-1"]
    finally:
        await log.close()


async def test_a_batch_whose_transaction_ended_while_it_waited_is_refused(storage: dict[str, Any]) -> None:
    """A transactional batch is verified (its transaction open here) when its produce arrives and appended when its
    turn comes. An abort written in between ended that transaction: appended, the batch would open one its
    coordinator does not know and nothing would ever end (the LSO stuck for every read_committed consumer). It is
    refused, as Kafka's verification guard refuses it; a batch verified after the marker goes in."""
    log = await open_log(storage, 0)
    try:
        await log.append(txn_batch(7, 0, 0), transactional_id=TXN_ID)
        verified = log.markers_applied(7)
        assert log.has_ongoing_txn(7, 0)
        await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=1, commit=False)
        end = log.log_end_offset
        with pytest.raises(KafkaError) as late:
            await log.append(txn_batch(7, 0, 2), transactional_id=TXN_ID, verified_markers=verified)
        assert late.value.code == ErrorCode.invalid_txn_state
        assert log.log_end_offset == end and not log.has_ongoing_txn(7) and log.last_stable_offset == end
        # The producer's next transaction, verified now: appended.
        await log.append(txn_batch(7, 0, 2), transactional_id=TXN_ID, verified_markers=log.markers_applied(7))
        assert log.has_ongoing_txn(7)
    finally:
        await log.close()


async def test_stale_epoch_marker_is_refused_and_appends_nothing(storage: dict[str, Any]) -> None:
    log = await open_log(storage, 0)
    try:
        await log.append(txn_batch(7, 3, 0), transactional_id=TXN_ID)
        end = log.log_end_offset
        with pytest.raises(KafkaError) as info:
            await log.write_txn_marker(producer_id=7, producer_epoch=2, coordinator_epoch=0, commit=True)
        assert info.value.code == ErrorCode.invalid_producer_epoch
        assert log.log_end_offset == end and log.has_ongoing_txn(7)
        # A marker for a producer with nothing open here is still written, and completes nothing.
        assert await log.write_txn_marker(producer_id=99, producer_epoch=0, coordinator_epoch=0, commit=False) == end
        assert log.aborted_transactions(0, end + 1) == [] and log.has_ongoing_txn(7)
    finally:
        await log.close()


async def test_client_batches_need_a_transactional_id_and_may_not_be_control_batches(storage: dict[str, Any]) -> None:
    log = await open_log(storage, 0)
    try:
        with pytest.raises(KafkaError) as info:
            await log.append(txn_batch(7, 0, 0))
        assert info.value.code == ErrorCode.transactional_id_authorization_failed
        control = build_batch(
            [Record(b"\0\0\0\1", b"\0\0\0\0\0\0")],
            producer_id=7,
            producer_epoch=0,
            is_control=True,
            is_transactional=True,
        )
        with pytest.raises(KafkaError) as info:
            await log.append(control, transactional_id=TXN_ID)
        assert info.value.code == ErrorCode.invalid_record
        await log.append(txn_batch(7, 0, 0), transactional_id=TXN_ID)
        with pytest.raises(KafkaError) as info:
            await log.append(txn_batch(7, 0, 2, transactional=False), transactional_id=TXN_ID)
        assert info.value.code == ErrorCode.invalid_txn_state
        assert log.log_end_offset == 2
    finally:
        await log.close()


async def test_unclean_recovery_rebuilds_open_transactions_and_the_aborted_index(storage: dict[str, Any]) -> None:
    log = await open_log(storage, 0)
    await log.append(txn_batch(7, 0, 0), transactional_id=TXN_ID)  # 0-1
    await log.append(txn_batch(8, 0, 0), transactional_id=TXN_ID)  # 2-3
    await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False)  # 4
    await log.append(txn_batch(9, 0, 0), transactional_id=TXN_ID)  # 5-6
    await log.write_txn_marker(producer_id=9, producer_epoch=0, coordinator_epoch=0, commit=False)  # 7
    # Lose the index entries, as a crash between a marker and its entry would.
    txn = log._state.txn
    assert txn is not None
    await txn.trim(txn.confirm_offset)
    await storage["crash"]()  # no clean close: no snapshot, PARTITION.cs stays false
    log = await open_log(storage, 1)
    try:
        assert log.ongoing_txn_start_offsets() == {8: 2} and log.last_stable_offset == 2
        assert log.aborted_transactions(0, 8) == [AbortedTxn(7, 0), AbortedTxn(9, 5)]
        await log.write_txn_marker(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=True)
        assert await committed_values(log) == [b"value-0", b"value-1"]
    finally:
        await log.close()
    log = await open_log(storage, 2)
    try:
        # Both recovered entries were stored: a clean reopen (no replay) still has them, once each.
        assert log.aborted_transactions(0, 9) == [AbortedTxn(7, 0), AbortedTxn(9, 5)]
    finally:
        await log.close()


async def test_delete_records_drops_aborted_entries_below_the_log_start(storage: dict[str, Any]) -> None:
    log = await open_log(storage, 0)
    try:
        await log.append(txn_batch(7, 0, 0), transactional_id=TXN_ID)  # 0-1
        await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False)  # 2
        await log.append(txn_batch(8, 0, 0), transactional_id=TXN_ID)  # 3-4
        await log.write_txn_marker(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=False)  # 5
        txn = log._state.txn
        assert txn is not None and txn.start_offset == 0
        assert await log.delete_records_before(3) == 3
        assert log.aborted_transactions(0, 6) == [AbortedTxn(8, 3)]
        assert txn.start_offset == 1  # the first entry's record is trimmed from the txn stream
        read = await log.read(3, 1 << 20, read_committed=True)
        assert read.aborted_transactions == (AbortedTxn(8, 3),)
    finally:
        await log.close()
    log = await open_log(storage, 1)
    try:
        assert log.aborted_transactions(0, 6) == [AbortedTxn(8, 3)]
    finally:
        await log.close()


async def test_deleting_an_open_transactions_records_keeps_the_lso_at_the_log_start_and_the_sequence(
    storage: dict[str, Any],
) -> None:
    log = await open_log(storage, 0)
    try:
        await log.append(txn_batch(7, 0, 0, n=6), transactional_id=TXN_ID)  # 0-5, its marker not written yet
        assert await log.delete_records_before(6) == 6
        assert log.last_stable_offset == 6  # the open transaction began below the log start
        await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)  # 6
        assert log.last_stable_offset == 7
        await log.append(txn_batch(7, 0, 6, n=4), transactional_id=TXN_ID)  # 7-10: the sequence continues
        assert log.ongoing_txn_start_offsets() == {7: 7}
    finally:
        await log.close()


async def test_a_crash_after_deleting_a_decided_transaction_does_not_bring_it_back_open(
    storage: dict[str, Any],
) -> None:
    """The last producer snapshot still shows the transaction open; its marker was deleted with its records, and
    the crash came before the snapshot taken after the deletion. Recovery must not trust that snapshot's view of
    the transaction, or the last stable offset would stay at the log start for ever."""
    log = await open_log(storage, 0)
    await log.append(txn_batch(7, 0, 0, n=6), transactional_id=TXN_ID)  # 0-5
    start_checkpoint(log._state, force=True)  # a snapshot with the transaction open
    checkpoint = log._state.checkpoint.task
    assert checkpoint is not None
    await checkpoint
    await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)  # 6
    assert await log.delete_records_before(7) == 7
    fresh = log._state.checkpoint.task
    assert fresh is not None  # the deletion asked for a fresh snapshot: crash before it is written
    fresh.cancel()
    await storage["crash"]()
    log = await open_log(storage, 1)
    try:
        await log.append(txn_batch(8, 0, 0, transactional=False))  # 7-8: another producer's data
        assert log.last_stable_offset == log.high_watermark == 9
        await log.append(txn_batch(7, 0, 6), transactional_id=TXN_ID)  # the producer's next transaction
        assert log.ongoing_txn_start_offsets() == {7: 9}
    finally:
        await log.close()


async def test_compaction_drops_aborted_writes_keeps_markers_and_never_loses_a_committed_value(
    storage: dict[str, Any],
) -> None:
    compact = LogConfig(compact=True, delete_retention_enabled=False, delete_retention_ms=60_000)
    log = await open_log(storage, 0, compact)
    try:
        await log.append(txn_batch(7, 0, 0, n=1, key=b"a"), transactional_id=TXN_ID)  # 0: a0 = value-0, committed
        await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)  # 1
        await log.append(txn_batch(7, 0, 1, n=1, key=b"a"), transactional_id=TXN_ID)  # 2: a0 = value-1, aborted
        await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False)  # 3
        await log.append(txn_batch(8, 0, 0, n=1, key=b"b"), transactional_id=TXN_ID)  # 4: open: the LSO
        await log.append(txn_batch(0, 0, 0, n=1, key=b"c", transactional=False))  # 5: newest batch, stays dirty
        result = await clean_partition(log, dedupe_buffer_bytes=1 << 20)
        assert result is not None and result.end <= log.last_stable_offset == 4
        assert await committed_values(log) == [b"value-0"]
        read = await log.read(0, 1 << 20)
        controls = [h.base_offset for h, _ in iter_batches(read.records) if h.is_control]
        assert controls == [1, 3]
        # The aborted write is gone even for read_uncommitted readers; its marker stays.
        data = [
            (r.offset, r.value) for h, b in iter_batches(read.records) if not h.is_control for r in decode_records(b)
        ]
        assert data == [(0, b"value-0"), (4, b"value-0"), (5, b"value-0")]
    finally:
        await log.close()
