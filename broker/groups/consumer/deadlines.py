"""The time-outs of a consumer group's members: each member's session, the rebalance time-out of a member told
to revoke partitions (it must do so before then, at the epoch it was told at), and the rebalance time-out of a
classic member (KIP-848's online migration) that must send its next JoinGroup or SyncGroup (Kafka's join and sync
time-outs).

A heap of every deadline ever set, soonest first, with the current deadline of each member beside it: an entry that
no longer matches is stale and dropped when it reaches the top. So a heartbeat (which moves its member's session
deadline) and asking for the next deadline cost the same in a group of 2,000 members as in one of 5.
"""

from __future__ import annotations

import heapq


class MemberDeadlines:
    def __init__(self) -> None:
        self._session: dict[str, int] = {}
        self._revocation: dict[str, tuple[int, int]] = {}
        self._join: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []

    def set_session(self, member_id: str, deadline: int) -> None:
        self._session[member_id] = deadline
        heapq.heappush(self._heap, (deadline, member_id))

    def set_revocation(self, member_id: str, deadline: int, epoch: int) -> None:
        """The member must have revoked by ``deadline``, if it is still at ``epoch`` then."""
        self._revocation[member_id] = (deadline, epoch)
        heapq.heappush(self._heap, (deadline, member_id))

    def clear_revocation(self, member_id: str) -> None:
        self._revocation.pop(member_id, None)

    def set_join(self, member_id: str, deadline: int, *, if_absent: bool = False) -> None:
        """A classic member must send its next JoinGroup or SyncGroup by ``deadline``; ``if_absent`` keeps a
        deadline already running (Kafka's ``scheduleConsumerGroupJoinTimeoutIfAbsent``)."""
        if if_absent and member_id in self._join:
            return
        self._join[member_id] = deadline
        heapq.heappush(self._heap, (deadline, member_id))

    def clear_join(self, member_id: str) -> None:
        self._join.pop(member_id, None)

    def forget(self, member_id: str) -> None:
        self._session.pop(member_id, None)
        self._revocation.pop(member_id, None)
        self._join.pop(member_id, None)

    def _current(self, deadline: int, member_id: str) -> bool:
        revocation = self._revocation.get(member_id)
        return (
            self._session.get(member_id) == deadline
            or (revocation is not None and revocation[0] == deadline)
            or self._join.get(member_id) == deadline
        )

    def next(self) -> int | None:
        heap = self._heap
        while heap:
            deadline, member_id = heap[0]
            if self._current(deadline, member_id):
                return deadline
            heapq.heappop(heap)
        return None

    def expired(self, now_ms: int) -> list[tuple[str, int | None]]:
        """(member id, None) for each expired session or join time-out, (member id, epoch) for each expired
        revocation, soonest first; a member appears once. Expired revocations are forgotten, expired sessions and
        join time-outs stay until ``forget``."""
        out: list[tuple[str, int | None]] = []
        seen: set[str] = set()
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            deadline, member_id = heapq.heappop(heap)
            if not self._current(deadline, member_id) or member_id in seen:
                continue
            seen.add(member_id)
            if self._session.get(member_id) == deadline or self._join.get(member_id) == deadline:
                out.append((member_id, None))
            else:
                out.append((member_id, self._revocation.pop(member_id)[1]))
        return out
