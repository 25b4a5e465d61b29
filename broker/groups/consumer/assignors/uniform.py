"""The ``uniform`` assignor, Kafka's default for KIP-848 consumer groups: balanced, sticky and deterministic.

When every member subscribes to the same topics (the common case) the group's partitions are dealt out so that
partition counts differ by at most one, each member keeping as many of its current partitions as that allows: a
member joining takes its share from the others and nothing else moves; a member leaving has its partitions spread
over the rest. When subscriptions differ, ``uniform_heterogeneous`` balances topic by topic as Kafka's
UniformHeterogeneousAssignmentBuilder does.

Rack-awareness (``racks``) is a Fjord addition to Kafka 4.2's assignor, after Kafka 3.7's rack-aware uniform
assignment: with all subscriptions equal the priorities are balance, then rack, then stickiness, so a partition
held by a member outside its racks goes to a member in one of them that has room under its quota.

Cost: linear in partitions plus members, with a heap per rack when racks apply; no step compares every member with
every partition.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Mapping

from broker.groups.consumer.assignment import AssignorError, MemberSubscription, TopicMetadata
from broker.groups.consumer.assignors.racks import RackPlacement
from broker.groups.consumer.assignors.uniform_heterogeneous import assign_heterogeneous
from broker.groups.consumer.assignors.view import (
    GroupAssignment,
    GroupView,
    as_assignment,
    current_partitions,
    empty_assignment,
    view_of,
)

Partition = tuple[uuid.UUID, int]


class UniformAssignor:
    """Kafka's ``uniform`` server-side assignor (``org.apache.kafka.coordinator.group.assignor.UniformAssignor``)."""

    @property
    def name(self) -> str:
        return "uniform"

    def assign(
        self, members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, TopicMetadata]
    ) -> GroupAssignment:
        view = view_of(members, topics)
        if not view.partition_counts:
            return empty_assignment(members)
        racks = RackPlacement([members[m].rack_id for m in view.member_ids], topics, view.partition_counts)
        if view.homogeneous:
            return _Homogeneous(view, members, racks).build()
        return assign_heterogeneous(view, members, racks)


