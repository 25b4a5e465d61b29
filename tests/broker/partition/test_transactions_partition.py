"""The partition side of transactions (KIP-98): producer state with open transactions and its snapshot, the
aborted-transaction index, and a PartitionLog over the real storage engine (file WAL + local objects on tmp_path,
in-memory stream metadata) taking markers: the last stable offset, read_committed reads, fencing, the txn stream
across a clean close, an unclean crash and DeleteRecords, and the log cleaner next to aborted transactions
(markers removed after ``delete.retention.ms``, with their index entries)."""

from __future__ import annotations

import dataclasses
import json
import struct
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode

from broker.partition.cleaner import clean_partition, cleanable
from broker.partition.log_config import LogConfig
from broker.partition.marker_retention import MarkerRetention
from broker.partition.meta_stream import KEY_LOG
from broker.partition.partition_log import PartitionLog
from broker.partition.partition_log.checkpoints import start_checkpoint
from broker.partition.producer_state import ProducerStateManager, decode_snapshot, encode_snapshot
from broker.partition.txn_index import (
    AbortedFilter,
    AbortedTxn,
    AbortedTxnEntry,
    TxnIndex,
    decode_entry,
    encode_entry,
)
from storage.config import BucketURL, StorageConfig
from storage.engine import StorageEngine
from storage.metadata.state_machine import StreamMetadataStateMachine
from wire.control_records import decode_marker, encode_marker_key, encode_marker_value
from wire.errors import KafkaError
from wire.record_batch import (
    BatchHeader,
    Record,
    build_batch,
    decode_records,
    iter_batches,
    parse_header,
    set_delete_horizon,
    validate_batch,
)

TOPIC_ID = uuid.UUID(int=98)
TXN_ID = "txn-app"


def _batch(pid: int, epoch: int, seq: int, n: int = 2, *, transactional: bool = True, key: bytes = b"k") -> bytes:
    now = int(time.time() * 1000)
    records = [Record(key + b"%d" % i, b"value-%d" % (seq + i), (), now + i) for i in range(n)]
    return build_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional
    )


def _header(pid: int, epoch: int, seq: int, n: int = 2, *, transactional: bool = True) -> BatchHeader:
    return parse_header(_batch(pid, epoch, seq, n, transactional=transactional))


def _append(state: ProducerStateManager, header: BatchHeader, offset: int) -> None:
    assert state.check(header) is None
    state.record(header, offset)


def _marker(state: ProducerStateManager, pid: int, epoch: int, offset: int, *, commit: bool) -> Any:
    state.check_marker(pid, epoch, 0)
    return state.complete_txn(
        producer_id=pid, producer_epoch=epoch, coordinator_epoch=0, commit=commit, marker_offset=offset, timestamp=1
    )


# ---------------------------------------------------------------------------------------------- producer state
def test_transactional_batches_open_a_transaction_that_a_marker_closes() -> None:
    state = ProducerStateManager("orders-0")
    _append(state, _header(7, 0, 0, transactional=False), 0)  # idempotent writes first: no transaction
    assert state.first_unstable_offset(2) == 2 and not state.has_ongoing_txn(7)
    _append(state, _header(7, 0, 2), 2)
    _append(state, _header(8, 0, 0), 4)
    _append(state, _header(7, 0, 4), 6)  # a later batch of the same transaction keeps its first offset
    assert state.ongoing_txn_start_offsets() == {7: 2, 8: 4}
    assert state.first_unstable_offset(8) == 2
    done = _marker(state, 7, 0, 8, commit=False)
    assert (done.producer_id, done.first_offset, done.last_offset, done.aborted) == (7, 2, 8, True)
    assert state.stable_offset_after(done) == 4  # producer 8's transaction is still undecided
    # The marker at 8 is not below the high watermark yet: the aborted transaction is still undecided too.
    assert state.first_unstable_offset(8) == 2
    assert state.first_unstable_offset(9) == 4
    done = _marker(state, 8, 0, 9, commit=True)
    assert done is not None and not done.aborted and state.stable_offset_after(done) == 10
    assert state.first_unstable_offset(10) == 10 and state.ongoing_txn_start_offsets() == {}


