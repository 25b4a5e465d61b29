"""Writing a transaction's COMMIT/ABORT markers on every partition of it: Kafka's TransactionMarkerChannelManager.

Markers go to each partition's current leader: through ``markers.write_markers`` when that is this broker, as a
WriteTxnMarkers request (api 27) otherwise. A partition is done when its leader took the marker; retriable errors
(leader moved, partition still opening, peer unreachable, time-out) are retried with a growing back-off against the
metadata as it is then, until every partition is done or the coordinator lost the transaction (``still_valid``
turns false: a new coordinator finishes it). A partition whose topic was deleted counts as done, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from kio.schema.errors import ErrorCode

from broker.broker_context import BrokerContext
from broker.groups.coordinator import GroupCoordinator
from broker.partition.manager import PartitionManager
from broker.transactions.markers import write_markers
from broker.transactions.peers import Peers
from broker.transactions.state import TopicPartition
from wire import codec, schema
from wire.api_versions import WRITE_TXN_MARKERS_KEY
from wire.log_text import untrusted

logger = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 2
_BACKOFF_START_S = 0.05
_BACKOFF_MAX_S = 1.0

#: Kafka retries these (TransactionMarkerRequestCompletionHandler): the partition's leadership or storage is moving.
_RETRIABLE = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.network_exception,
    }
)
#: The marker's coordinator epoch or producer epoch is stale at the partition: a newer coordinator owns the id.
_FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})


class MarkerSender:
    def __init__(
        self, broker: BrokerContext, partitions: PartitionManager, groups: GroupCoordinator, peers: Peers
    ) -> None:
        self._context = broker
        self._partitions = partitions
        self._groups = groups
        self._peers = peers

    async def send(
        self,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: Iterable[TopicPartition],
        still_valid: Callable[[], bool],
        done: Callable[[TopicPartition], None],
        transaction_version: int = 0,
    ) -> bool:
        """True once every partition took its marker; False when abandoned (``still_valid`` false, or fenced).
        ``done`` is told of each partition as its marker is written (or its topic found deleted)."""
        remaining = set(partitions)
        what = "COMMIT" if commit else "ABORT"
        backoff = _BACKOFF_START_S
        while remaining:
            if not still_valid():
                return False
            image = self._context.controller.image
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                part = image.partition(*tp)
                if part is None:
                    logger.info(
                        "transactional id '%s': %s-%d no longer exists; no %s marker is written there",
                        untrusted(transactional_id),
                        tp[0],
                        tp[1],
                        what,
                    )
                    remaining.discard(tp)
                    done(tp)
                elif part.leader >= 0:
                    by_leader.setdefault(part.leader, []).append(tp)
            rounds = [
                self._write(leader, tps, producer_id, producer_epoch, coordinator_epoch=coordinator_epoch,
                            commit=commit, transaction_version=transaction_version)
                for leader, tps in by_leader.items()
            ]
            for results in await asyncio.gather(*rounds):
                for tp, error in results.items():
                    if error is ErrorCode.none:
                        remaining.discard(tp)
                        done(tp)
                    elif error in _FENCED:
                        logger.warning(
                            "transactional id '%s': %s marker for producer %d epoch %d refused by %s-%d (%s): a newer "
                            "coordinator owns it; stopping",
                            untrusted(transactional_id),
                            what,
                            producer_id,
                            producer_epoch,
                            tp[0],
                            tp[1],
                            error.name,
                        )
                        return False
                    elif error not in _RETRIABLE:
                        logger.error(
                            "transactional id '%s': %s marker on %s-%d failed with %s; retrying",
                            untrusted(transactional_id),
                            what,
                            tp[0],
                            tp[1],
                            error.name,
                        )
            if remaining:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
        return True

    async def _write(
        self,
        leader: int,
        partitions: list[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        *,
        coordinator_epoch: int,
        commit: bool,
        transaction_version: int,
    ) -> dict[TopicPartition, ErrorCode]:
        if leader == self._context.node_id:
            return await write_markers(
                self._partitions,
                self._groups,
                partitions,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                commit=commit,
                transaction_version=transaction_version,
            )
        return await self._write_remote(leader, partitions, producer_id, producer_epoch,
                                        coordinator_epoch=coordinator_epoch, commit=commit,
                                        transaction_version=transaction_version)

    async def _write_remote(
        self,
        leader: int,
        partitions: list[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        *,
        coordinator_epoch: int,
        commit: bool,
        transaction_version: int,
    ) -> dict[TopicPartition, ErrorCode]:
        request_cls = codec.request_class(WRITE_TXN_MARKERS_KEY, WRITE_TXN_MARKERS_VERSION)
        marker_cls = schema.field_entity(request_cls, "markers")
        topic_cls = schema.field_entity(marker_cls, "topics")
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        request = schema.build(
            request_cls,
            markers=(
                schema.build(
                    marker_cls,
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transaction_result=commit,
                    coordinator_epoch=coordinator_epoch,
                    transaction_version=transaction_version,
                    topics=tuple(
                        schema.build(topic_cls, name=name, partition_indexes=tuple(parts))
                        for name, parts in by_topic.items()
                    ),
                ),
            ),
        )
        try:
            response = await self._peers.request(leader, request)
        except (ConnectionError, TimeoutError, codec.ProtocolError) as exc:
            logger.info("WriteTxnMarkers to broker %d for producer %d failed: %s; retrying", leader, producer_id, exc)
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        results = dict.fromkeys(partitions, ErrorCode.unknown_server_error)
        for marker in response.markers:
            for topic in marker.topics:
                for part in topic.partitions:
                    if (topic.name, part.partition_index) in results:
                        results[(topic.name, part.partition_index)] = ErrorCode(part.error_code)
        return results
