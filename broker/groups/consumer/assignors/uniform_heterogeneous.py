"""The uniform assignor when members subscribe to different topics, as Kafka's UniformHeterogeneousAssignmentBuilder.

Priorities are balance, then stickiness: members keep every current partition of a topic they still subscribe to;
the unassigned partitions go, topic by topic, each to the least loaded of the topic's subscribers; then, topic by
topic, a partition moves from the most loaded subscriber holding one to the least loaded subscriber while their
counts differ by more than one. Balancing one topic can unbalance another that shares members, so the topics are
gone round again until a whole round moves nothing, at most ``MAX_ROUNDS`` times (Kafka's limit: with
overlapping, non-identical subscriptions the result can be one partition short of perfect balance).

Topics are taken most partitions per subscriber first, then fewer subscribers first, then by id, so the topics
with the least freedom are placed while the members are still evenly loaded. Racks, where they apply, only break
ties: a partition goes to a member of its racks among the equally least loaded, and a balancing move takes a
partition of the receiver's rack if the giver has one among its last few.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Mapping

from broker.groups.consumer.assignment import MemberSubscription
from broker.groups.consumer.assignors.racks import RackPlacement
from broker.groups.consumer.assignors.view import GroupAssignment, GroupView, as_assignment, current_partitions

#: Rounds over the topics in the balancing phase (Kafka's MAX_ITERATION_COUNT).
MAX_ROUNDS = 16

#: How far back in a giver's partitions a balancing move looks for one in the receiver's rack (bounded so a move
#: stays constant time).
RACK_LOOKBACK = 16


def assign_heterogeneous(
    view: GroupView, members: Mapping[str, MemberSubscription], racks: RackPlacement
) -> GroupAssignment:
    builder = _Heterogeneous(view, racks)
    builder.keep_current(members)
    builder.assign_unassigned()
    builder.balance()
    return as_assignment(view, builder.owned)


class _Heterogeneous:
    def __init__(self, view: GroupView, racks: RackPlacement) -> None:
        self._view = view
        self._racks = racks
        self._owner = {t: [-1] * n for t, n in view.partition_counts.items()}
        self.owned: list[dict[uuid.UUID, list[int]]] = [{} for _ in view.member_ids]
        self._loads = [0] * len(view.member_ids)

    def _topic_order(self, topic_ids: list[uuid.UUID]) -> list[uuid.UUID]:
        counts = self._view.partition_counts
        subscribers = self._view.subscribers
        return sorted(topic_ids, key=lambda t: (-counts[t] / len(subscribers[t]), len(subscribers[t]), t))

    def keep_current(self, members: Mapping[str, MemberSubscription]) -> None:
        """Every member keeps its current partitions of the topics it subscribes to (the first claimant wins a
        partition listed twice)."""
        for index, member_id in enumerate(self._view.member_ids):
            for topic_id, partition in current_partitions(self._view, index, members[member_id]):
                if self._owner[topic_id][partition] == -1:
                    self._give(index, topic_id, partition)

    def assign_unassigned(self) -> None:
        """Each unassigned partition to the least loaded subscriber of its topic (lowest number on a tie, or a member
        of the partition's racks among the tied)."""
        unassigned = {t: [p for p, o in enumerate(owners) if o == -1] for t, owners in self._owner.items()}
        for topic_id in self._topic_order([t for t, ps in unassigned.items() if ps]):
            subscribers = self._view.subscribers[topic_id]
            heap = [(self._loads[i], i) for i in subscribers]
            heapq.heapify(heap)
            rack_heaps: dict[str, list[tuple[int, int]]] = {}
            if self._racks.enabled:
                for i in subscribers:
                    rack = self._racks.member_racks[i]
                    if rack is not None:
                        rack_heaps.setdefault(rack, []).append((self._loads[i], i))
                for rack_heap in rack_heaps.values():
                    heapq.heapify(rack_heap)
            for partition in unassigned[topic_id]:
                low, index = _top(heap, self._loads)
                in_rack = self._in_racks(rack_heaps, topic_id, partition, low) if rack_heaps else None
                if in_rack is not None:
                    index = in_rack
                self._give(index, topic_id, partition)
                heapq.heappush(heap, (self._loads[index], index))
                rack = self._racks.member_racks[index]
                if rack is not None and rack in rack_heaps:
                    heapq.heappush(rack_heaps[rack], (self._loads[index], index))

    def _in_racks(
        self, rack_heaps: dict[str, list[tuple[int, int]]], topic_id: uuid.UUID, partition: int, low: int
    ) -> int | None:
        """The lowest numbered member of the partition's racks whose load is ``low`` (the least), if any."""
        choice: int | None = None
        for rack in self._racks.racks(topic_id, partition):
            rack_heap = rack_heaps.get(rack)
            if rack_heap:
                load, candidate = _top(rack_heap, self._loads)
                if load == low and (choice is None or candidate < choice):
                    choice = candidate
        return choice

    def balance(self) -> None:
        """Move partitions topic by topic until a whole round over the topics moves none (Kafka's early exit: stop on
        coming back to the last topic that moved)."""
        topics = self._topic_order([t for t, s in self._view.subscribers.items() if len(s) >= 2])
        last_moved = -1
        for _ in range(MAX_ROUNDS):
            for position, topic_id in enumerate(topics):
                if position == last_moved:
                    return
                if self._balance_topic(topic_id) > 0 or last_moved == -1:
                    last_moved = position

    def _balance_topic(self, topic_id: uuid.UUID) -> int:
        loads = self._loads
        subscribers = self._view.subscribers[topic_id]
        if max(loads[i] for i in subscribers) - min(loads[i] for i in subscribers) <= 1:
            return 0
        # Givers: most loaded first, the highest number on a tie; receivers: least loaded, lowest number first.
        givers = [(-loads[i], -i) for i in subscribers if self.owned[i].get(topic_id)]
        receivers = [(loads[i], i) for i in subscribers]
        heapq.heapify(givers)
        heapq.heapify(receivers)
        moved = 0
        while givers:
            while givers and (-givers[0][0] != loads[-givers[0][1]] or not self.owned[-givers[0][1]].get(topic_id)):
                heapq.heappop(givers)
            if not givers:
                break
            giver = -givers[0][1]
            receiver = _top(receivers, loads)[1]
            if loads[giver] - loads[receiver] <= 1:
                break
            partition = self._take(giver, topic_id, self._pick(giver, receiver, topic_id))
            self._give(receiver, topic_id, partition)
            moved += 1
            heapq.heappush(givers, (-loads[receiver], -receiver))
            heapq.heappush(receivers, (loads[receiver], receiver))
            heapq.heappush(receivers, (loads[giver], giver))
            if self.owned[giver].get(topic_id):
                heapq.heappush(givers, (-loads[giver], -giver))
        return moved

    def _pick(self, giver: int, receiver: int, topic_id: uuid.UUID) -> int:
        """The position in the giver's list of the partition to move: its last, or a recent one in the receiver's
        rack."""
        partitions = self.owned[giver][topic_id]
        last = len(partitions) - 1
        if self._racks.enabled and self._racks.member_racks[receiver] is not None:
            for position in range(last, max(-1, last - RACK_LOOKBACK), -1):
                if self._racks.matches(receiver, topic_id, partitions[position]):
                    return position
        return last

    def _give(self, index: int, topic_id: uuid.UUID, partition: int) -> None:
        self._owner[topic_id][partition] = index
        self.owned[index].setdefault(topic_id, []).append(partition)
        self._loads[index] += 1

    def _take(self, index: int, topic_id: uuid.UUID, position: int) -> int:
        partition = self.owned[index][topic_id].pop(position)
        self._owner[topic_id][partition] = -1
        self._loads[index] -= 1
        return partition


def _top(heap: list[tuple[int, int]], loads: list[int]) -> tuple[int, int]:
    """The heap's least ``(load, member)`` entry that is still true (entries go stale as loads change; a member's
    current entry is always pushed, so one is found)."""
    while heap[0][0] != loads[heap[0][1]]:
        heapq.heappop(heap)
    return heap[0]