def test_marker_without_an_open_transaction_completes_nothing() -> None:
    state = ProducerStateManager("orders-0")
    assert _marker(state, 5, 3, 0, commit=True) is None
    entry = state.get(5)
    assert entry is not None and entry.producer_epoch == 3 and entry.coordinator_epoch == 0
    state.on_log_start_advanced(100)  # a log-start move forgets no producer: its epoch still fences
    with pytest.raises(KafkaError) as info:
        state.check(_header(5, 2, 0))
    assert info.value.code == ErrorCode.invalid_producer_epoch


def test_non_transactional_batch_inside_an_open_transaction_is_invalid_txn_state() -> None:
    state = ProducerStateManager("orders-0")
    _append(state, _header(7, 0, 0), 10)
    with pytest.raises(KafkaError, match="orders-0") as info:
        state.check(_header(7, 0, 2, transactional=False))
    assert info.value.code == ErrorCode.invalid_txn_state


def test_stale_marker_epoch_and_stale_coordinator_are_fenced() -> None:
    state = ProducerStateManager("orders-0")
    _append(state, _header(7, 2, 0), 0)
    with pytest.raises(KafkaError) as info:
        state.check_marker(7, 1, 0)
    assert info.value.code == ErrorCode.invalid_producer_epoch
    state.complete_txn(producer_id=7, producer_epoch=2, coordinator_epoch=5, commit=True, marker_offset=2, timestamp=1)
    with pytest.raises(KafkaError) as info:
        state.check_marker(7, 2, 4)
    assert info.value.code == ErrorCode.transaction_coordinator_fenced


def test_after_an_epoch_bump_by_the_coordinator_the_producer_starts_at_sequence_zero() -> None:
    state = ProducerStateManager("orders-0")
    _append(state, _header(7, 0, 0), 0)
    _append(state, _header(7, 0, 2), 2)
    # The coordinator aborts a timed-out transaction with the bumped epoch 1.
    assert _marker(state, 7, 1, 4, commit=False) is not None
    with pytest.raises(KafkaError) as info:
        state.check(_header(7, 0, 4))  # the zombie at the old epoch
    assert info.value.code == ErrorCode.invalid_producer_epoch
    with pytest.raises(KafkaError) as info:
        state.check(_header(7, 1, 4))
    assert info.value.code == ErrorCode.out_of_order_sequence_number
    _append(state, _header(7, 1, 0), 5)
    assert state.ongoing_txn_start_offsets() == {7: 5}


def test_the_brokers_own_transactional_writes_get_the_epoch_check_only() -> None:
    """The group coordinator writes every TxnOffsetCommit at sequence 0 (as Kafka does): no sequence checks."""
    state = ProducerStateManager("__consumer_offsets-3")
    state.record(_header(7, 1, 0), 10)
    assert state.check(_header(7, 1, 0), client=False) is None  # a client retry would be a duplicate
    state.record(_header(7, 1, 0), 12)
    with pytest.raises(KafkaError) as info:
        state.check(_header(7, 0, 0), client=False)
    assert info.value.code == ErrorCode.invalid_producer_epoch
    assert state.ongoing_txn_start_offsets() == {7: 10}


def test_producers_with_open_transactions_do_not_expire() -> None:
    state = ProducerStateManager("orders-0")
    _append(state, _header(7, 0, 0), 0)
    _append(state, _header(8, 0, 0, transactional=False), 2)
    now = int(time.time() * 1000) + 10_000_000
    assert state.any_expired(now, 1000) and not state.any_expired(now - 10_000_000, 1000)
    assert state.expire(now, 1000) == [8]
    assert state.has_ongoing_txn(7) and not state.any_expired(now, 1000)


def test_snapshot_round_trip_keeps_open_transactions_and_version_1_still_decodes() -> None:
    state = ProducerStateManager("orders-0")
    _append(state, _header(7, 1, 0), 40)
    _append(state, _header(8, 0, 0, transactional=False), 42)
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


# ---------------------------------------------------------------------------------------------- aborted index
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
        dataclasses.replace(_header(pid, 0, seq), base_offset=offset)
        for pid, seq, offset in [(7, 0, 0), (8, 0, 2), (7, 2, 4)]
    ]
    assert [filt.is_aborted(h) for h in headers] == [False, False, True]
    marker = parse_header(
        build_batch([Record(b"\0\0\0\0", b"\0\0\0\0\0\0")], producer_id=7, is_control=True, is_transactional=True)
    )
    assert not filt.is_aborted(dataclasses.replace(marker, base_offset=6), abort_marker=True)
    assert not filt.is_aborted(dataclasses.replace(headers[2], base_offset=7))  # the producer's next transaction


