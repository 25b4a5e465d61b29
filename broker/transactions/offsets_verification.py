"""KIP-890 part 1 for TxnOffsetCommit: the group coordinator asks, before it writes a transactional offset commit,
whether the group's ``__consumer_offsets`` partition is in the producer's ongoing transaction, as Kafka's coordinator
runtime does (``scheduleTransactionalWriteOperation``). Why it must: ``broker.groups.offset_commits``.

This module is the transaction side of that question (the group coordinator cannot import the transaction
coordinator, which depends on it): what is asked of the coordinator for each TxnOffsetCommit version, and what the
client is answered when the verification fails.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.groups.offsets import TopicPartition
from broker.groups.txn_offsets import TRANSACTION_ABORTABLE_VERSION, TxnVerifier
from broker.transactions.coordinator import TransactionCoordinator
from metadata.controller_api import ControllerClient
from wire.api_versions import TRANSACTION_VERSION


def txn_offset_commit_verifier(transactions: TransactionCoordinator, controller: ControllerClient) -> TxnVerifier:
    """The verifier the group coordinator asks. A v5 request at ``transaction.version`` 2 (KIP-890 part 2, a client
    sending no AddOffsetsToTxn) has the partition added to the transaction; any other is only verified."""

    async def verify(
        transactional_id: str, producer_id: int, producer_epoch: int, partition: TopicPartition, api_version: int
    ) -> ErrorCode:
        add = api_version >= 5 and controller.image.feature_level(TRANSACTION_VERSION.name) >= 2
        error = await transactions.verify(transactional_id, producer_id, producer_epoch, partition, add=add)
        return txn_offset_commit_verification_error(error, api_version)

    return verify


def txn_offset_commit_verification_error(error: ErrorCode, api_version: int) -> ErrorCode:
    """What a TxnOffsetCommit answers for a verification error, as Kafka's AddPartitionsToTxnManager and group
    coordinator translate it: the offsets partition not in the ongoing transaction is INVALID_TXN_STATE, from v4 on
    TRANSACTION_ABORTABLE (the client aborts and goes on); a fenced producer INVALID_PRODUCER_EPOCH; a coordinator
    that could not be reached (NETWORK_EXCEPTION, which older clients may not retry) COORDINATOR_LOAD_IN_PROGRESS,
    which they retry without a coordinator lookup. Kafka hands the others (a busy, moving or loading coordinator, an
    unknown producer id) to the client as they are."""
    if error is ErrorCode.invalid_txn_state and api_version >= TRANSACTION_ABORTABLE_VERSION:
        return ErrorCode.transaction_abortable
    if error is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if error is ErrorCode.network_exception:
        return ErrorCode.coordinator_load_in_progress
    return error
