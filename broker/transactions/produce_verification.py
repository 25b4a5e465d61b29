"""KIP-890 part 1 across brokers: a partition leader asks the transaction coordinator of a produce's transactional
id, on another broker, whether the partition is in the ongoing transaction (AddPartitionsToTxn ``verify_only``), and
what the produce answers for each outcome. A produce that cannot be verified is refused, never written: a hanging
transaction would hold back the last stable offset of the partition.

For a Produce v12+ (transactions v2, the leader adds the partition) a busy coordinator (CONCURRENT_TRANSACTIONS: the
id's previous write is in flight) is asked again after a back-off, as Kafka's ReplicaManager does, and answers the
client CONCURRENT_TRANSACTIONS, not NOT_ENOUGH_REPLICAS, when it stays busy. Kafka adds every partition of one
Produce in one AddPartitionsToTxn; here each partition is added on its own, so the partitions of one request take
turns and the retries may last up to a second (Kafka's window is 100 ms) before the client is told.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from broker.transactions.peers import Peers
from broker.transactions.state import TopicPartition
from wire import codec, schema
from wire.log_text import untrusted

logger = logging.getLogger(__name__)

ADD_PARTITIONS_TO_TXN_KEY = 24
_VERIFY_VERSION = 4
#: Transactions v2 (KIP-890 part 2): the partition leader adds the partition to the transaction itself.
_ADD_VERSION = 5
#: Kafka's ``add.partitions.to.txn.retry.backoff.ms``: the pause before a busy coordinator is asked again.
ADD_RETRY_BACKOFF_S = 0.02
#: How long a Produce v12's add keeps retrying a busy coordinator (see the module's docstring).
ADD_RETRY_WINDOW_S = 1.0


async def verify_remotely(
    peers: Peers,
    node_id: int,
    *,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partition: TopicPartition,
    add: bool = False,
) -> ErrorCode:
    """The answer of coordinator ``node_id`` (another broker) for ``partition`` (NONE: verified, or with ``add``,
    added to the transaction), NETWORK_EXCEPTION when it cannot be asked; :func:`produce_verification_error` turns
    it into the produce's answer."""
    request_cls = codec.request_class(ADD_PARTITIONS_TO_TXN_KEY, _ADD_VERSION if add else _VERIFY_VERSION)
    txn_cls = schema.field_entity(request_cls, "transactions")
    topic_cls = schema.field_entity(txn_cls, "topics")
    request = schema.build(
        request_cls,
        transactions=(
            schema.build(
                txn_cls,
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                verify_only=not add,
                topics=(schema.build(topic_cls, name=partition[0], partitions=(partition[1],)),),
            ),
        ),
    )
    try:
        response = await peers.request(node_id, request)
    except (ConnectionError, TimeoutError, codec.ProtocolError) as exc:
        logger.info("verifying '%s' with coordinator %d failed: %s", untrusted(transactional_id), node_id, exc)
        return ErrorCode.network_exception
    if response.error_code is not ErrorCode.none:
        return ErrorCode(response.error_code)
    for result in response.results_by_transaction:
        for topic in result.topic_results:
            for part in topic.results_by_partition:
                if (topic.name, part.partition_index) == partition:
                    return ErrorCode(part.partition_error_code)
    return ErrorCode.invalid_txn_state


async def retry_while_concurrent(ask: Callable[[], Awaitable[ErrorCode]]) -> ErrorCode:
    """``ask``'s answer, asked again every :data:`ADD_RETRY_BACKOFF_S` while it is CONCURRENT_TRANSACTIONS, for at
    most :data:`ADD_RETRY_WINDOW_S`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ADD_RETRY_WINDOW_S
    while (error := await ask()) is ErrorCode.concurrent_transactions and loop.time() + ADD_RETRY_BACKOFF_S < deadline:
        await asyncio.sleep(ADD_RETRY_BACKOFF_S)
    return error


def produce_verification_error(error: ErrorCode, *, keep_concurrent: bool = False) -> ErrorCode:
    """What a produce answers for a verification error, as Kafka's ReplicaManager: a coordinator that is moving,
    unreachable or busy becomes the retriable NOT_ENOUGH_REPLICAS (which older clients retry without refreshing
    their metadata), a fenced producer INVALID_PRODUCER_EPOCH. ``keep_concurrent`` (Produce v12+, transactions v2):
    a busy coordinator is answered CONCURRENT_TRANSACTIONS, as Kafka answers those clients."""
    if error is ErrorCode.concurrent_transactions and keep_concurrent:
        return error
    if error in (
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.concurrent_transactions,
        ErrorCode.network_exception,
    ):
        return ErrorCode.not_enough_replicas
    if error is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return error
