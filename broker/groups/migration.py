"""KIP-848's online migration at the coordinator: classic members' requests to a consumer group, and the
downgrade back to a classic group.

During a rolling upgrade (or its rollback) one group holds members of both protocols. A JoinGroup, SyncGroup,
Heartbeat or LeaveGroup reaching a consumer group is served by :mod:`broker.groups.consumer.classic_members` (a
JoinGroup answered once what it changed is durable, as a ConsumerGroupHeartbeat is), unless
``group.consumer.migration.policy`` is ``disabled``, which refuses classic members with INCONSISTENT_GROUP_PROTOCOL
as before. When the last member speaking the consumer protocol goes (it leaves, or its session or revocation
time-out fences it) and only classic members remain, the group becomes a classic group again if the policy allows
the downgrade (:func:`broker.groups.conversions.downgraded`): the consumer group's records are tombstoned, the
classic group's written, and a rebalance starts. The upgrade itself happens on a ConsumerGroupHeartbeat join
(:mod:`broker.groups.consumer_membership`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from broker.groups.classic.group import Group, JoinRequest
from broker.groups.classic.state import JoinResult, SyncResult
from broker.groups.consumer import classic_members
from broker.groups.consumer.changes import Change
from broker.groups.consumer.group import ConsumerGroup
from broker.groups.consumer_membership import ConsumerMembership
from broker.groups.consumer_persistence import encode_changes
from broker.groups.conversions import downgradable, downgraded, tombstones
from broker.groups.offsets_schema import encode_group_key, encode_group_value
from wire.log_text import untrusted
from wire.record_batch import Record
from wire.stored_schema import SchemaError

logger = logging.getLogger(__name__)


class GroupMigration(ConsumerMembership):
    """Classic members in consumer groups, and the downgrade (module docstring)."""

    async def _join_consumer_group(self, group: ConsumerGroup, request: JoinRequest) -> JoinResult:
        if not self.consumer_settings.classic_joins_allowed:
            return JoinResult(ErrorCode.inconsistent_group_protocol, request.member_id)
        result = classic_members.join(group, self._now_ms(), request, self._topics_for(None, group.group_id))
        stored = await self._write_consumer_changes(group, group.take_changes())
        if stored is not ErrorCode.none:
            result = JoinResult(stored, request.member_id)
        if self._groups.get(group.group_id) is group:
            self._after(group)
        return result

    async def _sync_consumer_group(
        self,
        group: ConsumerGroup,
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        result = classic_members.sync(
            group,
            self._now_ms(),
            member_id=member_id,
            instance_id=group_instance_id,
            generation_id=generation_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            topics=self._topics_for(None, group.group_id),
        )
        # The assignment may rest on a state still being written: answered once it is durable.
        await self._write_consumer_changes(group, group.take_changes())
        if self._groups.get(group.group_id) is group:
            self._after(group)
        return result

    def _heartbeat_consumer_group(
        self, group: ConsumerGroup, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        error = classic_members.heartbeat(group, self._now_ms(), member_id, group_instance_id, generation_id)
        self._after(group)
        return error

    def _leave_consumer_group(self, group: ConsumerGroup, members: Sequence[tuple[str, str | None]]) -> list[ErrorCode]:
        now = self._now_ms()
        results = [classic_members.leave(group, now, member_id, instance_id) for member_id, instance_id in members]
        self._after(group)
        return results

    def _downgraded(self, group: ConsumerGroup, changes: list[Change]) -> bool:
        """Converts a consumer group left with classic members only, when the policy allows (module docstring);
        its pending ``changes``, its tombstones and the classic group's record are written in one batch."""
        if not self.consumer_settings.downgrade_allowed or self._groups.get(group.group_id) is not group:
            return False
        if not downgradable(group, self.config.max_size):
            return False
        now = self._now_ms()
        classic = downgraded(group, self.config, now, self.cluster_topics())
        try:
            encoded = encode_changes(group.group_id, [*changes, *tombstones(group)])
        except SchemaError:
            return False
        records = [Record(key=key, value=value, timestamp=now) for key, value in encoded]
        records.append(
            Record(key=encode_group_key(group.group_id), value=encode_group_value(classic.snapshot(now)), timestamp=now)
        )
        group.mark_dead(now, ErrorCode.not_coordinator)
        self._cancel_timer(group.group_id)
        self._groups[group.group_id] = classic
        self._partitions.spawn(self._append_conversion(classic, records), name=f"downgrade {group.group_id}")
        logger.info(
            "group %s: the consumer group (%d classic members) becomes a classic group",
            untrusted(group.group_id),
            len(classic.members),
        )
        classic.rebalance(now, "the group was converted from a consumer group")
        self._after(classic)
        return True

    async def _append_conversion(self, classic: Group, records: Sequence[Record]) -> None:
        """Writes the conversion; when that fails, the classic group's next write carries the consumer group's
        tombstones (``_append_group``), or a reload would find the consumer group, not the classic one."""
        group_id = classic.group_id
        try:
            await self._append_group(group_id, records, self._whole_state(classic))
        except Exception as exc:
            logger.warning("group %s: writing its conversion to a classic group failed: %s", untrusted(group_id), exc)
