"""The classic protocol's requests at the coordinator: JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

Each checks the coordinator (this broker serves the group, the id fits the record format), finds or creates the
group, hands the request to the sans-I/O :class:`broker.groups.classic.group.Group` with the wall clock and, for the
requests that wait on the rebalance, parks on a future the group's callback resolves. Apart from the runtime
because it is specific to the classic protocol. The same requests reaching a consumer group come from its classic
members (KIP-848's online migration) and are served by :mod:`broker.groups.migration`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from kio.schema.errors import ErrorCode

from broker.groups.classic.group import Group, JoinRequest
from broker.groups.classic.state import JoinResult, SyncResult
from broker.groups.consumer.group import ConsumerGroup
from broker.groups.migration import GroupMigration
from broker.groups.share.group import ShareGroup


class ClassicMembership(GroupMigration):
    """The classic group membership requests of :class:`broker.groups.coordinator.GroupCoordinator`."""

    async def join_group(self, group_id: str, request: JoinRequest) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, request.member_id)
        if isinstance(self._any_group_or_error(group_id)[0], ShareGroup):
            # As Kafka: a JoinGroup for a group of another type is INCONSISTENT_GROUP_PROTOCOL, no member id.
            return JoinResult(ErrorCode.inconsistent_group_protocol, "")
        found, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return JoinResult(error, request.member_id)
        group = await self._classic_group(found) if isinstance(found, ConsumerGroup) else found
        if isinstance(group, ConsumerGroup):
            # A consumer group with members: this member joins it as a classic member (KIP-848's migration).
            return await self._join_consumer_group(group, request)
        if group is None:
            if request.member_id:
                return JoinResult(ErrorCode.unknown_member_id, request.member_id)
            group = self._groups[group_id] = Group(group_id, self.config, self._now_ms())
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()

        def answer(result: JoinResult) -> None:
            if not future.done():
                future.set_result(result)

        group.join(self._now_ms(), request, answer)
        self._after(group)
        return await future

    async def sync_group(
        self,
        group_id: str,
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult:
        if not group_id:
            return SyncResult(ErrorCode.invalid_group_id)
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return SyncResult(error)
        if isinstance(group, ConsumerGroup):
            return await self._sync_consumer_group(
                group,
                member_id=member_id,
                group_instance_id=group_instance_id,
                generation_id=generation_id,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
            )
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()

        def answer(result: SyncResult) -> None:
            if not future.done():
                future.set_result(result)

        group.sync(
            self._now_ms(),
            member_id=member_id,
            group_instance_id=group_instance_id,
            generation_id=generation_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=assignments,
            callback=answer,
        )
        self._after(group)
        return await future

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return error
        if isinstance(group, ConsumerGroup):
            return self._heartbeat_consumer_group(group, member_id, group_instance_id, generation_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error = group.heartbeat(self._now_ms(), member_id, group_instance_id, generation_id)
        self._after(group)
        return error

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]], reason: str | None = None
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per (member id, instance id) in request order)."""
        if not group_id:
            return ErrorCode.invalid_group_id, []
        group, error = self._group_or_error(group_id)
        if error is not ErrorCode.none:
            return error, []
        if isinstance(group, ConsumerGroup):
            return ErrorCode.none, self._leave_consumer_group(group, members)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id for _ in members]
        now = self._now_ms()
        results = [group.leave(now, member_id, instance_id, reason) for member_id, instance_id in members]
        self._after(group)
        return ErrorCode.none, results

    async def _classic_group(self, group: ConsumerGroup) -> Group | ConsumerGroup:
        """An empty consumer group becomes a classic group on its first JoinGroup, keeping its committed
        offsets; its consumer-group records get their tombstones, as Kafka writes them."""
        if not group.is_empty or group.pending_txn_offsets:
            return group
        now = self._now_ms()
        error = await self._tombstone_consumer_group(group)
        if error is not ErrorCode.none:
            return group
        classic = Group(group.group_id, self.config, now)
        classic.offsets = group.offsets
        self._cancel_timer(group.group_id)
        self._groups[group.group_id] = classic
        return classic
