"""Reaching the share-partition state of a group on each partition's leader: the broker-to-broker half of the
share-group offset admin APIs.

Kafka keeps share-partition state in ``__share_group_state`` behind a share coordinator; in Fjord it lives with the
partition (its share stream), so the leader of a partition is the one broker that can read or change it. The group
coordinator answering DescribeShareGroupOffsets, AlterShareGroupOffsets or DeleteShareGroupOffsets therefore asks
each partition's leader, with Kafka's own internal requests: ReadShareGroupStateSummary (87),
InitializeShareGroupState (83, the start offset reset) and DeleteShareGroupState (86), one per leader, all leaders
at once, over ``broker.transactions.peers`` as the transaction coordinator sends its markers; a partition this
broker leads is served in-process. The leader answers them from its ``SharePartitions`` (:class:`ShareStateStore`,
the names of the share plan) in :meth:`ShareStateAccess.answer_summary` and its two siblings. Lag needs the
partition's high watermark, which a remote leader gives through ListOffsets (latest), as Kafka's coordinator asks.

Nothing here retries: an operator's request gets the partition's error (COORDINATOR_NOT_AVAILABLE when the leader
cannot be reached) and asks again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from broker.broker_context import BrokerContext
from broker.partition.manager import PartitionManager
from broker.transactions.peers import Peers
from wire import codec, schema
from wire.errors import KafkaError
from wire.log_text import untrusted

logger = logging.getLogger(__name__)

INITIALIZE_SHARE_GROUP_STATE_KEY: Final = 83
DELETE_SHARE_GROUP_STATE_KEY: Final = 86
READ_SHARE_GROUP_STATE_SUMMARY_KEY: Final = 87
LIST_OFFSETS_KEY: Final = 2
_LIST_OFFSETS_VERSION: Final = 7
_LATEST_TIMESTAMP: Final = -1
#: The versions one Fjord broker sends another (both serve them: ``wire.api_versions``).
_VERSIONS: Final = {INITIALIZE_SHARE_GROUP_STATE_KEY: 0, DELETE_SHARE_GROUP_STATE_KEY: 0,
                    READ_SHARE_GROUP_STATE_SUMMARY_KEY: 1}
#: What a partition whose leader could not be reached (or that has none) is answered with.
UNREACHABLE: Final = ErrorCode.coordinator_not_available

TopicPartition = tuple[str, int]
StateSummary = tuple[int, int, int, int]
T = TypeVar("T")


class ShareStateStore(Protocol):
    """What this module uses of a broker's ``broker.share.registry.SharePartitions`` (the share plan's names):
    the share-partition state of a group on a partition this broker leads. Each raises ``KafkaError``
    (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_ID, ...) when it cannot answer."""

    async def summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> StateSummary | None:
        """(start offset, state epoch, leader epoch, delivery-complete count), or None when the group has no state
        on the partition. The count is Kafka 4.2's: the offsets at or past the start offset already acknowledged or
        archived, which lag leaves out (KIP-1226)."""
        ...

    async def reset(self, group_id: str, topic_id: uuid.UUID, partition: int, start_offset: int) -> None: ...

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Summary:
    """One partition's answer to a summary: start offset -1 when the group has no state there."""

    error: ErrorCode = ErrorCode.none
    start_offset: int = -1
    state_epoch: int = 0
    #: Kafka's PartitionFactory.DEFAULT_LEADER_EPOCH where there is no state.
    leader_epoch: int = 0
    #: The partition's high watermark (-1: unknown), for lag.
    high_watermark: int = -1
    #: Offsets at or past the start offset whose delivery is complete (-1: not known).
    delivery_complete_count: int = -1

    @property
    def lag(self) -> int:
        """Records between the share-partition start offset and the high watermark not yet delivered for good (as
        Kafka 4.2 computes it: high watermark - start offset - delivery-complete count); -1 when unknown."""
        if self.error is not ErrorCode.none or self.start_offset < 0 or self.high_watermark < 0:
            return -1
        return max(0, self.high_watermark - self.start_offset - max(0, self.delivery_complete_count))


