"""What a `RaftNode` asks its driver to do: the outbox items, and the persisted quorum state.

Durability contract (the driver must honour it, the simulator checks what happens when it is violated by a crash):

* Effects are executed in the order they were emitted.
* The *persistence* effects (`PersistQuorumState`, `AppendEntries`, `TruncateLog`, `PersistSnapshot`,
  `TrimLogPrefix`, `ResetLog`) may be buffered, but every one emitted before a `Send` must be durable before that
  `Send` leaves the node. This is what makes a vote, an epoch bump and a follower's fetch offset trustworthy: a peer
  only ever learns facts that survive a crash. An observer is the exception: it never votes and the leader counts
  its fetch offset toward no commit, so its writes may trail its sends (after a crash it fetches its lost tail again).
* After making the log durable the driver calls ``RaftNode.log_flushed(end_offset, now_ms)``; the leader counts
  its own entries toward the high watermark only up to that offset.
* `Commit`, `LoadSnapshot`, `RoleChanged` and `VotersChanged` are notifications for the state machine and the operator.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from raft.log import LogEntry, SnapshotId
from raft.messages import RaftMessage
from raft.voter_set import VoterSet


class Role(StrEnum):
    UNATTACHED = "unattached"  # knows no leader for its epoch (may have voted)
    PROSPECTIVE = "prospective"  # running a pre-vote; its epoch is unchanged
    CANDIDATE = "candidate"
    FOLLOWER = "follower"
    LEADER = "leader"
    RESIGNED = "resigned"  # a leader that gave up its epoch and waits for the next one


@dataclass(frozen=True, slots=True)
class QuorumState:
    """The part of a node's Raft state that must survive restarts (KRaft's ``quorum-state`` file)."""

    leader_epoch: int = 0
    leader_id: int | None = None
    voted_id: int | None = None


@dataclass(frozen=True, slots=True)
class PersistQuorumState:
    state: QuorumState


@dataclass(frozen=True, slots=True)
class AppendEntries:
    entries: tuple[LogEntry, ...]


@dataclass(frozen=True, slots=True)
class TruncateLog:
    """Drop the log suffix from ``end_offset`` on."""

    end_offset: int


@dataclass(frozen=True, slots=True)
class PersistSnapshot:
    snapshot_id: SnapshotId
    data: bytes


@dataclass(frozen=True, slots=True)
class TrimLogPrefix:
    """Entries below ``snapshot_id.end_offset`` may be deleted; the snapshot was persisted first."""

    snapshot_id: SnapshotId


@dataclass(frozen=True, slots=True)
class ResetLog:
    """Discard the whole log: it now starts empty at the (already persisted) snapshot ``snapshot_id``."""

    snapshot_id: SnapshotId


@dataclass(frozen=True, slots=True)
class Send:
    destination: int
    message: RaftMessage


@dataclass(frozen=True, slots=True)
class Commit:
    """``entries`` became committed (in offset order, ending at ``high_watermark - 1``); apply the DATA ones."""

    high_watermark: int
    entries: tuple[LogEntry, ...]


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    """Replace the state machine with ``data``; later `Commit`s continue from ``snapshot_id.end_offset``."""

    snapshot_id: SnapshotId
    data: bytes


@dataclass(frozen=True, slots=True)
class RoleChanged:
    role: Role
    epoch: int
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class VotersChanged:
    """The voters in effect changed (a VOTERS entry appended, truncated away, or a snapshot installed): a driver
    reaches them at their endpoints from now on."""

    voters: VoterSet


PersistEffect = PersistQuorumState | AppendEntries | TruncateLog | PersistSnapshot | TrimLogPrefix | ResetLog
Effect = PersistEffect | Send | Commit | LoadSnapshot | RoleChanged | VotersChanged
PERSIST_EFFECTS = (PersistQuorumState, AppendEntries, TruncateLog, PersistSnapshot, TrimLogPrefix, ResetLog)
