"""The log cleaner's switch-over: a round's output stream from its creation to replacing the cleaned prefix
(broker/partition/cleaner.py runs the rounds, DESIGN.md §10).

A round writes a new stream, named in LOG's ``doomed`` list before it is written (:func:`begin_cleaning`), so a
round interrupted by a crash or a leadership change leaves only a stream the next open deletes; an abandoned round
deletes it itself (:func:`abandon_cleaning`). A finished round switches the partition to its output with one LOG
meta record (:func:`install_cleaned`), then trims the log stream to the new cleaner offset and deletes the cleaned
stream it replaced. What those LOG records say is computed in :mod:`.cleaned_stream`; this module applies them to
the open partition, under its lock where the partition's state changes.
"""

from __future__ import annotations

import json
import logging

from kio.schema.errors import ErrorCode

from broker.partition.meta_stream import KEY_LOG, KEY_PARTITION
from broker.partition.partition_log.checkpoints import appends_durable, checkpoint_entries, partition_record
from broker.partition.partition_log.cleaned_stream import doomed_ids, switched_log_info
from broker.partition.partition_log.opening import open_stream
from broker.partition.partition_log.state import PartitionState
from metadata.stream_tags import partition_stream_tags
from storage import errors as storage_errors
from storage.stream_api import Stream
from wire.errors import KafkaError

logger = logging.getLogger(__name__)


async def begin_cleaning(state: PartitionState) -> Stream:
    """Creates and opens the stream a cleaner round writes, after naming it in LOG's ``doomed`` list: a round
    interrupted by a crash or a leadership change leaves a stream the next open deletes."""
    state.check_open()
    tags = partition_stream_tags(state.topic, state.topic_id, state.partition, "cleaned")
    stream_id = await state.streams.create_stream(tags)
    await state.put_log_info(doomed=[*state.doomed(), stream_id])
    stream = await open_stream(state.streams, stream_id, state.leader_epoch, state.where)
    state.cleaning = stream
    if state.closed:  # closed while we were opening it: close() did not see it
        await stream.close()
        raise KafkaError(ErrorCode.not_leader_or_follower, f"{state.where} is no longer led by this broker")
    return stream


async def abandon_cleaning(state: PartitionState, stream: Stream) -> None:
    """Deletes an unfinished round's stream (best effort: the ``doomed`` entry covers a failure). A stream the
    switch already installed (the round was interrupted after it) belongs to the partition and stays."""
    if stream is state.stored.cleaned:
        return
    state.cleaning = None
    try:
        await stream.destroy()
        if not state.closed:
            await state.put_log_info(doomed=[x for x in state.doomed() if x != stream.stream_id])
    except storage_errors.StorageError as exc:
        logger.warning("deleting cleaner stream %d of %s failed: %s", stream.stream_id, state.where, exc)


async def install_cleaned(
    state: PartitionState,
    stream: Stream,
    *,
    cleaner_offset: int,
    expected_start: int,
    read_bytes: int,
    written_bytes: int,
    tombstone_horizon_ms: int | None = None,
) -> bool:
    """Switches the partition to a round's output: ``stream`` holds ``[expected_start, cleaner_offset)``
    compacted, built from ``read_bytes`` of stored batches into ``written_bytes``. The switch is one LOG
    meta record (new cleaned stream, cleaner offset, the replaced stream doomed); then the log stream is
    trimmed to the cleaner offset and the replaced cleaned stream deleted. Returns False, changing nothing,
    when the partition moved on meanwhile (log start moved, closed) or its appends were not durable in time.

    A crash replays the log from the recovery point over the switched layout, where compaction may have removed a
    producer's last batch (a later record with the same key superseded it): producer state rebuilt from the
    compacted prefix would answer that producer's next batch OUT_OF_ORDER_SEQUENCE. Kafka's cleaner keeps each
    producer's last batch (emptied) for this; here the same meta record carries a producer snapshot at the log end
    and the recovery point with it, whenever the recovery point is below the cleaner offset, so no replay ever reads
    the compacted prefix (a checkpoint started after the switch may be skipped, or not durable before a crash). The
    snapshot names only durable batches (:func:`.checkpoints.appends_durable`, waited for under the lock as a
    checkpoint does); a switch whose appends do not get durable in time is refused, the round abandoned."""
    async with state.lock:
        if state.closed or state.log_start_offset != expected_start or cleaner_offset < state.cleaner_offset:
            return False
        snapshot = state.checkpoint.recovery_point < cleaner_offset
        if snapshot and not await appends_durable(state):
            logger.warning("%s: cleaner switch to offset %d refused: appends not durable in time", state.where,
                           cleaner_offset)
            return False
        old = state.stored.cleaned
        info = switched_log_info(
            state.log_info,
            stream_id=stream.stream_id,
            cleaner_offset=cleaner_offset,
            written_bytes=written_bytes,
            tombstone_horizon_ms=tombstone_horizon_ms,
            replaced=old.stream_id if old is not None else None,
        )
        doomed = doomed_ids(info)
        state.tombstone_horizon_ms = tombstone_horizon_ms
        state.size_bytes = max(0, state.size_bytes - read_bytes + written_bytes)
        state.cleaned_bytes = written_bytes
        state.stored.cleaned = stream
        state.cleaning = None
        state.stored.cleaner_offset = cleaner_offset
        state.log_info = info
        entries = checkpoint_entries(state) if snapshot else {KEY_PARTITION: partition_record(state,
                                                                                             clean_shutdown=False)}
        put = state.meta.put({KEY_LOG: json.dumps(info).encode(), **entries})
    await put
    await state.log.trim(cleaner_offset)
    if old is not None:
        try:
            await old.destroy()
        except storage_errors.StorageError as exc:
            logger.warning("deleting replaced cleaned stream %d of %s failed: %s", old.stream_id, state.where, exc)
            return True
    if not state.closed:
        await state.put_log_info(doomed=[x for x in doomed if old is None or x != old.stream_id])
    return True