class _Homogeneous:
    """Every member subscribes to every topic of ``view``: quotas of ``total // members`` partitions, the remainder
    one extra each to as many members, and each member's current partitions kept up to its quota."""

    def __init__(self, view: GroupView, members: Mapping[str, MemberSubscription], racks: RackPlacement) -> None:
        self._view = view
        self._members = members
        self._racks = racks
        count = len(view.member_ids)
        self._owner = {t: [-1] * n for t, n in view.partition_counts.items()}
        self._owned: list[dict[uuid.UUID, list[int]]] = [{} for _ in range(count)]
        self._sizes = [0] * count
        self._room = [0] * count
        # A partition given up only because its member is outside its racks, to its member: it goes back there
        # if no member of its racks has room.
        self._previous: dict[Partition, int] = {}

    def build(self) -> GroupAssignment:
        kept, held = self._claim_current()
        self._set_quotas(kept, held)
        pool = [(t, p) for t, owners in self._owner.items() for p, o in enumerate(owners) if o == -1]
        if self._racks.enabled:
            pool = self._place_in_racks(pool)
            pool = self._give_back(pool)
        self._fill(pool)
        return as_assignment(self._view, self._owned)

    def _claim_current(self) -> tuple[list[list[Partition]], list[int]]:
        """Each member's current partitions that it may keep (the first claimant wins a partition listed twice),
        and how many it held in all; with racks on, those outside the member's racks are let go for now."""
        kept: list[list[Partition]] = []
        held: list[int] = []
        for index, member_id in enumerate(self._view.member_ids):
            mine: list[Partition] = []
            count = 0
            for topic_id, partition in current_partitions(self._view, index, self._members[member_id]):
                owners = self._owner[topic_id]
                if owners[partition] != -1:
                    continue
                count += 1
                if self._racks.enabled and self._racks.mismatches(index, topic_id, partition):
                    self._previous[(topic_id, partition)] = index
                    continue
                owners[partition] = index
                mine.append((topic_id, partition))
            kept.append(mine)
            held.append(count)
        return kept, held

    def _set_quotas(self, kept: list[list[Partition]], held: list[int]) -> None:
        """Hand the extra partitions of the remainder to members already holding more than the minimum (so they keep
        it: this is what makes a join or a leave move only the partitions it must), then to the others in order;
        revoke what exceeds each quota (the member's highest partitions)."""
        members = len(self._view.member_ids)
        minimum, extra = divmod(sum(self._view.partition_counts.values()), members)
        quotas = [minimum] * members
        for index in range(members):
            if extra == 0:
                break
            if held[index] > minimum:
                quotas[index] += 1
                extra -= 1
        for index in range(members):
            if extra == 0:
                break
            if held[index] <= minimum:
                quotas[index] += 1
                extra -= 1
        for index, mine in enumerate(kept):
            quota = quotas[index]
            for topic_id, partition in mine[quota:]:
                self._owner[topic_id][partition] = -1
            owned = self._owned[index]
            for topic_id, partition in mine[:quota]:
                owned.setdefault(topic_id, []).append(partition)
            self._sizes[index] = min(quota, len(mine))
            self._room[index] = quota - self._sizes[index]

    def _place_in_racks(self, pool: list[Partition]) -> list[Partition]:
        """Give each unassigned partition with a rack to the least loaded member of one of its racks that has room;
        the partitions with the fewest such members first, so the scarce matches are not taken by others. Returns
        the partitions left."""
        racks = self._racks
        heaps: dict[str, list[tuple[int, int]]] = {}
        for rack, indexes in racks.members_by_rack.items():
            heap = [(self._sizes[i], i) for i in indexes if self._room[i] > 0]
            heapq.heapify(heap)
            heaps[rack] = heap
        order = sorted(
            (racks.rack_members(t, p), position)
            for position, (t, p) in enumerate(pool)
            if not racks.racks(t, p).isdisjoint(heaps)
        )
        placed = [False] * len(pool)
        for _, position in order:
            topic_id, partition = pool[position]
            best: tuple[int, int] | None = None
            for rack in racks.racks(topic_id, partition):
                candidates = heaps.get(rack)
                if not candidates:
                    continue
                while candidates and (
                    self._room[candidates[0][1]] == 0 or candidates[0][0] != self._sizes[candidates[0][1]]
                ):
                    heapq.heappop(candidates)
                if candidates and (best is None or candidates[0] < best):
                    best = candidates[0]
            if best is None:
                continue
            index = best[1]
            self._give(index, topic_id, partition)
            placed[position] = True
            if self._room[index] > 0:
                rack_of = racks.member_racks[index]
                assert rack_of is not None
                heapq.heappush(heaps[rack_of], (self._sizes[index], index))
        return [tp for position, tp in enumerate(pool) if not placed[position]]

    def _give_back(self, pool: list[Partition]) -> list[Partition]:
        """A partition let go for its rack that found no member of its racks returns to its member if it has room."""
        left: list[Partition] = []
        for topic_id, partition in pool:
            index = self._previous.get((topic_id, partition))
            if index is not None and self._room[index] > 0:
                self._give(index, topic_id, partition)
            else:
                left.append((topic_id, partition))
        return left

    def _fill(self, pool: list[Partition]) -> None:
        """Deal the rest out in order, each member with room taking what it lacks."""
        taken = 0
        for index, room in enumerate(self._room):
            for topic_id, partition in pool[taken : taken + room]:
                self._give(index, topic_id, partition)
            taken += room
        if taken < len(pool):
            raise AssignorError(f"uniform assignor left {len(pool) - taken} partitions unassigned")

    def _give(self, index: int, topic_id: uuid.UUID, partition: int) -> None:
        self._owner[topic_id][partition] = index
        self._owned[index].setdefault(topic_id, []).append(partition)
        self._sizes[index] += 1
        self._room[index] -= 1
