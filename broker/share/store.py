"""The durable share state of one topic partition: its share stream, written and replayed, checkpointed and trimmed.

Every change a share partition makes that must survive (acknowledgements, releases, lock time-outs, SPSO moves) is
appended to the partition's share stream as an update of its group before the caller is answered; every
``SNAPSHOT_EVERY`` updates of a group a snapshot of its whole state is written instead, and the stream is trimmed
below the oldest snapshot any group still needs. Replaying it therefore reads one snapshot per group and at most
``SNAPSHOT_EVERY`` updates after it (DESIGN §4: the share stream).

Appends are issued synchronously right after the state changed (``Stream.append`` assigns offsets at call time), so
the stream's order is the order of the changes even when callers then await durability concurrently.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable

from broker.partition.partition_log import PartitionLog
from broker.share.partition_state import PartitionShareState
from broker.share.state_records import SNAPSHOT, TOMBSTONE, UPDATE, ShareRecord, ShareStreamReplay, decode, encode
from storage.stream_api import Stream, read_batches
from wire.log_text import untrusted
from wire.stored_schema import SchemaError

logger = logging.getLogger(__name__)

#: Updates of one group between two of its snapshots: bounds a replay to this many updates per group.
SNAPSHOT_EVERY = 64
#: How many records may follow the oldest snapshot still needed before its group is snapshotted again even if it
#: made no change: a group that went idle would otherwise keep the whole stream behind its last snapshot.
IDLE_SNAPSHOT_LAG = 4 * SNAPSHOT_EVERY
_FETCH_CHUNK = 1 << 20


class ShareStore:
    """The share stream of one open partition and where each group's latest snapshot is in it."""

    def __init__(self, log: PartitionLog, replay: ShareStreamReplay) -> None:
        self.log = log
        self.replayed = replay
        self._snapshots: dict[str, int] = {g: r.snapshot_offset for g, r in replay.groups.items()}
        self._snapshot_epochs: dict[str, int] = {g: r.snapshot_epoch for g, r in replay.groups.items()}
        self._created: dict[str, int] = {g: r.create_timestamp for g, r in replay.groups.items()}
        self._updates: dict[str, int] = {g: r.updates_since_snapshot for g, r in replay.groups.items()}
        #: Each group's live state (the object its share partition changes), for re-snapshotting an idle group.
        self._states: dict[str, PartitionShareState] = {g: r.state for g, r in replay.groups.items()}

    @classmethod
    async def load(cls, log: PartitionLog) -> ShareStore:
        """Replays the partition's share stream (none yet: no state)."""
        replay = ShareStreamReplay()
        stream = log.share_stream
        if stream is not None:
            started = time.monotonic()
            async for batch in read_batches(stream, max_bytes=_FETCH_CHUNK):
                try:
                    replay.apply(batch.base_offset, decode(batch.payload))
                except SchemaError as exc:
                    replay.skipped += 1
                    logger.warning("%s: skipping bad share state record %d: %s", log.where, batch.base_offset, exc)
            logger.info("%s: share state of %d groups replayed from stream offsets [%d, %d) in %.3fs",
                        log.where, len(replay.groups), stream.start_offset, stream.confirm_offset,
                        time.monotonic() - started)
        return cls(log, replay)

    def groups(self) -> list[str]:
        return list(self._snapshots)

    def has(self, group_id: str) -> bool:
        return group_id in self._snapshots

    async def write_snapshot(self, group_id: str, state: PartitionShareState) -> None:
        """A group's whole state (its first write, a reset, or the periodic checkpoint), then a trim if it lets
        the stream's start move."""
        stream = await self.log.ensure_share_stream()
        await self._snapshot_now(stream, group_id, state)

    def write_update(self, group_id: str, state: PartitionShareState) -> Awaitable[None] | None:
        """Issues the changes of ``state`` since its last write (None: nothing to write). Must be called right
        after the change, without awaiting in between, so the stream keeps the order of changes."""
        stream = self.log.share_stream
        if stream is None or group_id not in self._snapshots:
            return None  # not initialized yet: the snapshot that initializes it carries everything
        self._states[group_id] = state
        if self._updates.get(group_id, 0) + 1 >= SNAPSHOT_EVERY:
            return self._snapshot_now(stream, group_id, state)
        update = state.take_update()
        if update is None:
            return None
        self._updates[group_id] = self._updates.get(group_id, 0) + 1
        record = ShareRecord(
            UPDATE, group_id, snapshot_epoch=self._snapshot_epochs.get(group_id, 0),
            leader_epoch=state.leader_epoch, start_offset=update.start_offset, batches=update.batches,
        )
        return _durable(stream.append(encode(record), 1))

    async def writes_begun(self) -> None:
        """The updates issued so far are being written (``Stream.writes_begun``), not yet durable."""
        stream = self.log.share_stream
        if stream is not None:
            await stream.writes_begun()

    async def write_tombstone(self, group_id: str) -> None:
        """Deletes the group's state (DeleteShareGroupOffsets, DeleteGroups)."""
        stream = self.log.share_stream
        if stream is None or group_id not in self._snapshots:
            return
        for table in (self._snapshots, self._snapshot_epochs, self._created, self._updates, self._states):
            table.pop(group_id, None)
        self.replayed.groups.pop(group_id, None)
        await stream.append(encode(ShareRecord(TOMBSTONE, group_id)), 1)
        await self._maybe_trim(stream)

    def _snapshot_now(self, stream: Stream, group_id: str, state: PartitionShareState) -> Awaitable[None]:
        self._states[group_id] = state
        now = int(time.time() * 1000)
        epoch = self._snapshot_epochs.get(group_id, -1) + 1
        record = ShareRecord(
            SNAPSHOT, group_id, snapshot_epoch=epoch, state_epoch=state.state_epoch,
            leader_epoch=state.leader_epoch, start_offset=state.start_offset,
            create_timestamp=self._created.setdefault(group_id, now), write_timestamp=now,
            batches=state.state_batches(),
        )
        offset = stream.next_offset
        wait = stream.append(encode(record), 1)
        self._snapshot_epochs[group_id] = epoch
        self._updates[group_id] = 0
        # A new group is known from now on (its updates follow its snapshot in the stream); an existing group's
        # older snapshot stays the one the trim respects until the new one is durable.
        self._snapshots.setdefault(group_id, offset)

        async def finish() -> None:
            await wait
            self._snapshots[group_id] = offset
            await self._maybe_trim(stream)

        return finish()

    async def _maybe_trim(self, stream: Stream) -> None:
        point = min(self._snapshots.values(), default=stream.confirm_offset)
        if stream.next_offset - point > IDLE_SNAPSHOT_LAG:
            # The oldest snapshot belongs to a group that has been idle: snapshot it again from its live state, so
            # the trim below (or the one after that snapshot is durable) can move past it.
            idle = [g for g, offset in self._snapshots.items() if offset == point and g in self._states]
            for group_id in idle:
                logger.debug("%s: re-snapshotting idle share group %s", self.log.where, untrusted(group_id))
                await self._snapshot_now(stream, group_id, self._states[group_id])
            if idle:
                return  # each new snapshot trimmed once durable
        point = min(point, stream.confirm_offset)
        if point > stream.start_offset:
            await stream.trim(point)


async def _durable(wait: Awaitable[int]) -> None:
    await wait
