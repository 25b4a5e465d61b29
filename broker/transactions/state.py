"""The state of one transactional id and its transitions, as Kafka's ``TransactionMetadata`` (sans-I/O).

A transactional id moves Empty → Ongoing → PrepareCommit/PrepareAbort → CompleteCommit/CompleteAbort, and from a
complete or empty state to Dead when it expires. Every change is first *prepared*: :class:`TxnTransit` is the
value to persist in ``__transaction_state`` and the metadata remembers it as its ``pending_state``, so that a second
request arriving while the write is in flight is answered CONCURRENT_TRANSACTIONS instead of racing it. Once the
record is durable the coordinator calls :meth:`TransactionMetadata.complete_transition`; when the write failed it
calls :meth:`TransactionMetadata.abandon_transition`, leaving the id as it was.

The request checks (which request is valid in which state, and which error answers it otherwise) are the pure
functions of this module, each modelled on the corresponding branch of Kafka's ``TransactionCoordinator``. They
return either a :class:`TxnTransit` to persist, or an error code (``ErrorCode.none`` meaning "nothing to write,
answer success now").
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

TopicPartition = tuple[str, int]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Kafka's Short.MaxValue: an epoch at MAX_EPOCH - 1 or above is exhausted, the next bump rotates the producer id.
MAX_EPOCH = 0x7FFF


class TxnState(enum.Enum):
    """The states with their ``TransactionStatus`` byte of the log value, and the names DescribeTransactions and
    ListTransactions show (Kafka's ``TransactionState.name``)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def byte(self) -> int:
        return self.value[0]

    @property
    def display(self) -> str:
        return self.value[1]

    @classmethod
    def from_byte(cls, value: int) -> TxnState:
        for state in cls:
            if state.byte == value:
                return state
        raise ValueError(f"unknown transaction status {value}")

    @classmethod
    def from_display(cls, name: str) -> TxnState | None:
        for state in cls:
            if state.display == name:
                return state
        return None


#: States in which an id has no transaction in flight: it may start one, get a new epoch, or expire.
IDLE_STATES = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})

#: Kafka's ``TransactionState.validPreviousStates``.
_VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    # Transactions v2 abort an idle id too (a client's abort that added nothing bumps the epoch all the same).
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE, *IDLE_STATES}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}



def is_epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The next state of a transactional id: what is written to ``__transaction_state`` before it takes effect."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    txn_start_ms: int
    txn_last_update_ms: int
    #: Transactions v2: the epoch this transaction's end bumped past was exhausted, so the producer continues as
    #: this id at epoch 0 once the markers (written as ``producer_id`` at the last epoch) are complete.
    next_producer_id: int = NO_PRODUCER_ID
    #: The transaction version of the client that ended the transaction (2: EndTxn v5, whose markers carry the
    #: bumped epoch and say so, WriteTxnMarkers v2); persisted (``log_schema``), so a new coordinator knows it too.
    client_transaction_version: int = 0


class InvalidTransition(Exception):
    """A transition Kafka's state machine does not allow: a coordinator bug, never a client's fault."""


