"""The KIP-848 requests at the coordinator: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Each checks the coordinator, finds or creates the group, hands the heartbeat to the sans-I/O
:class:`broker.groups.consumer.group.ConsumerGroup` with the wall clock and the cluster's topics, and answers once
what the heartbeat changed is durable in ``__consumer_offsets`` (so a coordinator that fails over never forgets an
epoch a member was told). A group id names one group: an *empty* classic group (one that only has committed
offsets) becomes a consumer group when its first member joins with the new protocol, keeping its offsets, as in
Kafka; a classic group with members is not a consumer group and answers GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from broker.groups.classic.group import Group
from broker.groups.consumer.assignment import TopicMetadata
from broker.groups.consumer.cluster_topics import ClusterTopics
from broker.groups.consumer.group import ConsumerGroup, HeartbeatRequest, HeartbeatResult
from broker.groups.consumer.member import JOIN_EPOCH
from broker.groups.offsets_schema import encode_group_key
from broker.groups.runtime import CoordinatorRuntime
from metadata.image import MetadataImage
from wire.record_batch import Record

logger = logging.getLogger(__name__)


def cluster_topics(image: MetadataImage) -> ClusterTopics:
    """The topics of a metadata image as consumer groups see them: partition counts, and each partition's rack
    (the rack of the broker leading it; Fjord does not replicate partitions between brokers)."""
    by_name: dict[str, TopicMetadata] = {}
    for name, topic in image.topics_by_name.items():
        racks: dict[int, frozenset[str]] = {}
        for index, partition in topic.partitions.items():
            broker = image.brokers.get(partition.leader)
            if broker is not None and broker.rack:
                racks[index] = frozenset((broker.rack,))
        by_name[name] = TopicMetadata(topic.topic_id, name, len(topic.partitions), racks)
    visible = frozenset(name for name in by_name if not name.startswith("__"))
    return ClusterTopics(by_name, visible)


class ConsumerMembership(CoordinatorRuntime):
    """The KIP-848 membership requests of :class:`broker.groups.coordinator.GroupCoordinator`."""

    _topics_seen: tuple[object, object] | None = None
    _topics_view: ClusterTopics | None = None

    def cluster_topics(self) -> ClusterTopics:
        """The current image's topics, rebuilt only when its topics or brokers changed (images are immutable)."""
        image = self._context.controller.image
        seen = self._topics_seen
        if (
            self._topics_view is None
            or seen is None
            or seen[0] is not image.topics_by_name
            or seen[1] is not image.brokers
        ):
            self._topics_view = cluster_topics(image)
            self._topics_seen = (image.topics_by_name, image.brokers)
        return self._topics_view

    async def consumer_group_heartbeat(self, group_id: str, request: HeartbeatRequest) -> HeartbeatResult:
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return HeartbeatResult(error, member_id=request.member_id)
        if isinstance(group, Group):
            converted = await self._convert_empty_classic(group, request)
            if isinstance(converted, HeartbeatResult):
                return converted
            group = converted
        if group is None:
            if request.member_epoch != JOIN_EPOCH:
                return HeartbeatResult(
                    ErrorCode.group_id_not_found, f"consumer group {group_id} not found", member_id=request.member_id
                )
            group = self._groups[group_id] = ConsumerGroup(group_id, self.consumer_config, self._now_ms())
        result = group.heartbeat(self._now_ms(), request, self.cluster_topics())
        changes = group.take_changes()
        if changes:
            write = asyncio.ensure_future(self._persist_consumer_group(group, changes))
            self._consumer_writes[group_id] = write
            stored = await asyncio.shield(write)
            if stored is not ErrorCode.none:
                result = HeartbeatResult(stored, member_id=request.member_id)
        else:
            # Nothing new to write, but the answer may rest on a state another heartbeat is still writing: it is
            # sent only once that is durable, so no member is told an epoch a failover could forget.
            pending = self._consumer_writes.get(group_id)
            if pending is not None and not pending.done():
                await asyncio.shield(pending)
        if self._consumer_writes.get(group_id) is not None and self._consumer_writes[group_id].done():
            del self._consumer_writes[group_id]
        if self._groups.get(group_id) is group:
            self._after(group)
        return result

    async def _convert_empty_classic(self, group: Group, request: HeartbeatRequest) -> ConsumerGroup | HeartbeatResult:
        """An empty classic group (offsets only) becomes a consumer group on its first new-protocol join."""
        if not group.is_empty or group.pending_txn_offsets or request.member_epoch != JOIN_EPOCH:
            return HeartbeatResult(
                ErrorCode.group_id_not_found,
                f"group {group.group_id} is not a consumer group",
                member_id=request.member_id,
            )
        now = self._now_ms()
        converted = ConsumerGroup(group.group_id, self.consumer_config, now)
        converted.offsets = group.offsets
        self._cancel_timer(group.group_id)
        self._groups[group.group_id] = converted
        if group.generation_id > 0 or group.protocol_type is not None:
            # The classic group's metadata record goes, as Kafka writes it when it converts an empty group.
            try:
                await self._append(
                    group.group_id, [Record(key=encode_group_key(group.group_id), value=None, timestamp=now)]
                )
            except Exception as exc:
                logger.warning("group %s: converting to a consumer group failed: %s", group.group_id, exc)
                self._groups[group.group_id] = group
                return HeartbeatResult(self._partitions.store_error(exc, group.group_id), member_id=request.member_id)
        logger.info("group %s: the empty classic group becomes a consumer group", group.group_id)
        return converted

    def describe_consumer_group(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        """(error, message, group) for ConsumerGroupDescribe: GROUP_ID_NOT_FOUND for an unknown group or one of
        another type, as Kafka answers."""
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return error, None, None
        if group is None or group.dead:
            return ErrorCode.group_id_not_found, f"group {group_id} not found", None
        if not isinstance(group, ConsumerGroup):
            return ErrorCode.group_id_not_found, f"group {group_id} is not a consumer group", None
        return ErrorCode.none, None, group
