"""Committed offsets, as every group type has them: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, expiry.

Offsets are stored per group in ``__consumer_offsets`` next to the group's metadata; a commit is acknowledged once
its records are durable. Offsets committed in a transaction stay pending (:mod:`broker.groups.txn_offsets`) until
the transaction's marker commits or aborts them. Retention follows KIP-211 (:mod:`broker.groups.offsets`).

Whether a commit is accepted depends on the group type (a classic group checks member id and generation; a KIP-848
consumer group checks member epochs); that check is the group's own (``validate_offset_commit``), and so are which
topics a live group still reads (``is_subscribed_to``), whether its offsets may be deleted (``may_delete_offsets``)
and since when it is empty (``empty_since_ms``), so the rest of this module is what every type shares. Groups that
only commit (no membership) are classic groups, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.groups.classic.group import Group
from broker.groups.consumer.group import ConsumerGroup
from broker.groups.offsets import TopicPartition
from broker.groups.offsets_schema import OffsetValue, encode_offset_key, encode_offset_value
from broker.groups.offsets_topic import OFFSETS_TOPIC, ReplayedPartition
from broker.groups.runtime import CoordinatorRuntime
from broker.groups.share.group import ShareGroup
from broker.groups.txn_offsets import TRANSACTION_ABORTABLE_VERSION, AppendedOffset
from broker.internal_topic import Load, Loaded, OwnedPartition
from metadata.image import MetadataImage, TopicImage
from wire.log_text import untrusted
from wire.record_batch import Record
from wire.stored_schema import MAX_STORED_STRING_BYTES

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _TxnCommit:
    """The transaction a TxnOffsetCommit writes in."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    api_version: int
    #: The producer's markers the offsets partition had applied when the transaction was verified: the append is
    #: refused if one came since (it ended the transaction while the commit waited), as Kafka's verification guard.
    verified_markers: int

    def __str__(self) -> str:
        return f"transaction {self.transactional_id!r} (producer {self.producer_id} epoch {self.producer_epoch})"


@dataclass(frozen=True)
class OffsetCommit:
    """One partition's offset as a client commits it (OffsetCommit, TxnOffsetCommit)."""

    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True)
class FetchedOffset:
    """One partition's answer to OffsetFetch: the committed offset, -1 when none, or the partition's error."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error: ErrorCode


def _metadata_too_large(metadata: str, max_length: int) -> bool:
    """Kafka's ``isMetadataInvalid`` compares Java's ``String.length()``, UTF-16 code units, with
    offset.metadata.max.bytes (bytes in name only): 4096 accented letters pass, 2049 emoji do not. The record
    format's int16-length string bounds the UTF-8 bytes as well."""
    return (
        len(metadata.encode("utf-16-le")) // 2 > max_length
        or len(metadata.encode("utf-8")) > MAX_STORED_STRING_BYTES
    )


def _of_another_topic(value: OffsetValue, topic: str, names: Mapping[str, TopicImage]) -> bool:
    """The offset was committed for an earlier topic of this name, since deleted: the name now has another id."""
    current = names.get(topic)
    return value.topic_id is not None and current is not None and current.topic_id != value.topic_id