# ---------------------------------------------------------------------------------------------- partition log
def _storage_config(tmp_path: Path, node_epoch: int) -> StorageConfig:
    return StorageConfig(
        data_buckets=(BucketURL(0, "file", str(tmp_path / "objects")),),
        wal_url=BucketURL(0, "file", str(tmp_path / "wal")),
        cluster_id="test",
        node_id=1,
        node_epoch=node_epoch,
    )


@pytest.fixture
async def storage(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """One engine incarnation at a time over the same disk and metadata; ``crash`` halts it as a crash leaves it
    and starts the next incarnation."""
    metadata = StreamMetadataStateMachine()
    state: dict[str, Any] = {"metadata": metadata}
    state["engine"] = StorageEngine(_storage_config(tmp_path, 0), metadata)
    await state["engine"].start()

    async def crash() -> None:
        await state["engine"].halt()
        engine = StorageEngine(_storage_config(tmp_path, state["engine"].node.node_epoch + 1), metadata)
        await engine.start()
        state["engine"] = engine

    state["crash"] = crash
    try:
        yield state
    finally:
        await state["engine"].shutdown()


async def _open(storage: dict[str, Any], epoch: int, config: LogConfig | None = None) -> PartitionLog:
    return await PartitionLog.open(
        streams=storage["engine"],
        kv=storage["metadata"],
        namespace="_fjord_test",
        topic="payments",
        partition=1,
        topic_id=TOPIC_ID,
        leader_epoch=epoch,
        config=config or LogConfig(),
    )


async def _committed_values(log: PartitionLog, start: int = 0) -> list[bytes | None]:
    """What a read_committed consumer sees from ``start``: records below the LSO minus aborted transactions."""
    values: list[bytes | None] = []
    position = start
    for _ in range(1000):
        if position >= log.last_stable_offset:
            return values
        read = await log.read(position, 1 << 20, read_committed=True)
        assert read.last_stable_offset == log.last_stable_offset
        filt = AbortedFilter(read.aborted_transactions)
        for header, batch in iter_batches(read.records):
            records = decode_records(batch)
            marker = decode_marker(records[0].key, records[0].value) if header.is_control else None
            abort = marker is not None and not marker.commit
            if not filt.is_aborted(header, abort) and not header.is_control:
                values += [r.value for r in records if r.offset >= position]
            position = header.next_offset
    raise AssertionError("read loop did not finish")


async def test_markers_move_the_lso_and_read_committed_stops_at_it(storage: dict[str, Any]) -> None:
    log = await _open(storage, 0)
    try:
        await log.append(_batch(0, 0, 0, transactional=False), transactional_id=None)  # 0-1 plain idempotent
        first = await log.append(_batch(7, 0, 0), transactional_id=TXN_ID)  # 2-3 open
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
        assert await _committed_values(log) == [b"value-0", b"value-1", b"value-0", b"value-1"]
    finally:
        await log.close()


async def test_aborted_transactions_are_listed_and_survive_close_and_reopen(storage: dict[str, Any]) -> None:
    log = await _open(storage, 0)
    try:
        await log.append(_batch(7, 0, 0), transactional_id=TXN_ID)  # 0-1, aborted below
        await log.append(_batch(8, 0, 0), transactional_id=TXN_ID)  # 2-3, committed
        await log.append(_batch(7, 0, 2), transactional_id=TXN_ID)  # 4-5, aborted
        assert await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False) == 6
        assert log.last_stable_offset == 2  # producer 8 is still open
        assert await log.write_txn_marker(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=True) == 7
        await log.append(_batch(8, 0, 2), transactional_id=TXN_ID)  # 8-9 stays open across the reopen
        assert log.aborted_transactions(0, 10) == [AbortedTxn(7, 0)]
        assert log.txn_index.entries[0].last_stable_offset == 2
        read = await log.read(0, 1 << 20, read_committed=True)
        assert read.aborted_transactions == (AbortedTxn(7, 0),)
        assert await _committed_values(log) == [b"value-0", b"value-1"]
    finally:
        await log.close()
    log = await _open(storage, 1)
    try:
        info = json.loads(log._state.meta.get(KEY_LOG) or b"{}")
        assert info["streamMap"]["txn"] >= 0  # created on the first abort
        assert log.aborted_transactions(0, 10) == [AbortedTxn(7, 0)]
        assert log.ongoing_txn_start_offsets() == {8: 8} and log.last_stable_offset == 8
        # The open transaction goes on after the reopen and is aborted with a bumped epoch by the coordinator.
        assert await log.write_txn_marker(producer_id=8, producer_epoch=1, coordinator_epoch=1, commit=False) == 10
        assert log.aborted_transactions(0, 11) == [AbortedTxn(7, 0), AbortedTxn(8, 8)]
        assert await _committed_values(log) == [b"value-0", b"value-1"]
    finally:
        await log.close()


