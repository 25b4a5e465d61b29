"""One consumer group under the classic protocol: a sans-I/O state machine with Kafka's semantics.

Nothing here blocks, sleeps or touches the network. Every operation takes the current time in milliseconds, so
tests drive rebalance and session timeouts by passing later times to :meth:`Group.tick`, and the asyncio
coordinator arms one timer at :meth:`Group.next_deadline_ms`. Requests whose answer depends on other members
(JoinGroup waits for the rebalance, SyncGroup for the leader's assignment) hand in a callback; it fires when the
group can answer, possibly during a later call on the same group.

Changes that must be durable before clients hear about them (the leader's assignment, a static member taking
over an old member id, the group becoming Empty) are queued as :class:`PendingWrite`; the coordinator appends the
snapshot to ``__consumer_offsets`` and then reports the outcome through ``on_done``, which is where the waiting
responses are released. The coordinator is assignor-agnostic: the leader computes assignments, this class only
picks a protocol every member supports and relays the metadata and assignments as opaque bytes.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.groups.offsets import GroupOffsets
from broker.groups.offsets_schema import GroupValue, MemberValue
from broker.groups.state import (
    VALID_PREVIOUS_STATES,
    GroupState,
    JoinCallback,
    JoinResult,
    Member,
    SyncCallback,
    SyncResult,
)
from broker.groups.txn_offsets import PendingTxnOffsets

logger = logging.getLogger(__name__)

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True)
class GroupConfig:
    """The broker settings the classic group protocol depends on (Kafka's defaults)."""

    min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    # How long a member that joined for the first time may take to rejoin a rebalance before it is dropped.
    new_member_join_timeout_ms: int = 300_000


@dataclass(frozen=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    # JoinGroup v4+: a new member must first obtain its id (MEMBER_ID_REQUIRED) and rejoin with it.
    require_known_member_id: bool = True
    # JoinGroup v9+ (KIP-814): a static leader rejoining a stable group is told not to recompute the assignment.
    supports_skip_assignment: bool = False
    # JoinGroup v8+ (KIP-800): why the client (re)joins; only logged, it explains rebalances to operators.
    reason: str | None = None


@dataclass
class PendingWrite:
    """A group snapshot that must reach ``__consumer_offsets`` before the waiting requests are answered."""

    value: GroupValue
    on_done: Callable[[ErrorCode, int], None] = field(repr=False)


def _ignore_outcome(error: ErrorCode, now_ms: int) -> None:
    """For writes nobody waits on (a group becoming Empty); a failure only means a stale record on reload."""


class Group:
    """State, members and committed offsets of one group; see the module docstring for the contract."""

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

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol only); None when that cannot be known."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            if self.protocol_name not in member.supported_protocols:
                return None
            parsed = parse_subscription_topics(member.metadata_for(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        """Whether a live consumer group still reads ``topic`` (its offsets may then not be deleted or expire)."""
        if self.state is GroupState.EMPTY or self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        topics = self.subscribed_topics()
        return True if topics is None else topic in topics

    def member_list(self) -> tuple[tuple[str, str | None, bytes], ...]:
        """The (member id, instance id, metadata of the selected protocol) list the leader assigns from."""
        assert self.protocol_name is not None
        return tuple(
            (m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name)) for m in self.members.values()
        )

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
    def restore(cls, group_id: str, config: GroupConfig, value: GroupValue, now_ms: int) -> Group:
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

    # ------------------------------------------------------------------------------------------------ join

    def join(self, now_ms: int, request: JoinRequest, callback: JoinCallback) -> None:
        """JoinGroup. ``callback`` fires once, now (errors, MEMBER_ID_REQUIRED) or when the rebalance completes."""
        cfg = self.config
        if not cfg.min_session_timeout_ms <= request.session_timeout_ms <= cfg.max_session_timeout_ms:
            callback(JoinResult(ErrorCode.invalid_session_timeout, request.member_id))
            return
        if self.state is GroupState.DEAD:
            callback(JoinResult(ErrorCode.coordinator_not_available, request.member_id))
            return
        if not self._accepts_joining(request.member_id):
            logger.info(
                "group %s: member %r rejected, group.max.size %d reached",
                self.group_id,
                request.member_id,
                cfg.max_size,
            )
            callback(JoinResult(ErrorCode.group_max_size_reached, request.member_id))
            return
        if not self._supports_protocols(request.protocol_type, request.protocols):
            callback(JoinResult(ErrorCode.inconsistent_group_protocol, request.member_id))
            return
        if request.member_id == "":
            self._join_new_member(now_ms, request, callback)
        else:
            self._join_known_member(now_ms, request, callback)

    def _accepts_joining(self, member_id: str) -> bool:
        if self.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        member = self.members.get(member_id)
        if self.state is GroupState.PREPARING_REBALANCE:
            if member is not None and member.awaiting_join:
                return True
            return sum(1 for m in self.members.values() if m.awaiting_join) < self.config.max_size
        return member is not None or len(self.members) < self.config.max_size

    def _supports_protocols(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        return any(all(name in m.supported_protocols for m in self.members.values()) for name in names)

    def _new_member_id(self, request: JoinRequest) -> str:
        prefix = request.group_instance_id if request.group_instance_id is not None else request.client_id
        return f"{prefix}-{uuid.uuid4()}"

    def _join_new_member(self, now_ms: int, request: JoinRequest, callback: JoinCallback) -> None:
        member_id = self._new_member_id(request)
        if request.group_instance_id is not None:
            self._join_static_member(now_ms, request, member_id, callback)
        elif request.require_known_member_id:
            self.pending_members[member_id] = now_ms + request.session_timeout_ms
            callback(JoinResult(ErrorCode.member_id_required, member_id))
        else:
            self._add_member_and_rebalance(now_ms, request, member_id, callback)

    def _join_known_member(self, now_ms: int, request: JoinRequest, callback: JoinCallback) -> None:
        member_id = request.member_id
        if member_id in self.pending_members:
            self._add_member_and_rebalance(now_ms, request, member_id, callback)
            return
        error = self._validate_member(member_id, request.group_instance_id)
        if error is not ErrorCode.none:
            callback(JoinResult(error, member_id))
            return
        member = self.members[member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(now_ms, member, request, callback)
        elif self.state is GroupState.COMPLETING_REBALANCE:
            if member.matches(request.protocols):
                # A retried join whose answer was lost: repeat it.
                callback(self._current_join_result(member))
            else:
                self._update_member_and_rebalance(now_ms, member, request, callback)
        elif self.state is GroupState.STABLE:
            if member_id == self.leader_id or not member.matches(request.protocols):
                # The leader rejoins to force a rebalance (e.g. it saw a metadata change); others when their
                # subscription changed.
                self._update_member_and_rebalance(now_ms, member, request, callback)
            else:
                callback(self._current_join_result(member))
        else:
            callback(JoinResult(ErrorCode.unknown_member_id, member_id))

    def _join_static_member(self, now_ms: int, request: JoinRequest, new_id: str, callback: JoinCallback) -> None:
        instance_id = request.group_instance_id
        assert instance_id is not None
        old_id = self.static_members.get(instance_id)
        if old_id is None:
            self._add_member_and_rebalance(now_ms, request, new_id, callback)
            return
        member = self.members[old_id]
        old_protocols = member.protocols
        old_timeouts = (member.rebalance_timeout_ms, member.session_timeout_ms)
        self._replace_static_member(old_id, new_id)
        member.update(request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms)
        member.last_heartbeat_ms = now_ms
        logger.info(
            "group %s: static member %s (instance %s) replaced by %s", self.group_id, old_id, instance_id, new_id
        )
        if self.state is GroupState.STABLE:
            unchanged = (
                self.protocol_name is not None
                and self._select_protocol() == self.protocol_name
                and dict(old_protocols).get(self.protocol_name) == member.metadata_for(self.protocol_name)
            )
            if not unchanged:
                member.awaiting_join.append(callback)
                self._prepare_rebalance(now_ms, f"static member {instance_id} rejoined with changed metadata")
                return
            generation = self.generation_id

            def done(error: ErrorCode, now: int) -> None:
                if error is not ErrorCode.none:
                    if new_id in self.members and self.generation_id == generation:
                        self._replace_static_member(new_id, old_id)
                        member.update(old_protocols, *old_timeouts)
                    callback(JoinResult(error, new_id))
                    return
                is_leader = self.leader_id == new_id
                callback(
                    JoinResult(
                        ErrorCode.none,
                        new_id,
                        generation_id=generation,
                        protocol_type=self.protocol_type,
                        protocol_name=self.protocol_name,
                        leader_id=self.leader_id or "",
                        members=self.member_list() if is_leader and new_id in self.members else (),
                        skip_assignment=is_leader and request.supports_skip_assignment,
                    )
                )

            self._writes.append(PendingWrite(self.snapshot(now_ms), done))
        elif self.state is GroupState.COMPLETING_REBALANCE:
            # The leader may already be assigning to the old member id; only a new rebalance keeps ids consistent.
            member.awaiting_join.append(callback)
            self._prepare_rebalance(now_ms, f"static member {instance_id} rejoined during CompletingRebalance")
        else:
            member.awaiting_join.append(callback)
            self._try_complete_join(now_ms)

    def _replace_static_member(self, old_id: str, new_id: str) -> None:
        member = self.members.pop(old_id)
        member.answer_join(JoinResult(ErrorCode.fenced_instance_id, old_id))
        member.answer_sync(SyncResult(ErrorCode.fenced_instance_id))
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader_id == old_id:
            self.leader_id = new_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)

    def _add_member_and_rebalance(
        self, now_ms: int, request: JoinRequest, member_id: str, callback: JoinCallback
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            is_new=True,
            last_heartbeat_ms=now_ms,
        )
        member.awaiting_join.append(callback)
        if not self.members:
            self.protocol_type = request.protocol_type
        self.members[member_id] = member
        if self.leader_id is None:
            self.leader_id = member_id
        if request.group_instance_id is not None:
            self.static_members[request.group_instance_id] = member_id
        self.pending_members.pop(member_id, None)
        if self.state is GroupState.PREPARING_REBALANCE and self._initial_delay:
            self._new_member_added = True
        self._maybe_prepare_rebalance(now_ms, _with_reason(f"member {member_id} joined", request.reason))

    def _update_member_and_rebalance(
        self, now_ms: int, member: Member, request: JoinRequest, callback: JoinCallback
    ) -> None:
        member.update(request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms)
        member.awaiting_join.append(callback)
        self._maybe_prepare_rebalance(now_ms, _with_reason(f"member {member.member_id} rejoined", request.reason))

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
        logger.debug("group %s: %s -> %s", self.group_id, self.state.value, state.value)
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
        logger.info("group %s: preparing to rebalance generation %d (%s)", self.group_id, self.generation_id, reason)
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
        for member in list(self.members.values()):
            if not member.awaiting_join:
                logger.info(
                    "group %s: member %s did not rejoin within the rebalance timeout; removing it",
                    self.group_id,
                    member.member_id,
                )
                self._remove_member(member)
        self.generation_id += 1
        if not self.members:
            self.protocol_name = None
            self._transition(GroupState.EMPTY, now_ms)
            logger.info("group %s: generation %d is empty", self.group_id, self.generation_id)
            self._writes.append(PendingWrite(self.snapshot(now_ms), _ignore_outcome))
            return
        self.protocol_name = self._select_protocol()
        self._transition(GroupState.COMPLETING_REBALANCE, now_ms)
        logger.info(
            "group %s: generation %d with %d members, protocol %s, leader %s",
            self.group_id,
            self.generation_id,
            len(self.members),
            self.protocol_name,
            self.leader_id,
        )
        for member in list(self.members.values()):
            member.is_new = False
            member.last_heartbeat_ms = now_ms
            member.answer_join(self._current_join_result(member))
        self.pending_sync = set(self.members)
        self._sync_deadline_ms = now_ms + self._rebalance_timeout_ms()

    def _select_protocol(self) -> str:
        """The protocol most members prefer among those every member supports (Kafka's vote)."""
        members = list(self.members.values())
        candidates = frozenset.intersection(*(m.supported_protocols for m in members))
        votes: dict[str, int] = {}
        for member in members:
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # Ties go to the protocol the first member prefers (deterministic, unlike a hash-map order).
        order = [name for name, _ in members[0].protocols if name in candidates]
        return max(order, key=lambda name: (votes.get(name, 0), -order.index(name)))

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
        logger.info("group %s: removing member %s (%s)", self.group_id, member.member_id, reason)
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
                logger.info("group %s: pending member %s never rejoined", self.group_id, member_id)
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
                    self.group_id,
                    member.member_id,
                )
                self._remove_member(member)
            if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._prepare_rebalance(now_ms, "members missed the SyncGroup deadline")

    # ------------------------------------------------------------------------------------------------ sync

    def _validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if group_instance_id is not None:
            owner = self.static_members.get(group_instance_id)
            if owner is not None and owner != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def sync(
        self,
        now_ms: int,
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
        callback: SyncCallback,
    ) -> None:
        """SyncGroup. Followers wait for the leader's assignment; the leader's is persisted before anyone hears."""
        if self.state is GroupState.DEAD:
            callback(SyncResult(ErrorCode.coordinator_not_available))
            return
        error = self._validate_member(member_id, group_instance_id)
        if error is ErrorCode.none and generation_id != self.generation_id:
            error = ErrorCode.illegal_generation
        if error is ErrorCode.none and (
            (protocol_type is not None and protocol_type != self.protocol_type)
            or (protocol_name is not None and protocol_name != self.protocol_name)
        ):
            error = ErrorCode.inconsistent_group_protocol
        if error is ErrorCode.none and self.state is GroupState.PREPARING_REBALANCE:
            error = ErrorCode.rebalance_in_progress
        if error is ErrorCode.none and self.state is GroupState.EMPTY:
            error = ErrorCode.unknown_member_id
        if error is not ErrorCode.none:
            callback(SyncResult(error))
            return
        member = self.members[member_id]
        self.pending_sync.discard(member_id)
        member.last_heartbeat_ms = now_ms
        if self.state is GroupState.STABLE:
            callback(self._sync_result(member))
            return
        member.awaiting_sync.append(callback)
        if member_id != self.leader_id:
            return
        unknown = sorted(set(assignments) - set(self.members))
        if unknown:
            logger.warning(
                "group %s: leader %s assigned to unknown members %s; ignoring them", self.group_id, member_id, unknown
            )
        full = {mid: assignments.get(mid, b"") for mid in self.members}
        generation = self.generation_id

        def done(error: ErrorCode, now: int) -> None:
            if self.state is not GroupState.COMPLETING_REBALANCE or self.generation_id != generation:
                return
            if error is not ErrorCode.none:
                logger.warning(
                    "group %s: could not persist generation %d (%s); rebalancing", self.group_id, generation, error.name
                )
                self._reset_and_propagate_assignment_error(error)
                self._prepare_rebalance(now, "persisting the assignment failed")
                return
            for mid, m in self.members.items():
                m.assignment = full.get(mid, b"")
            self._transition(GroupState.STABLE, now)
            logger.info("group %s: generation %d is stable", self.group_id, generation)
            for m in self.members.values():
                if m.awaiting_sync:
                    m.last_heartbeat_ms = now
                    m.answer_sync(self._sync_result(m))

        self._writes.append(PendingWrite(self.snapshot(now_ms, full), done))

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, member.assignment, self.protocol_type, self.protocol_name)

    # ------------------------------------------------------------------------------------------------ heartbeat / leave

    def heartbeat(self, now_ms: int, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = self._validate_member(member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.illegal_generation
        self.members[member_id].last_heartbeat_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, now_ms: int, member_id: str, group_instance_id: str | None, reason: str | None = None) -> ErrorCode:
        """LeaveGroup for one member identity (v3+ batches call this per member)."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if group_instance_id is not None:
            owner = self.static_members.get(group_instance_id)
            if owner is None:
                return ErrorCode.unknown_member_id
            if member_id and member_id != owner:
                return ErrorCode.fenced_instance_id
            member_id = owner
        elif member_id in self.pending_members:
            del self.pending_members[member_id]
            self._try_complete_join(now_ms)
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        self._remove_member_and_update_group(now_ms, member, _with_reason("left the group", reason))
        return ErrorCode.none

    # ------------------------------------------------------------------------------------------------ offsets

    def validate_offset_commit(
        self, now_ms: int, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Whether an OffsetCommit may write; managed members also count it as a heartbeat."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = self._validate_member(member_id, group_instance_id)
            if error is not ErrorCode.none:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
            if self.state is GroupState.COMPLETING_REBALANCE:
                return ErrorCode.rebalance_in_progress
            self.members[member_id].last_heartbeat_ms = now_ms
            return ErrorCode.none
        if self.state is not GroupState.EMPTY:
            # A group with members only takes commits from its members.
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def validate_txn_offset_commit(
        self, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Whether a TxnOffsetCommit may write, as Kafka checks it: a member id or generation, when given, must be
        current (a producer with a stale consumer generation is a zombie); without them anyone may commit."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if member_id or group_instance_id is not None:
            error = self._validate_member(member_id, group_instance_id)
            if error is not ErrorCode.none:
                return error
        if generation_id >= 0 and generation_id != self.generation_id:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    # ------------------------------------------------------------------------------------------------ lifecycle

    def describe_members(self) -> Iterator[tuple[Member, bytes, bytes]]:
        """(member, metadata, assignment); metadata and assignment are only meaningful once Stable."""
        stable = self.state is GroupState.STABLE and self.protocol_name is not None
        for m in self.members.values():
            if stable:
                assert self.protocol_name is not None
                metadata = m.metadata_for(self.protocol_name) if self.protocol_name in m.supported_protocols else b""
                yield m, metadata, m.assignment
            else:
                yield m, b"", b""

    def mark_dead(self, now_ms: int, error: ErrorCode = ErrorCode.not_coordinator) -> None:
        """The group leaves this coordinator (deleted, or its partition moved away): parked requests get ``error``."""
        for member in self.members.values():
            member.answer_join(JoinResult(error, member.member_id))
            member.answer_sync(SyncResult(error))
        for write in self.take_writes():
            write.on_done(error, now_ms)
        self._transition(GroupState.DEAD, now_ms)


def _with_reason(what: str, reason: str | None) -> str:
    return f"{what}; client reason: {reason}" if reason else what


def parse_subscription_topics(metadata: bytes) -> list[str] | None:
    """Topics in a ConsumerProtocolSubscription (any version: they all start with version + topic array)."""
    try:
        pos = 2  # int16 version
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        if count < 0:
            return None
        topics = []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if length < 0 or pos + length > len(metadata):
                return None
            topics.append(metadata[pos : pos + length].decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