@dataclass(eq=False)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_ms: int = -1
    txn_last_update_ms: int = -1
    #: The state a durable write is about to install; requests meanwhile get CONCURRENT_TRANSACTIONS.
    pending_state: TxnState | None = None
    #: A fence (epoch bump to abort an ongoing transaction) whose write failed: the retry reuses that epoch
    #: rather than bumping again (the bumped epoch was never returned to anyone).
    has_failed_epoch_fence: bool = False
    #: Transactions v2 (KIP-890 part 2): the id the producer continues as after an end that exhausted the epoch.
    next_producer_id: int = NO_PRODUCER_ID
    #: 2 when a v2 client (EndTxn v5) ended the transaction: its markers carry the bumped epoch and say so
    #: (WriteTxnMarkers v2, KIP-1228).
    client_transaction_version: int = 0
    #: The partitions of a PrepareCommit/PrepareAbort whose marker is written (or whose topic is gone), in memory
    #: only: DescribeTransactions lists the others, as Kafka's coordinator removes each partition from the
    #: transaction as its marker is written. Any transition applied clears it.
    markers_done: set[TopicPartition] = field(default_factory=set)

    @classmethod
    def new(cls, transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int) -> TransactionMetadata:
        """A transactional id seen for the first time: a fresh producer id, no epoch yet (the first InitProducerId
        bumps it to 0)."""
        return cls(
            transactional_id=transactional_id,
            producer_id=producer_id,
            last_producer_id=NO_PRODUCER_ID,
            producer_epoch=NO_PRODUCER_EPOCH,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            txn_last_update_ms=now_ms,
        )

    @classmethod
    def restore(cls, transactional_id: str, transit: TxnTransit) -> TransactionMetadata:
        """An id as loaded from ``__transaction_state`` (the log keeps neither last id nor last epoch)."""
        return cls(
            transactional_id=transactional_id,
            producer_id=transit.producer_id,
            last_producer_id=transit.last_producer_id,
            producer_epoch=transit.producer_epoch,
            last_producer_epoch=transit.last_producer_epoch,
            timeout_ms=transit.timeout_ms,
            state=transit.state,
            partitions=set(transit.partitions),
            txn_start_ms=transit.txn_start_ms,
            txn_last_update_ms=transit.txn_last_update_ms,
            next_producer_id=transit.next_producer_id,
            client_transaction_version=transit.client_transaction_version,
        )

    @property
    def described_partitions(self) -> set[TopicPartition]:
        """What DescribeTransactions lists: the transaction's partitions, less those whose marker is written."""
        return self.partitions - self.markers_done

    @property
    def ended_as_v2(self) -> bool:
        return self.client_transaction_version >= 2

    @property
    def pending(self) -> bool:
        return self.pending_state is not None

    @property
    def transition_in_progress(self) -> bool:
        """Kafka's ``pendingTransitionInProgress``: a write in flight, or a PrepareCommit/PrepareAbort whose markers
        are being written (Kafka holds its CompleteCommit/CompleteAbort pending from the moment PrepareX is
        durable). InitProducerId and AddPartitionsToTxn answer it CONCURRENT_TRANSACTIONS before they look at the
        producer: after a transactions v2 end that exhausted the epoch the producer already speaks as the next
        producer id, which is only installed once the markers are written."""
        return self.pending or self.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def snapshot(self) -> TxnTransit:
        """The current state as a log value (what a reload would restore)."""
        return TxnTransit(
            producer_id=self.producer_id,
            last_producer_id=self.last_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=self.last_producer_epoch,
            timeout_ms=self.timeout_ms,
            state=self.state,
            partitions=frozenset(self.partitions),
            txn_start_ms=self.txn_start_ms,
            txn_last_update_ms=self.txn_last_update_ms,
        )

    # ---------------------------------------------------------------------------------------------- transitions

    def _prepare(
        self,
        state: TxnState,
        *,
        producer_id: int,
        epoch: int,
        last_epoch: int,
        timeout_ms: int,
        partitions: Iterable[TopicPartition],
        txn_start_ms: int,
        now_ms: int,
        next_producer_id: int = NO_PRODUCER_ID,
    ) -> TxnTransit:
        if self.pending_state is not None:
            raise InvalidTransition(
                f"transactional id {self.transactional_id!r}: {state.display} prepared while "
                f"{self.pending_state.display} is pending"
            )
        if producer_id < 0:
            raise InvalidTransition(f"transactional id {self.transactional_id!r}: producer id {producer_id}")
        if self.state not in _VALID_PREVIOUS[state]:
            raise InvalidTransition(
                f"transactional id {self.transactional_id!r}: {self.state.display} -> {state.display} is not allowed"
            )
        self.pending_state = state
        return TxnTransit(
            producer_id=producer_id,
            last_producer_id=self.producer_id,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            timeout_ms=timeout_ms,
            state=state,
            partitions=frozenset(partitions),
            txn_start_ms=txn_start_ms,
            txn_last_update_ms=now_ms,
            next_producer_id=next_producer_id,
            client_transaction_version=self.client_transaction_version,
        )

    def complete_transition(self, transit: TxnTransit) -> None:
        """Installs a prepared transit once it is durable."""
        if self.pending_state is not transit.state:
            raise InvalidTransition(
                f"transactional id {self.transactional_id!r}: completing {transit.state.display} but "
                f"{self.pending_state.display if self.pending_state else 'nothing'} is pending"
            )
        self.pending_state = None
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.timeout_ms = transit.timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.markers_done.clear()
        self.txn_start_ms = transit.txn_start_ms
        self.txn_last_update_ms = transit.txn_last_update_ms
        self.next_producer_id = transit.next_producer_id
        self.client_transaction_version = transit.client_transaction_version
        if transit.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            self.has_failed_epoch_fence = False

    def abandon_transition(self) -> None:
        """The write of the pending transit failed: the id stays as it was."""
        self.pending_state = None

    def prepare_increment_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransit | ErrorCode:
        """InitProducerId on an idle id: bump the epoch (KIP-360: or answer a retried bump with the same epoch)."""
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch in (NO_PRODUCER_EPOCH, expected_epoch):
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump whose answer was lost: the producer gets the current epoch again.
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.producer_fenced
        return self._prepare(
            TxnState.EMPTY,
            producer_id=self.producer_id,
            epoch=epoch,
            last_epoch=last,
            timeout_ms=timeout_ms,
            partitions=(),
            txn_start_ms=-1,
            now_ms=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, timeout_ms: int, now_ms: int, *, record_last_epoch: bool
    ) -> TxnTransit:
        """InitProducerId when the epoch is exhausted: a new producer id at epoch 0."""
        return self._prepare(
            TxnState.EMPTY,
            producer_id=new_producer_id,
            epoch=0,
            last_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            timeout_ms=timeout_ms,
            partitions=(),
            txn_start_ms=-1,
            now_ms=now_ms,
        )

    def prepare_fence_epoch(self) -> TxnTransit:
        """Fences the producer of an ongoing transaction (InitProducerId by a new instance, or a time-out): the
        epoch bump that the abort will be written with. Not persisted itself; :meth:`prepare_end` turns it into
        PrepareAbort."""
        if self.producer_epoch >= MAX_EPOCH:
            raise InvalidTransition(
                f"transactional id {self.transactional_id!r}: epoch {self.producer_epoch} exhausted"
            )
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(
            TxnState.PREPARE_EPOCH_FENCE,
            producer_id=self.producer_id,
            epoch=epoch,
            last_epoch=NO_PRODUCER_EPOCH,
            timeout_ms=self.timeout_ms,
            partitions=self.partitions,
            txn_start_ms=self.txn_start_ms,
            now_ms=self.txn_last_update_ms,
        )

    def prepare_add_partitions(self, added: Iterable[TopicPartition], now_ms: int) -> TxnTransit:
        start = now_ms if self.state in IDLE_STATES else self.txn_start_ms
        return self._prepare(
            TxnState.ONGOING,
            producer_id=self.producer_id,
            epoch=self.producer_epoch,
            last_epoch=self.last_producer_epoch,
            timeout_ms=self.timeout_ms,
            partitions=self.partitions | set(added),
            txn_start_ms=start,
            now_ms=now_ms,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """All markers of a PrepareCommit/PrepareAbort are written: CompleteCommit/CompleteAbort."""
        state = TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        rotated = self.next_producer_id != NO_PRODUCER_ID
        return self._prepare(
            state,
            producer_id=self.next_producer_id if rotated else self.producer_id,
            epoch=0 if rotated else self.producer_epoch,
            last_epoch=self.producer_epoch - 1 if rotated else self.last_producer_epoch,
            timeout_ms=self.timeout_ms,
            partitions=(),
            txn_start_ms=self.txn_start_ms,
            now_ms=now_ms,
        )

    def prepare_dead(self, now_ms: int) -> TxnTransit:
        """Expiry of an idle id; persisted as a tombstone."""
        return self._prepare(
            TxnState.DEAD,
            producer_id=self.producer_id,
            epoch=self.producer_epoch,
            last_epoch=self.last_producer_epoch,
            timeout_ms=self.timeout_ms,
            partitions=(),
            txn_start_ms=self.txn_start_ms,
            now_ms=now_ms,
        )

    # ---------------------------------------------------------------------------------------------- requests

    def init_producer_id(
        self, timeout_ms: int, expected: tuple[int, int] | None, now_ms: int, new_producer_id: int | None
    ) -> TxnTransit | ErrorCode:
        """Kafka's ``prepareInitProducerIdTransit``. ``expected`` is the (producer id, epoch) a KIP-360 client sends
        to recover; ``new_producer_id`` a fresh id in case the epoch is exhausted (None: ask for one first, see
        :meth:`needs_new_producer_id`). A transit in state PrepareEpochFence means: abort the ongoing transaction
        (with :meth:`prepare_end`) and answer CONCURRENT_TRANSACTIONS."""
        if self.transition_in_progress:
            return ErrorCode.concurrent_transactions
        if expected is not None and not self._valid_expected_producer(*expected):
            return ErrorCode.producer_fenced
        if self.state in IDLE_STATES:
            if self.needs_new_producer_id(expected):
                if new_producer_id is None:
                    raise InvalidTransition("a new producer id is needed: the epoch is exhausted")
                return self.prepare_producer_id_rotation(
                    new_producer_id, timeout_ms, now_ms, record_last_epoch=expected is not None
                )
            return self.prepare_increment_epoch(timeout_ms, expected[1] if expected is not None else None, now_ms)
        if self.state is TxnState.ONGOING:
            return self.prepare_fence_epoch()
        raise InvalidTransition(f"transactional id {self.transactional_id!r} found in state {self.state.display}")

    def needs_new_producer_id(self, expected: tuple[int, int] | None) -> bool:
        """Whether InitProducerId on this idle id rotates to a new producer id (the epoch is exhausted)."""
        return (
            self.state in IDLE_STATES
            and self.epoch_exhausted
            and (expected is None or expected[1] == self.producer_epoch)
        )

    def _valid_expected_producer(self, producer_id: int, epoch: int) -> bool:
        return (
            self.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == self.producer_id
            or (producer_id == self.last_producer_id and is_epoch_exhausted(epoch))
        )

    def add_partitions(
        self, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition], now_ms: int
    ) -> TxnTransit | ErrorCode:
        """Kafka's ``handleAddPartitionsToTransaction`` checks; NONE when every partition is already in."""
        wanted = set(partitions)
        if self.transition_in_progress:
            return ErrorCode.concurrent_transactions
        if self.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if self.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if self.state is TxnState.ONGOING and wanted <= self.partitions:
            return ErrorCode.none
        if self.state not in _VALID_PREVIOUS[TxnState.ONGOING]:
            return ErrorCode.invalid_txn_state
        return self.prepare_add_partitions(wanted, now_ms)

    def verify_partitions(
        self, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn ``verify_only`` (KIP-890 part 1): which partitions are in the ongoing transaction.

        A pending AddPartitionsToTxn does not make it busy, as in Kafka's ``handleVerifyPartitionsInTransaction``:
        it answers from the partitions already durable. Clients produce to the partitions already added while they
        add more, and a busy answer (a retriable refusal of the produce) that reaches librdkafka as it starts an
        abort leaves the batch queued and unsent until the abort times out. A pending end of the transaction
        (PrepareCommit, PrepareAbort, an epoch fence) still answers CONCURRENT_TRANSACTIONS, where Kafka answers
        from the partitions and lets the partition's verification guard refuse an append that lands after the
        marker. Fjord's partition has a guard of its own (a batch whose transaction a marker ended while it waited
        is refused, ``broker.partition.partition_log.produce``), and still does not let a produce in while the
        transaction is ending."""
        wanted = list(partitions)
        error = ErrorCode.none
        if self.producer_id != producer_id:
            error = ErrorCode.invalid_producer_id_mapping
        elif self.producer_epoch != producer_epoch:
            error = ErrorCode.producer_fenced
        elif (self.pending and self.pending_state is not TxnState.ONGOING) or self.state in (
            TxnState.PREPARE_COMMIT,
            TxnState.PREPARE_ABORT,
        ):
            error = ErrorCode.concurrent_transactions
        if error is not ErrorCode.none:
            return dict.fromkeys(wanted, error)
        ongoing = self.state is TxnState.ONGOING
        return {
            tp: ErrorCode.none if ongoing and tp in self.partitions else ErrorCode.invalid_txn_state for tp in wanted
        }

    def end_transaction(
        self, producer_id: int, producer_epoch: int, commit: bool, now_ms: int, *, from_client: bool = True
    ) -> TxnTransit | ErrorCode:
        """Kafka's ``endTransaction`` checks. NONE answers a retried EndTxn whose transaction already completed;
        CONCURRENT_TRANSACTIONS one whose markers are still being written."""
        if self.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if (from_client and producer_epoch != self.producer_epoch) or producer_epoch < self.producer_epoch:
            return ErrorCode.producer_fenced
        if self.pending and self.pending_state is not TxnState.PREPARE_EPOCH_FENCE:
            return ErrorCode.concurrent_transactions
        if self.state is TxnState.ONGOING:
            self.client_transaction_version = 0
            target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            if target is TxnState.PREPARE_ABORT and self.pending_state is TxnState.PREPARE_EPOCH_FENCE:
                # The fence becomes the abort: its bumped epoch is the one the abort (and its markers) carry.
                self.pending_state = None
                self.producer_epoch = producer_epoch
                self.last_producer_epoch = NO_PRODUCER_EPOCH
                self.has_failed_epoch_fence = True  # until the PrepareAbort is durable (cleared on completion)
            return self.prepare_end(target, now_ms)
        if self.state is TxnState.COMPLETE_COMMIT:
            return ErrorCode.none if commit else ErrorCode.invalid_txn_state
        if self.state is TxnState.COMPLETE_ABORT:
            return ErrorCode.invalid_txn_state if commit else ErrorCode.none
        if self.state is TxnState.PREPARE_COMMIT:
            return ErrorCode.concurrent_transactions if commit else ErrorCode.invalid_txn_state
        if self.state is TxnState.PREPARE_ABORT:
            return ErrorCode.invalid_txn_state if commit else ErrorCode.concurrent_transactions
        return ErrorCode.invalid_txn_state

    def prepare_end(
        self, target: TxnState, now_ms: int, *, bump: bool = False, next_producer_id: int = NO_PRODUCER_ID
    ) -> TxnTransit:
        """PrepareCommit/PrepareAbort; ``bump`` (transactions v2): with the epoch bumped, which the markers carry
        and the client continues with (or, when it was exhausted, ``next_producer_id`` at epoch 0)."""
        idle = self.state in IDLE_STATES  # v2 aborts an idle id too: the client's abort with nothing added
        return self._prepare(
            target,
            producer_id=self.producer_id,
            epoch=self.producer_epoch + 1 if bump else self.producer_epoch,
            last_epoch=self.producer_epoch if bump else self.last_producer_epoch,
            timeout_ms=self.timeout_ms,
            partitions=() if idle else self.partitions,
            txn_start_ms=now_ms if idle else self.txn_start_ms,
            now_ms=now_ms,
            next_producer_id=next_producer_id,
        )

    def end_transaction_v2(
        self, producer_id: int, producer_epoch: int, commit: bool, now_ms: int, new_producer_id: int | None
    ) -> TxnTransit | ErrorCode:
        """Kafka's ``endTransaction`` for a transactions v2 client (EndTxn v5): the end bumps the epoch, so the
        epoch the client sends tells a retry (one below ours: the end it asked for is done or being done) from
        the next end. ``new_producer_id``: the id to continue as when our epoch is exhausted (see
        :meth:`needs_new_producer_id_on_end`). NONE answers a retry of a completed end."""
        retry_on_bump = self.producer_id == producer_id and self.producer_epoch == producer_epoch + 1
        retry_on_overflow = (self.last_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                             and self.producer_epoch == 0)
        retry = retry_on_bump or retry_on_overflow
        if self.producer_id != producer_id and not retry_on_overflow:
            return ErrorCode.invalid_producer_id_mapping
        state = self.state
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            valid = retry_on_bump
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = retry or producer_epoch == self.producer_epoch
        else:
            valid = producer_epoch == self.producer_epoch
        if not valid:
            return ErrorCode.producer_fenced
        if self.pending:
            return ErrorCode.concurrent_transactions
        prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if state is TxnState.ONGOING or (
            not commit and not retry and state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        ):
            if self.epoch_exhausted and new_producer_id is None:
                raise InvalidTransition("a new producer id is needed: the epoch is exhausted")
            rotate = new_producer_id if self.epoch_exhausted and new_producer_id is not None else NO_PRODUCER_ID
            self.client_transaction_version = 2
            return self.prepare_end(prepare, now_ms, bump=True, next_producer_id=rotate)
        if retry and state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return ErrorCode.none
        if state is prepare:
            return ErrorCode.concurrent_transactions
        return ErrorCode.invalid_txn_state

    def needs_new_producer_id_on_end(self) -> bool:
        """Whether a v2 end would bump past an exhausted epoch: the coordinator allocates the next id first."""
        return self.epoch_exhausted

    # ---------------------------------------------------------------------------------------------- timers

    def timed_out(self, now_ms: int) -> bool:
        """An ongoing transaction older than its timeout: the coordinator aborts it with an epoch bump."""
        return not self.pending and self.state is TxnState.ONGOING and self.txn_start_ms + self.timeout_ms < now_ms

    def expired(self, now_ms: int, expiration_ms: int) -> bool:
        """An idle id unused for ``transactional.id.expiration.ms``: the coordinator forgets it."""
        return not self.pending and self.state in IDLE_STATES and self.txn_last_update_ms <= now_ms - expiration_ms
