"""Group states and the member record of the classic group protocol.

The states and their legal transitions are Kafka's; clients and tools display the state names verbatim
(``kafka-consumer-groups --describe``, DescribeGroups, ListGroups filters), so the spelling matters.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @classmethod
    def parse(cls, name: str) -> GroupState | None:
        """Case-insensitive lookup of a state name as clients send it in a ListGroups states filter."""
        for state in cls:
            if state.value.lower() == name.lower():
                return state
        return None


# A group may only enter a state from the states listed here; anything else is a coordinator bug.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.DEAD: frozenset(
        {
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
            GroupState.DEAD,
        }
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


@dataclass(frozen=True)
class JoinResult:
    """What a JoinGroup request is answered with once the rebalance it takes part in completes (or fails)."""

    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    # (member id, group instance id, protocol metadata) — only the leader receives the member list.
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass
class Member:
    """One member of a group as the coordinator tracks it between requests."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # (name, metadata) in the member's order of preference.
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    # Callbacks of this member's JoinGroup / SyncGroup requests waiting for the rebalance to progress. A list, not
    # one slot: a client that retries a join while the first is still parked must get an answer to both, or the
    # in-order response queue of its connection stalls behind the first.
    awaiting_join: list[JoinCallback] = field(default_factory=list)
    awaiting_sync: list[SyncCallback] = field(default_factory=list)
    # A member that joined in the current rebalance and has not yet been given a generation.
    is_new: bool = False
    last_heartbeat_ms: int = 0
    supported_protocols: frozenset[str] = field(default=frozenset(), init=False)

    def __post_init__(self) -> None:
        self.supported_protocols = frozenset(name for name, _ in self.protocols)

    def update(
        self, protocols: tuple[tuple[str, bytes], ...], rebalance_timeout_ms: int, session_timeout_ms: int
    ) -> None:
        self.protocols = protocols
        self.supported_protocols = frozenset(name for name, _ in protocols)
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms

    def answer_join(self, result: JoinResult) -> None:
        callbacks, self.awaiting_join = self.awaiting_join, []
        for callback in callbacks:
            callback(result)

    def answer_sync(self, result: SyncResult) -> None:
        callbacks, self.awaiting_sync = self.awaiting_sync, []
        for callback in callbacks:
            callback(result)

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """True when a rejoin carries exactly the protocols (and metadata) this member already registered."""
        return self.protocols == protocols

    def vote(self, candidates: frozenset[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")
