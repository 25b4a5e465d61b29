"""One consumer group under the classic protocol: the requests that drive its rebalance state machine.

JoinGroup (new, known and static members), SyncGroup, Heartbeat and LeaveGroup, and the checks an OffsetCommit or
TxnOffsetCommit must pass, with Kafka's semantics. The state, the member table and the rebalance itself are
:class:`broker.groups.classic.rebalance.RebalancingGroup`, whose contract (sans-I/O, times in milliseconds,
callbacks, :class:`~broker.groups.classic.rebalance.PendingWrite`) holds here too. The coordinator is
assignor-agnostic: the leader computes assignments, this class only relays the metadata and assignments as opaque
bytes (:mod:`broker.groups.classic.protocols` picks the protocol).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.groups.classic.protocols import (
    CONSUMER_PROTOCOL_TYPE,
    select_protocol,
    subscribed_topics,
    supports_protocols,
)
from broker.groups.classic.rebalance import PendingWrite, RebalancingGroup
from broker.groups.classic.state import (
    GroupState,
    JoinCallback,
    JoinResult,
    Member,
    SyncCallback,
    SyncResult,
)
from wire.log_text import LOG_TEXT_MAX, untrusted

logger = logging.getLogger(__name__)


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


class Group(RebalancingGroup):
    """A classic group as its members' requests see it; see the module docstring for the contract."""

    group_type = "classic"

    # ------------------------------------------------------------------------------------------------ inspection

    @property
    def dead(self) -> bool:
        return self.state is GroupState.DEAD

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def may_delete_offsets(self) -> bool:
        """OffsetDelete and expiry touch a live group only when its subscriptions can be read: an Empty group, or
        one of the ``consumer`` protocol type; other live groups keep all their offsets."""
        return not self.dead and (self.state is GroupState.EMPTY or self.protocol_type == CONSUMER_PROTOCOL_TYPE)

    @property
    def empty_since_ms(self) -> int | None:
        """When a managed group became Empty (its offsets' retention counts from then); None otherwise, so a
        group that only ever committed offsets expires them by their commit time."""
        managed = self.protocol_type is not None
        return self.state_timestamp_ms if managed and self.state is GroupState.EMPTY else None

    @property
    def is_disposable(self) -> bool:
        """Created by a join that failed before anyone became a member: nothing worth keeping."""
        return (
            self.state is GroupState.EMPTY
            and self.generation_id == 0
            and self.is_empty
            and not len(self.offsets)
            and not self.pending_txn_offsets
        )

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol only); None when that cannot be known."""
        return subscribed_topics(self.protocol_type, self.protocol_name, self.members.values())

    def is_subscribed_to(self, topic: str) -> bool:
        """Whether a live consumer group still reads ``topic`` (its offsets may then not be deleted or expire)."""
        if self.state is GroupState.EMPTY or self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return False
        topics = self.subscribed_topics()
        return True if topics is None else topic in topics

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
                "group %s: member '%s' rejected, group.max.size %d reached",
                untrusted(self.group_id),
                untrusted(request.member_id),
                cfg.max_size,
            )
            callback(JoinResult(ErrorCode.group_max_size_reached, request.member_id))
            return
        if not supports_protocols(self.members.values(), self.protocol_type, request.protocol_type, request.protocols):
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
        old_leader = self.leader_id
        self._replace_static_member(old_id, new_id)
        member.update(request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms)
        member.last_heartbeat_ms = now_ms
        logger.info(
            "group %s: static member %s (instance %s) replaced by %s",
            untrusted(self.group_id),
            untrusted(old_id),
            untrusted(instance_id),
            untrusted(new_id),
        )
        if self.state is GroupState.STABLE:
            unchanged = (
                self.protocol_name is not None
                and select_protocol(list(self.members.values())) == self.protocol_name
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
                # KIP-814: from v9 a rejoining static leader is told it leads, with the members, and to skip the
                # assignment; before v9 the leader is named by its old member id, so the client takes itself for a
                # follower (it could not skip the assignment), as Kafka answers it.
                skip = self.leader_id == new_id and new_id in self.members and request.supports_skip_assignment
                callback(
                    JoinResult(
                        ErrorCode.none,
                        new_id,
                        generation_id=generation,
                        protocol_type=self.protocol_type,
                        protocol_name=self.protocol_name,
                        leader_id=(self.leader_id if request.supports_skip_assignment else old_leader) or "",
                        members=self.member_list() if skip else (),
                        skip_assignment=skip,
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

    # ------------------------------------------------------------------------------------------------ sync

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
                "group %s: leader %s assigned to unknown members %s; ignoring them",
                untrusted(self.group_id),
                untrusted(member_id),
                untrusted(", ".join(unknown), 4 * LOG_TEXT_MAX),
            )
        full = {mid: assignments.get(mid, b"") for mid in self.members}
        generation = self.generation_id

        def done(error: ErrorCode, now: int) -> None:
            if self.state is not GroupState.COMPLETING_REBALANCE or self.generation_id != generation:
                return
            if error is not ErrorCode.none:
                logger.warning(
                    "group %s: could not persist generation %d (%s); rebalancing",
                    untrusted(self.group_id),
                    generation,
                    error.name,
                )
                self._reset_and_propagate_assignment_error(error)
                self._prepare_rebalance(now, "persisting the assignment failed")
                return
            for mid, m in self.members.items():
                m.assignment = full.get(mid, b"")
            self._transition(GroupState.STABLE, now)
            logger.info("group %s: generation %d is stable", untrusted(self.group_id), generation)
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

    # ------------------------------------------------------------------------------------------------ migration

    def rebalance(self, now_ms: int, reason: str) -> None:
        """Starts a rebalance: a group just converted from a consumer group (KIP-848's online downgrade) has every
        member rejoin, so their client-side assignor takes over from the server-side one."""
        self._prepare_rebalance(now_ms, reason)

    # ------------------------------------------------------------------------------------------------ offsets

    def validate_offset_commit(
        self,
        now_ms: int,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        *,
        transactional: bool = False,
    ) -> ErrorCode:
        """Whether an OffsetCommit, or a TxnOffsetCommit (``transactional``), may write, as Kafka's
        ``ClassicGroup.validateOffsetCommit`` checks it. A negative generation commits freely while the group is
        Empty, whatever member or instance id comes with it (admin tools, consumers without group management, and
        librdkafka's assign() + commit(), which always sends its group.instance.id). Otherwise a member id,
        instance id or generation, when any is given, must name a current member at the current generation (a
        producer with a stale consumer generation is a zombie); without any of them only a TxnOffsetCommit, whose
        old versions carry none, is accepted from outside a group with members. An OffsetCommit counts as its
        member's heartbeat."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and self.state is GroupState.EMPTY:
            return ErrorCode.none
        if generation_id >= 0 or member_id or group_instance_id is not None:
            error = self._validate_member(member_id, group_instance_id)
            if error is not ErrorCode.none:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
        elif not transactional:
            # A group with members only takes commits from its members.
            return ErrorCode.unknown_member_id
        if transactional:
            return ErrorCode.none
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        self.members[member_id].last_heartbeat_ms = now_ms
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


def _with_reason(what: str, reason: str | None) -> str:
    return f"{what}; client reason: {reason}" if reason else what
