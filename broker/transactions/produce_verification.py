"""KIP-890 part 1 across brokers: a partition leader asks the transaction coordinator of a produce's transactional
id, on another broker, whether the partition is in the ongoing transaction (AddPartitionsToTxn ``verify_only``), and
what the produce answers for each outcome. A produce that cannot be verified is refused, never written: a hanging
transaction would hold back the last stable offset of the partition.
"""

from __future__ import annotations

import logging

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
    """The answer of coordinator ``node_id`` (another broker) for ``partition``, as a produce error (NONE: verified,
    or with ``add``, added to the transaction)."""
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
        return ErrorCode.not_enough_replicas
    if response.error_code is not ErrorCode.none:
        return produce_verification_error(ErrorCode(response.error_code))
    for result in response.results_by_transaction:
        for topic in result.topic_results:
            for part in topic.results_by_partition:
                if (topic.name, part.partition_index) == partition:
                    return produce_verification_error(ErrorCode(part.partition_error_code))
    return ErrorCode.invalid_txn_state


def produce_verification_error(error: ErrorCode) -> ErrorCode:
    """What a produce answers for a verification error, as Kafka's AddPartitionsToTxnManager: a coordinator that
    is moving or busy becomes the retriable NOT_ENOUGH_REPLICAS, a fenced producer INVALID_PRODUCER_EPOCH."""
    if error in (
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.concurrent_transactions,
    ):
        return ErrorCode.not_enough_replicas
    if error is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    return error
