"""Writing transaction markers on partitions this broker leads: the partition side of WriteTxnMarkers.

The transaction coordinator calls :func:`write_markers` directly for partitions led here and sends WriteTxnMarkers
(broker/handlers/write_txn_markers.py, which calls it too) to other leaders. The markers of one transaction are
written at once, not one after another: each waits only for its own partition, and the WAL makes them durable
together, where one at a time cost a commit one WAL round trip per partition (and held the producer's next
transaction, whose AddPartitionsToTxn waits for the markers, as long). A marker on a ``__consumer_offsets``
partition also ends the transaction's pending offset commits in the group coordinator (TxnOffsetCommit): they
become visible on COMMIT and are dropped on ABORT, once the marker is durable, as Kafka's GroupCoordinator does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from kio.schema.errors import ErrorCode

from broker.groups.coordinator import GroupCoordinator
from broker.groups.offsets_topic import OFFSETS_TOPIC
from broker.partition.access import leader_log
from broker.partition.manager import PartitionManager
from broker.transactions.state import TopicPartition
from metadata.errors import error_code_for, error_code_logged
from wire.log_text import LOG_TEXT_MAX, untrusted

logger = logging.getLogger(__name__)


async def write_marker(
    partitions: PartitionManager,
    groups: GroupCoordinator,
    *,
    topic: str,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    transaction_version: int = 0,
) -> ErrorCode:
    """Appends the COMMIT/ABORT marker of ``producer_id`` to ``topic``-``partition`` and waits until it is
    durable; the error code otherwise (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH
    for a fenced epoch, ...)."""
    try:
        log = await leader_log(partitions, topic, partition)
        offset = await log.write_txn_marker(
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            commit=commit,
            transaction_version=transaction_version,
        )
    except Exception as exc:
        code = error_code_for(exc)
        log_at = logging.ERROR if code == ErrorCode.unknown_server_error else logging.INFO
        logger.log(
            log_at,
            "%s marker of producer %d epoch %d on %s-%d refused: %s (%s)",
            "COMMIT" if commit else "ABORT",
            producer_id,
            producer_epoch,
            untrusted(topic),  # the WriteTxnMarkers sender's name, which may name no topic
            partition,
            code.name,
            untrusted(str(exc), 4 * LOG_TEXT_MAX),
            exc_info=exc if code == ErrorCode.unknown_server_error else None,
        )
        return code
    logger.debug(
        "%s marker of producer %d on %s-%d at offset %d",
        "COMMIT" if commit else "ABORT",
        producer_id,
        topic,
        partition,
        offset,
    )
    if topic == OFFSETS_TOPIC and offset >= 0:
        groups.complete_transaction(partition, producer_id, commit)
    return ErrorCode.none


async def write_markers(
    partitions: PartitionManager,
    groups: GroupCoordinator,
    targets: Iterable[TopicPartition],
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    commit: bool,
    transaction_version: int = 0,
) -> dict[TopicPartition, ErrorCode]:
    """:func:`write_marker` on every partition of ``targets`` at once; each partition's error code. A caller
    cancelled meanwhile (a coordinator stopping) leaves the markers to finish on their own, as a produce's appends
    do: an append cancelled half way would leave its stream unwritable."""
    chosen = list(dict.fromkeys(targets))
    tasks = [
        asyncio.ensure_future(
            write_marker(
                partitions,
                groups,
                topic=topic,
                partition=partition,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                commit=commit,
                transaction_version=transaction_version,
            )
        )
        for topic, partition in chosen
    ]
    if tasks:
        await asyncio.wait(tasks)
    codes: dict[TopicPartition, ErrorCode] = {}
    for (topic, partition), task in zip(chosen, tasks, strict=True):
        failure = task.exception()
        codes[(topic, partition)] = (
            task.result()
            if failure is None
            else error_code_logged(failure, logger, "writing a marker on %s-%d failed", topic, partition)
        )
    return codes
