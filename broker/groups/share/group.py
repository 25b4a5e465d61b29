"""One KIP-932 share group: members, the group epoch, the target assignment and each member's share of it.

Sans-I/O like :class:`broker.groups.consumer.group.ConsumerGroup`: every call takes the wall clock in milliseconds
(heartbeats also the cluster's topics); what must be persisted is queued as :mod:`broker.groups.share.changes` for
the coordinator to write (``take_changes``), and ``next_deadline_ms``/``tick`` drive the members' sessions.

Kafka's ``GroupMetadataManager.shareGroupHeartbeat``: the group epoch moves when a member joins, leaves or changes
its subscription, or a subscribed topic is created, deleted or grows; the target is then recomputed by the
assignor (:mod:`broker.groups.share.assignor`) at that epoch; a member heartbeating behind the target epoch is
given its share of the target at once (there is nothing to revoke first: partitions are shared).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from broker.groups.consumer.assignment import Assignment, TopicMetadata
from broker.groups.consumer.cluster_topics import ClusterTopics, metadata_hash
from broker.groups.consumer.deadlines import MemberDeadlines
from broker.groups.consumer.member import normalized
from broker.groups.share.assignor import SIMPLE_ASSIGNOR, assign_share
from broker.groups.share.changes import (
    ShareAssignmentChanged,
    ShareChange,
    ShareEpochChanged,
    ShareMemberChanged,
    ShareStateTopicsChanged,
    ShareTargetEpochChanged,
    ShareTargetMemberChanged,
)
from broker.groups.share.member import JOIN_EPOCH, LEAVE_EPOCH, ShareMember

SHARE_GROUP_TYPE = "share"


@dataclass(frozen=True, slots=True)
class ShareMembershipConfig:
    """What membership reads of a group's config: the broker's ``group.share.*`` values (``ShareGroupSettings``)
    with the group's own ``share.session.timeout.ms`` / ``share.heartbeat.interval.ms`` applied by the
    coordinator on each heartbeat."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200