class ShareStateAccess:
    """Routes a group's share-state reads and changes to each partition's leader, and answers them as a leader."""

    def __init__(
        self,
        context: BrokerContext,
        partitions: PartitionManager,
        peers: Peers,
        store: ShareStateStore | None = None,
    ) -> None:
        self._context = context
        self._partitions = partitions
        self._peers = peers
        #: The broker's SharePartitions; None until share partitions exist on this broker (every answer is then
        #: COORDINATOR_NOT_AVAILABLE).
        self.store = store

    # -- as the group coordinator ---------------------------------------------------------------------------------

    async def summaries(self, group_id: str, wanted: Iterable[TopicPartition]) -> dict[TopicPartition, Summary]:
        """Each partition's start offset and epochs, and its high watermark; partitions are known topics'."""

        async def local(tps: list[TopicPartition]) -> dict[TopicPartition, Summary]:
            found = {tp: await self.answer_summary(group_id, self._topic_id(tp[0]), tp[1]) for tp in tps}
            return {tp: _with_hw(s, self._local_hw(tp)) for tp, s in found.items()}

        async def remote(leader: int, tps: list[TopicPartition]) -> dict[TopicPartition, Summary]:
            results = await self._remote_state(leader, READ_SHARE_GROUP_STATE_SUMMARY_KEY, group_id,
                                               [(tp, {"leader_epoch": -1}) for tp in tps])
            watermarks = await self._remote_hws(leader, tps)
            summaries: dict[TopicPartition, Summary] = {}
            for tp in tps:
                part = results.get(tp)
                if part is None:
                    summaries[tp] = Summary(error=UNREACHABLE)
                elif part.error_code != ErrorCode.none:
                    summaries[tp] = Summary(error=ErrorCode(part.error_code))
                else:
                    summaries[tp] = Summary(start_offset=part.start_offset, state_epoch=part.state_epoch,
                                            leader_epoch=part.leader_epoch, high_watermark=watermarks.get(tp, -1),
                                            delivery_complete_count=part.delivery_complete_count)
            return summaries

        return await self._by_leader(list(wanted), local, remote, lambda: Summary(error=UNREACHABLE))

    async def resets(self, group_id: str, wanted: dict[TopicPartition, int]) -> dict[TopicPartition, ErrorCode]:
        """Sets each partition's start offset (the group must be empty: the caller checked)."""

        async def local(tps: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
            return {tp: await self.answer_reset(group_id, self._topic_id(tp[0]), tp[1], wanted[tp]) for tp in tps}

        async def remote(leader: int, tps: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
            results = await self._remote_state(leader, INITIALIZE_SHARE_GROUP_STATE_KEY, group_id,
                                               [(tp, {"state_epoch": 0, "start_offset": wanted[tp]}) for tp in tps])
            return {tp: ErrorCode(results[tp].error_code) if tp in results else UNREACHABLE for tp in tps}

        return await self._by_leader(list(wanted), local, remote, lambda: UNREACHABLE)

    async def deletes(self, group_id: str, wanted: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Drops the group's state on each partition."""

        async def local(tps: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
            return {tp: await self.answer_delete(group_id, self._topic_id(tp[0]), tp[1]) for tp in tps}

        async def remote(leader: int, tps: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
            results = await self._remote_state(leader, DELETE_SHARE_GROUP_STATE_KEY, group_id,
                                               [(tp, {}) for tp in tps])
            return {tp: ErrorCode(results[tp].error_code) if tp in results else UNREACHABLE for tp in tps}

        return await self._by_leader(list(wanted), local, remote, lambda: UNREACHABLE)

    # -- as a partition's leader (the internal APIs' handlers, and the coordinator for partitions led here) ------

    async def answer_summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> Summary:
        store = self._store_for(topic_id, partition)
        if isinstance(store, ErrorCode):
            return Summary(error=store)
        try:
            found = await store.summary(group_id, topic_id, partition)
        except KafkaError as exc:
            return Summary(error=exc.code)
        if found is None:
            return Summary()
        start, state_epoch, leader_epoch, complete = found
        return Summary(start_offset=start, state_epoch=state_epoch, leader_epoch=leader_epoch,
                       delivery_complete_count=complete)

    async def answer_reset(self, group_id: str, topic_id: uuid.UUID, partition: int, start_offset: int) -> ErrorCode:
        if start_offset < 0:
            return ErrorCode.invalid_request
        store = self._store_for(topic_id, partition)
        if isinstance(store, ErrorCode):
            return store
        return await _code_of(store.reset(group_id, topic_id, partition, start_offset))

    async def answer_delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> ErrorCode:
        store = self._store_for(topic_id, partition)
        if isinstance(store, ErrorCode):
            return store
        return await _code_of(store.delete(group_id, topic_id, partition))

    def _store_for(self, topic_id: uuid.UUID, partition: int) -> ShareStateStore | ErrorCode:
        """The store, or the code answering a partition this broker cannot answer for."""
        topic = self._context.controller.image.topics_by_id.get(topic_id)
        if topic is None or partition not in topic.partitions:
            return ErrorCode.unknown_topic_or_partition
        if self._partitions.get_by_id(topic_id, partition) is None:
            return ErrorCode.not_leader_or_follower
        if self.store is None:
            return UNREACHABLE
        return self.store

    # -- routing --------------------------------------------------------------------------------------------------

    def _topic_id(self, topic: str) -> uuid.UUID:
        image = self._context.controller.image.topics_by_name.get(topic)
        return uuid.UUID(int=0) if image is None else image.topic_id

    def _local_hw(self, tp: TopicPartition) -> int:
        log = self._partitions.get(*tp)
        return -1 if log is None else log.high_watermark

    async def _by_leader(
        self,
        wanted: list[TopicPartition],
        local: Callable[[list[TopicPartition]], Awaitable[dict[TopicPartition, T]]],
        remote: Callable[[int, list[TopicPartition]], Awaitable[dict[TopicPartition, T]]],
        leaderless: Callable[[], T],
    ) -> dict[TopicPartition, T]:
        image = self._context.controller.image
        by_leader: dict[int, list[TopicPartition]] = {}
        results: dict[TopicPartition, T] = {}
        for tp in wanted:
            part = image.partition(*tp)
            if part is None or part.leader < 0:
                results[tp] = leaderless()
            else:
                by_leader.setdefault(part.leader, []).append(tp)
        rounds = [
            local(tps) if leader == self._context.node_id else remote(leader, tps)
            for leader, tps in by_leader.items()
        ]
        for answered in await asyncio.gather(*rounds):
            results.update(answered)
        return results

    async def _remote_state(
        self, leader: int, api_key: int, group_id: str, partitions: list[tuple[TopicPartition, dict[str, object]]]
    ) -> dict[TopicPartition, Any]:
        """One internal request to ``leader``; its per-partition results ({} when the leader was not reached)."""
        request_cls = codec.request_class(api_key, _VERSIONS[api_key])
        topic_cls = schema.field_entity(request_cls, "topics")
        ids: dict[str, uuid.UUID] = {}
        by_topic: dict[uuid.UUID, list[Any]] = {}
        for (topic, index), fields in partitions:
            topic_id = ids.setdefault(topic, self._topic_id(topic))
            by_topic.setdefault(topic_id, []).append(
                schema.build_nested(topic_cls, "partitions", partition=index, **fields)
            )
        request = schema.build(
            request_cls,
            group_id=group_id,
            topics=tuple(schema.build(topic_cls, topic_id=t, partitions=tuple(p)) for t, p in by_topic.items()),
        )
        try:
            response = await self._peers.request(leader, request)
        except (ConnectionError, TimeoutError, codec.ProtocolError) as exc:
            logger.info(
                "%s to broker %d for share group '%s' failed: %s",
                type(request).__name__, leader, untrusted(group_id), exc,
            )
            return {}
        names = {topic_id: name for name, topic_id in ids.items()}
        return {
            (names[result.topic_id], part.partition): part
            for result in response.results
            if result.topic_id in names
            for part in result.partitions
        }

    async def _remote_hws(self, leader: int, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermarks of partitions ``leader`` leads (ListOffsets latest, read_uncommitted)."""
        request_cls = codec.request_class(LIST_OFFSETS_KEY, _LIST_OFFSETS_VERSION)
        topic_cls = schema.field_entity(request_cls, "topics")
        by_topic: dict[str, list[int]] = {}
        for topic, index in tps:
            by_topic.setdefault(topic, []).append(index)
        request = schema.build(
            request_cls,
            replica_id=-1,
            isolation_level=0,
            topics=tuple(
                schema.build(
                    topic_cls,
                    name=topic,
                    partitions=tuple(
                        schema.build_nested(topic_cls, "partitions", partition_index=p, current_leader_epoch=-1,
                                            timestamp=_LATEST_TIMESTAMP)
                        for p in parts
                    ),
                )
                for topic, parts in by_topic.items()
            ),
        )
        try:
            response = await self._peers.request(leader, request)
        except (ConnectionError, TimeoutError, codec.ProtocolError) as exc:
            logger.info("ListOffsets to broker %d failed: %s", leader, exc)
            return {}
        return {
            (topic.name, part.partition_index): part.offset
            for topic in response.topics
            for part in topic.partitions
            if part.error_code == ErrorCode.none
        }


def _with_hw(summary: Summary, high_watermark: int) -> Summary:
    return dataclasses.replace(summary, high_watermark=high_watermark)


async def _code_of(change: Awaitable[None]) -> ErrorCode:
    try:
        await change
    except KafkaError as exc:
        return exc.code
    return ErrorCode.none
