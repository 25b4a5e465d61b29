"""The ``__transaction_state`` topic: how it is created (an internal topic like ``__consumer_offsets``, compacted)
and how a partition of it is read back into the last state of each transactional id when this broker becomes its
leader. The records themselves are :mod:`broker.transactions.log_schema`'s; the coordinator writes them.
"""

from __future__ import annotations

import logging

from broker.internal_topic import InternalTopic, replay
from broker.partition.partition_log import PartitionLog
from broker.transactions.log_schema import SchemaError, decode_key, decode_value
from broker.transactions.state import TxnTransit
from settings.server import ServerConfig

logger = logging.getLogger(__name__)

TRANSACTION_TOPIC = "__transaction_state"


def _transaction_topic_configs(cfg: ServerConfig) -> dict[str, str]:
    # As Kafka's TransactionLog does; segment.bytes sizes nothing in a stream, but DescribeConfigs shows what was set.
    return {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "segment.bytes": str(cfg.value("transaction.state.log.segment.bytes")),
    }


TRANSACTION_STATE = InternalTopic(
    name=TRANSACTION_TOPIC,
    role="transaction coordinator",
    items="transactional ids",
    partitions_key="transaction.state.log.num.partitions",
    replication_key="transaction.state.log.replication.factor",
    configs=_transaction_topic_configs,
)


async def replay_transactions(log: PartitionLog, where: str) -> tuple[dict[str, TxnTransit | None], int]:
    """Last value per transactional id from the log start to its end (a tombstone removes the id), and how many
    records were read: what a new leader of a ``__transaction_state`` partition loads."""
    values: dict[str, TxnTransit | None] = {}
    count = 0
    async for header, record in replay(log, where):
        if header.is_control or record.key is None:
            continue
        count += 1
        try:
            transactional_id = decode_key(record.key)
            values[transactional_id] = None if record.value is None else decode_value(record.value)
        except SchemaError as exc:
            logger.warning("%s: record at offset %d skipped: %s", where, record.offset, exc)
    return values, count
