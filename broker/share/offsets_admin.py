"""The group coordinator's side of DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets
(KIP-932's ``kafka-share-groups.sh --describe --offsets``, ``--reset-offsets``, ``--delete-offsets``): Kafka's
rules about the group, applied before each partition's leader is asked (``broker.share.state_rpc``).

As Kafka's GroupCoordinatorService: a group id that is not a share group's answers GROUP_ID_NOT_FOUND, except
that altering the offsets of a group that does not exist yet creates it, empty (Kafka 4.2, KAFKA-19662: offsets set
before the group is first used); the start offsets can be altered or deleted only while the group has no members
(NON_EMPTY_GROUP otherwise: a member holds acquired records whose offsets a reset would pull from under it); a
topic the cluster does not know answers UNKNOWN_TOPIC_OR_PARTITION when altered or deleted, and no start offset
(-1, without an error) when described. While the cluster's ``share.version`` is 0 the
APIs answer UNSUPPORTED_VERSION, as Kafka's do. Describe without topics means every share partition of the group
that has state.

Whether a group exists and whether it is empty is the share group membership's to say (:class:`ShareGroupStates`,
``broker.groups.share_membership``), which also raises NOT_COORDINATOR when this broker does not coordinate it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from kio.schema.errors import ErrorCode

from broker.broker_context import BrokerContext
from broker.share.state_rpc import ShareStateAccess, Summary, TopicPartition
from wire.errors import KafkaError

GroupState = Literal["empty", "non-empty"]


class ShareGroupStates(Protocol):
    """What the offset admin APIs ask of the share group membership (the share plan's H-members)."""

    def share_group_state(self, group_id: str) -> GroupState | None:
        """None: no share group has this id (none at all, or a classic/consumer group has it). Raises
        ``KafkaError`` NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS when this broker cannot answer for it."""
        ...

    async def ensure_share_group(self, group_id: str) -> GroupState | None:
        """As :meth:`share_group_state`, but a group id no group has yet becomes an empty share group, persisted
        (Kafka's getOrMaybeCreatePersistedShareGroup), before AlterShareGroupOffsets sets its offsets."""
        ...

    def share_group_topics(self, group_id: str) -> Collection[str]:
        """The topics a describe without topics covers: those the group has share-partition state on (Kafka's
        ShareGroupStatePartitionMetadata initialized topics) or, lacking that record, those it subscribes to."""
        ...


@dataclass(frozen=True, slots=True)
class DescribedTopic:
    name: str
    #: Each requested partition's summary (no state, :data:`NO_DATA`, for a topic or partition not in the cluster).
    partitions: dict[int, Summary]


class ShareOffsetsAdmin:
    def __init__(
        self,
        context: BrokerContext,
        access: ShareStateAccess,
        groups: ShareGroupStates | None = None,
        enabled: Callable[[], bool] = lambda: True,
    ) -> None:
        self._context = context
        self.access = access
        #: The share group membership; None until share groups exist on this broker (every group is then unknown).
        self.groups = groups
        #: Whether the cluster's ``share.version`` is at least 1.
        self.enabled = enabled

    def _group(self, group_id: str) -> tuple[ErrorCode, GroupState | None]:
        if not self.enabled():
            return ErrorCode.unsupported_version, None
        if not group_id:
            return ErrorCode.invalid_group_id, None
        if self.groups is None:
            return ErrorCode.group_id_not_found, None
        try:
            state = self.groups.share_group_state(group_id)
        except KafkaError as exc:
            return exc.code, None
        return (ErrorCode.group_id_not_found, None) if state is None else (ErrorCode.none, state)

    async def _group_to_alter(self, group_id: str) -> tuple[ErrorCode, GroupState | None]:
        error, state = self._group(group_id)
        if error is not ErrorCode.group_id_not_found or self.groups is None:
            return error, state
        try:
            state = await self.groups.ensure_share_group(group_id)
        except KafkaError as exc:
            return exc.code, None
        return (ErrorCode.group_id_not_found, None) if state is None else (ErrorCode.none, state)

    async def describe(
        self, group_id: str, topics: Sequence[tuple[str, Sequence[int]]] | None
    ) -> tuple[ErrorCode, list[DescribedTopic]]:
        """The group's start offsets, epochs and lag per partition; a group-level error alone when it fails."""
        error, _state = self._group(group_id)
        if error is not ErrorCode.none:
            return error, []
        image = self._context.controller.image
        everything = topics is None
        if topics is None:
            assert self.groups is not None
            topics = [
                (name, sorted(image.topics_by_name[name].partitions))
                for name in sorted(self.groups.share_group_topics(group_id))
                if name in image.topics_by_name
            ]
        known = [(t, p) for t, parts in topics for p in parts if image.partition(t, p) is not None]
        found = await self.access.summaries(group_id, known)
        unknown = Summary(error=ErrorCode.unknown_topic_or_partition)
        described = [
            DescribedTopic(name, {p: found.get((name, p), unknown) for p in parts}) for name, parts in topics
        ]
        if everything:  # as Kafka: only the share partitions that have state (or could not be read)
            described = [
                DescribedTopic(t.name, kept)
                for t in described
                if (kept := {p: s for p, s in t.partitions.items() if s.start_offset >= 0 or _failed(s)})
            ]
        # As Kafka 4.2's GroupCoordinatorService, a partition the cluster does not know or whose state could not be
        # read is an absence of data, not an error (as OffsetFetch answers): start offset -1, lag -1, no error code.
        # The Java admin client turns a partition's error code into a failed listShareGroupOffsets future, which
        # Kafka never does here.
        return ErrorCode.none, [
            DescribedTopic(t.name, {p: NO_DATA if _failed(s) else s for p, s in t.partitions.items()})
            for t in described
        ]

    async def alter(
        self, group_id: str, wanted: Sequence[tuple[str, Sequence[tuple[int, int]]]]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """Sets start offsets ((topic, [(partition, start offset)])) of an empty group, made if it does not exist;
        per-partition codes."""
        error = self._changeable(*await self._group_to_alter(group_id))
        if error is not ErrorCode.none:
            return error, {}
        image = self._context.controller.image
        results: dict[TopicPartition, ErrorCode] = {}
        changes: dict[TopicPartition, int] = {}
        for topic, parts in wanted:
            for partition, start in parts:
                if image.partition(topic, partition) is None:
                    results[(topic, partition)] = ErrorCode.unknown_topic_or_partition
                elif start < 0:
                    results[(topic, partition)] = ErrorCode.invalid_request
                else:
                    changes[(topic, partition)] = start
        results.update(await self.access.resets(group_id, changes))
        return ErrorCode.none, results

    async def delete(self, group_id: str, topics: Sequence[str]) -> tuple[ErrorCode, dict[str, ErrorCode]]:
        """Drops an empty group's state on every partition of each topic; one code per topic (its first failure)."""
        error = self._changeable(*self._group(group_id))
        if error is not ErrorCode.none:
            return error, {}
        image = self._context.controller.image
        results: dict[str, ErrorCode] = {}
        wanted: list[TopicPartition] = []
        for name in topics:
            topic = image.topics_by_name.get(name)
            if topic is None:
                results[name] = ErrorCode.unknown_topic_or_partition
            else:
                wanted.extend((name, p) for p in sorted(topic.partitions))
        for (name, _p), code in sorted((await self.access.deletes(group_id, wanted)).items()):
            if results.get(name, ErrorCode.none) is ErrorCode.none:
                results[name] = code
        for name in topics:
            results.setdefault(name, ErrorCode.none)  # a topic of no partitions
        return ErrorCode.none, results

    @staticmethod
    def _changeable(error: ErrorCode, state: GroupState | None) -> ErrorCode:
        if error is ErrorCode.none and state != "empty":
            return ErrorCode.non_empty_group
        return error


#: A described partition with no state to show (Kafka's PartitionFactory sentinels).
NO_DATA: Final = Summary()


def _failed(summary: Summary) -> bool:
    return summary.error is not ErrorCode.none
