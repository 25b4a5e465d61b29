"""What every part of the group coordinator works through: the loaded groups, their timers and their writes.

:class:`CoordinatorRuntime` is the base the coordinator's parts build on, one module each: the classic protocol's
requests (:mod:`broker.groups.classic_membership`), committed offsets (:mod:`broker.groups.offset_commits`), and
the service that ties them together with group lookup, listing and deletion (:mod:`broker.groups.coordinator`).
It holds what they all share, whatever the group type:

* ownership: when this broker becomes leader of a ``__consumer_offsets`` partition it replays it
  (:mod:`broker.groups.offsets_topic`) and installs the groups it held, answering COORDINATOR_LOAD_IN_PROGRESS
  until done; when it loses the partition it drops those groups and answers NOT_COORDINATOR, so clients look the
  coordinator up again. Owning the partitions is :mod:`broker.internal_topic` (shared with the transaction
  coordinator); this module installs and drops what they hold;
* the wall clock, and looking a group up with the coordinator checks every request makes;
* one timer per group at the group's next deadline, and appending what a group asks to persist through the
  partition layer (``PartitionLog.append(origin="coordinator")``); a request whose answer depends on a write is
  answered only once the write is durable;
* deleting a group with its tombstones (DeleteGroups, and offset expiry emptying a group).

Groups of every type live in one table keyed by group id (a group id names one group, whatever its type): the
classic protocol's sans-I/O :class:`broker.groups.classic.group.Group`, the KIP-848
:class:`broker.groups.consumer.group.ConsumerGroup` and the KIP-932 :class:`broker.groups.share.group.ShareGroup`.
All answer the questions asked here the same way (``dead``,
``next_deadline_ms``, ``tick``, ``is_disposable``); what each asks to persist differs, so ``_after`` writes each
type's changes with its own records.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from functools import partial

from kio.schema.errors import ErrorCode

from broker.broker_context import BrokerContext
from broker.groups.classic.group import Group
from broker.groups.classic.rebalance import GroupConfig, PendingWrite
from broker.groups.consumer.assignors import assignor_named
from broker.groups.consumer.changes import Change
from broker.groups.consumer.group import ConsumerGroup, ConsumerGroupConfig
from broker.groups.consumer_persistence import encode_changes, encode_state, restore_group
from broker.groups.offsets_schema import encode_group_key, encode_group_value, encode_offset_key
from broker.groups.offsets_topic import (
    OFFSETS_INTERNAL_TOPIC,
    OFFSETS_TOPIC,
    ReplayedPartition,
    replay_offsets_partition,
)
from broker.groups.share.changes import ShareChange as ShareChangeT
from broker.groups.share.group import ShareGroup, ShareMembershipConfig
from broker.groups.share_persistence import encode_share_changes, encode_share_state, restore_share_group
from broker.groups.txn_offsets import TxnVerifier, newer, unverifiable
from broker.internal_topic import InternalTopicPartitions, Loaded, OwnedPartition
from broker.partition.manager import PartitionManager
from wire.errors import KafkaError
from wire.log_text import untrusted
from wire.record_batch import Record, build_batch
from wire.stored_schema import MAX_STORED_STRING_BYTES, SchemaError

logger = logging.getLogger(__name__)

#: How long what a failed write of a group left unwritten waits to be written again when no other write of the id
#: comes first; Kafka's coordinator timer retries a failed timeout operation after the same 500 ms.
WRITE_RETRY_S = 0.5

#: Records as the coordinator encodes them: (key, value), a None value being a tombstone.
Encoded = list[tuple[bytes, bytes | None]]


class CoordinatorRuntime:
    """The loaded groups of this broker and the plumbing every request to them goes through (module docstring)."""

    def __init__(
        self, broker: BrokerContext, partitions: PartitionManager, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._context = broker
        self._partition_manager = partitions
        # Wall clock in seconds: group timestamps are persisted, so it is time.time, not the loop's monotonic
        # clock. Public so that tests can move it (retention is measured in days).
        self.clock = clock
        cfg = broker.config
        self.config = GroupConfig(
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
            max_size=cfg.group_max_size,
        )
        # Committed offsets' settings (used by offset_commits.py).
        self._retention_ms = cfg.offsets_retention_ms
        self._retention_check_s = int(cfg.value("offsets.retention.check.interval.ms")) / 1000
        # offset.metadata.max.bytes, capped by what an int16-length string in the record format can hold.
        self._metadata_max_bytes = min(int(cfg.value("offset.metadata.max.bytes")), MAX_STORED_STRING_BYTES)
        settings = cfg.consumer_groups
        self.consumer_config = ConsumerGroupConfig(
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            max_size=settings.max_size,
            assignors={name: assignor for name in settings.assignors if (assignor := assignor_named(name))},
        )
        self.consumer_protocol_enabled = settings.enabled
        self.consumer_settings = settings
        share_settings = self.share_settings = cfg.share_groups
        self.share_config = ShareMembershipConfig(
            session_timeout_ms=share_settings.session_timeout_ms,
            heartbeat_interval_ms=share_settings.heartbeat_interval_ms,
            max_size=share_settings.max_size,
        )
        self._groups: dict[str, Group | ConsumerGroup | ShareGroup] = {}
        #: KIP-890 verification of a TxnOffsetCommit's transaction (the broker sets the transaction coordinator's).
        self.verify_transaction: TxnVerifier = unverifiable
        #: Transaction markers (producer id, commit) that reached a partition while it was loading.
        self._completions: dict[int, list[tuple[int, bool]]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        #: Each consumer or share group's latest write of heartbeat changes, which answers resting on it wait for.
        self._consumer_writes: dict[str, asyncio.Future[ErrorCode]] = {}
        #: The keys failed writes of a group id tombstoned: the id's next write tombstones them again
        #: (``_append_group``), or a reload would bring back what they removed.
        self._unwritten: dict[str, list[bytes]] = {}
        #: The retry of each group id's unwritten keys (``_retry_unwritten``), at most one per id.
        self._write_retries: dict[str, asyncio.TimerHandle] = {}
        self._cleanup_task: asyncio.Task[None] | None = None
        self._partitions = InternalTopicPartitions(
            broker,
            partitions,
            OFFSETS_INTERNAL_TOPIC,
            read=replay_offsets_partition,
            install=self._install,
            unload=self._unload_groups,
        )

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ------------------------------------------------------------------------------------------------ ownership

    @property
    def num_partitions(self) -> int:
        """Partitions of ``__consumer_offsets``: the existing topic's count wins over the config (as in Kafka)."""
        return self._partitions.num_partitions

    def partition_for(self, group_id: str) -> int:
        return self._partitions.partition_for(group_id)

    def _unload_groups(self, partition: int) -> int:
        """Drops the groups of a partition this broker no longer leads (their members' requests then answer
        NOT_COORDINATOR); returns how many."""
        self._completions.pop(partition, None)
        now = self._now_ms()
        dropped = 0
        for group_id in [g for g in self._unwritten if self.partition_for(g) == partition]:
            del self._unwritten[group_id]  # the next owner replays what was written, and writes from there
        for group_id in [g for g in self._write_retries if self.partition_for(g) == partition]:
            self._write_retries.pop(group_id).cancel()
        for group_id in [g for g in self._groups if self.partition_for(g) == partition]:
            group = self._groups.pop(group_id)
            self._cancel_timer(group_id)
            if not group.dead:
                group.mark_dead(now, ErrorCode.not_coordinator)
            dropped += 1
        return dropped

    def _install(self, owned: OwnedPartition, replayed: ReplayedPartition) -> Loaded:
        """Installs the groups a replay found; the partition serves them right after."""
        now = self._now_ms()
        for group_id, value in replayed.group_values.items():
            if value is not None:
                self._groups[group_id] = Group.restore(group_id, self.config, value, now)
        for group_id, found in replayed.consumer_groups.items():
            consumer_group = restore_group(found, self.consumer_config, now)
            if consumer_group is not None:
                self._groups[group_id] = consumer_group
        for group_id, found_share in replayed.share_groups.items():
            share_group = restore_share_group(found_share, self.share_config, now)
            if share_group is not None:
                self._groups[group_id] = share_group
        for group_id, committed in replayed.offsets.items():
            if not committed:
                continue  # every offset it had was tombstoned (the group was deleted): nothing to bring back
            group = self._groups.get(group_id)
            if isinstance(group, ShareGroup):
                continue  # offsets a group of this id committed before it became a share group
            if group is None:
                group = self._groups[group_id] = Group(group_id, self.config, now)
            for (topic, partition), offset in committed.items():
                group.offsets.put(topic, partition, offset.value, offset.log_offset)
        for group_id, pending in replayed.pending.items():
            if not pending:
                continue
            group = self._groups.get(group_id)
            if isinstance(group, ShareGroup):
                continue
            if group is None:
                group = self._groups[group_id] = Group(group_id, self.config, now)
            group.pending_txn_offsets = pending
        # Markers written while the partition was being read (after the replay's end) were queued for it.
        for producer_id, commit in self._completions.pop(owned.partition, []):
            self._complete_in_partition(owned.partition, producer_id, commit)
        loaded = [g for g in self._groups.values() if self.partition_for(g.group_id) == owned.partition]
        for group in loaded:
            self._reschedule(group)
        return Loaded(len(loaded), replayed.records)

    def coordinator_error(self, group_id: str) -> ErrorCode:
        """NONE when this broker serves ``group_id`` right now; else the error the client should act on."""
        return self._partitions.coordinator_error(group_id)

    def _complete_in_partition(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """Applies a transaction's outcome to the pending offsets of one partition's groups. Here rather than with
        the other offset operations because loading a partition applies the markers queued during the load."""
        for group in list(self._groups.values()):
            if isinstance(group, ShareGroup) or not group.pending_txn_offsets.has_producer(producer_id):
                continue
            if self.partition_for(group.group_id) != offsets_partition:
                continue
            applied = group.pending_txn_offsets.complete(producer_id, commit=commit)
            for (topic, partition), offset in applied.items():
                if newer(group.offsets.log_offset(topic, partition), offset):
                    group.offsets.put(topic, partition, offset.value, offset.log_offset)
            logger.debug(
                "group %s: transaction of producer %d %s (%d offsets)",
                untrusted(group.group_id),
                producer_id,
                "committed" if commit else "aborted",
                len(applied),
            )
            self._after(group)

    # ------------------------------------------------------------------------------------------------ plumbing

    def _cancel_timer(self, group_id: str) -> None:
        timer = self._timers.pop(group_id, None)
        if timer is not None:
            timer.cancel()

    def _reschedule(self, group: Group | ConsumerGroup | ShareGroup) -> None:
        self._cancel_timer(group.group_id)
        deadline = group.next_deadline_ms()
        if deadline is None or group.dead:
            return
        delay = max(0.0, (deadline - self._now_ms()) / 1000)
        self._timers[group.group_id] = asyncio.get_running_loop().call_later(delay, self._on_timer, group)

    def _on_timer(self, group: Group | ConsumerGroup | ShareGroup) -> None:
        self._timers.pop(group.group_id, None)
        if self._groups.get(group.group_id) is not group:
            return
        group.tick(self._now_ms())
        self._after(group)

    def _after(self, group: Group | ConsumerGroup | ShareGroup) -> None:
        """After any call into a group: start its writes, re-arm its timer, forget it if nothing is left."""
        if isinstance(group, Group):
            for write in group.take_writes():
                self._partitions.spawn(self._persist_group(group, write), name=f"persist group {group.group_id}")
        elif isinstance(group, ShareGroup):
            share_changes = group.take_changes()
            if share_changes:
                self._partitions.spawn(
                    self._write_share_changes(group, share_changes), name=f"persist group {group.group_id}"
                )
        else:
            changes = group.take_changes()
            if self._downgraded(group, changes):
                return
            if changes:
                # A timer's write (a member fenced) answers nobody: its error is not dropped all the same, as
                # ``_append_group`` has the group's next write carry what it removed, or writes it again.
                self._partitions.spawn(
                    self._write_consumer_changes(group, changes), name=f"persist group {group.group_id}"
                )
        if group.is_disposable and self._groups.get(group.group_id) is group:
            del self._groups[group.group_id]
            self._cancel_timer(group.group_id)
            return
        self._reschedule(group)

    async def _append(
        self,
        group_id: str,
        records: Sequence[Record],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        verified_markers: int | None = None,
    ) -> int:
        """Appends to the group's ``__consumer_offsets`` partition; returns the batch's base offset. With a
        producer id the batch belongs to that producer's transaction (TxnOffsetCommit), verified when the
        partition had applied ``verified_markers`` of its markers (a marker since ended it: INVALID_TXN_STATE)."""
        partition = self.partition_for(group_id)
        log = self._partition_manager.get(OFFSETS_TOPIC, partition) if partition in self._partitions.owned else None
        if log is None:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{OFFSETS_TOPIC}-{partition} is not open here")
        transactional = producer_id >= 0
        batch = build_batch(
            records,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            # Kafka writes transactional offset commits at sequence 0; the coordinator's own appends are not
            # sequence-checked (only client appends are).
            base_sequence=0 if transactional else -1,
            is_transactional=transactional,
        )
        result = await log.append(batch, origin="coordinator", verified_markers=verified_markers)
        return result.base_offset

    async def _persist_group(self, group: Group, write: PendingWrite) -> None:
        try:
            record = Record(
                key=encode_group_key(group.group_id), value=encode_group_value(write.value), timestamp=self._now_ms()
            )
            await self._append_group(group.group_id, [record], self._whole_state(group))
            error = ErrorCode.none
        except SchemaError as exc:
            # A member or instance id longer than the record format can hold (int16 string lengths).
            error = ErrorCode.invalid_request
            logger.warning(
                "group %s: generation %d cannot be stored: %s",
                untrusted(group.group_id), write.value.generation, exc,
            )
        except Exception as exc:
            error = self._partitions.store_error(exc, group.group_id)
            logger.warning(
                "group %s: persisting generation %d to %s-%d failed: %s",
                untrusted(group.group_id),
                write.value.generation,
                OFFSETS_TOPIC,
                self.partition_for(group.group_id),
                exc,
            )
        write.on_done(error, self._now_ms())
        if self._groups.get(group.group_id) is group:
            self._after(group)

    def _downgraded(self, group: ConsumerGroup, changes: list[Change]) -> bool:
        """True when the group just became a classic group (KIP-848's online downgrade, which
        :mod:`broker.groups.migration` decides), its ``changes`` written with the conversion."""
        return False

    async def _write_consumer_changes(
        self, group: ConsumerGroup, changes: Sequence[Change], before: Sequence[Record] = ()
    ) -> ErrorCode:
        """Persists a consumer group's changes as Kafka's records, after ``before`` (a converted group's old
        records): :meth:`_write_changes`."""
        encode = partial(encode_changes, group.group_id, changes)
        return await self._write_changes(group, encode, bool(changes or before), before)

    async def _write_share_changes(self, group: ShareGroup, changes: Sequence[ShareChangeT]) -> ErrorCode:
        """Persists a share group's changes as Kafka's records: :meth:`_write_changes`."""
        return await self._write_changes(group, partial(encode_share_changes, group.group_id, changes), bool(changes))

    async def _write_changes(
        self, group: ConsumerGroup | ShareGroup, encode: Callable[[], Encoded], new: bool, before: Sequence[Record] = ()
    ) -> ErrorCode:
        """Persists what a request or the group's timer changed (``new``: anything); the error a request answers
        with. A write waits for the group's write in flight: with nothing new to write, the answer may rest on the
        state that one writes, so no member is told an epoch a failover could forget; with something new, it
        carries what that one removed if it fails (``_append_group``), so no later write lands without them. After
        a failed write, even nothing new is a write: the failed one's tombstones and the group's whole state."""
        group_id = group.group_id
        pending = self._consumer_writes.get(group_id)
        if pending is not None and not pending.done():
            await asyncio.shield(pending)
        stored = ErrorCode.none
        if new or (group_id in self._unwritten and self._groups.get(group_id) is group):
            write = asyncio.ensure_future(self._persist_changes(group, encode, before))
            self._consumer_writes[group_id] = write
            stored = await asyncio.shield(write)
        latest = self._consumer_writes.get(group_id)
        if latest is not None and latest.done():
            del self._consumer_writes[group_id]
        return stored

    async def _persist_changes(
        self, group: ConsumerGroup | ShareGroup, encode: Callable[[], Encoded], before: Sequence[Record]
    ) -> ErrorCode:
        """Appends a consumer or share group's encoded changes after ``before``; the error a request answers with."""
        try:
            now = self._now_ms()
            records = [*before, *(Record(key=key, value=value, timestamp=now) for key, value in encode())]
            await self._append_group(group.group_id, records, self._whole_state(group))
        except SchemaError as exc:
            logger.warning("group %s: its state cannot be stored: %s", untrusted(group.group_id), exc)
            return ErrorCode.invalid_request
        except Exception as exc:
            logger.warning(
                "%s group %s: persisting epoch %d to %s-%d failed: %s",
                group.group_type,
                untrusted(group.group_id),
                group.group_epoch,
                OFFSETS_TOPIC,
                self.partition_for(group.group_id),
                exc,
            )
            return self._partitions.store_error(exc, group.group_id)
        return ErrorCode.none

    def _whole_state(self, group: Group | ConsumerGroup | ShareGroup) -> Callable[[], Encoded] | None:
        """The group's whole state as it is now, which a write of it carrying another's tombstones writes after
        them; None when its id names another group now (a write of a replaced group carries nothing)."""
        if self._groups.get(group.group_id) is not group:
            return None
        if isinstance(group, ShareGroup):
            return partial(encode_share_state, group)
        if isinstance(group, ConsumerGroup):
            return partial(encode_state, group)
        return _no_records  # each of a classic group's writes is its whole state, one record

    async def _append_group(
        self, group_id: str, records: Sequence[Record], whole_state: Callable[[], Encoded] | None
    ) -> None:
        """Appends a group's ``records`` (raising as :meth:`_append`); the one place a failed write of a group is
        made up for, whichever write failed: a request's, the group's timer's (a member fenced), a conversion's,
        a deletion's.

        A failed write left the group changed in memory: its request was answered with the error and a retry finds
        nothing new to write, or nobody was answered (a timer's write). Were that the end of it, what the failed
        write removed would still be in ``__consumer_offsets`` under later writes, and a reload would bring it back
        (a fenced member holding the partitions its successor was given, a converted group's records taking the
        place of the classic group written since). So the tombstones of a failed write wait in ``_unwritten`` for
        the id's next write, which writes them first and then the group's whole state as it is now
        (``whole_state``), as Kafka's coordinator only goes on from state it has written; when no write of the id
        comes within ``WRITE_RETRY_S``, :meth:`_retry_unwritten` makes one. Only removals are replayed, and values
        only as they are now: an older value written again could undo a newer one."""
        owned = self._partitions.owned.get(self.partition_for(group_id))
        carried = self._unwritten.pop(group_id, None) if whole_state is not None else None
        tombstones = [*(carried or ()), *(r.key for r in records if r.value is None and r.key is not None)]
        try:
            if carried is not None and whole_state is not None:
                now = self._now_ms()
                records = [
                    *(Record(key=key, value=None, timestamp=now) for key in carried),
                    *(Record(key=key, value=value, timestamp=now) for key, value in whole_state()),
                    *records,
                ]
            await self._append(group_id, records)
        except BaseException:
            # Even without tombstones the id is marked: its next write carries the group's whole state, which the
            # failed write's values were part of. Kept only while this load of the partition owns it (a later
            # owner replays what was written, and goes on from there).
            if owned is not None and self._partitions.owned.get(owned.partition) is owned:
                self._unwritten[group_id] = list(dict.fromkeys([*self._unwritten.get(group_id, ()), *tombstones]))
                if group_id not in self._write_retries:
                    self._write_retries[group_id] = asyncio.get_running_loop().call_later(
                        WRITE_RETRY_S, self._retry_unwritten, group_id
                    )
            raise

    def _retry_unwritten(self, group_id: str) -> None:
        """Writes what failed writes of ``group_id`` left unwritten, unless a write of the id did since.

        Waiting for the id's next write is not enough: there may be none. A member fenced by the group's timer,
        a member that left, a deleted group: nobody asks again. Until their tombstones are written, a coordinator
        that restarts or moves reloads what they removed, and a fenced member holds its partitions for one more
        session. A consumer or share group writes them with its whole state, in turn with its other writes; a
        deleted one writes them alone. A classic group's are left for its next generation's write: a classic group
        writes its whole state only when a generation completes, never in the middle of a rebalance."""
        self._write_retries.pop(group_id, None)
        owned = self._partitions.owned.get(self.partition_for(group_id))
        if group_id not in self._unwritten or owned is None or not self._partitions.serves(owned):
            return
        group = self._groups.get(group_id)
        if isinstance(group, Group):
            return
        if group is None and not self._unwritten[group_id]:
            del self._unwritten[group_id]  # a group gone with nothing to tombstone: nothing to write
            return
        logger.info(
            "group %s: writing again to %s-%d what a failed write left unwritten",
            untrusted(group_id),
            OFFSETS_TOPIC,
            owned.partition,
        )
        if group is None:
            self._partitions.spawn(self._write_gone_group(group_id), name=f"persist group {group_id}")
        else:
            self._partitions.spawn(self._write_changes(group, _no_records, False), name=f"persist group {group_id}")

    async def _write_gone_group(self, group_id: str) -> None:
        """Writes the tombstones failed writes left of a group that is no longer loaded (deleted, or emptied and
        dropped); a failure is retried as any other (``_append_group``)."""
        try:
            await self._append_group(group_id, [], _no_records)
        except Exception as exc:
            logger.warning("group %s: writing its tombstones again failed: %s", untrusted(group_id), exc)

    async def _tombstone_consumer_group(self, group: ConsumerGroup) -> ErrorCode:
        """Writes the tombstones of an empty consumer group's records (it is deleted, or becomes classic)."""
        return await self._write_consumer_changes(group, group.deletion_changes())

    def _group_or_error(self, group_id: str) -> tuple[Group | ConsumerGroup | None, ErrorCode]:
        """The classic or consumer group ``group_id`` names; a share group's id answers GROUP_ID_NOT_FOUND (Kafka's
        "Group ... is not a classic/consumer group"): the classic and KIP-848 requests never reach a share group."""
        group, error = self._any_group_or_error(group_id)
        if isinstance(group, ShareGroup):
            return None, ErrorCode.group_id_not_found
        return group, error

    def _any_group_or_error(self, group_id: str) -> tuple[Group | ConsumerGroup | ShareGroup | None, ErrorCode]:
        if len(group_id.encode("utf-8")) > MAX_STORED_STRING_BYTES:
            return None, ErrorCode.invalid_group_id
        error = self.coordinator_error(group_id)
        if error is not ErrorCode.none:
            return None, error
        return self._groups.get(group_id), ErrorCode.none

    # ------------------------------------------------------------------------------------------------ deletion

    async def _delete_group(self, group: Group | ConsumerGroup | ShareGroup) -> ErrorCode:
        now = self._now_ms()
        encoded: list[tuple[bytes, bytes | None]] = []
        if isinstance(group, ShareGroup):
            encoded = encode_share_changes(group.group_id, group.deletion_changes())
        else:
            # As Kafka's deleteAllOffsets: what open transactions commit is tombstoned too (once per partition),
            # or their COMMIT marker would bring the offsets, and with them the group, back in a replay.
            doomed = {tp for tp, _ in group.offsets} | group.pending_txn_offsets.partitions()
            encoded = [(encode_offset_key(group.group_id, t, p), None) for t, p in sorted(doomed)]
            if isinstance(group, Group):
                encoded.append((encode_group_key(group.group_id), None))
            else:
                encoded.extend(encode_changes(group.group_id, group.deletion_changes()))
        records = [Record(key=key, value=value, timestamp=now) for key, value in encoded]
        group.mark_dead(now, ErrorCode.coordinator_not_available)
        self._cancel_timer(group.group_id)
        if self._groups.get(group.group_id) is group:
            del self._groups[group.group_id]
        try:
            # What failed writes of the group left unwritten is tombstoned with it: a group of this id created
            # later would otherwise be replayed with the members they removed.
            await self._append_group(group.group_id, records, _no_records)
        except Exception as exc:
            logger.warning("group %s: writing its tombstones failed: %s", untrusted(group.group_id), exc)
            return self._partitions.store_error(exc, group.group_id)
        logger.info("%s group %s deleted", group.group_type, untrusted(group.group_id))
        return ErrorCode.none


def _no_records() -> Encoded:
    return []
