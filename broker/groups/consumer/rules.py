"""Kafka's checks of a KIP-848 group member's epoch and identity, as pure functions of the member the group holds
and what the request says (``GroupMetadataManager.throwIfConsumerGroupMemberEpochIsInvalid``,
``throwIfInstanceIdIsUnreleased``/``throwIfInstanceIdIsFenced``/``throwIfStaticMemberIsUnknown`` and
``ConsumerGroup.validateOffsetCommit``/``validateOffsetFetch``).

Kept apart from the group so that each rule reads as one function and the group only decides what happens after a
request passed them. A rule answers None (accepted) or a :class:`Rejection`, the error code and the message Kafka
would give the client.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.groups.consumer.assignment import Assignment
from broker.groups.consumer.member import JOIN_EPOCH, STATIC_LEAVE_EPOCH, ConsumerMember


@dataclass(frozen=True, slots=True)
class Rejection:
    error: ErrorCode
    message: str


def is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    """Kafka's ``isSubset``: a heartbeat that did not report what it owns is no proof of anything (False)."""
    if owned is None:
        return False
    for topic, partitions in owned.items():
        have = assigned.get(topic)
        if have is None or not frozenset(partitions) <= frozenset(have):
            return False
    return True


def epoch_rejection(member: ConsumerMember, received: int, owned: Assignment | None) -> Rejection | None:
    """FENCED_MEMBER_EPOCH unless the member sends its epoch, or the epoch before it while owning only partitions
    it is still given (the answer that moved it may have been lost). Epoch 0 is a (re)join and always passes."""
    if received in (JOIN_EPOCH, member.member_epoch):
        return None
    if received > member.member_epoch:
        relation = "greater"
    elif received != member.previous_member_epoch or not is_subset(owned, member.assigned):
        relation = "smaller"
    else:
        return None
    return Rejection(
        ErrorCode.fenced_member_epoch,
        f"member {member.member_id} has a {relation} member epoch ({received}) than the one known by the group "
        f"coordinator ({member.member_epoch}); it must abandon all its partitions and rejoin",
    )


def unknown_member(member_id: str, group_id: str) -> Rejection:
    return Rejection(ErrorCode.unknown_member_id, f"member {member_id} is not a member of group {group_id}")


def static_rejection(holder: ConsumerMember | None, member_id: str, instance_id: str) -> Rejection | None:
    """A static member's heartbeat (not a join): its instance id must be known and held by this very member id."""
    if holder is None:
        return Rejection(ErrorCode.unknown_member_id, f"instance id {instance_id} is unknown")
    if holder.member_id != member_id:
        return Rejection(
            ErrorCode.fenced_instance_id,
            f"static member {member_id} with instance id {instance_id} was fenced by member {holder.member_id}",
        )
    return None


def unreleased(holder: ConsumerMember, member_id: str, instance_id: str) -> Rejection | None:
    """A static member joining (epoch 0) takes the instance id over only once its holder left with epoch -2."""
    if holder.member_epoch == STATIC_LEAVE_EPOCH:
        return None
    return Rejection(
        ErrorCode.unreleased_instance_id,
        f"static member {member_id} with instance id {instance_id} cannot join the group because the instance id "
        f"is owned by member {holder.member_id}",
    )


def offset_commit_error(member: ConsumerMember | None, member_epoch: int, *, api_version: int) -> ErrorCode:
    """OffsetCommit from ``member`` (None: not in the group, which is not empty): a KIP-848 member must commit
    with OffsetCommit v9+ at its current epoch; a classic member, with any version, at the generation its last
    JoinGroup answered (its member epoch)."""
    if member is None:
        return ErrorCode.unknown_member_id
    if api_version < 9 and member.classic is None:
        return ErrorCode.unsupported_version
    return _epoch_error(member, member_epoch)


def _epoch_error(member: ConsumerMember, member_epoch: int) -> ErrorCode:
    """Kafka's ``validateMemberEpoch``: a classic member's wrong generation is ILLEGAL_GENERATION."""
    if member_epoch == member.member_epoch:
        return ErrorCode.none
    return ErrorCode.illegal_generation if member.classic is not None else ErrorCode.stale_member_epoch


def offset_fetch_error(member_id: str | None, member: ConsumerMember | None, member_epoch: int) -> ErrorCode:
    """OffsetFetch v9+: without a member id and with a negative epoch (admin tools, classic clients) anything may
    be read; otherwise the member must be in the group at that epoch."""
    if member_id is None and member_epoch < 0:
        return ErrorCode.none
    if member is None:
        return ErrorCode.unknown_member_id
    return _epoch_error(member, member_epoch)
