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
) -> ConsumerMember:
    """The member after this heartbeat. ``owned`` is what the member reported it owns (None when the heartbeat
    did not say, which counts as still owning everything it was given)."""
    match member.state:
        case MemberState.STABLE | MemberState.UNKNOWN:
            if member.member_epoch != target_epoch:
                return _next(
                    member,
                    member.member_epoch,
                    target_epoch=target_epoch,
                    target=target,
                    owned=owned,
                    owner_epoch=owner_epoch,
                )
            return member
        case MemberState.UNREVOKED_PARTITIONS:
            if _still_owns_any(owned, member.pending_revocation):
                return member
            return _next(
                member,
                member.member_epoch,
                target_epoch=target_epoch,
                target=target,
                owned=owned,
                owner_epoch=owner_epoch,
            )
        case MemberState.UNRELEASED_PARTITIONS:
            return _next(
                member,
                member.member_epoch,
                target_epoch=target_epoch,
                target=target,
                owned=owned,
                owner_epoch=owner_epoch,
            )


def _still_owns_any(owned: Assignment | None, revoking: Assignment) -> bool:
    if owned is None:
        return any(revoking.values())
    return any(owned.get(topic, frozenset()) & partitions for topic, partitions in revoking.items())


def _next(
    member: ConsumerMember,
    member_epoch: int,
    *,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owner_epoch: OwnerEpoch,
) -> ConsumerMember:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    withheld = False
    for topic in set(target) | set(member.assigned):
        wanted = frozenset(target.get(topic, ()))
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
