"""The KIP-932 membership requests at the coordinator: ShareGroupHeartbeat and ShareGroupDescribe.

Each checks the coordinator, finds or creates the share group, hands the heartbeat to the sans-I/O
:class:`broker.groups.share.group.ShareGroup` with the wall clock and the cluster's topics (the same view consumer
groups use, :meth:`ConsumerMembership.cluster_topics`), and answers once what the heartbeat changed is durable in
``__consumer_offsets``, so a coordinator that fails over continues at the epochs members were told. Session
time-outs run on the runtime's per-group timer like every group's. A group id names one group: a share heartbeat
for a classic or consumer group's id answers GROUP_ID_NOT_FOUND, as Kafka does (no conversion between share and
other groups exists). A group's own ``share.session.timeout.ms`` and ``share.heartbeat.interval.ms`` (GROUP configs)
apply from its next heartbeat.

It also answers what the share offset admin APIs ask of the membership (``broker.share.offsets_admin``'s
``ShareGroupStates``): whether a share group exists and has members, making one that does not exist yet, empty
(AlterShareGroupOffsets before first use), and which topics its share state covers.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Literal

from kio.schema.errors import ErrorCode

from broker.groups.consumer_membership import ConsumerMembership
from broker.groups.share.group import ShareGroup, ShareHeartbeat, ShareHeartbeatResult, ShareMembershipConfig
from broker.groups.share.member import JOIN_EPOCH
from metadata.group_configs import share_group_config
from wire.errors import KafkaError

#: Whether a share group has members, as the offset admin APIs ask (``broker.share.offsets_admin.GroupState``).
ShareGroupState = Literal["empty", "non-empty"]


class ShareMembership(ConsumerMembership):
    """The share group requests of :class:`broker.groups.coordinator.GroupCoordinator`."""

    async def share_group_heartbeat(self, group_id: str, request: ShareHeartbeat) -> ShareHeartbeatResult:
        group, error = self._any_group_or_error(group_id)
        if error is not ErrorCode.none:
            return ShareHeartbeatResult(error, member_id=request.member_id)
        if group is not None and not isinstance(group, ShareGroup):
            return ShareHeartbeatResult(
                ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.", member_id=request.member_id
            )
        if group is None:
            if request.member_epoch != JOIN_EPOCH:
                return ShareHeartbeatResult(
                    ErrorCode.group_id_not_found, f"Share group {group_id} not found.", member_id=request.member_id
                )
            group = self._groups[group_id] = ShareGroup(group_id, self.share_config, self._now_ms())
        group.config = self._share_group_config(group_id)
        result = group.heartbeat(self._now_ms(), request, self.cluster_topics())
        stored = await self._write_share_changes(group, group.take_changes())
        if stored is not ErrorCode.none:
            result = ShareHeartbeatResult(stored, member_id=request.member_id)
        if self._groups.get(group_id) is group:
            self._after(group)
        return result

    def _share_group_config(self, group_id: str) -> ShareMembershipConfig:
        """The broker's share group config with the group's own session time-out and heartbeat interval."""
        own = share_group_config(self._context.controller.image, self.share_settings, group_id)
        base = self.share_config
        if (own.session_timeout_ms, own.heartbeat_interval_ms) == (base.session_timeout_ms, base.heartbeat_interval_ms):
            return base
        return replace(base, session_timeout_ms=own.session_timeout_ms, heartbeat_interval_ms=own.heartbeat_interval_ms)

    def describe_share_group(self, group_id: str) -> tuple[ErrorCode, str | None, ShareGroup | None]:
        """(error, message, group) for ShareGroupDescribe: GROUP_ID_NOT_FOUND for an unknown group or one of
        another type, as Kafka answers."""
        group, error = self._any_group_or_error(group_id)
        if error is not ErrorCode.none:
            return error, None, None
        if group is None or group.dead:
            return ErrorCode.group_id_not_found, f"Group {group_id} not found.", None
        if not isinstance(group, ShareGroup):
            return ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.", None
        return ErrorCode.none, None, group

    # ------------------------------------------------------------------------------------------------ offset admin

    def _share_group(self, group_id: str) -> ShareGroup | None:
        """The share group ``group_id`` names, None if no share group has it; KafkaError when this broker cannot
        answer for it (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, INVALID_GROUP_ID)."""
        group, error = self._any_group_or_error(group_id)
        if error is not ErrorCode.none:
            raise KafkaError(error, f"group {group_id}: {error.name}")
        return group if isinstance(group, ShareGroup) and not group.dead else None

    def share_group_state(self, group_id: str) -> ShareGroupState | None:
        group = self._share_group(group_id)
        if group is None:
            return None
        return "empty" if group.is_empty else "non-empty"

    async def ensure_share_group(self, group_id: str) -> ShareGroupState | None:
        """As :meth:`share_group_state`; a group id no group has yet becomes an empty share group, persisted before
        this returns (Kafka 4.2 lets AlterShareGroupOffsets set a group's offsets before its first use)."""
        state = self.share_group_state(group_id)
        if state is not None or self._groups.get(group_id) is not None:
            return state
        group = self._groups[group_id] = ShareGroup(group_id, self.share_config, self._now_ms())
        group.keep()
        stored = await self._write_share_changes(group, group.take_changes())
        if stored is not ErrorCode.none:
            if self._groups.get(group_id) is group:
                del self._groups[group_id]
            raise KafkaError(stored, f"share group {group_id} could not be stored")
        return "empty"

    def share_group_topics(self, group_id: str) -> Collection[str]:
        """The topics the group's share state may cover: every topic its members were ever assigned partitions
        of (Kafka's initialized topics), and those its members subscribe to."""
        group = self._share_group(group_id)
        return sorted(group.topics()) if group is not None else []