class OffsetCommits(CoordinatorRuntime):
    """The committed-offsets requests of :class:`broker.groups.coordinator.GroupCoordinator`."""

    async def commit_offsets(
        self,
        group_id: str,
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Mapping[TopicPartition, OffsetCommit],
        retention_ms: int = -1,
        api_version: int = -1,
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit. ``generation_id`` is the request's ``generation_id_or_member_epoch``: a classic group's
        generation, or (v9+, ``api_version``) a KIP-848 member's epoch, which a consumer group checks with the
        version as Kafka's ``validateOffsetCommit`` does; classic groups do not read ``api_version``."""

        def everyone(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, code)

        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return everyone(error)
        now = self._now_ms()
        if group is None:
            if generation_id >= 0:
                # Kafka answers GROUP_ID_NOT_FOUND from v9 on, which classic and KIP-848 clients both understand;
                # ILLEGAL_GENERATION before, as older clients expect.
                return everyone(ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation)
            group = self._groups[group_id] = Group(group_id, self.config, now)
        if isinstance(group, ConsumerGroup):
            error = group.validate_offset_commit(member_id, generation_id, api_version=api_version)
        else:
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
        api_version: int,
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit (version ``api_version``): appends the offsets to ``__consumer_offsets`` inside the
        producer's transaction, once verified to hold that partition (:meth:`_verify_transaction`), and keeps them
        pending until its marker (``complete_transaction``) commits or aborts them."""

        def everyone(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, code)

        if not group_id:
            return everyone(ErrorCode.invalid_group_id)  # as Kafka (an OffsetCommit's empty id is a group)
        _, error = self._group_or_error(group_id)
        txn: _TxnCommit | None = None
        if error is ErrorCode.none:
            txn, error = await self._verify_transaction(
                group_id, transactional_id, producer_id, producer_epoch, api_version
            )
        if error is ErrorCode.none:
            group, error = self._group_or_error(group_id)  # looked up again: the verification may have waited
        if error is not ErrorCode.none or txn is None:
            return everyone(error)
        now = self._now_ms()
        if group is None:
            group = self._groups[group_id] = Group(group_id, self.config, now)
        if isinstance(group, ConsumerGroup):
            # Kafka's validateOffsetCommit with isTransactional: the member fields are optional, so a commit naming
            # none of them (epoch -1, no member id, no instance id) is taken; any one named is checked.
            anonymous = generation_id == -1 and not member_id and group_instance_id is None
            error = (
                ErrorCode.none
                if anonymous and not group.dead
                else group.validate_offset_commit(member_id, generation_id, api_version=9)
            )
            if error is ErrorCode.stale_member_epoch:
                # Kafka's validateTransactionalOffsetCommit answers a stale epoch ILLEGAL_GENERATION, which a
                # producer treats as abortable (it aborts and rewinds); STALE_MEMBER_EPOCH would be fatal to it.
                error = ErrorCode.illegal_generation
        else:
            error = group.validate_offset_commit(now, member_id, group_instance_id, generation_id, transactional=True)
        if error is not ErrorCode.none:
            self._after(group)
            return everyone(error)
        return await self._write_offsets(group, offsets, now, txn=txn)

    async def _verify_transaction(
        self, group_id: str, transactional_id: str, producer_id: int, producer_epoch: int, api_version: int
    ) -> tuple[_TxnCommit | None, ErrorCode]:
        """KIP-890 part 1, as Kafka verifies every TxnOffsetCommit before writing it: the group's
        ``__consumer_offsets`` partition must be in the producer's ongoing transaction (added by AddOffsetsToTxn, or
        by the verification itself for a transactions v2 client). Without it a commit lacking AddOffsetsToTxn, or
        arriving after its transaction ended, would open a transaction there that no marker ever ends, or be
        committed by the producer's next transaction. A producer already in a transaction on the partition at this
        epoch needs no asking, as Kafka's partition skips it."""
        partition = self.partition_for(group_id)
        log = self._partition_manager.get(OFFSETS_TOPIC, partition)
        if log is None:
            return None, ErrorCode.not_coordinator
        if not log.has_ongoing_txn(producer_id, producer_epoch):
            error = await self.verify_transaction(
                transactional_id, producer_id, producer_epoch, (OFFSETS_TOPIC, partition), api_version
            )
            if error is not ErrorCode.none:
                logger.info(
                    "group %s: refusing TxnOffsetCommit v%d of '%s' (producer %d epoch %d): %s",
                    untrusted(group_id), api_version, untrusted(transactional_id), producer_id, producer_epoch,
                    error.name,
                )
                return None, error
        markers = log.markers_applied(producer_id)
        return _TxnCommit(transactional_id, producer_id, producer_epoch, api_version, markers), ErrorCode.none

    async def _write_offsets(
        self,
        group: Group | ConsumerGroup,
        offsets: Mapping[TopicPartition, OffsetCommit],
        now: int,
        *,
        retention_ms: int = -1,
        txn: _TxnCommit | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """Checks and appends the offsets of an OffsetCommit, or of a TxnOffsetCommit (``txn``); once durable they
        are the group's committed offsets, or, in a transaction, its pending ones."""
        group_id = group.group_id
        image = self._context.controller.image
        results: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, OffsetValue] = {}
        for (topic, partition), commit in offsets.items():
            metadata = commit.metadata or ""
            if _metadata_too_large(metadata, self._metadata_max_bytes):
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
                    topic_id=image.topics_by_name[topic].topic_id,
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
                    verified_markers=txn.verified_markers if txn is not None else None,
                )
                code = ErrorCode.none
            except Exception as exc:
                # Too many offsets (or too much metadata) for one batch: INVALID_COMMIT_OFFSET_SIZE.
                code = self._partitions.store_error(exc, group_id, too_large=ErrorCode.invalid_commit_offset_size)
                if (code is ErrorCode.invalid_txn_state and txn is not None
                        and txn.api_version >= TRANSACTION_ABORTABLE_VERSION):
                    # Its transaction ended while it waited (the verification guard): abortable from v4, as the
                    # verification's own refusal.
                    code = ErrorCode.transaction_abortable
                logger.warning(
                    "group %s: committing %d offsets%s to %s-%d failed: %s",
                    untrusted(group_id),
                    len(accepted),
                    f" in {txn}" if txn is not None else "",
                    OFFSETS_TOPIC,
                    self.partition_for(group_id),
                    exc,
                )
            if code is ErrorCode.none and self._holds_offsets_of(group, txn is not None):
                for index, ((t, p), v) in enumerate(accepted.items()):
                    if txn is None:
                        group.offsets.put(t, p, v, base + index)
                    else:
                        group.pending_txn_offsets.add(txn.producer_id, (t, p), AppendedOffset(v, base + index))
            results.update(dict.fromkeys(accepted, code))
        if self._groups.get(group_id) is group:
            self._after(group)
        return {tp: results[tp] for tp in offsets}

    def _holds_offsets_of(self, group: Group | ConsumerGroup, transactional: bool) -> bool:
        """The offsets ``group`` held when a commit was appended are still the live ones. A conversion between a
        classic and a consumer group while the append was under way replaced the group but handed the same offsets
        over (in Kafka offsets live apart from membership): the acknowledged commit must land in them, or a member
        taking the partition over after the conversion reads an older offset and receives records again. A group
        deleted or unloaded meanwhile lost its offsets with it; its log replays the record where it is loaded."""
        current = self._groups.get(group.group_id)
        if current is group:
            return True
        if not isinstance(current, (Group, ConsumerGroup)):
            return False
        if transactional:
            return current.pending_txn_offsets is group.pending_txn_offsets
        return current.offsets is group.offsets

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

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None,
        *,
        require_stable: bool = False,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[ErrorCode, list[FetchedOffset]]:
        """Committed offsets (-1 where none); ``partitions=None`` means every partition the group committed. With
        ``require_stable`` a partition whose offset is pending in an open transaction answers
        UNSTABLE_OFFSET_COMMIT (the client retries until the transaction ends). ``member_id`` and ``member_epoch``
        (OffsetFetch v9+) are what a KIP-848 member sends for its group to check; None and -1 from an admin client
        or a classic member, whose groups do not read them."""
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return error, []
        if isinstance(group, ConsumerGroup):
            error = group.validate_offset_fetch(member_id, member_epoch)
            if error is not ErrorCode.none:
                return error, []
        if group is None:
            wanted = list(partitions) if partitions is not None else []
            return ErrorCode.none, [FetchedOffset(t, p, -1, -1, "", ErrorCode.none) for t, p in wanted]
        names = self._context.controller.image.topics_by_name
        wanted = (
            list(partitions) if partitions is not None
            else [tp for tp, value in group.offsets if not _of_another_topic(value, tp[0], names)]
        )
        out: list[FetchedOffset] = []
        for topic, partition in wanted:
            if require_stable and group.pending_txn_offsets.is_pending((topic, partition)):
                out.append(FetchedOffset(topic, partition, -1, -1, "", ErrorCode.unstable_offset_commit))
                continue
            found = group.offsets.get(topic, partition)
            if found is None or _of_another_topic(found, topic, names):
                # An offset of a deleted topic whose name a new topic took is not the new topic's position, even
                # before its tombstone (forget_deleted_topics) is in.
                out.append(FetchedOffset(topic, partition, -1, -1, "", ErrorCode.none))
            else:
                out.append(
                    FetchedOffset(topic, partition, found.offset, found.leader_epoch, found.metadata, ErrorCode.none)
                )
        return ErrorCode.none, out

    async def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        if not group_id:
            return ErrorCode.invalid_group_id, {}
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return error, {}
        if group is None or group.dead:
            return ErrorCode.group_id_not_found, {}
        if not group.may_delete_offsets:
            # Only consumer-protocol subscriptions can be read; other live groups keep all their offsets.
            return ErrorCode.non_empty_group, {}
        results: dict[TopicPartition, ErrorCode] = {}
        doomed: list[TopicPartition] = []
        for tp in partitions:
            if group.is_subscribed_to(tp[0]):
                results[tp] = ErrorCode.group_subscribed_to_topic
            else:
                results[tp] = ErrorCode.none
                # As Kafka's deleteOffsets: an offset only an open transaction commits is tombstoned too.
                if group.offsets.get(*tp) is not None or group.pending_txn_offsets.is_pending(tp):
                    doomed.append(tp)
        if doomed:
            error = await self._tombstone_offsets(group, doomed)
            if error is not ErrorCode.none:
                return error, {}
        return ErrorCode.none, results

    async def _tombstone_offsets(self, group: Group | ConsumerGroup, partitions: Sequence[TopicPartition]) -> ErrorCode:
        now = self._now_ms()
        records = [
            Record(key=encode_offset_key(group.group_id, t, p), value=None, timestamp=now) for t, p in partitions
        ]
        try:
            base = await self._append(group.group_id, records)
        except Exception as exc:
            logger.warning("group %s: deleting %d offsets failed: %s", untrusted(group.group_id), len(partitions), exc)
            return self._partitions.store_error(exc, group.group_id)
        for index, (t, p) in enumerate(partitions):
            # What the log says once replayed: a commit appended while the tombstone waited for its turn sits
            # after it and stays.
            tombstone = base + index
            committed_at = group.offsets.log_offset(t, p)
            if committed_at is not None and committed_at < tombstone:
                group.offsets.remove(t, p)
            group.pending_txn_offsets.remove((t, p), before=tombstone)
        return ErrorCode.none

    # ------------------------------------------------------------------------------------------------ deleted topics

    def forget_deleted_topics(self, old: MetadataImage, new: MetadataImage) -> None:
        """The metadata image's listener, as Kafka's ``onPartitionsDeleted``: a deleted topic's committed offsets,
        and those open transactions commit for it, are tombstoned in every group this broker serves. Kept, they
        would be the positions of a topic created again under the same name: a group that had read 1,000 records of
        the old topic would start the new one at offset 1,000 and never see its first 1,000 records. The groups of a
        partition still loading are seen to when it is installed (:meth:`_install`)."""
        deleted = {topic.name for topic_id, topic in old.topics_by_id.items() if topic_id not in new.topics_by_id}
        if deleted:
            served = [g for g in self._groups.values() if self.coordinator_error(g.group_id) is ErrorCode.none]
            self._forget_topics(served, lambda topic, _: topic in deleted)

    def _install(self, owned: OwnedPartition, replayed: ReplayedPartition) -> Loaded:
        """Installs a loaded partition's groups (``CoordinatorRuntime._install``), then forgets their offsets of
        topics the metadata no longer holds: deleted while no broker served the partition (its coordinator stopping
        or moving as the topic went), they would otherwise stay. This broker's image is at least as new as the
        election that made it the partition's leader, which came after every commit in the partition, so a topic
        that a commit named and the image lacks was deleted, and so was one whose name the image gives another
        topic id than the commit recorded (deleted and created again meanwhile). An offset recorded without a topic
        id (written before Fjord kept them) cannot tell the second case."""
        loaded = super()._install(owned, replayed)
        names = self._context.controller.image.topics_by_name
        here = [g for g in self._groups.values() if self.partition_for(g.group_id) == owned.partition]
        self._forget_topics(
            here, lambda topic, value: topic not in names or _of_another_topic(value, topic, names)
        )
        return loaded

    def _forget_topics(
        self,
        groups: Iterable[Group | ConsumerGroup | ShareGroup],
        gone: Callable[[str, OffsetValue], bool],
    ) -> None:
        """Tombstones, in the background, the offsets (committed, and pending in open transactions) that ``groups``
        hold and ``gone`` says are of deleted topics, given the topic's name and the offset. Started at once, so
        that their append comes before any later commit of the group, which could name a topic created again."""
        for group in groups:
            if isinstance(group, ShareGroup):
                continue
            doomed = sorted(
                {tp for tp, value in group.offsets if gone(tp[0], value)}
                | {tp for _, tp, pending in group.pending_txn_offsets if gone(tp[0], pending.value)}
            )
            if doomed:
                self._partitions.spawn(self._forget(group, doomed), name=f"forget deleted topics of {group.group_id}")

    async def _forget(self, group: Group | ConsumerGroup, partitions: Sequence[TopicPartition]) -> None:
        topics = sorted({t for t, _ in partitions})
        if await self._tombstone_offsets(group, partitions) is ErrorCode.none:
            logger.info("group %s: removed the committed offsets of %d partitions of deleted topics %s",
                        untrusted(group.group_id), len(partitions), ", ".join(topics))

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
            if isinstance(group, ShareGroup):
                continue  # a share group has no offsets and is kept until DeleteGroups, as in Kafka
            if self.coordinator_error(group.group_id) is not ErrorCode.none or not group.may_delete_offsets:
                continue
            pending = group.pending_txn_offsets
            # Kafka's cleanupExpiredOffsets: an offset an open transaction is committing again is not expired
            # yet, and a group with an open transaction is kept, or the transaction's COMMIT marker would find no
            # group to commit its offsets to (an exactly-once application's position lost).
            expired = [
                tp
                for tp in group.offsets.expired(
                    now, self._retention_ms, empty_since_ms=group.empty_since_ms, keep=group.is_subscribed_to
                )
                if not pending.is_pending(tp)
            ]
            if expired and await self._tombstone_offsets(group, expired) is ErrorCode.none:
                removed += len(expired)
                logger.info("group %s: %d committed offsets expired", untrusted(group.group_id), len(expired))
            if group.is_empty and not len(group.offsets) and not pending:
                await self._delete_group(group)
        return removed
