"""Moving one member from its current assignment towards its share of the target assignment (Kafka's
``CurrentAssignmentBuilder``), one heartbeat at a time.

The rule that keeps a partition from being consumed twice: a member is first told to give up what the target
takes away from it (``UNREVOKED_PARTITIONS``, at its old epoch); only once it reports in a heartbeat that it no
longer owns those partitions does it move to the target epoch. At the target epoch it gets every new partition
nobody else still holds; a partition still held (by a member yet to revoke it) is withheld, and the member waits in
``UNRELEASED_PARTITIONS`` until a later heartbeat finds it free.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from broker.groups.consumer.assignment import Assignment
from broker.groups.consumer.member import ConsumerMember, MemberState

#: The epoch of the member that holds a partition now, or None when nobody does.
OwnerEpoch = Callable[[uuid.UUID, int], "int | None"]


def reconcile(
    member: ConsumerMember,
    *,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owner_epoch: OwnerEpoch,
    subscribed: frozenset[uuid.UUID] | None = None,
    subscription_changed: bool = False,
) -> ConsumerMember:
    """The member after this heartbeat. ``owned`` is what the member reported it owns (None when the heartbeat
    did not say, which counts as still owning everything it was given). ``subscribed`` is the ids of the topics
    the member subscribes to now (None: do not check): the target of any other topic counts as empty, and when
    ``subscription_changed`` what the member holds of them is taken back at once, even before a new target (Kafka
    4.2's ``hasSubscriptionChanged`` in CurrentAssignmentBuilder)."""
    step = partial(
        _next, target_epoch=target_epoch, target=target, owned=owned, owner_epoch=owner_epoch, subscribed=subscribed
    )
    match member.state:
        case MemberState.STABLE | MemberState.UNKNOWN:
            if member.member_epoch != target_epoch:
                return step(member)
            if subscription_changed and subscribed is not None:
                return _drop_unsubscribed(member, subscribed, owned)
            return member
        case MemberState.UNREVOKED_PARTITIONS:
            if _still_owns_any(owned, member.pending_revocation):
                if subscription_changed and subscribed is not None:
                    return _drop_unsubscribed(member, subscribed, owned)
                return member
            return step(member)
        case MemberState.UNRELEASED_PARTITIONS:
            return step(member)


def _drop_unsubscribed(
    member: ConsumerMember, subscribed: frozenset[uuid.UUID], owned: Assignment | None
) -> ConsumerMember:
    """Kafka's ``updateCurrentAssignment``: the partitions of topics the member no longer subscribes to move to
    pending revocation (or simply go, if the member already let them go); its epoch does not change."""
    dropped = {t: frozenset(ps) for t, ps in member.assigned.items() if t not in subscribed and ps}
    if not dropped:
        return member
    assigned = {t: frozenset(ps) for t, ps in member.assigned.items() if t not in dropped}
    revoking = {t: frozenset(ps) for t, ps in member.pending_revocation.items()}
    for topic, partitions in dropped.items():
        revoking[topic] = revoking.get(topic, frozenset()) | partitions
    if _still_owns_any(owned, revoking):
        return replace(member, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned, pending_revocation=revoking)
    return replace(member, assigned=assigned)


def _still_owns_any(owned: Assignment | None, revoking: Assignment) -> bool:
    if owned is None:
        return any(revoking.values())
    return any(owned.get(topic, frozenset()) & partitions for topic, partitions in revoking.items())


def _next(
    member: ConsumerMember,
    *,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owner_epoch: OwnerEpoch,
    subscribed: frozenset[uuid.UUID] | None,
) -> ConsumerMember:
    """Kafka's ``computeNextAssignment``: revoke what the target took away (staying at the member's epoch), or
    else move to the target epoch with every new partition nobody else holds."""
    member_epoch = member.member_epoch
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    withheld = False
    for topic in set(target) | set(member.assigned):
        wanted = frozenset(target.get(topic, ())) if subscribed is None or topic in subscribed else frozenset()
        current = frozenset(member.assigned.get(topic, ()))
        kept = current & wanted
        gone = current - wanted
        new = set()
        for partition in wanted - current:
            holder = owner_epoch(topic, partition)
            if holder is None:
                new.add(partition)
            else:
                withheld = True
        if gone:
            revoking[topic] = gone
        if kept or new:
            assigned[topic] = kept | new
    if revoking and _still_owns_any(owned, revoking):
        # Give up first, at the old epoch; what is kept stays, nothing new is handed out yet.
        kept_only = {t: ps & frozenset(member.assigned.get(t, ())) for t, ps in assigned.items()}
        return replace(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            member_epoch=member_epoch,
            previous_member_epoch=member_epoch,
            assigned={t: ps for t, ps in kept_only.items() if ps},
            pending_revocation=revoking,
        )
    return replace(
        member,
        state=MemberState.UNRELEASED_PARTITIONS if withheld else MemberState.STABLE,
        member_epoch=target_epoch,
        previous_member_epoch=member_epoch,
        assigned=assigned,
        pending_revocation={},
    )
