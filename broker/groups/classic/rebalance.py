"""A classic group's members and generations, and the rebalance that moves it from one generation to the next.

This is the sans-I/O core of the classic protocol's state machine: the states and their transitions, the member
table, the deadlines (sessions, the rebalance and SyncGroup time-outs, the initial rebalance delay) and the
snapshots that must be persisted. :class:`broker.groups.classic.group.Group` adds the requests that drive it
(JoinGroup, SyncGroup, Heartbeat, LeaveGroup, the offset-commit checks); they are apart because the rebalance is
one idea with its own invariants (a generation completes only when every member rejoined or the rebalance timed
out, and then without the dynamic members that did not rejoin), and the requests are many small entry points into it.

Nothing here blocks, sleeps or touches the network. Every operation takes the current time in milliseconds, so
tests drive rebalance and session timeouts by passing later times to :meth:`RebalancingGroup.tick`, and the
asyncio coordinator arms one timer at :meth:`RebalancingGroup.next_deadline_ms`. Requests whose answer depends on
other members (JoinGroup waits for the rebalance, SyncGroup for the leader's assignment) hand in a callback; it fires
when the group can answer, possibly during a later call on the same group.

Changes that must be durable before clients hear about them (the leader's assignment, a static member taking
over an old member id, the group becoming Empty) are queued as :class:`PendingWrite`; the coordinator appends the
snapshot to ``__consumer_offsets`` and then reports the outcome through ``on_done``, which is where the waiting
responses are released.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Self

from kio.schema.errors import ErrorCode

from broker.groups.classic.protocols import select_protocol
from broker.groups.classic.state import (
    VALID_PREVIOUS_STATES,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)
from broker.groups.offsets import GroupOffsets
from broker.groups.offsets_schema import GroupValue, MemberValue
from broker.groups.txn_offsets import PendingTxnOffsets
from wire.log_text import LOG_TEXT_MAX, untrusted

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupConfig:
    """The broker settings the classic group protocol depends on (Kafka's defaults)."""

    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    # How long a member that joined for the first time may take to rejoin a rebalance before it is dropped.
    new_member_join_timeout_ms: int = 300_000


@dataclass
class PendingWrite:
    """A group snapshot that must reach ``__consumer_offsets`` before the waiting requests are answered."""

    value: GroupValue
    on_done: Callable[[ErrorCode, int], None] = field(repr=False)


def _ignore_outcome(error: ErrorCode, now_ms: int) -> None:
    """For writes nobody waits on (a group becoming Empty); a failure only means a stale record on reload."""


class RebalancingGroup:
    """State, members and committed offsets of one classic group, and its rebalance; see the module docstring."""

    def __init__(self, group_id: str, config: GroupConfig, now_ms: int) -> None:
        self.group_id = group_id
        self.config = config
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        # Members told MEMBER_ID_REQUIRED, with the time by which they must rejoin.
        self.pending_members: dict[str, int] = {}
        # Members that got their JoinGroup answer but have not sent SyncGroup yet.
        self.pending_sync: set[str] = set()
        self.offsets = GroupOffsets()
        self.pending_txn_offsets = PendingTxnOffsets()
        self._join_deadline_ms: int | None = None
        self._sync_deadline_ms: int | None = None
        self._initial_delay = False
        self._initial_remaining_ms = 0
        self._new_member_added = False
        self._writes: list[PendingWrite] = []

    # ------------------------------------------------------------------------------------------------ inspection

    def __repr__(self) -> str:
        return (
            f"Group({self.group_id!r}, {self.state.value}, generation={self.generation_id}, "
            f"members={len(self.members)})"
        )

    @property
    def is_empty(self) -> bool:
        return not self.members and not self.pending_members

    def take_writes(self) -> list[PendingWrite]:
        """Hands the queued snapshots to the caller, who must append them and call each ``on_done``."""
        writes, self._writes = self._writes, []
        return writes

    def next_deadline_ms(self) -> int | None:
        """The earliest time at which :meth:`tick` has something to do, or None."""
        candidates = list(self.pending_members.values())
        for member in self.members.values():
            deadline = self._member_deadline(member)
            if deadline is not None:
                candidates.append(deadline)
        if self.state is GroupState.PREPARING_REBALANCE and self._join_deadline_ms is not None:
            candidates.append(self._join_deadline_ms)
        if self.pending_sync and self._sync_deadline_ms is not None:
            candidates.append(self._sync_deadline_ms)
        return min(candidates, default=None)

    def member_list(self) -> tuple[tuple[str, str | None, bytes], ...]:
        """The (member id, instance id, metadata of the selected protocol) list the leader assigns from."""
        assert self.protocol_name is not None
        return tuple(
            (m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name)) for m in self.members.values()
        )

    # ------------------------------------------------------------------------------------------------ persisted form

    def snapshot(self, now_ms: int, assignments: Mapping[str, bytes] | None = None) -> GroupValue:
        """The group as one ``__consumer_offsets`` group-metadata value."""
        members = []
        for m in self.members.values():
            subscription = (
                m.metadata_for(self.protocol_name)
                if self.protocol_name is not None and self.protocol_name in m.supported_protocols
                else b""
            )
            members.append(
                MemberValue(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=subscription,
                    assignment=assignments.get(m.member_id, b"") if assignments is not None else m.assignment,
                )
            )
        return GroupValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=tuple(members),
        )

    @classmethod
    def restore(cls, group_id: str, config: GroupConfig, value: GroupValue, now_ms: int) -> Self:
        """Rebuilds a group from its last persisted snapshot; members must heartbeat within their session."""
        group = cls(group_id, config, now_ms)
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        if value.current_state_timestamp_ms >= 0:
            group.state_timestamp_ms = value.current_state_timestamp_ms
        for mv in value.members:
            protocols = ((value.protocol, mv.subscription),) if value.protocol is not None else ()
            group.members[mv.member_id] = Member(
                member_id=mv.member_id,
                group_instance_id=mv.group_instance_id,
                client_id=mv.client_id,
                client_host=mv.client_host,
                rebalance_timeout_ms=mv.rebalance_timeout_ms,
                session_timeout_ms=mv.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=protocols,
                assignment=mv.assignment,
                last_heartbeat_ms=now_ms,
            )
            if mv.group_instance_id is not None:
                group.static_members[mv.group_instance_id] = mv.member_id
        if group.members:
            group.state = GroupState.STABLE
            if group.leader_id not in group.members:
                group.leader_id = next(iter(group.members))
        return group

    def _current_join_result(self, member: Member) -> JoinResult:
        return JoinResult(
            ErrorCode.none,
            member.member_id,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id or "",
            members=self.member_list() if member.member_id == self.leader_id else (),
        )

    # ------------------------------------------------------------------------------------------------ rebalance

    def _transition(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        logger.debug("group %s: %s -> %s", untrusted(self.group_id), self.state.value, state.value)
        self.state = state
        self.state_timestamp_ms = now_ms

    def _rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _maybe_prepare_rebalance(self, now_ms: int, reason: str) -> None:
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(now_ms, reason)
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(now_ms)

    def _prepare_rebalance(self, now_ms: int, reason: str) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(ErrorCode.rebalance_in_progress)
        self.pending_sync.clear()
        self._sync_deadline_ms = None
        rebalance_timeout = self._rebalance_timeout_ms()
        delay = self.config.initial_rebalance_delay_ms
        if self.state is GroupState.EMPTY and delay > 0:
            # A new group waits a little for more members, so the first consumers of a starting application
            # do not each cause a rebalance of their own.
            self._initial_delay = True
            self._join_deadline_ms = now_ms + delay
            self._initial_remaining_ms = max(rebalance_timeout - delay, 0)
            self._new_member_added = False
        else:
            self._initial_delay = False
            self._join_deadline_ms = now_ms + rebalance_timeout
        logger.info(
            "group %s: preparing to rebalance generation %d (%s)",
            untrusted(self.group_id), self.generation_id, untrusted(reason, 4 * LOG_TEXT_MAX),
        )
        self._transition(GroupState.PREPARING_REBALANCE, now_ms)
        self._try_complete_join(now_ms)

    def _try_complete_join(self, now_ms: int) -> None:
        if self.state is not GroupState.PREPARING_REBALANCE or self._initial_delay:
            return
        if not self.pending_members and all(m.awaiting_join for m in self.members.values()):
            self._complete_join(now_ms)

    def _complete_join(self, now_ms: int) -> None:
        self._join_deadline_ms = None
        self._initial_delay = False
        # Only dynamic members that did not rejoin are dropped. A static member (KIP-345) that did not rejoin is
        # most likely restarting: it stays in the generation with its last metadata, so the leader assigns it its
        # partitions and its return under a new member id needs no rebalance; its session (or the SyncGroup
        # deadline) removes it if it never comes back, as Kafka's coordinator does.
        for member in list(self.members.values()):
            if not member.awaiting_join and member.group_instance_id is None:
                logger.info(
                    "group %s: dynamic member %s did not rejoin within the rebalance timeout; removing it",
                    untrusted(self.group_id),
                    untrusted(member.member_id),
                )
                self._remove_member(member)
        if self.members and not self._elect_joined_leader():
            # Nobody rejoined, so nobody could assign: wait one more rebalance timeout, during which the silent
            # static members rejoin or their sessions expire (the last expiry empties the group).
            logger.warning(
                "group %s: no member rejoined generation %d within the rebalance timeout; waiting again",
                untrusted(self.group_id),
                self.generation_id,
            )
            self._join_deadline_ms = now_ms + self._rebalance_timeout_ms()
            return
        self.generation_id += 1
        if not self.members:
            self.protocol_name = None
            self._transition(GroupState.EMPTY, now_ms)
            logger.info("group %s: generation %d is empty", untrusted(self.group_id), self.generation_id)
            self._writes.append(PendingWrite(self.snapshot(now_ms), _ignore_outcome))
            return
        self.protocol_name = select_protocol(list(self.members.values()))
        self._transition(GroupState.COMPLETING_REBALANCE, now_ms)
        logger.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            untrusted(self.group_id),
            self.generation_id,
            len(self.members),
            untrusted(self.protocol_name),
            untrusted(self.leader_id),
        )
        for member in list(self.members.values()):
            member.is_new = False
            member.last_heartbeat_ms = now_ms
            member.answer_join(self._current_join_result(member))
        self.pending_sync = set(self.members)
        self._sync_deadline_ms = now_ms + self._rebalance_timeout_ms()

    def _elect_joined_leader(self) -> bool:
        """Makes a member that rejoined the leader when the leader did not (a static leader kept while it restarts
        cannot run the assignor); False when no member rejoined, as Kafka's ``maybeElectNewJoinedLeader``."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.awaiting_join:
            return True
        joined = next((m.member_id for m in self.members.values() if m.awaiting_join), None)
        if joined is None:
            return False
        logger.info(
            "group %s: leader %s did not rejoin; %s leads instead",
            untrusted(self.group_id),
            untrusted(self.leader_id),
            untrusted(joined),
        )
        self.leader_id = joined
        return True

    def _reset_and_propagate_assignment_error(self, error: ErrorCode) -> None:
        for member in self.members.values():
            member.assignment = b""
            member.answer_sync(SyncResult(error))

    def _remove_member(self, member: Member) -> None:
        """Drops a member; its parked requests learn it is gone. No rebalance (callers decide)."""
        del self.members[member.member_id]
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == (
            member.member_id
        ):
            del self.static_members[member.group_instance_id]
        self.pending_sync.discard(member.member_id)
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)
        member.answer_join(JoinResult(ErrorCode.unknown_member_id, member.member_id))
        member.answer_sync(SyncResult(ErrorCode.unknown_member_id))

    def _remove_member_and_update_group(self, now_ms: int, member: Member, reason: str) -> None:
        logger.info(
            "group %s: removing member %s (%s)",
            untrusted(self.group_id), untrusted(member.member_id), untrusted(reason, 4 * LOG_TEXT_MAX),
        )
        self._remove_member(member)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now_ms, f"member {member.member_id} left: {reason}")
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(now_ms)

    def _member_deadline(self, member: Member) -> int | None:
        if member.awaiting_join:
            return member.last_heartbeat_ms + self.config.new_member_join_timeout_ms if member.is_new else None
        if member.awaiting_sync:
            return None
        return member.last_heartbeat_ms + member.session_timeout_ms

    def tick(self, now_ms: int) -> None:
        """Applies every timeout due at ``now_ms``: sessions, MEMBER_ID_REQUIRED rejoins, rebalance and sync."""
        for member_id, rejoin_by in list(self.pending_members.items()):
            if now_ms >= rejoin_by:
                del self.pending_members[member_id]
                logger.info(
                    "group %s: pending member %s never rejoined",
                    untrusted(self.group_id), untrusted(member_id),
                )
                self._try_complete_join(now_ms)
        for member in list(self.members.values()):
            deadline = self._member_deadline(member)
            if deadline is not None and now_ms >= deadline and member.member_id in self.members:
                self._remove_member_and_update_group(now_ms, member, "session timeout expired")
        if (
            self.state is GroupState.PREPARING_REBALANCE
            and self._join_deadline_ms is not None
            and now_ms >= self._join_deadline_ms
        ):
            if self._initial_delay and self._new_member_added and self._initial_remaining_ms > 0:
                step = min(self.config.initial_rebalance_delay_ms, self._initial_remaining_ms)
                self._initial_remaining_ms -= step
                self._new_member_added = False
                self._join_deadline_ms = now_ms + step
            else:
                self._complete_join(now_ms)
        if self.pending_sync and self._sync_deadline_ms is not None and now_ms >= self._sync_deadline_ms:
            late = [self.members[m] for m in sorted(self.pending_sync) if m in self.members]
            self.pending_sync.clear()
            self._sync_deadline_ms = None
            for member in late:
                logger.info(
                    "group %s: member %s sent no SyncGroup within the rebalance timeout",
                    untrusted(self.group_id),
                    untrusted(member.member_id),
                )
                self._remove_member(member)
            if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._prepare_rebalance(now_ms, "members missed the SyncGroup deadline")

    # ------------------------------------------------------------------------------------------------ checks

    def _validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if group_instance_id is not None:
            owner = self.static_members.get(group_instance_id)
            if owner is not None and owner != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    # ------------------------------------------------------------------------------------------------ lifecycle

    def mark_dead(self, now_ms: int, error: ErrorCode = ErrorCode.not_coordinator) -> None:
        """The group leaves this coordinator (deleted, or its partition moved away): parked requests get ``error``."""
        for member in self.members.values():
            member.answer_join(JoinResult(error, member.member_id))
            member.answer_sync(SyncResult(error))
        for write in self.take_writes():
            write.on_done(error, now_ms)
        self._transition(GroupState.DEAD, now_ms)
