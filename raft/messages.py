"""Raft messages, transport-agnostic, shaped like KRaft's RPCs for the single metadata partition.

Field names follow the Kafka schemas (Vote v2, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot,
DescribeQuorum) with the topic/partition nesting flattened away, because the quorum replicates exactly one
partition. A wire codec maps each class to the kio entity of the same name by copying fields.

Every message carries ``correlation_id`` (the Kafka request header's field): a response echoes its request's id, and
the core ignores responses that do not answer its outstanding request. This is what keeps duplicated or late
responses from being applied twice (a stale diverging-epoch hint applied after a refetch would truncate entries the
leader already counts as replicated).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum

from raft.log import LogEntry, SnapshotId


class Errors(IntEnum):
    """The Kafka error codes the quorum uses (same numbers as Kafka's ``Errors``)."""

    NONE = 0
    NOT_LEADER_OR_FOLLOWER = 6
    CLUSTER_AUTHORIZATION_FAILED = 31  # the peer's authorizer refused this node's principal
    REQUEST_TIMED_OUT = 7  # a voter change waits for the leader's epoch or the last change to commit
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    INCONSISTENT_CLUSTER_ID = 104
    INVALID_VOTER_KEY = 125  # a Vote or BeginQuorumEpoch names another voter than the one it reached
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127


NO_LEADER = -1
"""Kafka's "no leader known" id (``leader_id = -1``)."""


@dataclass(frozen=True, slots=True)
class LeaderIdAndEpoch:
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """Fetch's diverging-epoch hint: the leader's log ends epoch ``epoch`` at ``end_offset`` (exclusive)."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class VoteRequest:
    """Vote v2. ``pre_vote`` asks "would you vote for me?" without anyone changing epoch (KIP-996)."""

    cluster_id: str
    replica_epoch: int  # the candidate's epoch (for a pre-vote: the epoch it would run in)
    replica_id: int  # the candidate
    last_offset_epoch: int
    last_offset: int  # the candidate's log end offset
    pre_vote: bool
    voter_id: int
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error_code: Errors
    leader_id: int
    leader_epoch: int
    vote_granted: bool
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    cluster_id: str
    leader_id: int
    leader_epoch: int
    voter_id: int
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error_code: Errors
    leader_id: int
    leader_epoch: int
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    """Sent by a resigning leader; ``preferred_successors`` are ordered best first (most caught up)."""

    cluster_id: str
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error_code: Errors
    leader_id: int
    leader_epoch: int
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower's (or observer's) pull: "I hold the leader's log up to ``fetch_offset``, ending in this epoch"."""

    cluster_id: str
    replica_id: int
    max_wait_ms: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    max_bytes: int
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """Exactly one of ``diverging_epoch``, ``snapshot_id`` and ``records`` is meaningful on success."""

    error_code: Errors
    high_watermark: int
    log_start_offset: int
    current_leader: LeaderIdAndEpoch
    diverging_epoch: EpochEndOffset | None = None
    snapshot_id: SnapshotId | None = None
    records: tuple[LogEntry, ...] = ()
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    cluster_id: str
    replica_id: int
    max_bytes: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    error_code: Errors
    snapshot_id: SnapshotId
    current_leader: LeaderIdAndEpoch
    size: int
    position: int
    unaligned_records: bytes
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class DescribeQuorumRequest:
    correlation_id: int = 0


@dataclass(frozen=True, slots=True)
class ReplicaState:
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1
    #: A voter's metadata directory id, as the voter set knows it (KIP-853; None: unknown, and for observers).
    directory_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    error_code: Errors
    leader_id: int
    leader_epoch: int
    high_watermark: int
    current_voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]
    correlation_id: int = 0


RaftRequest = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
    | DescribeQuorumRequest
)
RaftResponse = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
    | DescribeQuorumResponse
)
RaftMessage = RaftRequest | RaftResponse