class ShareGroupState(enum.Enum):
    """Kafka's share group states, spelled as tools show them (a share group never waits on a rebalance)."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ShareHeartbeat:
    """A ShareGroupHeartbeat as the group reads it; None means "unchanged since the last heartbeat"."""

    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str = ""
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


def _refused(request: ShareHeartbeat, error: ErrorCode, message: str) -> ShareHeartbeatResult:
    return ShareHeartbeatResult(error, message, member_id=request.member_id, member_epoch=request.member_epoch)


class ShareGroup:
    """See the module docstring."""

    group_type = SHARE_GROUP_TYPE
    protocol_type = "share"
    assignor_name = SIMPLE_ASSIGNOR

    def __init__(self, group_id: str, config: ShareMembershipConfig, now_ms: int) -> None:
        self.group_id = group_id
        self.config = config
        self.group_epoch = 0
        self.target_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.target: dict[str, Assignment] = {}
        #: The subscribed topics (id → metadata) the target was, or is about to be, computed on.
        self.subscription: dict[uuid.UUID, TopicMetadata] = {}
        self.deadlines = MemberDeadlines()
        self._changes: list[ShareChange] = []
        self.dead = False
        self.state_timestamp_ms = now_ms
        #: Recompute the subscribed topics only when the cluster's topics or a subscription changed.
        self._subscriptions_version = 0
        self._refreshed: tuple[ClusterTopics, int] | None = None
        #: The subscribed topics' hash a loaded group was stored with, until its first refresh.
        self._restored_hash: int | None = None
        #: The partitions members were ever assigned, by topic id with the topic's name (share state may exist).
        self.state_topics: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
        #: The group was written without a member (an offsets reset before first use): keep it, though empty.
        self._kept = False

    @classmethod
    def restored(
        cls,
        group_id: str,
        config: ShareMembershipConfig,
        now_ms: int,
        *,
        group_epoch: int,
        metadata_hash: int,
        target_epoch: int,
        target: Mapping[str, Assignment],
        members: Sequence[ShareMember],
        state_topics: Mapping[uuid.UUID, tuple[str, frozenset[int]]] | None = None,
    ) -> ShareGroup:
        """The group as a coordinator loading ``__consumer_offsets`` finds it; every member gets a fresh session."""
        group = cls(group_id, config, now_ms)
        group._kept = True
        group.state_topics = dict(state_topics or {})
        group.group_epoch = group_epoch
        group.target_epoch = target_epoch
        group.target = {m: dict(a) for m, a in target.items()}
        group._restored_hash = metadata_hash
        for member in members:
            group.members[member.member_id] = member
            group.deadlines.set_session(member.member_id, now_ms + config.session_timeout_ms)
        return group

    # ------------------------------------------------------------------------------------------------ state

    @property
    def state(self) -> ShareGroupState:
        if self.dead:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def is_empty(self) -> bool:
        return not self.members

    @property
    def is_disposable(self) -> bool:
        """Never had a member (a join that failed): nothing was written. A share group whose members all left
        stays, Empty, until DeleteGroups (Kafka keeps share groups: their share-partition state outlives them)."""
        return not self.members and self.group_epoch == 0 and not self._kept

    def keep(self) -> None:
        """Writes the group with no member (Kafka's getOrMaybeCreatePersistedShareGroup, for AlterShareGroupOffsets
        before the group is first used), so that it exists, empty, from now on."""
        if not self._kept:
            self._kept = True
            self._changes.append(ShareEpochChanged(self.group_epoch, metadata_hash(self.subscription)))

    def topics(self) -> set[str]:
        """The topics the group's share state may cover: those ever assigned, and those its members subscribe to."""
        names = {name for name, _ in self.state_topics.values()}
        for member in self.members.values():
            names |= member.subscribed_topic_names
        return names

    def take_changes(self) -> list[ShareChange]:
        changes, self._changes = self._changes, []
        return changes

    # ------------------------------------------------------------------------------------------------ heartbeat

    def heartbeat(self, now_ms: int, request: ShareHeartbeat, topics: ClusterTopics) -> ShareHeartbeatResult:
        if self.dead:
            return _refused(request, ErrorCode.not_coordinator, f"share group {self.group_id} is unloaded")
        if request.member_epoch == LEAVE_EPOCH:
            return self._leave(now_ms, request)
        member = self.members.get(request.member_id)
        if member is None and len(self.members) >= self.config.max_size:
            return _refused(
                request,
                ErrorCode.group_max_size_reached,
                f"The share group has reached its maximum capacity of {self.config.max_size} members.",
            )
        if member is None:
            if request.member_epoch != JOIN_EPOCH:
                return _refused(
                    request,
                    ErrorCode.unknown_member_id,
                    f"Member {request.member_id} is not a member of group {self.group_id}.",
                )
            member = ShareMember(member_id=request.member_id)
            is_new = True
        else:
            # Epoch 0 from a known member is a rejoin (a client that lost its state): it keeps its epoch and is
            # sent its assignment again, as Kafka accepts it.
            epoch = request.member_epoch
            rejection = None if epoch == JOIN_EPOCH else self._epoch_rejection(member, epoch)
            if rejection is not None:
                return _refused(request, ErrorCode.fenced_member_epoch, rejection)
            is_new = False
        updated = replace(
            member,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            subscribed_topic_names=(
                frozenset(request.subscribed_topic_names)
                if request.subscribed_topic_names is not None
                else member.subscribed_topic_names
            ),
            client_id=request.client_id,
            client_host=request.client_host,
        )
        bump = updated.subscribed_topic_names != member.subscribed_topic_names
        if is_new or updated.metadata_differs(member):
            self._changes.append(ShareMemberChanged(updated))
        if bump or is_new:
            self._subscriptions_version += 1
        self.members[updated.member_id] = updated
        if self._refresh_subscription(topics):
            bump = True
        if bump:
            self._bump_epoch()
        if self.group_epoch > self.target_epoch:
            self._compute_target()
        target = normalized(self.target.get(updated.member_id, {}))
        reconciled = updated
        if updated.member_epoch != self.target_epoch or normalized(updated.assigned) != target:
            reconciled = replace(
                updated, member_epoch=self.target_epoch, previous_member_epoch=updated.member_epoch, assigned=target
            )
        if is_new or reconciled.assignment_differs(updated):
            self._changes.append(ShareAssignmentChanged(reconciled))
        self.members[reconciled.member_id] = reconciled
        self.deadlines.set_session(reconciled.member_id, now_ms + self.config.session_timeout_ms)
        # Kafka sends the assignment on a join, on a full request (one naming the subscription: a client sends one
        # after any failed heartbeat, whose answer may have carried a new assignment) and when it changed.
        send = (
            request.member_epoch == JOIN_EPOCH
            or request.subscribed_topic_names is not None
            or normalized(reconciled.assigned) != normalized(member.assigned)
        )
        return ShareHeartbeatResult(
            ErrorCode.none,
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=normalized(reconciled.assigned) if send else None,
        )

    @staticmethod
    def _epoch_rejection(member: ShareMember, received: int) -> str | None:
        """Kafka's ``throwIfShareGroupMemberEpochIsInvalid``: the member's epoch, or the one before it (the answer
        that moved it may have been lost); anything else is FENCED_MEMBER_EPOCH."""
        if received > member.member_epoch:
            return (
                f"The share group member has a greater member epoch ({received}) than the one known by the group "
                f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin."
            )
        if received < member.member_epoch and received != member.previous_member_epoch:
            return (
                f"The share group member has a smaller member epoch ({received}) than the one known by the group "
                f"coordinator ({member.member_epoch}), and it does not match the previous member epoch "
                f"({member.previous_member_epoch}). The member must abandon all its partitions and rejoin."
            )
        return None

    def _leave(self, now_ms: int, request: ShareHeartbeat) -> ShareHeartbeatResult:
        """Kafka's ``shareGroupLeave``: the member goes with its records, and the group epoch moves."""
        if request.member_id not in self.members:
            return _refused(
                request,
                ErrorCode.unknown_member_id,
                f"Member {request.member_id} is not a member of group {self.group_id}.",
            )
        self.fence(now_ms, request.member_id)
        return ShareHeartbeatResult(ErrorCode.none, member_id=request.member_id, member_epoch=LEAVE_EPOCH)

    def fence(self, now_ms: int, member_id: str) -> None:
        """Kafka's ``shareGroupFenceMember``: the member's records get their tombstones and the group epoch moves
        (computed on the topics the others still subscribe to), so the next heartbeats spread its partitions."""
        member = self.members.pop(member_id, None)
        if member is None:
            return
        self._subscriptions_version += 1
        self.deadlines.forget(member_id)
        self.target.pop(member_id, None)
        self._changes.append(ShareAssignmentChanged(member, deleted=True))
        self._changes.append(ShareTargetMemberChanged(member_id, None))
        self._changes.append(ShareMemberChanged(member, deleted=True))
        names = frozenset().union(*(m.subscribed_topic_names for m in self.members.values()))
        self.subscription = {t: meta for t, meta in self.subscription.items() if meta.name in names}
        self._bump_epoch()
        if not self.members:
            self.state_timestamp_ms = now_ms

    # ------------------------------------------------------------------------------------------------ assignment

    def _refresh_subscription(self, topics: ClusterTopics) -> bool:
        """Recomputes the subscribed topics' metadata; True when it changed (the group epoch must move)."""
        refreshed = self._refreshed
        if refreshed is not None and refreshed[0] is topics and refreshed[1] == self._subscriptions_version:
            return False
        self._refreshed = (topics, self._subscriptions_version)
        subscribed: dict[uuid.UUID, TopicMetadata] = {}
        for member in self.members.values():
            for name in member.subscribed_topic_names:
                meta = topics.by_name.get(name)
                if meta is not None:
                    subscribed[meta.topic_id] = meta
        if subscribed == self.subscription:
            return False
        restored, self._restored_hash = self._restored_hash, None
        self.subscription = subscribed
        return restored is None or restored != metadata_hash(subscribed)

    def _bump_epoch(self) -> None:
        self.group_epoch += 1
        self._changes.append(ShareEpochChanged(self.group_epoch, metadata_hash(self.subscription)))

    def _compute_target(self) -> None:
        by_name = {t.name: t.topic_id for t in self.subscription.values()}
        subscriptions = {
            member_id: frozenset(by_name[n] for n in member.subscribed_topic_names if n in by_name)
            for member_id, member in self.members.items()
        }
        result = assign_share(subscriptions, self.subscription, self.target)
        for member_id in subscriptions:
            new = normalized(result.get(member_id, {}))
            if new != normalized(self.target.get(member_id, {})):
                self._changes.append(ShareTargetMemberChanged(member_id, new))
            self.target[member_id] = new
        self.target_epoch = self.group_epoch
        self._changes.append(ShareTargetEpochChanged(self.target_epoch))
        self._note_state_topics()

    def _note_state_topics(self) -> None:
        """Records the partitions the new target hands out for the first time (ShareStateTopicsChanged)."""
        grown = dict(self.state_topics)
        for assignment in self.target.values():
            for topic_id, partitions in assignment.items():
                meta = self.subscription.get(topic_id)
                name, known = grown.get(topic_id, (meta.name if meta is not None else "", frozenset()))
                if not partitions <= known:
                    grown[topic_id] = (name, known | partitions)
        if grown != self.state_topics:
            self.state_topics = grown
            self._changes.append(ShareStateTopicsChanged(dict(grown)))

    # ------------------------------------------------------------------------------------------------ timers

    def next_deadline_ms(self) -> int | None:
        return self.deadlines.next()

    def tick(self, now_ms: int) -> list[str]:
        """Fences the members whose session expired; returns their ids."""
        gone = [member_id for member_id, _ in self.deadlines.expired(now_ms) if member_id in self.members]
        for member_id in gone:
            self.fence(now_ms, member_id)
        return gone

    # ------------------------------------------------------------------------------------------------ lifecycle

    def mark_dead(self, now_ms: int, error: ErrorCode) -> None:
        self.dead = True
        self.state_timestamp_ms = now_ms

    def deletion_changes(self) -> list[ShareChange]:
        """Tombstones for every record of the (empty) group, the group's own last, for DeleteGroups."""
        changes: list[ShareChange] = [ShareTargetMemberChanged(member_id, None) for member_id in self.target]
        changes.append(ShareTargetEpochChanged(self.target_epoch, deleted=True))
        changes.append(ShareStateTopicsChanged({}, deleted=True))
        changes.append(ShareEpochChanged(self.group_epoch, deleted=True))
        return changes

    def describe_members(self) -> Iterator[ShareMember]:
        """The members for ShareGroupDescribe, by member id."""
        for member_id in sorted(self.members):
            yield self.members[member_id]