async def test_stale_epoch_marker_is_refused_and_appends_nothing(storage: dict[str, Any]) -> None:
    log = await _open(storage, 0)
    try:
        await log.append(_batch(7, 3, 0), transactional_id=TXN_ID)
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
    log = await _open(storage, 0)
    try:
        with pytest.raises(KafkaError) as info:
            await log.append(_batch(7, 0, 0))
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
        await log.append(_batch(7, 0, 0), transactional_id=TXN_ID)
        with pytest.raises(KafkaError) as info:
            await log.append(_batch(7, 0, 2, transactional=False), transactional_id=TXN_ID)
        assert info.value.code == ErrorCode.invalid_txn_state
        assert log.log_end_offset == 2
    finally:
        await log.close()


async def test_unclean_recovery_rebuilds_open_transactions_and_the_aborted_index(storage: dict[str, Any]) -> None:
    log = await _open(storage, 0)
    await log.append(_batch(7, 0, 0), transactional_id=TXN_ID)  # 0-1
    await log.append(_batch(8, 0, 0), transactional_id=TXN_ID)  # 2-3
    await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False)  # 4
    await log.append(_batch(9, 0, 0), transactional_id=TXN_ID)  # 5-6
    await log.write_txn_marker(producer_id=9, producer_epoch=0, coordinator_epoch=0, commit=False)  # 7
    # Lose the index entries, as a crash between a marker and its entry would.
    txn = log._state.txn
    assert txn is not None
    await txn.trim(txn.confirm_offset)
    await storage["crash"]()  # no clean close: no snapshot, PARTITION.cs stays false
    log = await _open(storage, 1)
    try:
        assert log.ongoing_txn_start_offsets() == {8: 2} and log.last_stable_offset == 2
        assert log.aborted_transactions(0, 8) == [AbortedTxn(7, 0), AbortedTxn(9, 5)]
        await log.write_txn_marker(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=True)
        assert await _committed_values(log) == [b"value-0", b"value-1"]
    finally:
        await log.close()
    log = await _open(storage, 2)
    try:
        # Both recovered entries were stored: a clean reopen (no replay) still has them, once each.
        assert log.aborted_transactions(0, 9) == [AbortedTxn(7, 0), AbortedTxn(9, 5)]
    finally:
        await log.close()


async def test_delete_records_drops_aborted_entries_below_the_log_start(storage: dict[str, Any]) -> None:
    log = await _open(storage, 0)
    try:
        await log.append(_batch(7, 0, 0), transactional_id=TXN_ID)  # 0-1
        await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False)  # 2
        await log.append(_batch(8, 0, 0), transactional_id=TXN_ID)  # 3-4
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
    log = await _open(storage, 1)
    try:
        assert log.aborted_transactions(0, 6) == [AbortedTxn(8, 3)]
    finally:
        await log.close()


async def test_deleting_an_open_transactions_records_keeps_the_lso_at_the_log_start_and_the_sequence(
    storage: dict[str, Any],
) -> None:
    log = await _open(storage, 0)
    try:
        await log.append(_batch(7, 0, 0, n=6), transactional_id=TXN_ID)  # 0-5, its marker not written yet
        assert await log.delete_records_before(6) == 6
        assert log.last_stable_offset == 6  # the open transaction began below the log start
        await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)  # 6
        assert log.last_stable_offset == 7
        await log.append(_batch(7, 0, 6, n=4), transactional_id=TXN_ID)  # 7-10: the sequence continues
        assert log.ongoing_txn_start_offsets() == {7: 7}
    finally:
        await log.close()


