"""The asyncio side of the transaction coordinator: ownership, persistence in ``__transaction_state``, markers, timers.

A transactional id belongs to one ``__transaction_state`` partition (Kafka's hash of the id) and is served by that
partition's leader, whose leader epoch is the *coordinator epoch* every marker carries (a partition refuses markers
of an older coordinator). When this broker becomes leader of such a partition it replays it and answers
COORDINATOR_LOAD_IN_PROGRESS until done; a transaction found half-ended (PrepareCommit/PrepareAbort) gets its
markers written again and completes. When it loses the partition it drops those ids and answers NOT_COORDINATOR.
Owning the partitions is :mod:`broker.internal_topic` (shared with the group coordinator); the topic and how a
partition is replayed are :mod:`broker.transactions.state_topic`'s.

Every state change is written to the partition (``append(origin="coordinator")``) before it takes effect and before
the request that caused it is answered (:mod:`broker.transactions.state` holds the rules; this module feeds it the
wall clock and does the I/O). EndTxn answers once PrepareCommit/PrepareAbort is durable, as Kafka does; the markers
are then written by :class:`MarkerSender` and CompleteCommit/CompleteAbort recorded once all were taken. A timer
aborts transactions older than their timeout (fencing their producer with an epoch bump) and forgets ids idle for
``transactional.id.expiration.ms`` (a tombstone). A produce's transaction is verified here when this broker
coordinates its id, else by :mod:`broker.transactions.produce_verification` (KIP-890).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence

from kio.schema.errors import ErrorCode

from broker.broker_context import BrokerContext
from broker.groups.coordinator import GroupCoordinator
from broker.groups.offsets_topic import OFFSETS_TOPIC
from broker.internal_topic import (
    InternalTopicPartitions,
    Loaded,
    OwnedPartition,
)
from broker.partition.manager import PartitionManager
from broker.partition.producer_ids import ProducerIdAllocator
from broker.transactions.listing import select_transactions
from broker.transactions.log_schema import encode_key, encode_value, value_version
from broker.transactions.marker_sender import MarkerSender
from broker.transactions.peers import Peers
from broker.transactions.produce_verification import produce_verification_error, retry_while_concurrent, verify_remotely
from broker.transactions.state import (
    NO_PRODUCER_ID,
    InvalidTransition,
    TopicPartition,
    TransactionMetadata,
    TxnState,
    TxnTransit,
)
from broker.transactions.state_topic import TRANSACTION_STATE, TRANSACTION_TOPIC, replay_transactions
from wire.errors import KafkaError
from wire.log_text import untrusted
from wire.record_batch import Record, build_batch
from wire.stored_schema import MAX_STORED_STRING_BYTES

logger = logging.getLogger(__name__)

_COMPLETE_RETRY_S = 0.5
#: How long AddPartitionsToTxn waits for the markers of the id's previous transaction before it answers
#: CONCURRENT_TRANSACTIONS. A producer's next transaction starts while they are written (EndTxn is answered once
#: PrepareCommit is durable), and the refusal costs it a client back-off (20 ms in librdkafka and the Java client)
#: where the markers take a WAL flush or two. The wait ends as soon as they are written, so the bound only matters
#: when a partition leader cannot take its marker; it stays well inside any client's request time-out.
_MARKERS_WAIT_S = 1.0


class TransactionCoordinator:
    def __init__(
        self,
        broker: BrokerContext,
        partitions: PartitionManager,
        producer_ids: ProducerIdAllocator,
        groups: GroupCoordinator,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``groups``: the broker's group coordinator, which writes the markers of transactional offset commits
        (AddOffsetsToTxn) on its ``__consumer_offsets`` partitions."""
        self._context = broker
        self._partition_manager = partitions
        self._producer_ids = producer_ids
        self._groups = groups
        #: Wall clock in seconds (timestamps are persisted); public so tests can move it.
        self.clock = clock
        cfg = broker.config
        self.max_timeout_ms = int(cfg.value("transaction.max.timeout.ms"))
        self.expiration_ms = int(cfg.value("transactional.id.expiration.ms"))
        self._check_interval_s = int(cfg.value("transaction.abort.timed.out.transaction.cleanup.interval.ms")) / 1000
        self._txns: dict[str, TransactionMetadata] = {}
        #: Transactions whose markers are being written (by identity: a reloaded id is a new object), each with the
        #: event set once they and CompleteCommit/CompleteAbort are written (or the attempt ended).
        self._completing: dict[TransactionMetadata, asyncio.Event] = {}
        self._timer_task: asyncio.Task[None] | None = None
        self._partitions = InternalTopicPartitions(
            broker,
            partitions,
            TRANSACTION_STATE,
            read=replay_transactions,
            install=self._install,
            unload=self._unload_ids,
        )
        self._peers = Peers(broker)
        self._markers = MarkerSender(broker, partitions, groups, self._peers)

    # ------------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._partitions.start()
        self._timer_task = asyncio.create_task(self._timer_loop(), name="transaction-timeouts")

    async def stop(self) -> None:
        """Lets in-flight writes finish (so their requests are answered), then drops every id; unfinished markers
        are written by whoever leads the partition next."""
        await self._partitions.stop(self._timer_task, cancel_unfinished=True)
        count = len(self._txns)
        self._partitions.unload_all()
        await self._peers.close()
        logger.info("transaction coordinator stopped (%d transactional ids unloaded)", count)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ------------------------------------------------------------------------------------------------ ownership

    @property
    def num_partitions(self) -> int:
        """Partitions of ``__transaction_state``: the existing topic's count wins over the config (as in Kafka)."""
        return self._partitions.num_partitions

    def partition_for(self, transactional_id: str) -> int:
        return self._partitions.partition_for(transactional_id)

    def _unload_ids(self, partition: int) -> int:
        """Drops the ids of a partition this broker no longer leads; returns how many."""
        doomed = [t for t in self._txns if self.partition_for(t) == partition]
        for transactional_id in doomed:
            del self._txns[transactional_id]
        return len(doomed)

    def _install(self, owned: OwnedPartition, replayed: tuple[dict[str, TxnTransit | None], int]) -> Loaded:
        """Installs the ids a replay found; once the partition serves them, half-ended transactions complete."""
        values, records = replayed
        loaded = [TransactionMetadata.restore(tid, value) for tid, value in values.items() if value is not None]
        for metadata in loaded:
            self._txns[metadata.transactional_id] = metadata
        return Loaded(len(loaded), records, then=functools.partial(self._resume_completions, loaded, owned))

    def _resume_completions(self, loaded: Sequence[TransactionMetadata], owned: OwnedPartition) -> None:
        for metadata in loaded:
            if metadata.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                logger.info(
                    "transactional id '%s' was left in %s by the previous coordinator: writing its markers",
                    untrusted(metadata.transactional_id),
                    metadata.state.display,
                )
                self._start_completion(metadata, owned)

    def coordinator_error(self, transactional_id: str) -> ErrorCode:
        """NONE when this broker coordinates ``transactional_id`` right now; else the error the client acts on."""
        return self._partitions.coordinator_error(transactional_id)

    def _serving(self, metadata: TransactionMetadata) -> bool:
        """Whether ``metadata`` is still the live state of its id here (not unloaded or reloaded meanwhile)."""
        transactional_id = metadata.transactional_id
        return (
            self.coordinator_error(transactional_id) is ErrorCode.none and self._txns.get(transactional_id) is metadata
        )

    def _owner(self, transactional_id: str) -> OwnedPartition:
        return self._partitions.owned[self.partition_for(transactional_id)]

    # ------------------------------------------------------------------------------------------------ find

    async def find_coordinator(self, transactional_id: str) -> tuple[ErrorCode, int, str | None]:
        """(error, node id of the coordinator, message); creates ``__transaction_state`` on first use."""
        return await self._partitions.find_coordinator(transactional_id)

    def coordinator_node(self, transactional_id: str) -> int:
        """The broker leading the id's ``__transaction_state`` partition per the metadata (-1: none)."""
        return self._partitions.coordinator_node(transactional_id)

    # ------------------------------------------------------------------------------------------------ persistence

    async def _persist(self, metadata: TransactionMetadata, transit: TxnTransit, owned: OwnedPartition) -> ErrorCode:
        """Writes ``transit`` and, once durable and still ours, installs it; on failure the id stays as it was."""
        transactional_id = metadata.transactional_id
        value = None if transit.state is TxnState.DEAD else encode_value(transit, value_version(transit))
        try:
            log = self._partition_manager.get(TRANSACTION_TOPIC, owned.partition)
            if log is None or log.leader_epoch != owned.leader_epoch:
                raise KafkaError(
                    ErrorCode.not_leader_or_follower, f"{TRANSACTION_TOPIC}-{owned.partition} is not open here"
                )
            record = Record(key=encode_key(transactional_id), value=value, timestamp=self._now_ms())
            await log.append(build_batch([record]), origin="coordinator")
        except Exception as exc:
            error = self._partitions.store_error(exc, transactional_id)
            logger.warning(
                "transactional id '%s': writing %s to %s-%d failed: %s",
                untrusted(transactional_id),
                transit.state.display,
                TRANSACTION_TOPIC,
                owned.partition,
                exc,
            )
            if self._txns.get(transactional_id) is metadata and metadata.pending_state is transit.state:
                metadata.abandon_transition()
            return error
        if not self._partitions.serves(owned) or self._txns.get(transactional_id) is not metadata:
            return ErrorCode.not_coordinator
        metadata.complete_transition(transit)
        if transit.state is TxnState.DEAD:
            del self._txns[transactional_id]
        return ErrorCode.none

    # ------------------------------------------------------------------------------------------------ requests

    def _validate_id(self, transactional_id: str | None) -> ErrorCode:
        if not transactional_id or len(transactional_id.encode("utf-8")) > MAX_STORED_STRING_BYTES:
            # Empty, or longer than the int16-length key of ``__transaction_state`` can hold.
            return ErrorCode.invalid_request
        return self.coordinator_error(transactional_id)

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for InitProducerId with a transactional id; ``expected`` is the KIP-360
        (producer id, epoch) a recovering producer sends, None for a new one."""
        error = self._validate_id(transactional_id)
        if error is not ErrorCode.none:
            return error, -1, -1
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, -1, -1
        metadata = self._txns.get(transactional_id)
        if metadata is None:
            producer_id = await self._producer_ids.allocate()
            error = self.coordinator_error(transactional_id)
            if error is not ErrorCode.none:
                return error, -1, -1
            metadata = self._txns.get(transactional_id)
            if metadata is None:
                metadata = TransactionMetadata.new(transactional_id, producer_id, timeout_ms, self._now_ms())
                self._txns[transactional_id] = metadata
        new_producer_id: int | None = None
        if not metadata.pending and metadata.needs_new_producer_id(expected):
            new_producer_id = await self._producer_ids.allocate()
            if self._txns.get(transactional_id) is not metadata:
                return ErrorCode.concurrent_transactions, -1, -1
        owned = self._owner(transactional_id)
        try:
            result = metadata.init_producer_id(timeout_ms, expected, self._now_ms(), new_producer_id)
        except InvalidTransition as exc:
            logger.error("InitProducerId for '%s': %s", untrusted(transactional_id), exc)
            return ErrorCode.concurrent_transactions, -1, -1
        if isinstance(result, ErrorCode):
            return result, -1, -1
        if result.state is TxnState.PREPARE_EPOCH_FENCE:
            logger.info(
                "transactional id '%s': a new producer fences epoch %d; aborting its ongoing transaction first",
                untrusted(transactional_id),
                metadata.producer_epoch,
            )
            error = await self._end(
                metadata, owned, result.producer_id, result.producer_epoch, commit=False, from_client=False
            )
            return (error if error is not ErrorCode.none else ErrorCode.concurrent_transactions), -1, -1
        error = await self._persist(metadata, result, owned)
        if error is not ErrorCode.none:
            return error, -1, -1
        logger.info(
            "transactional id '%s': producer id %d epoch %d (timeout %d ms)",
            untrusted(transactional_id),
            metadata.producer_id,
            metadata.producer_epoch,
            metadata.timeout_ms,
        )
        return ErrorCode.none, metadata.producer_id, metadata.producer_epoch

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn: one error per partition, all the same (the partitions exist: AddPartitionsToTxn's
        handler answers unknown ones before asking, as Kafka's KafkaApis does)."""
        error = self._validate_id(transactional_id)
        if error is not ErrorCode.none:
            return dict.fromkeys(partitions, error)
        metadata = self._txns.get(transactional_id)
        if metadata is None:
            return dict.fromkeys(partitions, ErrorCode.invalid_producer_id_mapping)
        if (producer_id, producer_epoch) in ((metadata.producer_id, metadata.producer_epoch),
                                             (metadata.next_producer_id, 0)):
            await self._markers_written(metadata)
            error = self._validate_id(transactional_id)  # the wait may have seen the id's partition move away
            if error is ErrorCode.none and not self._serving(metadata):
                error = ErrorCode.concurrent_transactions  # reloaded meanwhile: the client retries on the new state
            if error is not ErrorCode.none:
                return dict.fromkeys(partitions, error)
        result = metadata.add_partitions(producer_id, producer_epoch, partitions, self._now_ms())
        if isinstance(result, ErrorCode):
            return dict.fromkeys(partitions, result)
        error = await self._persist(metadata, result, self._owner(transactional_id))
        if error is ErrorCode.none:
            added = sorted(set(partitions))
            logger.debug("transactional id '%s': partitions %s added", untrusted(transactional_id), added)
        return dict.fromkeys(partitions, error)

    async def _markers_written(self, metadata: TransactionMetadata) -> None:
        """Waits, at most ``_MARKERS_WAIT_S``, while the markers of the id's previous transaction are written."""
        ended = self._completing.get(metadata)
        if ended is not None:
            try:
                await asyncio.wait_for(ended.wait(), _MARKERS_WAIT_S)
            except TimeoutError:
                pass  # still writing: the state machine answers CONCURRENT_TRANSACTIONS and the client retries

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn ``verify_only`` (KIP-890 part 1): INVALID_TXN_STATE for a partition not in the
        ongoing transaction of this producer."""
        error = self._validate_id(transactional_id)
        if error is not ErrorCode.none:
            return dict.fromkeys(partitions, error)
        metadata = self._txns.get(transactional_id)
        if metadata is None:
            return dict.fromkeys(partitions, ErrorCode.invalid_producer_id_mapping)
        return metadata.verify_partitions(producer_id, producer_epoch, partitions)

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        groups = self._groups
        error = self._validate_id(transactional_id)
        if error is not ErrorCode.none:
            return error
        if OFFSETS_TOPIC not in self._context.controller.image.topics_by_name:
            # The group's coordinator lookup creates the topic; the marker needs the partition to exist.
            error, _, _ = await groups.find_coordinator(group_id)
            if error is not ErrorCode.none:
                return ErrorCode.coordinator_not_available
        results = await self.add_partitions(
            transactional_id, producer_id, producer_epoch, [(OFFSETS_TOPIC, groups.partition_for(group_id))]
        )
        return next(iter(results.values()))

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, *, v2: bool = False
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for EndTxn. ``v2``: a transactions v2 client (EndTxn v5, KIP-890 part 2),
        whose every end bumps the epoch; the answer carries the id and epoch it continues with (v1: -1, -1)."""
        error = self._validate_id(transactional_id)
        metadata = self._txns.get(transactional_id)
        if error is ErrorCode.none and metadata is None:
            error = ErrorCode.invalid_producer_id_mapping
        if error is not ErrorCode.none or metadata is None:
            return error, -1, -1
        owned = self._owner(transactional_id)
        if not v2:
            return await self._end(metadata, owned, producer_id, producer_epoch, commit=commit,
                                   from_client=True), -1, -1
        new_producer_id = None
        if metadata.needs_new_producer_id_on_end():
            new_producer_id = await self._producer_ids.allocate()
            if not self._serving(metadata):
                return ErrorCode.concurrent_transactions, -1, -1
        try:
            result = metadata.end_transaction_v2(producer_id, producer_epoch, commit, self._now_ms(), new_producer_id)
        except InvalidTransition as exc:
            logger.error("EndTxn for '%s': %s", untrusted(transactional_id), exc)
            return ErrorCode.concurrent_transactions, -1, -1
        if isinstance(result, ErrorCode):
            if result is ErrorCode.none:
                return result, metadata.producer_id, metadata.producer_epoch
            logger.info("transactional id '%s': EndTxn v5 (%s) by producer %d epoch %d refused in state %s: %s",
                        untrusted(transactional_id), "commit" if commit else "abort", producer_id, producer_epoch,
                        metadata.state.display, result.name)
            return result, -1, -1
        error = await self._persist(metadata, result, owned)
        if error is not ErrorCode.none:
            return error, -1, -1
        self._start_completion(metadata, owned)
        if metadata.next_producer_id != NO_PRODUCER_ID:
            return ErrorCode.none, metadata.next_producer_id, 0
        return ErrorCode.none, metadata.producer_id, metadata.producer_epoch

    async def _end(
        self,
        metadata: TransactionMetadata,
        owned: OwnedPartition,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        from_client: bool,
    ) -> ErrorCode:
        result = metadata.end_transaction(producer_id, producer_epoch, commit, self._now_ms(), from_client=from_client)
        if isinstance(result, ErrorCode):
            if metadata.pending_state is TxnState.PREPARE_EPOCH_FENCE:
                metadata.abandon_transition()
            if result is not ErrorCode.none:
                logger.info(
                    "transactional id '%s': EndTxn(%s) by producer %d epoch %d refused in state %s: %s",
                    untrusted(metadata.transactional_id),
                    "commit" if commit else "abort",
                    producer_id,
                    producer_epoch,
                    metadata.state.display,
                    result.name,
                )
            return result
        error = await self._persist(metadata, result, owned)
        if error is ErrorCode.none:
            # DEBUG, as Kafka's coordinator logs them: a producer committing every 100 ms would write 20 lines/s.
            logger.debug(
                "transactional id '%s': %s of producer %d epoch %d over %d partitions",
                untrusted(metadata.transactional_id),
                result.state.display,
                metadata.producer_id,
                metadata.producer_epoch,
                len(metadata.partitions),
            )
            self._start_completion(metadata, owned)
        return error

    # ------------------------------------------------------------------------------------------------ completion

    def _start_completion(self, metadata: TransactionMetadata, owned: OwnedPartition) -> None:
        if metadata in self._completing:
            return
        self._completing[metadata] = asyncio.Event()
        self._partitions.spawn(
            self._complete(metadata, owned), name=f"complete transaction {metadata.transactional_id}"
        )

    async def _complete(self, metadata: TransactionMetadata, owned: OwnedPartition) -> None:
        """Writes the markers of a PrepareCommit/PrepareAbort, then records CompleteCommit/CompleteAbort."""
        transactional_id = metadata.transactional_id

        def still_valid() -> bool:
            return self._partitions.serves(owned) and self._txns.get(transactional_id) is metadata

        try:
            done = await self._markers.send(
                transactional_id=transactional_id,
                producer_id=metadata.producer_id,
                producer_epoch=metadata.producer_epoch,
                coordinator_epoch=owned.leader_epoch,
                commit=metadata.state is TxnState.PREPARE_COMMIT,
                partitions=set(metadata.partitions),
                still_valid=still_valid,
                done=metadata.markers_done.add,
                transaction_version=2 if metadata.ended_as_v2 else 0,
            )
            # Retried for as long as the id is ours: a new coordinator would reload PrepareX and redo it all.
            while done and still_valid():
                transit = metadata.prepare_complete(self._now_ms())
                error = await self._persist(metadata, transit, owned)
                if error is ErrorCode.none:
                    logger.debug("transactional id '%s': %s", untrusted(transactional_id), metadata.state.display)
                    return
                await asyncio.sleep(_COMPLETE_RETRY_S)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("transactional id '%s': completing the transaction failed", untrusted(transactional_id))
        finally:
            ended = self._completing.pop(metadata, None)
            if ended is not None:
                ended.set()

    # ------------------------------------------------------------------------------------------------ timers

    async def _timer_loop(self) -> None:
        while True:
            await asyncio.sleep(self._check_interval_s)
            try:
                await self.abort_timed_out_transactions()
                await self.expire_transactional_ids()
            except Exception:
                logger.exception("transaction time-out round failed")

    async def abort_timed_out_transactions(self) -> int:
        """Aborts every ongoing transaction older than its timeout, fencing its producer; returns how many."""
        now = self._now_ms()
        aborted = 0
        for metadata in list(self._txns.values()):
            transactional_id = metadata.transactional_id
            if not self._serving(metadata) or not metadata.timed_out(now):
                continue
            fence = metadata.prepare_fence_epoch()
            logger.info(
                "transactional id '%s': transaction of producer %d epoch %d timed out after %d ms; aborting it",
                untrusted(transactional_id),
                metadata.producer_id,
                metadata.producer_epoch,
                metadata.timeout_ms,
            )
            error = await self._end(
                metadata,
                self._owner(transactional_id),
                fence.producer_id,
                fence.producer_epoch,
                commit=False,
                from_client=False,
            )
            if error is ErrorCode.none:
                aborted += 1
        return aborted

    async def expire_transactional_ids(self) -> int:
        """Forgets ids idle for longer than ``transactional.id.expiration.ms``; returns how many."""
        now = self._now_ms()
        expired = 0
        for metadata in list(self._txns.values()):
            transactional_id = metadata.transactional_id
            if not self._serving(metadata) or not metadata.expired(now, self.expiration_ms):
                continue
            transit = metadata.prepare_dead(now)
            if await self._persist(metadata, transit, self._owner(transactional_id)) is ErrorCode.none:
                expired += 1
                logger.info(
                    "transactional id '%s' expired (producer id %d)",
                    untrusted(transactional_id), metadata.producer_id,
                )
        return expired

    # ------------------------------------------------------------------------------------------------ admin

    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        if not transactional_id:  # Kafka's handleDescribeTransactions: not a name any transaction can have
            return ErrorCode.invalid_request, None
        error = self.coordinator_error(transactional_id)
        if error is not ErrorCode.none:
            return error, None
        metadata = self._txns.get(transactional_id)
        if metadata is None or metadata.state is TxnState.DEAD:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, metadata

    def list_transactions(
        self,
        state_filters: Iterable[str],
        producer_id_filters: Iterable[int],
        *,
        duration_filter_ms: int = -1,
        transactional_id_pattern: str | None = None,
    ) -> tuple[ErrorCode, list[TransactionMetadata], list[str]]:
        """(error, transactions, unknown state names) of the ids this broker coordinates, as ListTransactions v0-2
        filters them (:mod:`broker.transactions.listing`)."""
        error = self._partitions.listing_error()
        if error is not ErrorCode.none:
            return error, [], []
        return select_transactions(
            self._txns.values(),
            state_filters=state_filters,
            producer_id_filters=producer_id_filters,
            duration_filter_ms=duration_filter_ms,
            transactional_id_pattern=transactional_id_pattern,
            now_ms=self._now_ms(),
        )

    # ------------------------------------------------------------------------------------------------ produce

    async def verify_produce(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partition: TopicPartition,
        *, add: bool = False, retry_concurrent: bool = False,
    ) -> ErrorCode:
        """KIP-890 part 1: whether ``partition`` is in the ongoing transaction of ``transactional_id``, asked of its
        coordinator (here, or over the wire). NONE when it is; the error to refuse the produce with otherwise.
        ``add`` (part 2, a Produce v12+ of transactions v2): the coordinator adds the partition instead; with
        ``retry_concurrent`` (Produce v12+) a busy coordinator is asked again (``retry_while_concurrent``)."""
        ask = functools.partial(self.verify, transactional_id, producer_id, producer_epoch, partition, add=add)
        if retry_concurrent:
            return produce_verification_error(await retry_while_concurrent(ask), keep_concurrent=True)
        return produce_verification_error(await ask())

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partition: TopicPartition, *, add: bool
    ) -> ErrorCode:
        """KIP-890: the coordinator's answer (here, or over the wire) whether ``partition`` is in the ongoing
        transaction (with ``add``: added to it); the callers translate a refusal for their request."""
        node_id = self.coordinator_node(transactional_id)
        if node_id == self._context.node_id and add:
            return (await self.add_partitions(transactional_id, producer_id, producer_epoch, [partition]))[partition]
        if node_id == self._context.node_id:
            return self.verify_partitions(transactional_id, producer_id, producer_epoch, [partition])[partition]
        if node_id < 0:
            return ErrorCode.coordinator_not_available
        return await verify_remotely(self._peers, node_id, transactional_id=transactional_id,
                                     producer_id=producer_id, producer_epoch=producer_epoch, partition=partition,
                                     add=add)
