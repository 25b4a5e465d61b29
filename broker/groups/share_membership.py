"""The KIP-932 membership requests at the coordinator: ShareGroupHeartbeat and ShareGroupDescribe.

Each checks the coordinator, finds or creates the share group, hands the heartbeat to the sans-I/O
:class:`broker.groups.share.group.ShareGroup` with the wall clock and the cluster's topics (the same view consumer
groups use, :meth:`ConsumerMembership.cluster_topics`), and answers once what the heartbeat changed is durable in
``__consumer_offsets``, so a coordinator that fails over continues at the epochs members were told. Session
time-outs run on the runtime's per-group timer like every group's. A group id names one group: a share heartbeat
for a classic or consumer group's id answers GROUP_ID_NOT_FOUND, as Kafka does (no conversion between share and
other groups exists).
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker.groups.consumer_membership import ConsumerMembership
from broker.groups.share.group import ShareGroup, ShareHeartbeat, ShareHeartbeatResult
from broker.groups.share.member import JOIN_EPOCH


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
        result = group.heartbeat(self._now_ms(), request, self.cluster_topics())
        stored = await self._write_share_changes(group)
        if stored is not ErrorCode.none:
            result = ShareHeartbeatResult(stored, member_id=request.member_id)
        if self._groups.get(group_id) is group:
            self._after(group)
        return result

    async def _write_share_changes(self, group: ShareGroup) -> ErrorCode:
        """Persists what a heartbeat changed before it is answered; with nothing new to write, waits for a write
        of the group still in flight that the answer rests on (as consumer groups do)."""
        group_id = group.group_id
        changes = group.take_changes()
        stored = ErrorCode.none
        if changes:
            write = asyncio.ensure_future(self._persist_share_group(group, changes))
            self._consumer_writes[group_id] = write
            stored = await asyncio.shield(write)
        else:
            pending = self._consumer_writes.get(group_id)
            if pending is not None and not pending.done():
                await asyncio.shield(pending)
        latest = self._consumer_writes.get(group_id)
        if latest is not None and latest.done():
            del self._consumer_writes[group_id]
        return stored

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
