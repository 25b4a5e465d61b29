"""The KIP-848 requests at the coordinator: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Each checks the coordinator, finds or creates the group, hands the heartbeat to the sans-I/O
:class:`broker.groups.consumer.group.ConsumerGroup` with the wall clock and the cluster's topics, and answers once
what the heartbeat changed is durable in ``__consumer_offsets`` (so a coordinator that fails over never forgets an
epoch a member was told). A group id names one group: a classic group becomes a consumer group when a member
joins it with the new protocol, keeping its offsets, as in Kafka: an empty one (offsets only) always, one with
members (which stay, as classic members) when ``group.consumer.migration.policy`` allows the online upgrade
(:mod:`broker.groups.conversions`); otherwise it answers GROUP_ID_NOT_FOUND. A group's own
``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms`` (GROUP configs) apply from its next heartbeat.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final

from kio.schema.errors import ErrorCode

from broker.groups.classic.group import Group
from broker.groups.consumer.assignment import TopicMetadata
from broker.groups.consumer.changes import Change
from broker.groups.consumer.cluster_topics import ClusterTopics
from broker.groups.consumer.group import ConsumerGroup, ConsumerGroupConfig, HeartbeatRequest, HeartbeatResult
from broker.groups.consumer.member import JOIN_EPOCH
from broker.groups.conversions import Upgrade, upgrade_refusal, upgraded
from broker.groups.offsets_schema import encode_group_key
from broker.groups.runtime import CoordinatorRuntime
from metadata.group_configs import consumer_group_config
from metadata.image import MetadataImage
from wire.log_text import untrusted
from wire.record_batch import Record

logger = logging.getLogger(__name__)

#: The principals whose views of the topics are kept at once (a view is rebuilt when the topics or ACLs change).
_MAX_AUDIENCES: Final = 1024
#: The groups whose last heartbeat's audience is kept (forgetting one costs one more resolution of its regexes).
_MAX_GROUP_AUDIENCES: Final = 65536


@dataclass(frozen=True, slots=True)
class Audience:
    """Who heartbeats, as far as the topics its regex may match go: ``key`` tells principals (and hosts) apart,
    ``describable`` is its TOPIC DESCRIBE."""

    key: object
    describable: Callable[[str], bool]


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
    #: Each principal's view of the topics for regex subscriptions (an authorizer is configured), valid for one
    #: view of the topics and one set of ACLs (``_audience_of``).
    _audience_views: dict[object, ClusterTopics] | None = None
    _audience_of: tuple[object, object, object] | None = None
    #: The audience of each consumer group's last heartbeat.
    _audiences: dict[str, Audience] | None = None

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

    def _topics_for(self, audience: Audience | None, group_id: str) -> ClusterTopics:
        """The topics as ``audience`` (a principal, with an authorizer configured) may see them through a regex;
        without one (a classic member's JoinGroup or SyncGroup in a consumer group), as the group's last heartbeat
        saw them, so that a classic member's request does not resolve the group's regexes again."""
        topics = self.cluster_topics()
        audiences = self._audiences if self._audiences is not None else {}
        self._audiences = audiences
        if audience is None:
            audience = audiences.get(group_id)
            if audience is None:
                return topics
        else:
            if len(audiences) >= _MAX_GROUP_AUDIENCES:
                audiences.clear()
            audiences[group_id] = audience
        acls = self._context.controller.image.acls
        seen = self._audience_of
        if self._audience_views is None or seen is None or seen[0] is not topics or seen[1] is not acls:
            self._audience_views = {}
            self._audience_of = (topics, acls, object())
        views = self._audience_views
        generation = self._audience_of[2] if self._audience_of is not None else None
        view = views.get(audience.key)
        if view is None:
            if len(views) >= _MAX_AUDIENCES:
                views.clear()
            view = views[audience.key] = topics.describable_by(audience.describable, generation)
        return view

    def _group_config(self, group_id: str) -> ConsumerGroupConfig:
        """The broker's consumer group config with the group's own session time-out and heartbeat interval."""
        own = consumer_group_config(self._context.controller.image, self.consumer_settings, group_id)
        base = self.consumer_config
        if (own.session_timeout_ms, own.heartbeat_interval_ms) == (base.session_timeout_ms, base.heartbeat_interval_ms):
            return base
        return replace(base, session_timeout_ms=own.session_timeout_ms, heartbeat_interval_ms=own.heartbeat_interval_ms)

    async def consumer_group_heartbeat(
        self, group_id: str, request: HeartbeatRequest, audience: Audience | None = None
    ) -> HeartbeatResult:
        """``audience``: the heartbeating principal, when an authorizer is configured: the topics its regex
        subscriptions match are those it may DESCRIBE."""
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return HeartbeatResult(error, member_id=request.member_id)
        classic, conversion = None, None
        if isinstance(group, Group):
            classic, conversion = group, self._converted(group, request)
            if isinstance(conversion, HeartbeatResult):
                return conversion
            group = conversion.group
        if group is None:
            if request.member_epoch != JOIN_EPOCH:
                return HeartbeatResult(
                    ErrorCode.group_id_not_found, f"consumer group {group_id} not found", member_id=request.member_id
                )
            group = self._groups[group_id] = ConsumerGroup(group_id, self.consumer_config, self._now_ms())
        group.config = self._group_config(group_id)
        result = group.heartbeat(self._now_ms(), request, self._topics_for(audience, group_id))
        records: list[Record] = []
        changes: list[Change] = []
        if classic is not None and isinstance(conversion, Upgrade):
            if result.error is not ErrorCode.none:
                return result  # as in Kafka, a join that fails leaves the classic group as it was
            records, changes = self._install_conversion(classic, conversion)
        changes.extend(group.take_changes())
        stored = await self._write_consumer_changes(group, changes, records)
        if stored is not ErrorCode.none:
            result = HeartbeatResult(stored, member_id=request.member_id)
        if self._groups.get(group_id) is group:
            self._after(group)
        return result

    def _converted(self, group: Group, request: HeartbeatRequest) -> Upgrade | HeartbeatResult:
        """The consumer group a classic group becomes on a ConsumerGroupHeartbeat join: an empty one (offsets
        only) always, one with members when ``group.consumer.migration.policy`` allows the upgrade
        (:mod:`broker.groups.conversions`); otherwise GROUP_ID_NOT_FOUND, as Kafka answers."""
        now = self._now_ms()
        refusal = f"group {group.group_id} is not a consumer group"
        if request.member_epoch == JOIN_EPOCH and group.is_empty:
            if not group.pending_txn_offsets:
                converted = ConsumerGroup(group.group_id, self.consumer_config, now)
                converted.offsets = group.offsets
                return Upgrade(converted, [])
        elif request.member_epoch == JOIN_EPOCH and not self.consumer_settings.upgrade_allowed:
            refusal = f"cannot upgrade classic group {group.group_id}: group.consumer.migration.policy forbids it"
        elif request.member_epoch == JOIN_EPOCH:
            why = upgrade_refusal(group, self.consumer_config.max_size)
            upgrade = why or upgraded(group, self.consumer_config, now, self.cluster_topics())
            if isinstance(upgrade, Upgrade):
                return upgrade
            refusal = f"cannot upgrade classic group {group.group_id}: {upgrade}"
        return HeartbeatResult(ErrorCode.group_id_not_found, refusal, member_id=request.member_id)

    def _install_conversion(self, classic: Group, upgrade: Upgrade) -> tuple[list[Record], list[Change]]:
        """Puts the converted group in the classic one's place; (the classic group's tombstone if it ever wrote a
        record, the new group's records). Requests parked on the classic group's rebalance learn it is over."""
        group_id = classic.group_id
        self._cancel_timer(group_id)
        self._groups[group_id] = upgrade.group
        classic.mark_dead(self._now_ms(), ErrorCode.rebalance_in_progress)
        logger.info(
            "group %s: the classic group (%d members) becomes a consumer group",
            untrusted(group_id), len(classic.members),
        )
        records = []
        if classic.generation_id > 0 or classic.protocol_type is not None:
            records.append(Record(key=encode_group_key(group_id), value=None, timestamp=self._now_ms()))
        return records, list(upgrade.changes)

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