async def test_a_crash_after_deleting_a_decided_transaction_does_not_bring_it_back_open(
    storage: dict[str, Any],
) -> None:
    """The last producer snapshot still shows the transaction open; its marker was deleted with its records, and
    the crash came before the snapshot taken after the deletion. Recovery must not trust that snapshot's view of
    the transaction, or the last stable offset would stay at the log start for ever."""
    log = await _open(storage, 0)
    await log.append(_batch(7, 0, 0, n=6), transactional_id=TXN_ID)  # 0-5
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
    log = await _open(storage, 1)
    try:
        await log.append(_batch(8, 0, 0, transactional=False))  # 7-8: another producer's data
        assert log.last_stable_offset == log.high_watermark == 9
        await log.append(_batch(7, 0, 6), transactional_id=TXN_ID)  # the producer's next transaction
        assert log.ongoing_txn_start_offsets() == {7: 9}
    finally:
        await log.close()


async def test_compaction_drops_aborted_writes_keeps_markers_and_never_loses_a_committed_value(
    storage: dict[str, Any],
) -> None:
    compact = LogConfig(compact=True, delete_retention_enabled=False, delete_retention_ms=60_000)
    log = await _open(storage, 0, compact)
    try:
        await log.append(_batch(7, 0, 0, n=1, key=b"a"), transactional_id=TXN_ID)  # 0: a0 = value-0, committed
        await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)  # 1
        await log.append(_batch(7, 0, 1, n=1, key=b"a"), transactional_id=TXN_ID)  # 2: a0 = value-1, aborted
        await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False)  # 3
        await log.append(_batch(8, 0, 0, n=1, key=b"b"), transactional_id=TXN_ID)  # 4: open: the LSO
        await log.append(_batch(0, 0, 0, n=1, key=b"c", transactional=False))  # 5: newest batch, stays dirty
        result = await clean_partition(log, dedupe_buffer_bytes=1 << 20)
        assert result is not None and result.end <= log.last_stable_offset == 4
        assert await _committed_values(log) == [b"value-0"]
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


# ---------------------------------------------------------------------------------------------- markers in compaction
def _control(pid: int, offset: int, *, commit: bool, timestamp: int = 1_000) -> bytes:
    record = Record(encode_marker_key(commit), encode_marker_value(0), (), timestamp)
    return build_batch([record], base_offset=offset, producer_id=pid, is_control=True, is_transactional=True)


def test_a_delete_horizon_keeps_the_records_timestamps_and_a_valid_crc() -> None:
    batch = _control(7, 41, commit=False, timestamp=5_000)
    flagged = set_delete_horizon(batch, 9_000)
    header = validate_batch(flagged)
    assert (header.delete_horizon_ms, header.base_offset, header.producer_id) == (9_000, 41, 7)
    assert parse_header(batch).delete_horizon_ms is None
    assert [(r.offset, r.timestamp, r.key) for r in decode_records(flagged)] == [
        (r.offset, r.timestamp, r.key) for r in decode_records(batch)
    ]


def test_markers_get_a_horizon_once_their_transaction_is_empty_and_go_after_it() -> None:
    now, retention = 100_000, 2_000
    first = MarkerRetention(now, retention, indexed_aborts=[3], droppable=1)
    first.on_data(dataclasses.replace(_header(8, 0, 0), base_offset=0))  # producer 8's committed data stays
    kept_commit = first.on_marker(parse_header(_control(8, 2, commit=True)), _control(8, 2, commit=True), abort=False)
    assert kept_commit == _control(8, 2, commit=True)  # unchanged: its transaction still has data
    aborted = first.on_marker(parse_header(_control(7, 3, commit=False)), _control(7, 3, commit=False), abort=True)
    assert aborted is not None and parse_header(aborted).delete_horizon_ms == now + retention
    assert (first.next_horizon_ms, first.dropped_through, first.removed) == (now + retention, None, 0)
    # Before the horizon it stays; after it, it goes with its index entry.
    for at, gone in ((now + retention - 1, False), (now + retention, True)):
        later = MarkerRetention(at, retention, indexed_aborts=[3], droppable=1)
        answer = later.on_marker(parse_header(aborted), aborted, abort=True)
        assert (answer is None, later.dropped_through) == (gone, 3 if gone else None)


