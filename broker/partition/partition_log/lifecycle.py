"""A partition's life once its streams are open: adopting what recovery rebuilt, the clean close, deletion.

:mod:`.opening` finds and opens the streams and :mod:`.recovery` rebuilds the in-memory state from them;
:func:`restore` installs that state, starts this broker's leader epoch and persists ``PARTITION`` with the
clean-shutdown flag down, so a crash from now on is detected at the next open. :func:`close` does the reverse: it
persists everything the next open needs (producer snapshot, leader epochs, ``PARTITION`` with the flag up and the
recovery point at the log end), so that open reads none of the log. :func:`delete` is the end of a deleted topic's
partition: every stream it owns, the cleaner's leftovers included, and its KV entry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from broker.partition.indexes import TimeIndexEntry, encode_epoch_checkpoint, encode_time_entry
from broker.partition.meta_stream import KEY_LEADER_EPOCH_CHECKPOINT, KEY_PARTITION, KEY_PRODUCER_SNAPSHOTS
from broker.partition.partition_log import checkpoints, txn_markers
from broker.partition.partition_log.opening import delete_doomed
from broker.partition.partition_log.phases import Phases
from broker.partition.partition_log.recovery import recover
from broker.partition.partition_log.state import PartitionState
from broker.partition.producer_state import encode_snapshot
from storage import errors as storage_errors
from storage.stream_api import Stream

logger = logging.getLogger(__name__)

#: How long a close waits for the appends in flight before it closes the data streams first and writes the meta
#: entries after them.
_SETTLE_S = 5.0

UNCLEAN_CLOSE_RETRY_S = 30.0
"""How long an unclean close (:func:`_close_unclean`) retries closing the streams (a controller failover takes
seconds). Bounded so that a reconciliation round ends; streams still opened then are closed when this node
restarts."""
_UNCLEAN_BACKOFF_START_S = 0.05
_UNCLEAN_BACKOFF_MAX_S = 2.0


async def restore(state: PartitionState, marks: Phases | None = None) -> None:
    """Adopts the state recovery rebuilt, starts this leader epoch, and persists PARTITION with ``cs=false``."""
    recovered = await recover(
        meta=state.meta,
        stored=state.stored,
        time_stream=state.time,
        log_info=state.log_info,
        where=state.where,
        txn_stream=state.txn,
    )
    marks = marks or Phases()
    marks.mark("recover")
    state.producers = recovered.producers
    state.time_index, state.time_unloaded_end = recovered.time_index, recovered.time_unloaded_end
    state.txn_index = recovered.txn_index
    if recovered.unstored_aborts:
        await txn_markers.store_recovered_aborts(state, recovered.unstored_aborts)
    state.epochs = recovered.epochs
    state.log_start_offset = recovered.log_start_offset
    state.cleaned_bytes = recovered.cleaned_bytes
    state.size_bytes = recovered.size_bytes
    state.max_timestamp, state.max_timestamp_offset = recovered.max_timestamp, recovered.max_timestamp_offset
    progress = state.checkpoint
    progress.recovery_point, progress.time_checkpoint = recovered.recovery_point, recovered.time_checkpoint
    if state.epochs.assign(state.leader_epoch, state.log_end_offset):
        logger.info("%s leader epoch %d starts at offset %d", state.where, state.leader_epoch, state.log_end_offset)
    entries: dict[str, bytes] = {}
    if recovered.replayed_from is not None:
        # Everything below the log end was just uploaded (WAL recovery) or was already in object storage, and
        # the state rebuilt from it is complete: that is the new recovery point, so the next crash replays
        # only what is written from now on (a crash loop must not replay a growing log).
        progress.recovery_point, progress.time_checkpoint = state.log_end_offset, state.time.confirm_offset
        entries[KEY_PRODUCER_SNAPSHOTS] = encode_snapshot(state.log_end_offset, state.producers)
    entries[KEY_LEADER_EPOCH_CHECKPOINT] = encode_epoch_checkpoint(state.epochs.entries)
    entries[KEY_PARTITION] = checkpoints.partition_record(state, clean_shutdown=False)
    await state.meta.put(entries, compact=False)
    marks.mark("meta")
    logger.info(
        "opened %s (topic id %s) at leader epoch %d: log [%d, %d), %d producers (%d open transactions), "
        "%d time-index entries stored, %d aborted transactions (%s)",
        state.where,
        state.topic_id,
        state.leader_epoch,
        state.log_start_offset,
        state.log_end_offset,
        len(state.producers),
        len(state.producers.ongoing_txn_start_offsets()),
        state.time.confirm_offset - state.time.start_offset,
        len(state.txn_index),
        marks,
    )
    state.meta.compact_later()  # after the partition serves: a moved partition's producer is waiting for it


async def close(state: PartitionState) -> None:
    """Clean close of one partition (:func:`close_together`); raises what its close raised."""
    (result,) = await close_together([state])
    if result is not None:
        raise result


async def close_together(states: Sequence[PartitionState]) -> list[BaseException | None]:
    """Clean close: waits for in-flight appends, force-uploads, and persists PARTITION(cs=true), producer
    snapshots and the leader-epoch checkpoint so the next open skips recovery. Returns, per partition, what its
    close raised (None: closed, or the close did not complete and was logged: the next open recovers).

    A moved partition's producer waits for this close (the target opens once the source's streams are closed), so
    it costs one upload and one round of closes: once every append taken is durable, the closing meta entries join
    the WAL behind them (every other live meta entry rewritten with them), the first stream's flush seals them into
    the same block as the log's last records (each stream closing on its own would wait for an upload of its own),
    and that upload's commit closes every stream (one controller call and one metadata commit for both,
    ``UploadPipeline.close_with``), the meta stream trimmed to its closing entries (the
    reassignment watch elects on the meta stream's close, so the target finds every stream closed, and it replays
    only those entries, from the block this close uploaded).
    Partitions closed together (one reconciliation round's, which a balancer's moves from one broker are) settle
    and write their meta entries first and then close their streams, so one upload carries them all: a partition
    whose entries missed the first close's block would wait for that upload and then one of its own. Should an
    append not settle, the entries follow the closed data streams as before, so a clean-shutdown flag never
    precedes records that are not durable.

    Should storage fail along the way (the WAL refusing the closing entries, the upload or the controller's close
    failing), the partition is closed uncleanly instead (:func:`_close_unclean`): its streams still get closed at
    the controller, or the next owner could never open them."""
    prepared = await asyncio.gather(*(_prepare_close(state) for state in states), return_exceptions=True)
    finished = await asyncio.gather(
        *(_finish_close(state, closing) for state, closing in zip(states, prepared, strict=True)
          if isinstance(closing, _Closing)),
        return_exceptions=True,
    )
    results: list[BaseException | None] = []
    rest = iter(finished)
    for closing in prepared:
        if isinstance(closing, BaseException):
            results.append(closing)
        elif isinstance(closing, _Closing):
            result = next(rest)
            results.append(result if isinstance(result, BaseException) else None)
        else:
            results.append(None)
    return results


@dataclass(slots=True)
class _Closing:
    """A partition between its close's two halves: its data streams (and, once ``settled``, its meta stream) to
    close, and the phases so far for its log line."""

    streams: list[Stream]
    settled: bool
    marks: Phases
    #: Where the meta stream is trimmed to as it closes, its closing entries' first (None: nothing to trim).
    meta_trim: int | None = None
    #: Why the first half failed (None: it did not): the second closes the partition uncleanly.
    failure: storage_errors.StorageError | None = None


async def _prepare_close(state: PartitionState) -> _Closing | None:
    """Takes no more appends, waits for those in flight and writes the closing meta entries behind them (None:
    closed already; a failure of storage is the second half's to handle, :func:`_close_unclean`)."""
    if state.closed:
        return None
    marks = Phases()
    async with state.lock:
        state.closed = True  # from here no append takes an offset: the log end and the producer state are final
        task = state.checkpoint.task
    marks.mark("lock")
    if task is not None:
        await asyncio.gather(task, return_exceptions=True)
        marks.mark("checkpoint")
    try:
        if state.max_timestamp >= 0:
            last = state.time_index.last
            if last is None or last.timestamp < state.max_timestamp:
                entry = TimeIndexEntry(state.max_timestamp, state.max_timestamp_offset)
                if state.time_index.add(entry):
                    await state.time.append(encode_time_entry(entry), 1)
        data = _data_streams(state)
        settled = all(await asyncio.gather(*(_settled(s) for s in data)))
        marks.mark("settle")
        meta_trim = None
        if settled:
            meta_trim = await state.meta.put_last(_closing_entries(state))
            marks.mark("meta")
            data.append(state.meta.stream)
    except storage_errors.StorageError as exc:
        # Closed after the partitions closed together wrote their entries, not holding up their upload.
        return _Closing(_streams(state), False, marks, failure=exc)
    return _Closing(data, settled, marks, meta_trim)


async def _finish_close(state: PartitionState, closing: _Closing) -> None:
    """Closes the streams (and, if an append did not settle, writes the meta entries after them); uncleanly if
    storage failed in either half."""
    marks = closing.marks
    marks.mark("others")  # waiting for the partitions closed together to write their meta entries
    if closing.failure is not None:
        await _close_unclean(state, closing.failure)
        return
    try:
        # Closed together: one upload carries every stream's last records (and the meta entries), and its commit
        # closes them all, the meta stream trimmed to its closing entries (the next opener replays only those).
        trim = -1 if closing.meta_trim is None else closing.meta_trim
        await state.streams.close_streams([(s, trim if s is state.meta.stream else -1) for s in closing.streams])
        marks.mark("closes")
        if not closing.settled:
            await state.meta.put_last(_closing_entries(state))  # not trimmed: this close is slow already
            await state.meta.stream.close()
            marks.mark("meta after")
        # The bench (bench/balancer.py) reads this line; the phases say where a move's close spends its time.
        logger.info("closed %s cleanly at offset %d (%s)", state.where, state.log_end_offset, marks)
    except storage_errors.StorageError as exc:
        await _close_unclean(state, exc)


async def _close_unclean(state: PartitionState, failure: storage_errors.StorageError) -> None:
    """After a clean close failed: closes the partition's streams at the controller without the closing meta
    entries, retried with capped backoff for :data:`UNCLEAN_CLOSE_RETRY_S` at most. The next owner could never open
    a stream left opened here (StreamNotClosedError until this broker restarts), and nothing else closes it: the
    partition is out of the manager's logs already.

    The next open recovers from the meta stream as after a crash: PARTITION was persisted with the clean-shutdown
    flag down when this broker opened the partition, so it replays the log from the recovery point (closing entries
    a failed close may have written are complete all the same: they follow every append taken).

    Safe because no stream is closed at the controller before every record it acknowledged is committed, and none
    is committed twice: ``close_streams`` closes a stream still open here as a clean close does, settling its
    appends and uploading its records first (the upload pipeline retries until it commits them); a stream a failed
    close closed here already is closed at the controller only if that close committed its records before its
    controller call failed (``left_open``), nothing uploaded again. One whose upload failed for good (a fenced
    node, an engine stopping) stays opened at its epoch with its records in the WAL, which this node's next start
    (or a failover replaying its WAL) commits at that epoch and then closes: closing it now would fence that commit
    and lose those records. A close repeated after one that was applied unanswered is answered as done, or refused
    as fenced or not found once the stream moved on, which the stream client takes as closed."""
    streams = _streams(state)
    logger.warning("closing %s did not complete cleanly (%s); closing its streams without the closing entries, the "
                   "next open recovers", state.where, failure)
    deadline = time.monotonic() + UNCLEAN_CLOSE_RETRY_S
    delay = _UNCLEAN_BACKOFF_START_S
    while True:
        try:
            await state.streams.close_streams([(stream, -1) for stream in streams])
        except storage_errors.NodeEpochExpiredError as exc:
            # This incarnation is fenced: no close of it is ever accepted. Its WAL's replay closes the streams.
            logger.error("closing %s uncleanly failed, this node is fenced: %s", state.where, exc)
            return
        except Exception as exc:
            if time.monotonic() + delay > deadline:
                logger.error("closing %s uncleanly failed for %.1f s, its streams stay opened here until this node "
                             "restarts: %s", state.where, UNCLEAN_CLOSE_RETRY_S, exc)
                return
            logger.warning("closing %s uncleanly failed, retrying in %.2f s: %s", state.where, delay, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _UNCLEAN_BACKOFF_MAX_S)
            continue
        logger.info("closed %s uncleanly at offset %d", state.where, state.log_end_offset)
        return


def _data_streams(state: PartitionState) -> list[Stream]:
    """The streams the partition has open but its meta stream."""
    extra = (state.stored.cleaned, state.cleaning, state.txn, state.share)
    return [state.log, state.time, *(s for s in extra if s is not None)]


def _streams(state: PartitionState) -> list[Stream]:
    """Every stream the partition has open: its data streams, then its meta stream."""
    return [*_data_streams(state), state.meta.stream]


async def _settled(stream: Stream) -> bool:
    """Whether every append the stream took is durable (False after ``_SETTLE_S`` seconds: one failed or hangs)."""
    if stream.confirm_offset >= stream.next_offset:
        return True
    return await stream.wait_for_append(stream.next_offset - 1, _SETTLE_S)


def _closing_entries(state: PartitionState) -> dict[str, bytes]:
    """What the next open reads instead of the log: the producer snapshot, the leader epochs and PARTITION with the
    clean-shutdown flag up and the recovery point at the log end."""
    return {
        KEY_PRODUCER_SNAPSHOTS: encode_snapshot(state.log_end_offset, state.producers),
        KEY_LEADER_EPOCH_CHECKPOINT: encode_epoch_checkpoint(state.epochs.entries),
        KEY_PARTITION: checkpoints.partition_record(state, clean_shutdown=True),
    }


async def delete(state: PartitionState) -> None:
    """Destroys the partition's streams and its KV entry (topic deletion)."""
    async with state.lock:
        state.closed = True
    extra = [s for s in (state.stored.cleaned, state.cleaning) if s is not None]
    txn = [s for s in (state.txn, state.share) if s is not None]
    for stream in (state.log, state.time, *txn, *extra, state.meta.stream):
        try:
            await stream.destroy()
        except storage_errors.StorageError as exc:
            logger.warning("deleting stream %d of %s failed: %s", stream.stream_id, state.where, exc)
    # Streams of interrupted or replaced cleaner rounds not deleted yet would otherwise outlive the topic.
    doomed = [x for x in state.doomed() if all(x != s.stream_id for s in extra)]
    left = await delete_doomed(state.streams, doomed, state.leader_epoch, state.where)
    if left:
        logger.warning("streams %s of deleted %s could not be deleted", left, state.where)
    await state.kv.delete_kv(state.kv_key)
    logger.info("deleted the streams of %s", state.where)
