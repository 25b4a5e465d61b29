"""What the partition-side transaction tests share (``test_txn_producer_state.py``, ``test_transactions_partition.py``,
``test_txn_marker_compaction.py``): transactional batches and their headers, a batch and a marker applied to a
``ProducerStateManager``, a ``PartitionLog`` opened over the ``storage`` fixture (``conftest.py``), and what a
read_committed consumer sees of it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from broker.partition.log_config import LogConfig
from broker.partition.partition_log import PartitionLog
from broker.partition.producer_state import ProducerStateManager
from broker.partition.txn_index import (
    AbortedFilter,
)
from wire.control_records import decode_marker
from wire.record_batch import (
    BatchHeader,
    Record,
    build_batch,
    decode_records,
    iter_batches,
    parse_header,
)

TOPIC_ID = uuid.UUID(int=98)


TXN_ID = "txn-app"


def txn_batch(pid: int, epoch: int, seq: int, n: int = 2, *, transactional: bool = True, key: bytes = b"k") -> bytes:
    now = int(time.time() * 1000)
    records = [Record(key + b"%d" % i, b"value-%d" % (seq + i), (), now + i) for i in range(n)]
    return build_batch(
        records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional
    )


def txn_header(pid: int, epoch: int, seq: int, n: int = 2, *, transactional: bool = True) -> BatchHeader:
    return parse_header(txn_batch(pid, epoch, seq, n, transactional=transactional))


def append_header(state: ProducerStateManager, header: BatchHeader, offset: int) -> None:
    assert state.check(header) is None
    state.record(header, offset)


def complete_marker(state: ProducerStateManager, pid: int, epoch: int, offset: int, *, commit: bool) -> Any:
    state.check_marker(pid, epoch, 0)
    return state.complete_txn(
        producer_id=pid, producer_epoch=epoch, coordinator_epoch=0, commit=commit, marker_offset=offset, timestamp=1
    )


async def open_log(storage: dict[str, Any], epoch: int, config: LogConfig | None = None) -> PartitionLog:
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


async def committed_values(log: PartitionLog, start: int = 0) -> list[bytes | None]:
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