def test_an_indexed_abort_marker_goes_only_with_every_indexed_one_before_it() -> None:
    now = 100_000
    early = set_delete_horizon(_control(7, 3, commit=False), now + 50)  # a longer retention when it was set
    late = set_delete_horizon(_control(9, 9, commit=False), now - 50)
    blocked = MarkerRetention(now, 1_000, indexed_aborts=[3, 9], droppable=2)
    assert blocked.on_marker(parse_header(early), early, abort=True) == early
    assert blocked.on_marker(parse_header(late), late, abort=True) == late
    assert (blocked.dropped_through, blocked.next_horizon_ms) == (None, now + 50)
    # An entry not durable in the txn stream yet cannot be trimmed off it, so its marker stays too.
    undurable = MarkerRetention(now + 60, 1_000, indexed_aborts=[3, 9], droppable=1)
    assert undurable.on_marker(parse_header(early), early, abort=True) is None
    assert undurable.on_marker(parse_header(late), late, abort=True) == late
    assert undurable.dropped_through == 3
    # A marker without an index entry (its transaction wrote nothing here) needs no such order.
    free = MarkerRetention(now, 1_000, indexed_aborts=[3], droppable=1)
    assert free.on_marker(parse_header(early), early, abort=True) == early
    commit = set_delete_horizon(_control(9, 9, commit=True), now - 50)
    assert free.on_marker(parse_header(commit), commit, abort=False) is None


RETENTION = 1_000
COMPACT_TXN = LogConfig(compact=True, delete_retention_enabled=False, delete_retention_ms=RETENTION)


async def _txn_changelog(log: PartitionLog) -> list[bytes | None]:
    """Committed and aborted transactions over keys a, b, c and a plain last batch; returns what read_committed
    consumers must see (b0, the second a0, d0)."""
    await log.append(_batch(7, 0, 0, n=1, key=b"a"), transactional_id=TXN_ID)  # 0: a0 (replaced at 6)
    await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)  # 1
    await log.append(_batch(7, 0, 1, n=1, key=b"a"), transactional_id=TXN_ID)  # 2: aborted
    await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False)  # 3
    await log.append(_batch(8, 0, 0, n=1, key=b"b"), transactional_id=TXN_ID)  # 4: b0
    await log.write_txn_marker(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=True)  # 5
    await log.append(_batch(7, 0, 2, n=1, key=b"a"), transactional_id=TXN_ID)  # 6: a0 = value-2
    await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)  # 7
    await log.append(_batch(9, 0, 0, n=1, key=b"c"), transactional_id=TXN_ID)  # 8: aborted
    await log.write_txn_marker(producer_id=9, producer_epoch=0, coordinator_epoch=0, commit=False)  # 9
    await log.append(_batch(0, 0, 0, n=1, key=b"d", transactional=False))  # 10: newest batch, stays dirty
    assert log.aborted_transactions(0, 11) == [AbortedTxn(7, 2), AbortedTxn(9, 8)]
    return [b"value-0", b"value-2", b"value-0"]


