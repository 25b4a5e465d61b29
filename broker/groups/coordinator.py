"""The group coordinator the broker runs: one object serving every group API, for every group type.

It is assembled from one module per idea, all working through :class:`broker.groups.runtime.CoordinatorRuntime`
(the loaded groups, their timers and persistence in ``__consumer_offsets``): the classic protocol's membership
requests (:mod:`broker.groups.classic_membership`), the KIP-848 and KIP-932 ones
(:mod:`broker.groups.consumer_membership`, :mod:`broker.groups.share_membership`) and committed offsets
(:mod:`broker.groups.offset_commits`). What is left here concerns every group whatever its type: starting and
stopping, FindCoordinator, and looking groups up, listing and deleting them (DescribeGroups, ListGroups,
DeleteGroups).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence

from kio.schema.errors import ErrorCode

from broker.groups.classic.group import Group
from broker.groups.classic_membership import ClassicMembership
from broker.groups.consumer.group import ConsumerGroup
from broker.groups.consumer_membership import ConsumerMembership
from broker.groups.offset_commits import OffsetCommits
from broker.groups.share.group import ShareGroup
from broker.groups.share_membership import ShareMembership

logger = logging.getLogger(__name__)


class GroupCoordinator(ClassicMembership, ShareMembership, ConsumerMembership, OffsetCommits):
    """The group coordinator of this broker (``Broker.groups``); see the module docstring for its parts."""

    # ------------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._partitions.start()
        self._context.controller.subscribe(self.forget_deleted_topics)
        self._cleanup_task = asyncio.create_task(self._cleanup_loop(), name="group-offsets-expiry")

    async def stop(self) -> None:
        """Lets in-flight writes finish (so their requests are answered), then drops every group."""
        await self._partitions.stop(self._cleanup_task, cancel_unfinished=False)
        groups = len(self._groups)
        self._partitions.unload_all()
        logger.info("group coordinator stopped (%d groups unloaded)", groups)

    # ------------------------------------------------------------------------------------------------ find

    async def find_coordinator(self, group_id: str) -> tuple[ErrorCode, int, str | None]:
        """(error, node id of the coordinator, message); creates ``__consumer_offsets`` on first use."""
        return await self._partitions.find_coordinator(group_id)

    # ------------------------------------------------------------------------------------------------ admin

    def list_groups(
        self, states: Iterable[str] = (), types: Iterable[str] = ()
    ) -> tuple[ErrorCode, list[Group | ConsumerGroup | ShareGroup]]:
        """Groups this broker coordinates, optionally only those in the named states and of the named types
        (``classic``, ``consumer``, ``share``), both case-insensitive as Kafka matches them."""
        wanted = {s.lower() for s in states}
        kinds = {t.lower() for t in types}
        error = self._partitions.listing_error()
        if error is ErrorCode.coordinator_not_available:
            return error, []
        groups = [
            g
            for g in self._groups.values()
            if not g.dead
            and (not wanted or g.state_name.lower() in wanted)
            and (not kinds or g.group_type in kinds)
        ]
        return error, sorted(groups, key=lambda g: g.group_id)

    def describe_group(self, group_id: str) -> tuple[ErrorCode, Group | ConsumerGroup | None]:
        """(error, group); a group this coordinator does not know is reported as None (Kafka shows it Dead), and
        so is a share group (DescribeGroups describes classic and consumer groups only: Kafka answers a share
        group's id as a group that is not there)."""
        group, error = self._any_group_or_error(group_id)
        return error, None if isinstance(group, ShareGroup) else group

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        """Deletes each empty group (a share group too: its share-partition state is the caller's to delete)."""
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group, error = self._any_group_or_error(group_id)
            if error is not ErrorCode.none:
                results[group_id] = error
            elif group is None or group.dead:
                results[group_id] = ErrorCode.group_id_not_found
            elif not group.is_empty:
                results[group_id] = ErrorCode.non_empty_group
            else:
                results[group_id] = await self._delete_group(group)
        return results
