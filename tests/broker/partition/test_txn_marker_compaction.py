"""The log cleaner next to aborted transactions (KIP-98 with compaction): a delete horizon set on a batch keeps its
records' timestamps and a valid CRC, markers get a horizon once their transaction is empty and go after
``delete.retention.ms`` with their index entries, and read_committed stays exact throughout, across a crash between
the index entries going and the switch too.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from broker.partition.cleaner import clean_partition, cleanable
from broker.partition.log_config import LogConfig
from broker.partition.marker_retention import MarkerRetention
from broker.partition.partition_log import PartitionLog
from broker.partition.txn_index import (
    AbortedTxn,
)
from tests.broker.partition.txn_log import (
    TXN_ID,
    committed_values,
    open_log,
    txn_batch,
    txn_header,
)
from wire.batch_validation import validate_batch
from wire.control_records import encode_marker_key, encode_marker_value
from wire.record_batch import (
    Record,
    build_batch,
    decode_records,
    iter_batches,
    parse_header,
    set_delete_horizon,
)


def _control(pid: int, offset: int, *, commit: bool, timestamp: int = 1_000) -> bytes:
    record = Record(encode_marker_key(commit), encode_marker_value(0), (), timestamp)
    return build_batch([record], base_offset=offset, producer_id=pid, is_control=True, is_transactional=True)


RETENTION = 1_000
COMPACT_TXN = LogConfig(compact=True, delete_retention_enabled=False, delete_retention_ms=RETENTION)


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
    first.on_data(dataclasses.replace(txn_header(8, 0, 0), base_offset=0))  # producer 8's committed data stays
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


async def _txn_changelog(log: PartitionLog) -> list[bytes | None]:
    """Committed and aborted transactions over keys a, b, c and a plain last batch; returns what read_committed
    consumers must see (b0, the second a0, d0)."""
    await log.append(txn_batch(7, 0, 0, n=1, key=b"a"), transactional_id=TXN_ID)  # 0: a0 (replaced at 6)
    await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)  # 1
    await log.append(txn_batch(7, 0, 1, n=1, key=b"a"), transactional_id=TXN_ID)  # 2: aborted
    await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False)  # 3
    await log.append(txn_batch(8, 0, 0, n=1, key=b"b"), transactional_id=TXN_ID)  # 4: b0
    await log.write_txn_marker(producer_id=8, producer_epoch=0, coordinator_epoch=0, commit=True)  # 5
    await log.append(txn_batch(7, 0, 2, n=1, key=b"a"), transactional_id=TXN_ID)  # 6: a0 = value-2
    await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=True)  # 7
    await log.append(txn_batch(9, 0, 0, n=1, key=b"c"), transactional_id=TXN_ID)  # 8: aborted
    await log.write_txn_marker(producer_id=9, producer_epoch=0, coordinator_epoch=0, commit=False)  # 9
    await log.append(txn_batch(0, 0, 0, n=1, key=b"d", transactional=False))  # 10: newest batch, stays dirty
    assert log.aborted_transactions(0, 11) == [AbortedTxn(7, 2), AbortedTxn(9, 8)]
    return [b"value-0", b"value-2", b"value-0"]


async def test_compaction_removes_markers_after_delete_retention_and_read_committed_stays_exact(
    storage: dict[str, Any],
) -> None:
    log = await open_log(storage, 0, COMPACT_TXN)
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
        assert await committed_values(log) == expected

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
        assert await committed_values(log) == expected
        # The producer goes on after its markers are gone: a new aborted transaction is indexed and hidden.
        await log.append(txn_batch(7, 0, 3, n=1, key=b"e"), transactional_id=TXN_ID)  # 11
        await log.write_txn_marker(producer_id=7, producer_epoch=0, coordinator_epoch=0, commit=False)  # 12
        assert log.aborted_transactions(0, 13) == [AbortedTxn(7, 11)]
        assert await committed_values(log) == expected
    finally:
        await log.close()
    log = await open_log(storage, 1, COMPACT_TXN)
    try:
        assert log.aborted_transactions(0, 13) == [AbortedTxn(7, 11)]
        assert await committed_values(log) == expected
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
    log = await open_log(storage, 0, COMPACT_TXN)
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
    log = await open_log(storage, 1, COMPACT_TXN)
    try:
        # The old layout: the markers (their data long gone) outlive their index entries, which is harmless.
        assert [o for o, control, _ in await _stored(log) if control] == [1, 3, 5, 7, 9]
        assert log.aborted_transactions(0, 11) == []
        assert await committed_values(log) == expected
        assert await clean_partition(log, dedupe_buffer_bytes=1 << 20, now_ms=now + RETENTION) is not None
        assert [o for o, control, _ in await _stored(log) if control] == [5, 7]
        assert await committed_values(log) == expected
    finally:
        await log.close()