async def test_compaction_removes_markers_after_delete_retention_and_read_committed_stays_exact(
    storage: dict[str, Any],
) -> None:
    log = await _open(storage, 0, COMPACT_TXN)
    try:
        expected = await _txn_changelog(log)
        now = int(time.time() * 1000)

        first = await clean_partition(log, dedupe_buffer_bytes=1 << 20, now_ms=now)
        assert first is not None and first.end == 10
        stored = await _stored(log)
        # Markers of emptied transactions (1: its a0 was replaced; 3 and 9: aborted) get a horizon and stay.
        assert [(o, h) for o, control, h in stored if control] == [
            (1, now + RETENTION),
            (3, now + RETENTION),
            (5, None),
            (7, None),
            (9, now + RETENTION),
        ]
        assert log.tombstone_horizon_ms == now + RETENTION
        assert not cleanable(log, now + RETENTION - 1) and cleanable(log, now + RETENTION)
        assert await _committed_values(log) == expected

        second = await clean_partition(log, dedupe_buffer_bytes=1 << 20, now_ms=now + RETENTION)
        assert second is not None and second.end == 10
        stored = await _stored(log)
        # Offsets kept; no control batch is left but the COMMITs of transactions whose data is still there.
        assert [(o, control) for o, control, _ in stored] == [(4, False), (5, True), (6, False), (7, True), (10, False)]
        assert log.tombstone_horizon_ms is None
        assert log.aborted_transactions(0, 11) == [] and len(log.txn_index) == 0
        txn = log._state.txn
        assert txn is not None and txn.start_offset == txn.confirm_offset == 2  # both entries trimmed away
        assert (await log.read(0, 1 << 20, read_committed=True)).aborted_transactions == ()
        assert await _committed_values(log) == expected
        # The producer goes on after its markers are gone: a new aborted transaction is indexed and hidden.
        await log.append(_batch(7, 0, 3, n=1, key=b"e"), transactional_id=TXN_ID)  # 11
        await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False)  # 12
        assert log.aborted_transactions(0, 13) == [AbortedTxn(7, 11)]
        assert await _committed_values(log) == expected
    finally:
        await log.close()
    log = await _open(storage, 1, COMPACT_TXN)
    try:
        assert log.aborted_transactions(0, 13) == [AbortedTxn(7, 11)]
        assert await _committed_values(log) == expected
    finally:
        await log.close()


async def _stored(log: PartitionLog) -> list[tuple[int, bool, int | None]]:
    """(base offset, is control, delete horizon) of every batch a read_uncommitted reader gets from the start."""
    read = await log.read(0, 1 << 20)
    return [(h.base_offset, h.is_control, h.delete_horizon_ms) for h, _ in iter_batches(read.records)]


class _Crash(Exception):
    """Stands for the process dying at the injection point (the engine is halted right after)."""


async def test_a_crash_after_the_index_entries_went_but_before_the_switch_keeps_read_committed_exact(
    storage: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = await _open(storage, 0, COMPACT_TXN)
    expected = await _txn_changelog(log)
    now = int(time.time() * 1000)
    assert await clean_partition(log, dedupe_buffer_bytes=1 << 20, now_ms=now) is not None

    async def crash() -> None:
        raise _Crash()

    async def no_cleanup(stream: Any) -> None:
        return None  # a crashed process cleans nothing up

    monkeypatch.setattr(log, "abandon_cleaning", no_cleanup)
    with pytest.raises(_Crash):
        await clean_partition(log, dedupe_buffer_bytes=1 << 20, now_ms=now + RETENTION, after_write=crash)
    await storage["crash"]()
    log = await _open(storage, 1, COMPACT_TXN)
    try:
        # The old layout: the markers (their data long gone) outlive their index entries, which is harmless.
        assert [o for o, control, _ in await _stored(log) if control] == [1, 3, 5, 7, 9]
        assert log.aborted_transactions(0, 11) == []
        assert await _committed_values(log) == expected
        assert await clean_partition(log, dedupe_buffer_bytes=1 << 20, now_ms=now + RETENTION) is not None
        assert [o for o, control, _ in await _stored(log) if control] == [5, 7]
        assert await _committed_values(log) == expected
    finally:
        await log.close()


def test_a_stale_snapshot_drops_producers_below_the_log_start_but_not_a_fencing_epoch() -> None:
    state = ProducerStateManager("orders-0")
    _append(state, _header(5, 0, 0, n=6), 0)  # open, its marker deleted with it
    assert _marker(state, 6, 3, 2, commit=False) is None  # known only from a marker: its epoch fences
    _append(state, _header(9, 0, 0), 20)  # above the log start: stays
    state.drop_stale(10)
    assert state.get(5) is None and not state.has_ongoing_txn(5)
    assert state.get(6) is not None and state.get(9) is not None
    assert state.first_unstable_offset(30) == 20


def test_a_marker_after_the_transactions_records_were_deleted_keeps_the_producers_sequence() -> None:
    """The EndTxn answer comes before the markers are written, so a DeleteRecords of a just-committed transaction
    can move the log start before its marker lands (librdkafka's 0103 does this). The producer's next batch
    continues its sequence, as on Kafka."""
    state = ProducerStateManager("orders-0")
    _append(state, _header(5, 0, 0, n=6), 0)
    state.on_log_start_advanced(6)
    assert _marker(state, 5, 0, 6, commit=True) is not None
    assert state.check(_header(5, 0, 6)) is None
