"""One KIP-848 consumer group: members, the group epoch, the target assignment and each member's way towards it.

Sans-I/O: every call takes the wall clock in milliseconds and, for heartbeats, the cluster's topics as the
coordinator sees them; what must be persisted is queued as :mod:`broker.groups.consumer.changes` for the
coordinator to write (``take_changes``), and ``next_deadline_ms``/``tick`` drive the session and revocation
time-outs.

The three epochs, as in Kafka:

* the **group epoch** moves whenever what the assignor would see changes: a member joins, leaves or changes its
  subscription, or a subscribed topic is created, deleted or grows;
* the **target assignment** is computed by the server-side assignor at the group epoch (its *assignment epoch*);
* each **member epoch** reaches the assignment epoch once the member has given up what the target took from it
  (:mod:`broker.groups.consumer.reconciliation`).
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from broker.groups.consumer.assignment import Assignment, Assignor, AssignorError, MemberSubscription, TopicMetadata
from broker.groups.consumer.changes import (
    Change,
    CurrentAssignmentChanged,
    GroupEpochChanged,
    MemberMetadataChanged,
    TargetEpochChanged,
    TargetMemberChanged,
)
from broker.groups.consumer.cluster_topics import ClusterTopics, metadata_hash
from broker.groups.consumer.deadlines import MemberDeadlines
from broker.groups.consumer.member import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ClassicMetadata,
    ConsumerMember,
    MemberState,
    normalized,
)
from broker.groups.consumer.reconciliation import reconcile
from broker.groups.consumer.rules import (
    Rejection,
    epoch_rejection,
    offset_commit_error,
    offset_fetch_error,
    static_rejection,
    unknown_member,
    unreleased,
)
from broker.groups.consumer.subscribed_topics import member_topic_names, subscribes_to
from broker.groups.offsets import GroupOffsets
from broker.groups.txn_offsets import PendingTxnOffsets

CONSUMER_GROUP_TYPE = "consumer"


class ConsumerGroupState(enum.Enum):
    """Kafka's consumer group states, spelled as tools show them."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    #: ``group.consumer.assignors`` in order, the first being the default.
    assignors: Mapping[str, Assignor] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat as the group reads it; None means "unchanged since the last heartbeat"."""

    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""
    classic: ClassicMetadata | None = None  # a classic member's JoinGroup (consumer.classic_members)


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str = ""
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


class ConsumerGroup:
    """See the module docstring."""

    group_type = CONSUMER_GROUP_TYPE
    protocol_type = "consumer"

    def __init__(self, group_id: str, config: ConsumerGroupConfig, now_ms: int) -> None:
        self.group_id = group_id
        self.config = config
        self.group_epoch = 0
        self.target_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Assignment] = {}
        #: Which member holds each partition (assigned or pending revocation): nobody else may get it meanwhile.
        self._owners: dict[tuple[uuid.UUID, int], str] = {}
        self._static: dict[str, str] = {}
        #: The subscribed topics (id → metadata) the target was, or is about to be, computed on.
        self.subscription: dict[uuid.UUID, TopicMetadata] = {}
        self.deadlines = MemberDeadlines()  # classic members' requests move theirs too (consumer.classic_members)
        #: Moves whenever a member's subscription may have changed (joins, leaves, new names or regex): the
        #: subscribed topics are recomputed only then, or when the cluster's topics change.
        self._subscriptions_version = 0
        self._refreshed: tuple[object, int] | None = None
        self._changes: list[Change] = []
        self.offsets = GroupOffsets()
        self.pending_txn_offsets = PendingTxnOffsets()
        self.dead = False
        self.state_timestamp_ms = now_ms
        self.assignor_name = ""
        #: The subscribed topics' hash a loaded group was stored with, until its first refresh (``restore``).
        self._restored_hash: int | None = None
        #: What each member's regex matched when the subscription was last refreshed.
        self._regex_matches: dict[str, frozenset[str]] = {}

    @classmethod
    def restored(
        cls,
        group_id: str,
        config: ConsumerGroupConfig,
        now_ms: int,
        *,
        group_epoch: int,
        metadata_hash: int,
        target_epoch: int,
        target: Mapping[str, Assignment],
        members: Sequence[ConsumerMember],
    ) -> ConsumerGroup:
        """The group as a coordinator loading ``__consumer_offsets`` finds it: every member gets a fresh session
        (and, if it was revoking, a fresh revocation time-out), as Kafka does on load."""
        group = cls(group_id, config, now_ms)
        group.group_epoch = group_epoch
        group.target_epoch = target_epoch
        group.target = {m: dict(a) for m, a in target.items()}
        group._restored_hash = metadata_hash
        for member in members:
            group._put_member(member)
            group.deadlines.set_session(member.member_id, now_ms + member.session_ms(config.session_timeout_ms))
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                group.deadlines.set_revocation(
                    member.member_id, now_ms + max(member.rebalance_timeout_ms, 0), member.member_epoch
                )
        return group

    # ------------------------------------------------------------------------------------------------ state

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.target_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.member_epoch != self.target_epoch or member.state is not MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def is_empty(self) -> bool:
        return not self.members

    def take_changes(self) -> list[Change]:
        changes, self._changes = self._changes, []
        return changes

    def owner_of(self, topic_id: uuid.UUID, partition: int) -> str | None:
        return self._owners.get((topic_id, partition))

    # ------------------------------------------------------------------------------------------------ heartbeat

    def heartbeat(self, now_ms: int, request: HeartbeatRequest, topics: ClusterTopics) -> HeartbeatResult:
        """Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``: find (or create, or take over) the member, bump
        the group epoch if what the assignor sees changed, recompute the target if behind, then move the member
        one step towards it (``reconcile``)."""
        if self.dead:
            return HeartbeatResult(ErrorCode.not_coordinator, member_id=request.member_id)
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(now_ms, request)
        if request.member_id not in self.members and len(self.members) >= self.config.max_size:
            return HeartbeatResult(
                ErrorCode.group_max_size_reached,
                f"group {self.group_id} has reached its maximum capacity of {self.config.max_size} members",
                member_id=request.member_id,
            )
        found = self._member_for(request)
        if isinstance(found, Rejection):
            return HeartbeatResult(found.error, found.message, member_id=request.member_id)
        member, is_new = found
        updated = self._with_request(member, request)
        # Kafka's hasMemberSubscriptionChanged: only the subscribed topics (names or regex) move the group epoch.
        bump = self.group_epoch == 0 or updated.subscription_differs(member)
        if is_new or updated.metadata_differs(member):
            self._changes.append(MemberMetadataChanged(updated))
        self._put_member(updated)
        if self._refresh_subscription(topics):
            bump = True
        if bump:
            self._bump_epoch()
        if self.group_epoch > self.target_epoch:
            self._compute_target()
        reconciled = reconcile(
            updated,
            target_epoch=self.target_epoch,
            target=self.target.get(updated.member_id, {}),
            owned=request.owned,
            owner_epoch=lambda t, p: self._owner_epoch(updated.member_id, t, p),
            subscribed=self._subscribed_ids(updated, topics),
            subscription_changed=updated.subscription_differs(member),
        )
        if is_new or reconciled.assignment_differs(updated):
            self._changes.append(CurrentAssignmentChanged(reconciled))
            self._put_member(reconciled)
            if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                deadline = now_ms + max(reconciled.rebalance_timeout_ms, 0)
                self.deadlines.set_revocation(reconciled.member_id, deadline, reconciled.member_epoch)
            else:
                self.deadlines.clear_revocation(reconciled.member_id)
        self.deadlines.set_session(reconciled.member_id, now_ms + reconciled.session_ms(self.config.session_timeout_ms))
        full_request = (
            request.rebalance_timeout_ms != -1
            and (request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None)
            and request.owned is not None
        )
        send_assignment = (
            request.member_epoch == JOIN_EPOCH
            or full_request
            or normalized(reconciled.assigned) != normalized(member.assigned)
        )
        return HeartbeatResult(
            ErrorCode.none,
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=normalized(reconciled.assigned) if send_assignment else None,
        )

    def _member_for(self, request: HeartbeatRequest) -> tuple[ConsumerMember, bool] | Rejection:
        """The member the heartbeat speaks for and whether it is new (Kafka's getOrMaybeSubscribeDynamic/
        StaticConsumerGroupMember). A known member id sending epoch 0 keeps its epoch and assignment (KIP-848's
        rejoin after being fenced); a static member joining under a new member id takes over the one that left."""
        instance_id = request.instance_id
        if instance_id is None:
            member = self.members.get(request.member_id)
            if member is None:
                if request.member_epoch != JOIN_EPOCH:
                    return unknown_member(request.member_id, self.group_id)
                return ConsumerMember(member_id=request.member_id), True
            rejected = epoch_rejection(member, request.member_epoch, request.owned)
            return rejected if rejected is not None else (member, False)
        holder = self.members.get(self._static.get(instance_id, ""))
        if request.member_epoch != JOIN_EPOCH:
            rejected = static_rejection(holder, request.member_id, instance_id)
            if rejected is not None or holder is None:
                return rejected or unknown_member(request.member_id, self.group_id)
            rejected = epoch_rejection(holder, request.member_epoch, request.owned)
            return rejected if rejected is not None else (holder, False)
        if holder is None:
            existing = self.members.get(request.member_id)
            return (existing, False) if existing is not None else (ConsumerMember(member_id=request.member_id), True)
        rejected = unreleased(holder, request.member_id, instance_id)
        if rejected is not None:
            return rejected
        return self._replace_static(holder, request.member_id), False

    def _replace_static(self, holder: ConsumerMember, member_id: str) -> ConsumerMember:
        """Kafka's static member replacement: the returning instance gets the old member's subscription,
        assignment and share of the target under its new member id, at epoch 0 (reconciliation then brings it to
        the target epoch); the old member's records are tombstoned. The group epoch does not move."""
        target = self.target.get(holder.member_id, {})
        self._remove_member(holder.member_id, tombstones=True)
        taken = replace(holder, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        self._changes.append(MemberMetadataChanged(taken))
        self.target[member_id] = target
        self._changes.append(TargetMemberChanged(member_id, target))
        self._changes.append(CurrentAssignmentChanged(taken))
        self._put_member(taken)
        return taken

    def _with_request(self, member: ConsumerMember, request: HeartbeatRequest) -> ConsumerMember:
        return replace(
            member,
            instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(
                request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms
            ),
            subscribed_topic_names=(
                frozenset(request.subscribed_topic_names)
                if request.subscribed_topic_names is not None
                else member.subscribed_topic_names
            ),
            subscribed_topic_regex=(
                (request.subscribed_topic_regex or None)
                if request.subscribed_topic_regex is not None
                else member.subscribed_topic_regex
            ),
            server_assignor=(
                (request.server_assignor or None) if request.server_assignor is not None else member.server_assignor
            ),
            client_id=request.client_id,
            client_host=request.client_host,
            classic=request.classic,
        )

    def _leave(self, now_ms: int, request: HeartbeatRequest) -> HeartbeatResult:
        """Kafka's ``consumerGroupLeave``: a dynamic member (or a static one sending -1) is fenced, which frees its
        partitions and bumps the group epoch; a static member sending -2 only steps out (its epoch becomes -2,
        what it was revoking is released) and keeps its partitions until its session expires or its instance id
        comes back under a new member id."""
        instance_id = request.instance_id
        if instance_id is None:
            member = self.members.get(request.member_id)
            rejected = unknown_member(request.member_id, self.group_id) if member is None else None
        else:
            member = self.members.get(self._static.get(instance_id, ""))
            rejected = static_rejection(member, request.member_id, instance_id)
        if rejected is not None or member is None:
            error = rejected or unknown_member(request.member_id, self.group_id)
            return HeartbeatResult(
                error.error, error.message, member_id=request.member_id, member_epoch=request.member_epoch
            )
        if instance_id is not None and request.member_epoch == STATIC_LEAVE_EPOCH:
            left = replace(member, member_epoch=STATIC_LEAVE_EPOCH, pending_revocation={})
            self._put_member(left)
            self._changes.append(CurrentAssignmentChanged(left))
            self.deadlines.clear_revocation(member.member_id)
        else:
            self.fence(now_ms, member.member_id)
        return HeartbeatResult(ErrorCode.none, member_id=member.member_id, member_epoch=request.member_epoch)

    def fence(self, now_ms: int, member_id: str) -> None:
        """Kafka's ``consumerGroupFenceMember``: the member and its records go, and the group epoch moves (with the
        subscribed topics recomputed without it), so the next heartbeat hands its partitions to the others."""
        self._remove_member(member_id, tombstones=True)
        self._prune_subscription()
        self._bump_epoch()
        if not self.members:
            self.state_timestamp_ms = now_ms

    # ------------------------------------------------------------------------------------------------ members

    def _put_member(self, member: ConsumerMember) -> None:
        old = self.members.get(member.member_id)
        if (
            old is None
            or old.subscribed_topic_names != member.subscribed_topic_names
            or old.subscribed_topic_regex != member.subscribed_topic_regex
        ):
            self._subscriptions_version += 1
        if old is not None:
            for tp in old.owned_partitions():
                if self._owners.get(tp) == member.member_id:
                    del self._owners[tp]
            if old.instance_id not in (None, member.instance_id) and self._static.get(old.instance_id) == old.member_id:
                del self._static[old.instance_id]  # the member took another instance id: the old one is free
        self.members[member.member_id] = member
        for tp in member.owned_partitions():
            self._owners[tp] = member.member_id
        if member.instance_id is not None:
            self._static[member.instance_id] = member.member_id

    def _remove_member(self, member_id: str, *, tombstones: bool) -> None:
        member = self.members.pop(member_id, None)
        if member is None:
            return
        self._subscriptions_version += 1
        for tp in member.owned_partitions():
            if self._owners.get(tp) == member_id:
                del self._owners[tp]
        if member.instance_id is not None and self._static.get(member.instance_id) == member_id:
            del self._static[member.instance_id]
        self.deadlines.forget(member_id)
        self.target.pop(member_id, None)
        if tombstones:
            self._changes.append(CurrentAssignmentChanged(member, deleted=True))
            self._changes.append(TargetMemberChanged(member_id, None))
            self._changes.append(MemberMetadataChanged(member, deleted=True))

    def _owner_epoch(self, asking: str, topic_id: uuid.UUID, partition: int) -> int | None:
        owner = self._owners.get((topic_id, partition))
        if owner is None or owner == asking:
            return None
        return self.members[owner].member_epoch

    # ------------------------------------------------------------------------------------------------ assignment

    def _subscribed_ids(self, member: ConsumerMember, topics: ClusterTopics) -> frozenset[uuid.UUID]:
        """The ids of the topics ``member`` subscribes to that exist now (by name or through its regex)."""
        names = member_topic_names(member, self._regex_matches)
        return frozenset(topics.by_name[n].topic_id for n in names if n in topics.by_name)

    def _refresh_subscription(self, topics: ClusterTopics) -> bool:
        """Recomputes the subscribed topics' metadata; True when it changed (the group epoch must move). Nothing to
        do when neither the cluster's topics nor any member's subscription changed since the last time."""
        refreshed = self._refreshed
        if refreshed is not None and refreshed[0] is topics.resolution and refreshed[1] == self._subscriptions_version:
            return False
        self._refreshed = (topics.resolution, self._subscriptions_version)
        self._regex_matches = {
            m.subscribed_topic_regex: topics.matching(m.subscribed_topic_regex)
            for m in self.members.values()
            if m.subscribed_topic_regex
        }
        subscribed: dict[uuid.UUID, TopicMetadata] = {}
        for member in self.members.values():
            for name in member_topic_names(member, self._regex_matches):
                meta = topics.by_name.get(name)
                if meta is not None:
                    subscribed[meta.topic_id] = meta
        if subscribed == self.subscription:
            return False
        restored, self._restored_hash = self._restored_hash, None
        self.subscription = subscribed
        # A group just loaded knows its topics only by their hash: the same topics are no change.
        return restored is None or restored != metadata_hash(subscribed)

    def _prune_subscription(self) -> None:
        """Drops the topics only departed members subscribed to, as Kafka computes the metadata hash of a fenced
        member's epoch bump without it (and so the next heartbeat does not bump the epoch a second time)."""
        regexes = {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}
        self._regex_matches = {r: ts for r, ts in self._regex_matches.items() if r in regexes}
        names: set[str] = set()
        for member in self.members.values():
            names |= member_topic_names(member, self._regex_matches)
        self.subscription = {t: meta for t, meta in self.subscription.items() if meta.name in names}

    def refresh_topics(self, topics: ClusterTopics) -> None:
        """The cluster's topics changed (a topic matching a subscription was created or deleted, or grew): the
        group epoch moves so that the next heartbeat computes a new target."""
        if self.members and self._refresh_subscription(topics):
            self._bump_epoch()

    def _bump_epoch(self) -> None:
        self.group_epoch += 1
        self._changes.append(GroupEpochChanged(self.group_epoch, metadata_hash(self.subscription)))

    def _pick_assignor(self) -> Assignor | None:
        assignors = self.config.assignors
        chosen = Counter(
            m.server_assignor
            for m in self.members.values()
            if m.server_assignor is not None and m.server_assignor in assignors
        )
        if chosen:
            # The assignor most members asked for; a tie goes to the first name, so every coordinator picks alike.
            return assignors[max(sorted(chosen), key=lambda n: chosen[n])]
        return next(iter(assignors.values()), None)

    def _compute_target(self) -> None:
        assignor = self._pick_assignor()
        if assignor is None:
            return
        by_name = {t.name: t.topic_id for t in self.subscription.values()}
        names = frozenset(by_name)
        specs = {
            member_id: MemberSubscription(
                instance_id=member.instance_id,
                rack_id=member.rack_id,
                subscribed_topic_ids=frozenset(
                    by_name[n] for n in member_topic_names(member, self._regex_matches) & names
                ),
                current=self.target.get(member_id, {}),
            )
            for member_id, member in self.members.items()
        }
        try:
            result = assignor.assign(specs, self.subscription)
        except AssignorError:
            return
        for member_id in specs:
            new = normalized(result.get(member_id, {}))
            if new != normalized(self.target.get(member_id, {})):
                self._changes.append(TargetMemberChanged(member_id, new))
            self.target[member_id] = new
        self.target_epoch = self.group_epoch
        self.assignor_name = assignor.name
        self._changes.append(TargetEpochChanged(self.target_epoch))

    # ------------------------------------------------------------------------------------------------ timers

    def next_deadline_ms(self) -> int | None:
        return self.deadlines.next()

    def tick(self, now_ms: int) -> list[str]:
        """Fences members whose session expired, or who did not revoke within their rebalance time-out (still at
        the epoch they were told to revoke at); returns their ids. Each is its own epoch bump, as each of Kafka's
        timers is its own operation."""
        gone = []
        for member_id, revoking_at in self.deadlines.expired(now_ms):
            member = self.members.get(member_id)
            if member is not None and (revoking_at is None or member.member_epoch == revoking_at):
                gone.append(member_id)
        for member_id in gone:
            self.fence(now_ms, member_id)
        return gone

    # ------------------------------------------------------------------------------------------------ offsets

    def validate_offset_commit(self, member_id: str, member_epoch: int, *, api_version: int) -> ErrorCode:
        """Kafka's ``ConsumerGroup.validateOffsetCommit``: a negative epoch (admin tools, consumers without group
        management) may commit only while the group is empty; a member only at its current epoch, with
        OffsetCommit v9+."""
        if self.dead:
            return ErrorCode.coordinator_not_available
        if member_epoch < 0 and not self.members:
            return ErrorCode.none
        return offset_commit_error(self.members.get(member_id), member_epoch, api_version=api_version)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """Kafka's ``ConsumerGroup.validateOffsetFetch`` (OffsetFetch v9+)."""
        member = self.members.get(member_id) if member_id is not None else None
        return offset_fetch_error(member_id, member, member_epoch)

    def is_subscribed_to(self, topic: str) -> bool:
        """From the members themselves, not the refreshed topics: a group just loaded has not refreshed them."""
        return subscribes_to(self.members.values(), self._regex_matches, topic)

    @property
    def may_delete_offsets(self) -> bool:
        """OffsetDelete and expiry may remove offsets of topics nobody subscribes to: subscriptions are known."""
        return not self.dead

    @property
    def empty_since_ms(self) -> int | None:
        """When the group last became empty (its offsets' retention counts from then), None while it has
        members."""
        return self.state_timestamp_ms if not self.members else None

    @property
    def is_disposable(self) -> bool:
        """Never had a member and holds no offsets (a join that failed): nothing was written, nothing to keep. A
        group whose members all left stays, Empty, as in Kafka, until the offsets' retention check deletes it once
        it has no offsets left."""
        return (
            not self.members and self.group_epoch == 0 and not len(self.offsets) and not self.pending_txn_offsets
        )

    # ------------------------------------------------------------------------------------------------ lifecycle

    def mark_dead(self, now_ms: int, error: ErrorCode) -> None:
        self.dead = True
        self.state_timestamp_ms = now_ms

    def deletion_changes(self) -> list[Change]:
        """Tombstones for every record of the (empty) group, for DeleteGroups."""
        changes: list[Change] = [TargetMemberChanged(member_id, None) for member_id in self.target]
        changes.append(TargetEpochChanged(self.target_epoch, deleted=True))
        changes.append(GroupEpochChanged(self.group_epoch, deleted=True))
        return changes

    def describe_members(self) -> Iterator[tuple[ConsumerMember, Assignment]]:
        """(member, its share of the target) for ConsumerGroupDescribe, by member id."""
        for member_id in sorted(self.members):
            yield self.members[member_id], self.target.get(member_id, {})
