"""The asyncio side of the classic group coordinator: ownership, timers and persistence in ``__consumer_offsets``.

A group belongs to one ``__consumer_offsets`` partition (Kafka's hash of the group id) and is served by that
partition's leader. When this broker becomes leader of such a partition it replays it from the log start to the
end (offset commits, group metadata, tombstones) and answers COORDINATOR_LOAD_IN_PROGRESS until done; when it loses
the partition it drops those groups and answers NOT_COORDINATOR, so clients look the coordinator up again. Owning
the partitions is :mod:`broker.internal_topic` (shared with the transaction coordinator); this module installs and
drops what they hold.

Group state lives in :class:`broker.groups.classic.group.Group` (sans-I/O). This module feeds it requests with the wall
clock, arms one timer per group at the group's next deadline, and appends what the group asks to persist through
the partition layer (``PartitionLog.append(origin="coordinator")``); a request whose answer depends on a write is
answered only once the write is durable.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode

from broker.groups.classic.group import Group, JoinRequest
from broker.groups.classic.protocols import CONSUMER_PROTOCOL_TYPE
from broker.groups.classic.rebalance import GroupConfig, PendingWrite
from broker.groups.classic.state import GroupState, JoinResult, SyncResult
from broker.groups.offsets import TopicPartition
from broker.groups.offsets_schema import (
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from broker.groups.txn_offsets import AppendedOffset, PendingTxnOffsets, newer
from broker.internal_topic import (
    InternalTopic,
    InternalTopicHost,
    InternalTopicPartitions,
    Load,
    Loaded,
    OwnedPartition,
    replay,
)
from broker.partition.partition_log import PartitionLog
from settings.server import ServerConfig
from wire.control_records import ControlRecordError, decode_marker
from wire.errors import KafkaError
from wire.record_batch import Record, build_batch
from wire.stored_schema import MAX_STORED_STRING_BYTES, SchemaError

logger = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


def _offsets_topic_configs(cfg: ServerConfig) -> dict[str, str]:
    return {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "segment.bytes": str(cfg.value("offsets.topic.segment.bytes")),
    }


_OFFSETS = InternalTopic(
    name=OFFSETS_TOPIC,
    role="group coordinator",
    items="groups",
    partitions_key="offsets.topic.num.partitions",
    replication_key="offsets.topic.replication.factor",
    configs=_offsets_topic_configs,
)


class CoordinatorHost(InternalTopicHost, Protocol):
    """What the coordinator needs from the broker node (``node.process.Node`` satisfies it)."""


@dataclass
class _Replayed:
    """What replaying one ``__consumer_offsets`` partition found."""

    group_values: dict[str, GroupValue | None] = field(default_factory=dict)
    offsets: dict[str, dict[TopicPartition, AppendedOffset]] = field(default_factory=dict)
    pending: dict[str, PendingTxnOffsets] = field(default_factory=dict)
    records: int = 0


@dataclass(frozen=True)
class _TxnCommit:
    """The transaction a TxnOffsetCommit writes in."""

    transactional_id: str
    producer_id: int
    producer_epoch: int

    def __str__(self) -> str:
        return f"transaction {self.transactional_id!r} (producer {self.producer_id} epoch {self.producer_epoch})"


@dataclass(frozen=True)
class OffsetCommit:
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode


def _tombstone(key: bytes, now_ms: int) -> Record:
    """A null-value record: compaction eventually drops the key from ``__consumer_offsets`` altogether."""
    return Record(key=key, value=None, timestamp=now_ms)


class GroupCoordinator:
    def __init__(self, node: CoordinatorHost, *, clock: Callable[[], float] = time.time) -> None:
        self._node = node
        # Wall clock in seconds: group timestamps are persisted, so it is time.time, not the loop's monotonic
        # clock. Public so that tests can move it (retention is measured in days).
        self.clock = clock
        cfg = node.config
        self.config = GroupConfig(
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
            max_size=cfg.group_max_size,
        )
        self._retention_ms = cfg.offsets_retention_ms
        self._retention_check_s = int(cfg.value("offsets.retention.check.interval.ms")) / 1000
        # offset.metadata.max.bytes, capped by what an int16-length string in the record format can hold.
        self._metadata_max_bytes = min(int(cfg.value("offset.metadata.max.bytes")), MAX_STORED_STRING_BYTES)
        self._groups: dict[str, Group] = {}
        #: Transaction markers (producer id, commit) that reached a partition while it was loading.
        self._completions: dict[int, list[tuple[int, bool]]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._cleanup_task: asyncio.Task[None] | None = None
        self._partitions = InternalTopicPartitions(
            node, _OFFSETS, read=self._replay, install=self._install, unload=self._unload_groups
        )

    # ------------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._partitions.start()
        self._cleanup_task = asyncio.create_task(self._cleanup_loop(), name="group-offsets-expiry")

    async def stop(self) -> None:
        """Lets in-flight writes finish (so their requests are answered), then drops every group."""
        await self._partitions.stop(self._cleanup_task, cancel_unfinished=False)
        groups = len(self._groups)
        self._partitions.unload_all()
        logger.info("group coordinator stopped (%d groups unloaded)", groups)

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
        for group_id in [g for g in self._groups if self.partition_for(g) == partition]:
            group = self._groups.pop(group_id)
            self._cancel_timer(group_id)
            if group.state is not GroupState.DEAD:
                group.mark_dead(now, ErrorCode.not_coordinator)
            dropped += 1
        return dropped

    def _install(self, owned: OwnedPartition, replayed: _Replayed) -> Loaded:
        """Installs the groups a replay found; the partition serves them right after."""
        now = self._now_ms()
        for group_id, value in replayed.group_values.items():
            if value is not None:
                self._groups[group_id] = Group.restore(group_id, self.config, value, now)
        for group_id, committed in replayed.offsets.items():
            group = self._groups.get(group_id)
            if group is None:
                group = self._groups[group_id] = Group(group_id, self.config, now)
            for (topic, partition), offset in committed.items():
                group.offsets.put(topic, partition, offset.value, offset.log_offset)
        for group_id, pending in replayed.pending.items():
            if not pending:
                continue
            group = self._groups.get(group_id)
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

    async def _replay(self, log: PartitionLog, where: str) -> _Replayed:
        """Last value per key from the log start to its end; tombstones remove earlier values. Offsets committed in
        a transaction stay pending until the transaction's marker, which applies or drops them."""
        replayed = _Replayed()
        async for header, record in replay(log, where):
            producer_id = header.producer_id if header.is_transactional else -1
            replayed.records += 1
            if header.is_control:
                self._apply_marker(record, producer_id, replayed, where)
            else:
                self._apply_record(record, producer_id, replayed, where)
        return replayed

    @staticmethod
    def _apply_marker(record: Record, producer_id: int, replayed: _Replayed, where: str) -> None:
        try:
            marker = decode_marker(record.key, record.value)
        except ControlRecordError as exc:
            logger.warning("%s: control record at offset %d does not decode (%s); skipped", where, record.offset, exc)
            return
        if marker is None or producer_id < 0:
            return
        for group_id, pending in replayed.pending.items():
            committed = replayed.offsets.setdefault(group_id, {})
            for tp, offset in pending.complete(producer_id, commit=marker.commit).items():
                current = committed.get(tp)
                if newer(current.log_offset if current is not None else None, offset):
                    committed[tp] = offset

    @staticmethod
    def _apply_record(record: Record, producer_id: int, replayed: _Replayed, where: str) -> None:
        if record.key is None:
            logger.warning("%s: record at offset %d has no key; skipped", where, record.offset)
            return
        try:
            key = decode_key(record.key)
            if isinstance(key, OffsetKey):
                tp = (key.topic, key.partition)
                if producer_id >= 0 and record.value is not None:
                    offset = AppendedOffset(decode_offset_value(record.value), record.offset)
                    replayed.pending.setdefault(key.group_id, PendingTxnOffsets()).add(producer_id, tp, offset)
                    return
                committed = replayed.offsets.setdefault(key.group_id, {})
                if record.value is None:
                    committed.pop(tp, None)
                else:
                    committed[tp] = AppendedOffset(decode_offset_value(record.value), record.offset)
            elif isinstance(key, GroupKey):
                if record.value is None:
                    # Only the group metadata goes; its offsets have tombstones of their own (as in Kafka).
                    replayed.group_values[key.group_id] = None
                else:
                    replayed.group_values[key.group_id] = decode_group_value(record.value)
            else:
                logger.debug(
                    "%s: offset %d has key version %d, which this coordinator does not use",
                    where,
                    record.offset,
                    key.version,
                )
        except SchemaError as exc:
            logger.warning("%s: record at offset %d does not decode (%s); skipped", where, record.offset, exc)

    def coordinator_error(self, group_id: str) -> ErrorCode:
        """NONE when this broker serves ``group_id`` right now; else the error the client should act on."""
        return self._partitions.coordinator_error(group_id)

    # ------------------------------------------------------------------------------------------------ find

    async def find_coordinator(self, group_id: str) -> tuple[ErrorCode, int, str | None]:
        """(error, node id of the coordinator, message); creates ``__consumer_offsets`` on first use."""
        return await self._partitions.find_coordinator(group_id)

    # ------------------------------------------------------------------------------------------------ plumbing

    def _cancel_timer(self, group_id: str) -> None:
        timer = self._timers.pop(group_id, None)
        if timer is not None:
            timer.cancel()

    def _reschedule(self, group: Group) -> None:
        self._cancel_timer(group.group_id)
        deadline = group.next_deadline_ms()
        if deadline is None or group.state is GroupState.DEAD:
            return
        delay = max(0.0, (deadline - self._now_ms()) / 1000)
        self._timers[group.group_id] = asyncio.get_running_loop().call_later(delay, self._on_timer, group)

    def _on_timer(self, group: Group) -> None:
        self._timers.pop(group.group_id, None)
        if self._groups.get(group.group_id) is not group:
            return
        group.tick(self._now_ms())
        self._after(group)

    def _after(self, group: Group) -> None:
        """After any call into a group: start its writes, re-arm its timer, forget it if nothing is left."""
        for write in group.take_writes():
            self._partitions.spawn(self._persist_group(group, write), name=f"persist group {group.group_id}")
        if (
            group.state is GroupState.EMPTY
            and group.generation_id == 0
            and group.is_empty
            and not len(group.offsets)
            and not group.pending_txn_offsets
            and self._groups.get(group.group_id) is group
        ):
            # Created by a join that failed before anyone became a member: nothing worth keeping.
            del self._groups[group.group_id]
            self._cancel_timer(group.group_id)
            return
        self._reschedule(group)

    async def _append(
        self, group_id: str, records: Sequence[Record], *, producer_id: int = -1, producer_epoch: int = -1
    ) -> int:
        """Appends to the group's ``__consumer_offsets`` partition; returns the batch's base offset. With a
        producer id the batch belongs to that producer's transaction (TxnOffsetCommit)."""
        partition = self.partition_for(group_id)
        log = self._node.partitions.get(OFFSETS_TOPIC, partition) if partition in self._partitions.owned else None
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
        result = await log.append(batch, origin="coordinator")
        return result.base_offset

    async def _persist_group(self, group: Group, write: PendingWrite) -> None:
        try:
            record = Record(
                key=encode_group_key(group.group_id), value=encode_group_value(write.value), timestamp=self._now_ms()
            )
            await self._append(group.group_id, [record])
            error = ErrorCode.none
        except SchemaError as exc:
            # A member or instance id longer than the record format can hold (int16 string lengths).
            error = ErrorCode.invalid_request
            logger.warning("group %s: generation %d cannot be stored: %s", group.group_id, write.value.generation, exc)
        except Exception as exc:
            error = self._partitions.store_error(exc, group.group_id)
            logger.warning(
                "group %s: persisting generation %d to %s-%d failed: %s",
                group.group_id,
                write.value.generation,
                OFFSETS_TOPIC,
                self.partition_for(group.group_id),
                exc,
            )
        write.on_done(error, self._now_ms())
        if self._groups.get(group.group_id) is group:
            self._after(group)

    def _group_or_error(self, group_id: str) -> tuple[Group | None, ErrorCode]:
        if len(group_id.encode("utf-8")) > MAX_STORED_STRING_BYTES:
            return None, ErrorCode.invalid_group_id
        error = self.coordinator_error(group_id)
        if error is not ErrorCode.none:
            return None, error
        return self._groups.get(group_id), ErrorCode.none

    # ------------------------------------------------------------------------------------------------ membership

    async def join_group(self, group_id: str, request: JoinRequest) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, request.member_id)
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return JoinResult(error, request.member_id)
        if group is None:
            if request.member_id:
                return JoinResult(ErrorCode.unknown_member_id, request.member_id)
            group = self._groups[group_id] = Group(group_id, self.config, self._now_ms())
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()

        def answer(result: JoinResult) -> None:
            if not future.done():
                future.set_result(result)

        group.join(self._now_ms(), request, answer)
        self._after(group)
        return await future

    async def sync_group(
        self,
        group_id: str,
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult:
        if not group_id:
            return SyncResult(ErrorCode.invalid_group_id)
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return SyncResult(error)
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()

        def answer(result: SyncResult) -> None:
            if not future.done():
                future.set_result(result)

        group.sync(
            self._now_ms(),
            member_id=member_id,
            group_instance_id=group_instance_id,
            generation_id=generation_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=assignments,
            callback=answer,
        )
        self._after(group)
        return await future

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return error
        if group is None:
            return ErrorCode.unknown_member_id
        error = group.heartbeat(self._now_ms(), member_id, group_instance_id, generation_id)
        self._after(group)
        return error

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]], reason: str | None = None
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per (member id, instance id) in request order)."""
        if not group_id:
            return ErrorCode.invalid_group_id, []
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return error, []
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id for _ in members]
        now = self._now_ms()
        results = [group.leave(now, member_id, instance_id, reason) for member_id, instance_id in members]
        self._after(group)
        return ErrorCode.none, results

    # ------------------------------------------------------------------------------------------------ offsets

    async def commit_offsets(
        self,
        group_id: str,
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommit],
        retention_ms: int = -1,
    ) -> dict[TopicPartition, ErrorCode]:
        def everyone(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, code)

        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return everyone(error)
        now = self._now_ms()
        if group is None:
            if generation_id >= 0:
                return everyone(ErrorCode.illegal_generation)
            group = self._groups[group_id] = Group(group_id, self.config, now)
        error = group.validate_offset_commit(now, member_id, group_instance_id, generation_id)
        if error is not ErrorCode.none:
            self._after(group)
            return everyone(error)
        # The commit counted as a heartbeat: re-arm the session timer (but do not let _after forget a group
        # created for this very commit before its offsets are in).
        self._reschedule(group)
        return await self._write_offsets(group, offsets, now, retention_ms=retention_ms)

    async def commit_transactional_offsets(
        self,
        group_id: str,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommit],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: appends the offsets to ``__consumer_offsets`` inside the producer's transaction and
        keeps them pending until its marker (``complete_transaction``) commits or aborts them."""

        def everyone(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, code)

        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return everyone(error)
        now = self._now_ms()
        if group is None:
            group = self._groups[group_id] = Group(group_id, self.config, now)
        error = group.validate_txn_offset_commit(member_id, group_instance_id, generation_id)
        if error is not ErrorCode.none:
            self._after(group)
            return everyone(error)
        txn = _TxnCommit(transactional_id, producer_id, producer_epoch)
        return await self._write_offsets(group, offsets, now, txn=txn)

    async def _write_offsets(
        self,
        group: Group,
        offsets: Mapping[TopicPartition, OffsetCommit],
        now: int,
        *,
        retention_ms: int = -1,
        txn: _TxnCommit | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """Checks and appends the offsets of an OffsetCommit, or of a TxnOffsetCommit (``txn``); once durable they
        are the group's committed offsets, or, in a transaction, its pending ones."""
        group_id = group.group_id
        image = self._node.controller.image
        results: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, OffsetValue] = {}
        for (topic, partition), commit in offsets.items():
            metadata = commit.metadata or ""
            if len(metadata.encode("utf-8")) > self._metadata_max_bytes:
                results[(topic, partition)] = ErrorCode.offset_metadata_too_large
            elif image.partition(topic, partition) is None:
                results[(topic, partition)] = ErrorCode.unknown_topic_or_partition
            else:
                accepted[(topic, partition)] = OffsetValue(
                    offset=commit.offset,
                    metadata=metadata,
                    commit_timestamp_ms=now,
                    leader_epoch=commit.leader_epoch,
                    expire_timestamp_ms=now + retention_ms if retention_ms >= 0 else None,
                )
        if accepted:
            records = [
                Record(key=encode_offset_key(group_id, t, p), value=encode_offset_value(v), timestamp=now)
                for (t, p), v in accepted.items()
            ]
            try:
                base = await self._append(
                    group_id,
                    records,
                    producer_id=txn.producer_id if txn is not None else -1,
                    producer_epoch=txn.producer_epoch if txn is not None else -1,
                )
                code = ErrorCode.none
            except Exception as exc:
                # Too many offsets (or too much metadata) for one batch: INVALID_COMMIT_OFFSET_SIZE.
                code = self._partitions.store_error(exc, group_id, too_large=ErrorCode.invalid_commit_offset_size)
                logger.warning(
                    "group %s: committing %d offsets%s to %s-%d failed: %s",
                    group_id,
                    len(accepted),
                    f" in {txn}" if txn is not None else "",
                    OFFSETS_TOPIC,
                    self.partition_for(group_id),
                    exc,
                )
            if code is ErrorCode.none and self._groups.get(group_id) is group:
                for index, ((t, p), v) in enumerate(accepted.items()):
                    if txn is None:
                        group.offsets.put(t, p, v, base + index)
                    else:
                        group.pending_txn_offsets.add(txn.producer_id, (t, p), AppendedOffset(v, base + index))
            results.update(dict.fromkeys(accepted, code))
        if self._groups.get(group_id) is group:
            self._after(group)
        return {tp: results[tp] for tp in offsets}

    def complete_transaction(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker was written on ``__consumer_offsets-<offsets_partition>``: the producer's pending
        offsets in the groups of that partition become committed (COMMIT) or are dropped (ABORT)."""
        owned = self._partitions.owned.get(offsets_partition)
        if owned is None:
            return
        if owned.state is Load.LOADING:
            self._completions.setdefault(offsets_partition, []).append((producer_id, commit))
            return
        self._complete_in_partition(offsets_partition, producer_id, commit)

    def _complete_in_partition(self, offsets_partition: int, producer_id: int, commit: bool) -> None:
        for group in list(self._groups.values()):
            if not group.pending_txn_offsets.has_producer(producer_id):
                continue
            if self.partition_for(group.group_id) != offsets_partition:
                continue
            applied = group.pending_txn_offsets.complete(producer_id, commit=commit)
            for (topic, partition), offset in applied.items():
                if newer(group.offsets.log_offset(topic, partition), offset):
                    group.offsets.put(topic, partition, offset.value, offset.log_offset)
            logger.debug(
                "group %s: transaction of producer %d %s (%d offsets)",
                group.group_id,
                producer_id,
                "committed" if commit else "aborted",
                len(applied),
            )
            self._after(group)

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None, *, require_stable: bool = False
    ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """Committed offsets (-1 where none); ``partitions=None`` means every partition the group committed. With
        ``require_stable`` a partition whose offset is pending in an open transaction answers
        UNSTABLE_OFFSET_COMMIT (the client retries until the transaction ends)."""
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return error, []
        if group is None:
            wanted = list(partitions) if partitions is not None else []
            return ErrorCode.none, [FetchedOffset(t, p, -1, -1, "", ErrorCode.none) for t, p in wanted]
        wanted = list(partitions) if partitions is not None else [tp for tp, _ in group.offsets]
        out: list[FetchedOffset] = []
        for topic, partition in wanted:
            if require_stable and group.pending_txn_offsets.is_pending((topic, partition)):
                out.append(FetchedOffset(topic, partition, -1, -1, "", ErrorCode.unstable_offset_commit))
                continue
            found = group.offsets.get(topic, partition)
            if found is None:
                out.append(FetchedOffset(topic, partition, -1, -1, "", ErrorCode.none))
            else:
                out.append(
                    FetchedOffset(topic, partition, found.offset, found.leader_epoch, found.metadata, ErrorCode.none)
                )
        return ErrorCode.none, out

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return error, {}
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found, {}
        if group.state is not GroupState.EMPTY and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            # Only consumer-protocol subscriptions can be read; other live groups keep all their offsets.
            return ErrorCode.non_empty_group, {}
        results: dict[TopicPartition, ErrorCode] = {}
        doomed: list[TopicPartition] = []
        for tp in partitions:
            if group.is_subscribed_to(tp[0]):
                results[tp] = ErrorCode.group_subscribed_to_topic
            else:
                results[tp] = ErrorCode.none
                if group.offsets.get(*tp) is not None:
                    doomed.append(tp)
        if doomed:
            error = await self._tombstone_offsets(group, doomed)
            if error is not ErrorCode.none:
                return error, {}
        return ErrorCode.none, results

    async def _tombstone_offsets(self, group: Group, partitions: Sequence[TopicPartition]) -> ErrorCode:
        now = self._now_ms()
        records = [
            Record(key=encode_offset_key(group.group_id, t, p), value=None, timestamp=now) for t, p in partitions
        ]
        try:
            await self._append(group.group_id, records)
        except Exception as exc:
            logger.warning("group %s: deleting %d offsets failed: %s", group.group_id, len(partitions), exc)
            return self._partitions.store_error(exc, group.group_id)
        for t, p in partitions:
            group.offsets.remove(t, p)
        return ErrorCode.none

    # ------------------------------------------------------------------------------------------------ admin

    def list_groups(self, states: Iterable[str] = ()) -> tuple[ErrorCode, list[Group]]:
        """Groups this broker coordinates, optionally only those in the named states (case-insensitive)."""
        wanted = {s.lower() for s in states}
        error = self._partitions.listing_error()
        if error is ErrorCode.coordinator_not_available:
            return error, []
        groups = [
            g
            for g in self._groups.values()
            if g.state is not GroupState.DEAD and (not wanted or g.state.value.lower() in wanted)
        ]
        return error, sorted(groups, key=lambda g: g.group_id)

    def describe_group(self, group_id: str) -> tuple[ErrorCode, Group | None]:
        """(error, group); a group this coordinator does not know is reported as None (Kafka shows it Dead)."""
        group, error = self._group_or_error(group_id)
        return error, group

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group, error = self._group_or_error(group_id)
            if error is not ErrorCode.none:
                results[group_id] = error
            elif group is None or group.state is GroupState.DEAD:
                results[group_id] = ErrorCode.group_id_not_found
            elif group.state is not GroupState.EMPTY or group.members:
                results[group_id] = ErrorCode.non_empty_group
            else:
                results[group_id] = await self._delete_group(group)
        return results

    async def _delete_group(self, group: Group) -> ErrorCode:
        now = self._now_ms()
        records = [
            Record(key=encode_offset_key(group.group_id, t, p), value=None, timestamp=now)
            for (t, p), _ in group.offsets
        ]
        records.append(Record(key=encode_group_key(group.group_id), value=None, timestamp=now))
        group.mark_dead(now, ErrorCode.coordinator_not_available)
        self._cancel_timer(group.group_id)
        if self._groups.get(group.group_id) is group:
            del self._groups[group.group_id]
        try:
            await self._append(group.group_id, records)
        except Exception as exc:
            logger.warning("group %s: writing its tombstones failed: %s", group.group_id, exc)
            return self._partitions.store_error(exc, group.group_id)
        logger.info("group %s deleted (%d offsets)", group.group_id, len(records) - 1)
        return ErrorCode.none

    # ------------------------------------------------------------------------------------------------ retention

    async def _cleanup_loop(self) -> None:
        while True:
            await asyncio.sleep(self._retention_check_s)
            try:
                await self.expire_offsets()
            except Exception:
                logger.exception("offset expiration round failed")

    async def expire_offsets(self) -> int:
        """One retention round (offsets.retention.minutes); returns how many offsets were removed."""
        now = self._now_ms()
        removed = 0
        for group in list(self._groups.values()):
            if self.coordinator_error(group.group_id) is not ErrorCode.none or group.state is GroupState.DEAD:
                continue
            managed = group.protocol_type is not None
            if group.state is not GroupState.EMPTY and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                continue
            empty_since = group.state_timestamp_ms if managed and group.state is GroupState.EMPTY else None
            expired = group.offsets.expired(
                now, self._retention_ms, empty_since_ms=empty_since, keep=group.is_subscribed_to
            )
            if expired and await self._tombstone_offsets(group, expired) is ErrorCode.none:
                removed += len(expired)
                logger.info("group %s: %d committed offsets expired", group.group_id, len(expired))
            if group.state is GroupState.EMPTY and group.is_empty and not len(group.offsets):
                await self._delete_group(group)
        return removed
