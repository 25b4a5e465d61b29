"""Checkpoints: moving a partition's recovery point forward and persisting it (DESIGN.md §4, Kafka's
recovery-point checkpoint and producer snapshots).

An unclean restart replays the log from the recovery point (:mod:`.recovery`), and the log lives in object
storage, so the recovery point must follow the log end: a checkpoint persists producer state (open transactions
too), the leader-epoch cache and the ``PARTITION`` record (recovery offset, size, max timestamp, time-index
position) as of the log end. One is taken when enough bytes or time have passed since the last
(``log.flush.offset.checkpoint.interval.bytes`` / ``.ms``), after an upload, and, forced, after what changes what a
replay would read (a log-start move, a cleaner's switch). Checkpoints run in the background, one at a time per
partition, and name only durable data.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from broker.partition.indexes import encode_epoch_checkpoint
from broker.partition.meta_stream import KEY_LEADER_EPOCH_CHECKPOINT, KEY_PARTITION, KEY_PRODUCER_SNAPSHOTS
from broker.partition.partition_log.state import EXPIRY_CHECK_INTERVAL_S, PartitionState
from broker.partition.producer_state import encode_snapshot
from storage.errors import StorageError
from storage.stream_api import Stream

logger = logging.getLogger(__name__)


def partition_record(state: PartitionState, *, clean_shutdown: bool) -> bytes:
    """The PARTITION meta entry; :mod:`.recovery` reads it back. ``r`` is the recovery point and ``ti`` the
    time stream's end with it; a clean shutdown's record names the log end for both, and ``tn`` the time stream's
    newest entry (the index's last, which is the stream's last record: every entry the index adds is appended
    to the stream), so the next open need not read it from object storage."""
    progress = state.checkpoint
    record: dict[str, object] = {
        "s": state.log_start_offset,
        "c": state.cleaner_offset,
        "cb": state.cleaned_bytes,
        "r": progress.recovery_point,
        "ti": progress.time_checkpoint,
        "cs": clean_shutdown,
        "mt": [state.max_timestamp, state.max_timestamp_offset],
        "z": [state.log_end_offset, state.size_bytes],
    }
    if clean_shutdown:
        progress.recovery_point, progress.time_checkpoint = state.log_end_offset, state.time.next_offset
        record["r"], record["ti"] = progress.recovery_point, progress.time_checkpoint
        newest = state.time_index.last
        if newest is not None:
            record["tn"] = [newest.timestamp, newest.offset]
    return json.dumps(record).encode()


def checkpoint_due(state: PartitionState) -> bool:
    """Bytes or time bound (``log.flush.offset.checkpoint.interval.bytes`` / ``.ms``) reached with appends."""
    progress = state.checkpoint
    if progress.bytes_since >= state.config.checkpoint_interval_bytes:
        return True
    elapsed_ms = (time.monotonic() - progress.last_at) * 1000
    return progress.bytes_since > 0 and elapsed_ms >= state.config.checkpoint_interval_ms


def maybe_checkpoint(state: PartitionState) -> None:
    """The periodic check (the partition manager's timer): a partition written to less than the bytes bound
    still gets a checkpoint within the time bound, even when no append comes to notice it; and one with
    producers idle past ``producer.id.expiration.ms`` gets one that expires them, every
    ``EXPIRY_CHECK_INTERVAL_S`` (Kafka's ``producer.id.expiration.check.interval.ms``), appends or not."""
    if checkpoint_due(state):
        start_checkpoint(state)
    elif time.monotonic() >= state.checkpoint.next_expiry_check:
        state.checkpoint.next_expiry_check = time.monotonic() + EXPIRY_CHECK_INTERVAL_S
        if state.producers.any_expired(int(time.time() * 1000), state.config.producer_id_expiration_ms):
            start_checkpoint(state, force=True)


def uploaded(state: PartitionState, end_offset: int) -> None:
    """An upload committed the log up to ``end_offset`` to object storage: the recovery point may follow."""
    if end_offset > state.checkpoint.recovery_point:
        start_checkpoint(state)


def start_checkpoint(state: PartitionState, *, force: bool = False) -> None:
    """One checkpoint at a time per partition, in the background; ``force`` even with nothing appended since
    the last one (the cleaner's switch changes what a replay would read)."""
    progress = state.checkpoint
    if state.closed or progress.task is not None:
        return
    if not force and progress.bytes_since == 0 and progress.recovery_point >= state.log.next_offset:
        return
    progress.task = asyncio.create_task(_checkpoint(state), name=f"checkpoint {state.where}")


async def _checkpoint(state: PartitionState) -> None:
    """Persists the recovery point: producer state (open transactions too), the leader-epoch cache, and
    PARTITION with the recovery offset, size, max timestamp and time-index position, all as of the log end,
    so a crash replays only the log written after it."""
    progress = state.checkpoint
    try:
        async with state.lock:
            if state.closed:
                return
            end = state.log.next_offset
            if not await appends_durable(state):
                logger.warning("%s: checkpoint at offset %d skipped: appends not durable in time", state.where, end)
                return
            expired = state.producers.expire(int(time.time() * 1000), state.config.producer_id_expiration_ms)
            if expired:
                logger.info("%s: expired %d idle producers", state.where, len(expired))
            previous = progress.recovery_point
            put = state.meta.put(checkpoint_entries(state))
        await put
        logger.debug("%s: recovery point %d -> %d", state.where, previous, end)
    except StorageError as exc:  # S3 away or the stream moving: the next checkpoint tries again
        logger.warning("checkpoint of %s failed: %s", state.where, exc)
    except Exception:
        logger.exception("checkpoint of %s failed", state.where)
    finally:
        progress.task = None


async def appends_durable(state: PartitionState) -> bool:
    """Under the partition's lock: waits (bounded) until every append taken is durable, False on timeout. A
    snapshot must hold only durable batches: a crash loses non-durable ones, and a snapshot naming them would turn
    the producer's retry into a false duplicate. The time-index entries of those batches are appended right after
    them; a checkpoint names them too, so it waits for both."""
    return await _durable(state.log, state.log.next_offset) and await _durable(state.time, state.time.next_offset)


def checkpoint_entries(state: PartitionState) -> dict[str, bytes]:
    """Under the partition's lock, once :func:`appends_durable`: moves the recovery point to the log end and
    returns the meta entries that persist it (producer snapshot, leader epochs, PARTITION)."""
    progress = state.checkpoint
    progress.bytes_since = 0
    progress.last_at = time.monotonic()
    end = state.log.next_offset
    progress.recovery_point, progress.time_checkpoint = end, state.time.next_offset
    return {
        KEY_PRODUCER_SNAPSHOTS: encode_snapshot(end, state.producers),
        KEY_LEADER_EPOCH_CHECKPOINT: encode_epoch_checkpoint(state.epochs.entries),
        KEY_PARTITION: partition_record(state, clean_shutdown=False),
    }


async def _durable(stream: Stream, end: int) -> bool:
    """Waits (bounded) until everything appended to ``stream`` below ``end`` is durable; False on timeout."""
    if stream.confirm_offset < end:
        await stream.wait_for_append(end - 1, 10.0)
    return stream.confirm_offset >= end
