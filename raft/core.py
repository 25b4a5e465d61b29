"""The sans-I/O Raft state machine of one quorum voter, designed the KRaft way.

Replication is pull-based: followers send `FetchRequest(fetch_offset, last_fetched_epoch)`; the leader answers with
entries, a diverging-epoch hint (the follower truncates and refetches) or a snapshot id (the follower pulls the
snapshot in chunks with FetchSnapshot). A follower's fetch offset is its durable log end, so it doubles as its
acknowledgement: the leader's high watermark is the majority-median of the voters' fetch offsets (its own counted
up to its flushed end), and only advances over entries of its own epoch (a leader commits a previous epoch's entries
only by committing its own no-op leader-change entry after them); until then its fetch answers carry no high
watermark (-1), as KRaft's, since what it knows is only what it learned as a follower.

Elections: a follower that has not heard from its leader within ``fetch_timeout_ms`` becomes *prospective* and runs
a pre-vote (KIP-996): nobody changes epoch, and voters that have heard from a leader recently say no, so a node that
was partitioned away cannot disrupt a healthy quorum when it returns. A successful pre-vote starts the real vote at
``epoch + 1``. The winner persists its epoch, appends a leader-change entry, and announces itself with
BeginQuorumEpoch. A leader that has not been fetched from by a majority within ``check_quorum_timeout_ms`` resigns,
as does one asked to (`resign`), sending EndQuorumEpoch so the best successor can run at once.

Nothing here does I/O or reads a clock: inputs are `tick`, `receive`, `propose`, `log_flushed` and
`snapshot_taken`, each given ``now_ms``; outputs accumulate in an outbox of effects (see `raft.effects`
for the durability contract) that the driver drains. With the same inputs and the same seeded ``random.Random``
the node behaves identically, which is what the deterministic simulator relies on.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from raft.effects import (
    AppendEntries,
    Commit,
    Effect,
    LoadSnapshot,
    PersistQuorumState,
    PersistSnapshot,
    QuorumState,
    ResetLog,
    Role,
    RoleChanged,
    Send,
    TrimLogPrefix,
    TruncateLog,
    VotersChanged,
)
from raft.log import EntryKind, LogEntry, RaftLog, SnapshotId
from raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    RaftMessage,
    ReplicaState,
    VoteRequest,
    VoteResponse,
)
from raft.voter_set import (
    Voter,
    VoterHistory,
    VoterSet,
    decode_voters,
    encode_voters,
    unwrap_snapshot,
    wrap_snapshot,
)

logger = logging.getLogger(__name__)

OBSERVER_SESSION_TIMEOUT_MS: Final = 300_000
"""An observer that has not fetched for this long is forgotten by the leader (gone from DescribeQuorum), as KRaft's
LeaderState forgets it: brokers that left do not stay listed for as long as one leader holds office."""


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Timing and sizing knobs; the names follow KRaft's ``controller.quorum.*`` settings where one exists."""

    cluster_id: str = "fjord"
    election_timeout_ms: int = 1000  # base; each wait is randomized in [base, 2 * base)
    election_backoff_max_ms: int = 1000
    fetch_timeout_ms: int = 2000
    fetch_max_wait_ms: int = 500  # how long the leader parks a fetch that found nothing new
    request_timeout_ms: int = 2000  # resend an unanswered fetch / fetch-snapshot after this long
    retry_backoff_ms: int = 20
    check_quorum_timeout_ms: int | None = None  # default 1.5 * fetch_timeout_ms, as KRaft
    begin_quorum_resend_ms: int = 500
    pre_vote: bool = True  # off only to test the bare vote path harder (more concurrent candidates)
    fetch_max_bytes: int = 1 << 20
    snapshot_chunk_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if self.election_timeout_ms <= 0 or self.fetch_timeout_ms <= 0:
            raise ValueError("election_timeout_ms and fetch_timeout_ms must be positive")
        if self.request_timeout_ms <= self.fetch_max_wait_ms:
            raise ValueError(
                f"request_timeout_ms ({self.request_timeout_ms}) must exceed fetch_max_wait_ms "
                f"({self.fetch_max_wait_ms}), or every parked fetch would be resent"
            )

    @property
    def check_quorum_ms(self) -> int:
        if self.check_quorum_timeout_ms is not None:
            return self.check_quorum_timeout_ms
        return self.fetch_timeout_ms * 3 // 2


@dataclass(frozen=True, slots=True)
class NotLeader:
    """`RaftNode.propose` was called on a node that is not the leader; where to go instead, if known."""

    leader_id: int | None
    epoch: int


@dataclass(frozen=True, slots=True)
class AddVoter:
    """KIP-853's AddRaftVoter: ``voter`` joins; it must be an observer that fetched up to the leader's end lately."""

    voter: Voter


@dataclass(frozen=True, slots=True)
class RemoveVoter:
    """KIP-853's RemoveRaftVoter: the voter ``node_id`` (of this directory, when given) leaves."""

    node_id: int
    directory_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class UpdateVoter:
    """KIP-853's UpdateRaftVoter: the voter ``voter.node_id`` (of this directory) announces its endpoints, as a
    voter whose CONTROLLER listener moved does once it starts; ``leader_epoch``: the epoch it asks in (-1: any)."""

    voter: Voter
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class WriteVoters:
    """``kraft.version`` 0 -> 1 (Kafka 4.1's ``kafka-features upgrade --feature kraft.version=1``): the configured
    voters (a static quorum's ``controller.quorum.voters``) written to the log, whose sets rule from then on, so that
    AddRaftVoter and RemoveRaftVoter may change them. ``validate_only``: check, append nothing."""

    validate_only: bool = False


#: A change of the voter set a leader may append (one VOTERS entry each).
VoterChange = AddVoter | RemoveVoter | UpdateVoter | WriteVoters


@dataclass(frozen=True, slots=True)
class VoterChangeRefused:
    """Why a leader did not append a voter change: Kafka's error code for it and a line for the operator."""

    error: Errors
    message: str


@dataclass(slots=True)
class _ReplicaProgress:
    """What the leader knows about one fetching replica during its epoch."""

    end_offset: int = -1  # the replica's acknowledged log end (its last valid fetch offset)
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    fetched_this_epoch: bool = False


@dataclass(slots=True)
class _ParkedFetch:
    request: FetchRequest
    deadline_ms: int
    high_watermark: int


@dataclass(slots=True)
class _SnapshotDownload:
    snapshot_id: SnapshotId
    buffer: bytearray = field(default_factory=bytearray)


def encode_leader_change(leader_id: int, epoch: int, voters: Iterable[int]) -> bytes:
    """Payload of the control entry a new leader appends first (like KRaft's LeaderChangeMessage)."""
    return json.dumps({"leader_id": leader_id, "epoch": epoch, "voters": sorted(voters)}).encode()


class RaftNode:
    """One voter of the quorum. Construct it from recovered state; drive it with the input methods; drain effects."""

    def __init__(
        self,
        node_id: int,
        voters: Iterable[int] | VoterSet,
        *,
        rng: random.Random,
        now_ms: int,
        config: RaftConfig | None = None,
        quorum_state: QuorumState | None = None,
        log: RaftLog | None = None,
        snapshot_data: bytes = b"",
    ) -> None:
        self.node_id = node_id
        # No voter at all: a controller formatted to be added to a running quorum, which observes until it learns
        # the voters (learn_voters) or its log names them.
        self._configured = voters if isinstance(voters, VoterSet) else VoterSet.of(voters)
        self.config = config or RaftConfig()
        self._rng = rng
        self._log = log if log is not None else RaftLog()
        # The stored snapshot carries the voters where it ends once a VOTERS entry made them (raft.voter_set).
        self._snapshot_data = snapshot_data
        snapshot_voters, _state = unwrap_snapshot(snapshot_data)
        self._history = (
            VoterHistory(snapshot_voters, self._log.start_offset - 1, from_log=True)
            if snapshot_voters is not None
            else VoterHistory(self._configured)
        )
        for entry in self._log.read(self._log.start_offset, self._log.end_offset):
            if entry.kind is EntryKind.VOTERS:
                self._history.append(entry.offset, _decode_voters(entry))
        state = quorum_state or QuorumState()
        self._epoch = state.leader_epoch
        self._voted_id = state.voted_id
        self._leader_id: int | None = None
        self._persisted = state
        self._role = Role.UNATTACHED
        self._announced: tuple[Role, int, int | None] = (self._role, self._epoch, None)
        self._outbox: list[Effect] = []
        self._next_correlation = rng.getrandbits(30)
        # Commit state (not persisted: relearned from the leader after a restart, as in KRaft).
        self._hw = self._log.start_offset
        self._applied = self._log.start_offset
        # The leader's high watermark as this follower first learned it in this process (None before).
        self._first_leader_hw: int | None = None
        self._flushed_end = self._log.end_offset
        # Timers.
        self._election_deadline = now_ms + self._random_election_timeout()
        self._fetch_deadline = 0
        self._last_leader_contact_ms = -1
        # Follower state.
        self._fetch_inflight: tuple[int, int] | None = None  # (correlation id, sent at)
        self._next_fetch_at: int | None = None
        self._snapshot_download: _SnapshotDownload | None = None
        # Election state: correlation id -> voter, and the answers so far.
        self._vote_round: dict[int, int] = {}
        self._granted: set[int] = set()
        self._rejected: set[int] = set()
        # Leader state.
        self._progress: dict[int, _ReplicaProgress] = {}
        self._parked: dict[int, _ParkedFetch] = {}
        # The high watermark each replica was last told: a fetch is parked only if it has nothing newer to learn.
        self._hw_sent: dict[int, int] = {}
        self._epoch_start_offset = 0
        self._begin_resend_at = 0
        self._discovery_target: int | None = None
        # Peers whose authorizer refused this node (CLUSTER_AUTHORIZATION_FAILED), warned about once each.
        self._refused_by: set[int] = set()

        if self._log.start_offset > 0:
            self._emit(LoadSnapshot(self._log.snapshot_id, _state))
        if state.leader_id is not None and state.leader_id != node_id and state.leader_id in self.voters:
            self._become_follower(self._epoch, state.leader_id, now_ms)
        elif len(self.voters) == 1 or self.is_observer:
            # Nobody else can vote (or we do not vote): elect or look for the leader at once.
            self._election_deadline = now_ms
        else:
            # A restarted leader does not resume its epoch: it cannot know what happened while it was down.
            self._set_role(Role.UNATTACHED, None)

    # ---- read-only view ------------------------------------------------------------------------------------
    @property
    def voters(self) -> frozenset[int]:
        """The node ids of the voters in effect: the configured ones, or the last VOTERS entry's."""
        return self._history.latest.ids

    @property
    def voter_set(self) -> VoterSet:
        return self._history.latest

    @property
    def voters_from_log(self) -> bool:
        """The log names the voters (KIP-853's ``kraft.version`` 1), not the configuration."""
        return self._history.latest_from_log

    @property
    def is_observer(self) -> bool:
        """An observer (a broker replaying the metadata log, a controller not yet added) fetches like a follower
        but never votes or runs."""
        return self.node_id not in self._history.latest.ids

    @property
    def _majority(self) -> int:
        return len(self._history.latest.voters) // 2 + 1

    @property
    def role(self) -> Role:
        return self._role

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def leader_id(self) -> int | None:
        return self._leader_id

    @property
    def voted_id(self) -> int | None:
        return self._voted_id

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def first_leader_high_watermark(self) -> int | None:
        """The commit offset the leader reported in the first fetch answer this follower took since it started that
        carried one (None before any; a new leader reports none until it has committed an entry of its epoch, see
        `_reported_hw`): what a restarted voter must have applied before it knows it has caught up once, as
        Kafka's controller completes its authorizer's initial load."""
        return self._first_leader_hw

    @property
    def log(self) -> RaftLog:
        """The in-memory log. Callers must not mutate it."""
        return self._log

    @property
    def snapshot_data(self) -> bytes:
        """The state machine's data of the current snapshot (without the voters Raft keeps in it)."""
        return unwrap_snapshot(self._snapshot_data)[1]

    def drain(self) -> list[Effect]:
        out, self._outbox = self._outbox, []
        return out

    def next_deadline_ms(self, now_ms: int) -> int:
        """The earliest time after ``now_ms`` at which `tick` may do something; drivers may sleep until then."""
        if self._role is Role.LEADER:
            deadlines = (
                [self._begin_resend_at]
                if any(not p.fetched_this_epoch for v, p in self._progress.items() if v in self.voters)
                else []
            )
            deadlines.extend(p.deadline_ms for p in self._parked.values())
            cq = self.config.check_quorum_ms
            # Voters already silent for longer are counted out; only a still-live one going quiet changes anything.
            deadlines.extend(
                p.last_fetch_ms + cq + 1
                for v, p in self._progress.items()
                if v in self.voters and v != self.node_id and p.last_fetch_ms + cq + 1 > now_ms
            )
            return min(deadlines) if deadlines else self._begin_resend_at + self.config.check_quorum_ms
        if self._role is Role.FOLLOWER:
            deadlines = [self._fetch_deadline]
            if self._fetch_inflight is not None:
                deadlines.append(self._fetch_inflight[1] + self.config.request_timeout_ms)
            elif self._next_fetch_at is not None:
                deadlines.append(self._next_fetch_at)
            return min(deadlines)
        if self.is_observer and self._fetch_inflight is not None:
            return self._fetch_inflight[1] + self.config.request_timeout_ms
        return self._election_deadline

    def describe(self, now_ms: int) -> DescribeQuorumResponse:
        """The DescribeQuorum answer; only the leader knows replica progress."""
        if self._role is not Role.LEADER:
            return DescribeQuorumResponse(
                Errors.NOT_LEADER_OR_FOLLOWER, self._leader_or_none(), self._epoch, self._hw, (), ()
            )

        self._expire_observers(now_ms)

        voters = self._history.latest

        def state(replica: int) -> ReplicaState:
            voter = voters.get(replica)
            directory = voter.directory_id if voter is not None else None
            if replica == self.node_id:
                return ReplicaState(replica, self._log.end_offset, now_ms, now_ms, directory)
            p = self._progress.get(replica, _ReplicaProgress())
            # A voter's last_fetch_ms starts at the election for the check-quorum timer; until it fetches in this
            # epoch it has not fetched at all as far as this leader knows, which Kafka reports as -1.
            last_fetch = p.last_fetch_ms if p.fetched_this_epoch else -1
            return ReplicaState(replica, p.end_offset, last_fetch, p.last_caught_up_ms, directory)

        return DescribeQuorumResponse(
            Errors.NONE,
            self.node_id,
            self._epoch,
            self._hw,
            tuple(state(v) for v in sorted(self.voters)),
            tuple(state(o) for o in sorted(self._progress) if o not in self.voters),
        )

    # ---- inputs --------------------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> None:
        role = self._role
        if role is Role.LEADER:
            self._leader_tick(now_ms)
        elif role is Role.FOLLOWER:
            if now_ms >= self._fetch_deadline and self.is_observer:
                logger.info("observer %d: lost leader %s; looking for the leader", self.node_id, self._leader_id)
                self._discover_leader(now_ms)
            elif now_ms >= self._fetch_deadline:
                logger.info(
                    "node %d: no contact with leader %s of epoch %d for %d ms; starting a pre-vote",
                    self.node_id,
                    self._leader_id,
                    self._epoch,
                    self.config.fetch_timeout_ms,
                )
                self._become_prospective(now_ms)
            elif self._fetch_inflight is not None:
                if now_ms - self._fetch_inflight[1] >= self.config.request_timeout_ms:
                    self._fetch_inflight = None
                    self._send_fetch(now_ms)
            elif self._next_fetch_at is not None and now_ms >= self._next_fetch_at:
                self._send_fetch(now_ms)
        elif self.is_observer:
            if self._fetch_inflight is not None and now_ms - self._fetch_inflight[1] >= self.config.request_timeout_ms:
                self._fetch_inflight = None
            if self._fetch_inflight is None and now_ms >= self._election_deadline:
                self._discover_leader(now_ms)
        elif now_ms >= self._election_deadline:
            if role is Role.CANDIDATE:
                logger.info("node %d: election for epoch %d timed out", self.node_id, self._epoch)
            self._become_prospective(now_ms)

    def receive(self, sender: int, message: RaftMessage, now_ms: int) -> None:
        match message:
            case FetchRequest():
                self._on_fetch_request(sender, message, now_ms)
            case FetchResponse():
                self._on_fetch_response(sender, message, now_ms)
            case VoteRequest():
                self._on_vote_request(sender, message, now_ms)
            case VoteResponse():
                self._on_vote_response(sender, message, now_ms)
            case BeginQuorumEpochRequest():
                self._on_begin_quorum_epoch(sender, message, now_ms)
            case EndQuorumEpochRequest():
                self._on_end_quorum_epoch(sender, message, now_ms)
            case FetchSnapshotRequest():
                self._on_fetch_snapshot_request(sender, message, now_ms)
            case FetchSnapshotResponse():
                self._on_fetch_snapshot_response(sender, message, now_ms)
            case BeginQuorumEpochResponse() | EndQuorumEpochResponse():
                self._note_refusal(sender, message)
                self._observe_leader(message.leader_epoch, message.leader_id, now_ms)
            case DescribeQuorumRequest():
                reply = self.describe(now_ms)
                self._send(sender, dataclasses.replace(reply, correlation_id=message.correlation_id))
            case DescribeQuorumResponse():
                pass
            case _:
                logger.warning("node %d: ignoring unexpected %s from %d", self.node_id, type(message).__name__, sender)

    def propose(self, entries: Sequence[bytes], now_ms: int) -> int | NotLeader:
        """Append ``entries`` if this node leads; returns the offset of the last one (committed once HW passes it)."""
        if self._role is not Role.LEADER:
            return NotLeader(self._leader_id, self._epoch)
        if not entries:
            raise ValueError("propose needs at least one entry")
        self._append_local([(bytes(data), EntryKind.DATA) for data in entries])
        self._complete_parked(now_ms)
        return self._log.end_offset - 1

    def log_flushed(self, end_offset: int, now_ms: int) -> None:
        """The driver made the local log durable up to ``end_offset``."""
        flushed = min(end_offset, self._log.end_offset)
        if flushed > self._flushed_end:
            self._flushed_end = flushed
            if self._role is Role.LEADER:
                self._maybe_advance_hw(now_ms)
                self._complete_parked(now_ms)

    def snapshot_taken(self, end_offset: int, data: bytes, now_ms: int) -> SnapshotId | None:
        """The state machine captured its state after applying everything below ``end_offset``.

        The snapshot becomes the log's base (the driver persists it, then deletes the entries it covers) and is what
        lagging followers download. Returns None when ``end_offset`` is not beyond the current snapshot.
        """
        if end_offset <= self._log.start_offset:
            return None
        if end_offset > self._applied:
            raise ValueError(
                f"node {self.node_id}: cannot snapshot at {end_offset}, only {self._applied} entries are applied"
            )
        snapshot_id = SnapshotId(end_offset, self._log.epoch_at(end_offset - 1))
        stored = wrap_snapshot(self._history.snapshot_voters(end_offset), data)
        self._emit(PersistSnapshot(snapshot_id, stored))
        self._emit(TrimLogPrefix(snapshot_id))
        self._log.truncate_prefix(snapshot_id)
        self._history.trim_prefix(end_offset)
        self._snapshot_data = stored
        logger.info("node %d: snapshot %s taken; log now starts there", self.node_id, snapshot_id)
        return snapshot_id

    def resign(self, now_ms: int) -> None:
        """Graceful step-down (e.g. shutdown): hand leadership to the most caught-up voter quickly."""
        if self._role is Role.LEADER:
            self._resign(now_ms, "asked to resign")

    def learn_voters(self, voters: VoterSet, now_ms: int) -> bool:
        """The voters as a running quorum told them (a joining controller asked its bootstrap servers), where
        neither the configuration nor the log named any. False, and nothing changes, once the log names them: its
        sets are the truth."""
        if self._history.latest_offset >= 0 or self._configured.voters:
            return False
        before = self._voters_seen()
        self._configured = voters
        self._history = VoterHistory(voters)
        self._voters_changed(before, now_ms)
        self._election_deadline = now_ms  # look for the leader among them at once
        return True

    def change_voters(self, change: VoterChange, now_ms: int) -> int | NotLeader | VoterChangeRefused:
        """KIP-853: append the voter set that ``change`` makes, if this leader may; returns the entry's offset (the
        change is done once the high watermark passes it). The checks and their error codes are KRaft's
        (AddVoterHandler, RemoveVoterHandler, UpdateVoterHandler): one change at a time, each after the leader
        committed its epoch. An update that changes nothing appends nothing."""
        if self._role is not Role.LEADER:
            return NotLeader(self._leader_id, self._epoch)
        if isinstance(change, UpdateVoter) and change.leader_epoch >= 0 and change.leader_epoch != self._epoch:
            error = Errors.FENCED_LEADER_EPOCH if change.leader_epoch < self._epoch else Errors.UNKNOWN_LEADER_EPOCH
            return VoterChangeRefused(error, f"the update names epoch {change.leader_epoch}, leader "
                                             f"{self.node_id}'s is {self._epoch}")
        if self._hw <= self._epoch_start_offset:
            return VoterChangeRefused(Errors.REQUEST_TIMED_OUT,
                                      f"leader {self.node_id} has not yet committed an entry of epoch {self._epoch}")
        if self._history.latest_offset >= self._hw:
            return VoterChangeRefused(Errors.REQUEST_TIMED_OUT,
                                      f"the voter change at offset {self._history.latest_offset} is not yet committed")
        current = self._history.latest
        if isinstance(change, WriteVoters):
            if self._history.latest_from_log:
                return self._history.latest_offset  # written already: committed, nothing appended
            unreachable = [v.node_id for v in current.voters if not v.endpoints]
            if unreachable:
                return VoterChangeRefused(Errors.INVALID_REQUEST, f"voters {unreachable} have no endpoint to write")
            if change.validate_only:
                return self._history.latest_offset
            after = current
        elif isinstance(change, AddVoter):
            voter = change.voter
            if voter.node_id in current.ids:
                return VoterChangeRefused(Errors.DUPLICATE_VOTER, f"node {voter.node_id} is already a voter")
            if not voter.endpoints:
                return VoterChangeRefused(Errors.INVALID_REQUEST, f"node {voter.node_id}: no endpoint given")
            progress = self._progress.get(voter.node_id)
            window = self.config.fetch_timeout_ms
            if progress is None or now_ms - progress.last_fetch_ms > window:
                return VoterChangeRefused(Errors.REQUEST_TIMED_OUT,
                                          f"node {voter.node_id} has not fetched from leader {self.node_id} "
                                          f"within {window} ms: start it as an observer first")
            if now_ms - progress.last_caught_up_ms > window:
                return VoterChangeRefused(Errors.REQUEST_TIMED_OUT,
                                          f"node {voter.node_id} has not caught up with leader {self.node_id}'s "
                                          f"log (at {progress.end_offset} of {self._log.end_offset})")
            after = current.with_voter(voter)
        elif isinstance(change, UpdateVoter):
            voter = change.voter
            found = current.get(voter.node_id)
            if found is None or not found.matches(voter.node_id, voter.directory_id):
                directory = f" with directory {voter.directory_id}" if voter.directory_id is not None else ""
                return VoterChangeRefused(Errors.VOTER_NOT_FOUND, f"node {voter.node_id}{directory} is not a voter")
            if not voter.endpoints:
                return VoterChangeRefused(Errors.INVALID_REQUEST, f"node {voter.node_id}: no endpoint given")
            updated = Voter(voter.node_id, found.directory_id or voter.directory_id, voter.endpoints)
            if updated == found:
                return self._history.latest_offset  # committed already (no change is pending)
            after = current.without(voter.node_id).with_voter(updated)
        else:
            found = current.get(change.node_id)
            if found is None or not found.matches(change.node_id, change.directory_id):
                directory = f" with directory {change.directory_id}" if change.directory_id is not None else ""
                return VoterChangeRefused(Errors.VOTER_NOT_FOUND, f"node {change.node_id}{directory} is not a voter")
            if len(current.voters) == 1:
                return VoterChangeRefused(Errors.VOTER_NOT_FOUND,
                                          f"node {change.node_id} is the only voter; a quorum needs one")
            after = current.without(change.node_id)
        before = (current, self._history.latest_from_log)
        self._append_local([(encode_voters(after), EntryKind.VOTERS)])
        self._history.append(self._log.end_offset - 1, after)
        self._voters_changed(before, now_ms)
        self._complete_parked(now_ms)
        return self._log.end_offset - 1

    # ---- outbox helpers ------------------------------------------------------------------------------------
    def _emit(self, effect: Effect) -> None:
        self._outbox.append(effect)

    def _send(self, destination: int, message: RaftMessage) -> None:
        self._outbox.append(Send(destination, message))

    def _correlation(self) -> int:
        self._next_correlation = (self._next_correlation + 1) & 0x7FFFFFFF
        return self._next_correlation

    def _persist(self) -> None:
        state = QuorumState(self._epoch, self._leader_id, self._voted_id)
        if state != self._persisted:
            self._persisted = state
            self._emit(PersistQuorumState(state))

    def _set_role(self, role: Role, leader_id: int | None) -> None:
        self._role = role
        self._leader_id = leader_id
        announced = (role, self._epoch, leader_id)
        if announced != self._announced:
            self._announced = announced
            self._emit(RoleChanged(role, self._epoch, leader_id))

    def _leader_or_none(self) -> int:
        return self._leader_id if self._leader_id is not None else NO_LEADER

    def _current_leader(self) -> LeaderIdAndEpoch:
        # A resigned leader no longer serves its epoch: pointing fetchers at it would only bring them back.
        leader = NO_LEADER if self._role is Role.RESIGNED else self._leader_or_none()
        return LeaderIdAndEpoch(leader, self._epoch)

    def _random_election_timeout(self) -> int:
        base = self.config.election_timeout_ms
        return base + self._rng.randrange(base)

    def _random_backoff(self) -> int:
        return self._rng.randrange(1, self.config.election_backoff_max_ms + 1)

    def _voters_seen(self) -> tuple[VoterSet, bool]:
        """The voters in effect and whether the log names them: what `_voters_changed` compares."""
        return self._history.latest, self._history.latest_from_log

    def _voters_changed(self, before: tuple[VoterSet, bool], now_ms: int) -> None:
        """The voters in effect, or where they come from, may have changed: tell the driver (the same voters the log
        names from now on, after a ``kraft.version`` upgrade, may now announce themselves), and a leader counts its
        majority anew."""
        after, from_log = self._voters_seen()
        if (after, from_log) == before:
            return
        if after != before[0]:
            logger.info("node %d: voters now %s (were %s)", self.node_id, after.describe(), before[0].describe())
        self._emit(VotersChanged(after))
        if self._role is Role.LEADER:
            for voter in after.ids:
                self._progress.setdefault(voter, _ReplicaProgress(last_fetch_ms=now_ms))
            self._maybe_advance_hw(now_ms)

    # ---- transitions ---------------------------------------------------------------------------------------
    def _leave_current_role(self) -> None:
        self._fetch_inflight = None
        self._next_fetch_at = None
        self._snapshot_download = None
        self._vote_round.clear()
        self._granted.clear()
        self._rejected.clear()
        self._progress.clear()
        self._parked.clear()
        self._hw_sent.clear()

    def _new_epoch(self, epoch: int) -> None:
        if epoch > self._epoch:
            self._epoch = epoch
            self._voted_id = None

    def _become_unattached(self, epoch: int, now_ms: int, *, persist: bool = True) -> None:
        """``persist=False`` lets a caller about to record a vote write the new epoch and the vote at once."""
        self._leave_current_role()
        self._new_epoch(epoch)
        self._set_role(Role.UNATTACHED, None)
        if persist:
            self._persist()
        self._election_deadline = now_ms + self._random_election_timeout()

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int, *, heard_from_leader: bool = False) -> None:
        """Follow ``leader_id``; only direct word from the leader counts as contact (pre-votes are refused then)."""
        self._leave_current_role()
        self._new_epoch(epoch)
        self._set_role(Role.FOLLOWER, leader_id)
        self._persist()
        self._fetch_deadline = now_ms + self.config.fetch_timeout_ms
        self._last_leader_contact_ms = now_ms if heard_from_leader else -1
        self._send_fetch(now_ms)

    def _become_prospective(self, now_ms: int) -> None:
        if not self.config.pre_vote:
            self._become_candidate(now_ms)
            return
        self._leave_current_role()
        self._set_role(Role.PROSPECTIVE, None)
        self._election_deadline = now_ms + self._random_election_timeout()
        self._granted.add(self.node_id)
        self._send_votes(pre_vote=True)
        self._check_election(now_ms)

    def _become_candidate(self, now_ms: int) -> None:
        self._leave_current_role()
        self._epoch += 1
        self._voted_id = self.node_id
        self._set_role(Role.CANDIDATE, None)
        self._persist()
        logger.info("node %d: candidate for epoch %d", self.node_id, self._epoch)
        self._election_deadline = now_ms + self._random_election_timeout()
        self._granted.add(self.node_id)
        self._send_votes(pre_vote=False)
        self._check_election(now_ms)

    def _become_leader(self, now_ms: int) -> None:
        self._leave_current_role()
        self._set_role(Role.LEADER, self.node_id)
        self._persist()
        logger.info("node %d: leader of epoch %d (log end %d)", self.node_id, self._epoch, self._log.end_offset)
        self._epoch_start_offset = self._log.end_offset
        for voter in self.voters:
            # Everyone gets a full check-quorum period from now to show up.
            self._progress[voter] = _ReplicaProgress(last_fetch_ms=now_ms)
        self._progress[self.node_id].fetched_this_epoch = True
        self._append_local([(encode_leader_change(self.node_id, self._epoch, self.voters), EntryKind.LEADER_CHANGE)])
        self._send_begin_quorum_epoch(now_ms)
        self._maybe_advance_hw(now_ms)

    def _resign(self, now_ms: int, reason: str) -> None:
        logger.warning("node %d: resigning leadership of epoch %d: %s", self.node_id, self._epoch, reason)
        successors = sorted(
            (v for v in self.voters if v != self.node_id),
            key=lambda v: (-self._progress.get(v, _ReplicaProgress()).end_offset, v),
        )
        self._leave_current_role()
        self._set_role(Role.RESIGNED, self.node_id)
        for voter in successors:
            self._send(
                voter,
                EndQuorumEpochRequest(
                    self.config.cluster_id, self.node_id, self._epoch, tuple(successors), self._correlation()
                ),
            )
        self._election_deadline = now_ms + self._random_election_timeout()

    def _discover_leader(self, now_ms: int) -> None:
        """Observer without a leader: ask a random voter; its answer (an error naming the leader) points the way."""
        self._leave_current_role()
        self._set_role(Role.UNATTACHED, None)
        if not self.voters:  # a joining controller that has not learned the voters yet: nobody to ask
            self._election_deadline = now_ms + self.config.retry_backoff_ms
            return
        self._discovery_target = self._rng.choice(sorted(self.voters))
        correlation = self._correlation()
        self._fetch_inflight = (correlation, now_ms)
        self._election_deadline = now_ms + self.config.retry_backoff_ms + self._random_backoff()
        self._send(self._discovery_target, self._fetch_request(correlation))

    def _on_discovery_response(self, sender: int, resp: FetchResponse, now_ms: int) -> None:
        if (
            self._fetch_inflight is None
            or self._fetch_inflight[0] != resp.correlation_id
            or sender != self._discovery_target
        ):
            return
        self._fetch_inflight = None
        self._note_refusal(sender, resp)
        leader = resp.current_leader
        if resp.error_code is Errors.NONE and leader.leader_id == sender:
            self._become_follower(leader.leader_epoch, sender, now_ms, heard_from_leader=True)
        elif leader.leader_id not in (NO_LEADER, self.node_id) and leader.leader_epoch >= self._epoch:
            self._become_follower(leader.leader_epoch, leader.leader_id, now_ms)

    def _observe_leader(self, epoch: int, leader_id: int, now_ms: int) -> bool:
        """React to a peer reporting a newer epoch; returns True if this node changed epoch.

        The leader need not be among this node's voters: as KIP-853 has it, a node whose log has not yet caught up
        with a voter change (one that added the leader, or took this node out) still follows whoever won the epoch."""
        if epoch <= self._epoch:
            return False
        if leader_id not in (NO_LEADER, self.node_id):
            self._become_follower(epoch, leader_id, now_ms)
        else:
            self._become_unattached(epoch, now_ms)
        return True

    # ---- elections -----------------------------------------------------------------------------------------
    def _send_votes(self, *, pre_vote: bool) -> None:
        epoch = self._epoch + 1 if pre_vote else self._epoch
        for voter in sorted(self.voters - {self.node_id}):
            correlation = self._correlation()
            self._vote_round[correlation] = voter
            self._send(
                voter,
                VoteRequest(
                    self.config.cluster_id,
                    epoch,
                    self.node_id,
                    self._log.last_epoch,
                    self._log.end_offset,
                    pre_vote,
                    voter,
                    correlation,
                ),
            )

    def _check_election(self, now_ms: int) -> None:
        if len(self._granted) < self._majority:
            return
        if self._role is Role.PROSPECTIVE:
            self._become_candidate(now_ms)
        elif self._role is Role.CANDIDATE:
            self._become_leader(now_ms)

    def _has_live_leader(self, now_ms: int) -> bool:
        if self._role is Role.LEADER:
            return True
        return self._role is Role.FOLLOWER and now_ms - self._last_leader_contact_ms < self.config.fetch_timeout_ms

    def _prefer_own_candidacy(self, req: VoteRequest) -> bool:
        """Refuse a pre-vote whose real vote would be refused, or that would only split the vote.

        A voter that already voted in the epoch the requester would run in cannot vote for it. Two prospective
        nodes with identical logs would otherwise both win their pre-votes, both run, and split the vote (then
        wait a whole election timeout): the lower id goes first. This only ever delays a pre-vote; safety rests
        on the real vote.
        """
        if req.replica_epoch == self._epoch and self._voted_id not in (None, req.replica_id):
            return True
        same_log = (req.last_offset_epoch, req.last_offset) == (self._log.last_epoch, self._log.end_offset)
        return self._role is Role.PROSPECTIVE and same_log and req.replica_id > self.node_id

    def _on_vote_request(self, sender: int, req: VoteRequest, now_ms: int) -> None:
        def answer(granted: bool, error: Errors = Errors.NONE) -> None:
            # Name the leader only if it is alive: a prospective told about a dead one would go and wait on it.
            leader = self._leader_or_none() if self._has_live_leader(now_ms) else NO_LEADER
            self._send(sender, VoteResponse(error, leader, self._epoch, granted, req.correlation_id))

        if req.cluster_id != self.config.cluster_id:
            answer(False, Errors.INCONSISTENT_CLUSTER_ID)
            return
        if _no_candidate_sends(req):
            answer(False, Errors.INVALID_REQUEST)
            return
        if not self._meant_for_this_node(req.voter_id):
            answer(False, Errors.INVALID_VOTER_KEY)
            return
        # A candidate this node's log does not name yet may be a voter added after it (KIP-853): the log check below
        # decides, as for any candidate; a node that is not a voter itself has no vote to give.
        if req.replica_id == self.node_id or self.is_observer:
            answer(False, Errors.INVALID_REQUEST)
            return
        if req.replica_epoch < self._epoch:
            answer(False)
            return
        log_ok = (req.last_offset_epoch, req.last_offset) >= (self._log.last_epoch, self._log.end_offset)
        if req.pre_vote:
            # A pre-vote changes nothing here, whatever its epoch.
            answer(log_ok and not self._has_live_leader(now_ms) and not self._prefer_own_candidacy(req))
            return
        # Only a granted vote restarts this node's election timer: if every refused candidate (say, one with a
        # stale log) pushed it back, the nodes able to win might never get to run.
        running_deadline = self._election_deadline if self._role is not Role.FOLLOWER else None
        if req.replica_epoch > self._epoch:
            self._become_unattached(req.replica_epoch, now_ms, persist=False)
        if (
            self._role in (Role.LEADER, Role.RESIGNED, Role.FOLLOWER, Role.CANDIDATE)
            or self._voted_id not in (None, req.replica_id)
            or not log_ok
        ):
            self._persist()  # the epoch bump, if any, before anyone hears of it
            if running_deadline is not None and self._role is Role.UNATTACHED:
                self._election_deadline = min(self._election_deadline, running_deadline)
            answer(False)
            return
        if self._voted_id is None:
            self._voted_id = req.replica_id
            if self._role is not Role.UNATTACHED:
                self._leave_current_role()
                self._set_role(Role.UNATTACHED, None)
            self._persist()
            logger.info("node %d: voted for %d in epoch %d", self.node_id, req.replica_id, self._epoch)
        self._election_deadline = now_ms + self._random_election_timeout()
        answer(True)

    def _on_vote_response(self, sender: int, resp: VoteResponse, now_ms: int) -> None:
        if self._observe_leader(resp.leader_epoch, resp.leader_id, now_ms):
            return
        voter = self._vote_round.pop(resp.correlation_id, None)
        if voter is None or voter != sender or self._role not in (Role.PROSPECTIVE, Role.CANDIDATE):
            return
        if resp.error_code is not Errors.NONE:
            self._note_refusal(sender, resp)
            self._rejected.add(sender)
            return
        if resp.vote_granted:
            self._granted.add(sender)
            self._check_election(now_ms)
            return
        self._rejected.add(sender)
        if (
            self._role is Role.PROSPECTIVE
            and resp.leader_epoch == self._epoch
            and resp.leader_id not in (NO_LEADER, self.node_id)
        ):
            # KIP-996: a voter still following a live leader; go back to fetching from it.
            self._become_follower(self._epoch, resp.leader_id, now_ms)
        elif len(self._rejected) > len(self.voters) - self._majority:
            # This round is lost; retry after a random backoff rather than the full election timeout.
            self._election_deadline = min(self._election_deadline, now_ms + self._random_backoff())

    def _meant_for_this_node(self, voter_id: int) -> bool:
        """Whether a request that names the voter it is for (Vote and BeginQuorumEpoch v1+; -1 before) names this
        node. One meant for another changes nothing here: Kafka answers it INVALID_VOTER_KEY."""
        return voter_id < 0 or voter_id == self.node_id

    def _on_begin_quorum_epoch(self, sender: int, req: BeginQuorumEpochRequest, now_ms: int) -> None:
        error = Errors.NONE
        if req.cluster_id != self.config.cluster_id:
            # Another cluster's leader (a node configured with this quorum's addresses) must not become this
            # node's leader, at an epoch this quorum never held.
            error = Errors.INCONSISTENT_CLUSTER_ID
        elif not self._meant_for_this_node(req.voter_id):
            error = Errors.INVALID_VOTER_KEY
        elif req.leader_id != sender or req.leader_id < 0:
            error = Errors.INVALID_REQUEST
        elif req.leader_epoch < self._epoch:
            error = Errors.FENCED_LEADER_EPOCH
        elif req.leader_epoch == self._epoch and self._role is Role.LEADER:
            if req.leader_id != self.node_id:
                logger.error(
                    "node %d: node %d claims leadership of epoch %d that this node leads",
                    self.node_id,
                    req.leader_id,
                    self._epoch,
                )
                error = Errors.INVALID_REQUEST
        elif not (self._role is Role.FOLLOWER and self._leader_id == req.leader_id and req.leader_epoch == self._epoch):
            self._become_follower(req.leader_epoch, req.leader_id, now_ms, heard_from_leader=True)
        else:
            self._last_leader_contact_ms = now_ms
        self._send(sender, BeginQuorumEpochResponse(error, self._leader_or_none(), self._epoch, req.correlation_id))

    def _on_end_quorum_epoch(self, sender: int, req: EndQuorumEpochRequest, now_ms: int) -> None:
        error = Errors.NONE
        if req.cluster_id != self.config.cluster_id:
            error = Errors.INCONSISTENT_CLUSTER_ID
        elif req.leader_epoch < self._epoch:
            error = Errors.FENCED_LEADER_EPOCH
        elif req.leader_id == self.node_id or req.leader_id < 0:
            error = Errors.INVALID_REQUEST
        else:
            if req.leader_epoch > self._epoch:
                self._become_unattached(req.leader_epoch, now_ms)
            if self._role in (Role.FOLLOWER, Role.UNATTACHED) and self._leader_id in (None, req.leader_id):
                # The best successor runs at once; the others wait a little longer each so it usually wins.
                try:
                    position = req.preferred_successors.index(self.node_id)
                except ValueError:
                    position = len(req.preferred_successors)
                self._leave_current_role()
                self._set_role(Role.UNATTACHED, None)
                self._election_deadline = now_ms + position * self._random_backoff()
        self._send(sender, EndQuorumEpochResponse(error, self._leader_or_none(), self._epoch, req.correlation_id))

    # ---- leader --------------------------------------------------------------------------------------------
    def _append_local(self, items: Sequence[tuple[bytes, EntryKind]]) -> None:
        base = self._log.end_offset
        entries = tuple(LogEntry(base + i, self._epoch, data, kind) for i, (data, kind) in enumerate(items))
        self._log.append(entries)
        self._emit(AppendEntries(entries))

    def _send_begin_quorum_epoch(self, now_ms: int) -> None:
        for voter in sorted(self.voters - {self.node_id}):
            if not self._progress[voter].fetched_this_epoch:
                self._send(
                    voter,
                    BeginQuorumEpochRequest(
                        self.config.cluster_id, self.node_id, self._epoch, voter, self._correlation()
                    ),
                )
        self._begin_resend_at = now_ms + self.config.begin_quorum_resend_ms

    def _leader_tick(self, now_ms: int) -> None:
        if self.node_id not in self.voters and self._history.latest_offset < self._hw:
            # KIP-853: a leader that removed itself leads until the removal is committed, then hands over.
            self._resign(now_ms, "this node's removal from the voters is committed")
            return
        cq = self.config.check_quorum_ms
        live = sum(
            1 for voter in self.voters if voter == self.node_id or now_ms - self._progress[voter].last_fetch_ms <= cq
        )
        if live < self._majority:
            self._resign(now_ms, f"only {live} of {len(self.voters)} voters fetched within {cq} ms")
            return
        if now_ms >= self._begin_resend_at:
            self._send_begin_quorum_epoch(now_ms)
        self._complete_parked(now_ms)
        self._expire_observers(now_ms)

    def _expire_observers(self, now_ms: int) -> None:
        """Forget the observers idle for `OBSERVER_SESSION_TIMEOUT_MS`; one that fetches again is tracked anew."""
        idle = [
            replica
            for replica, p in self._progress.items()
            if replica not in self.voters and now_ms - p.last_fetch_ms >= OBSERVER_SESSION_TIMEOUT_MS
        ]
        for replica in idle:
            del self._progress[replica]
            self._hw_sent.pop(replica, None)

    def _maybe_advance_hw(self, now_ms: int) -> None:
        offsets = sorted(
            (self._flushed_end if voter == self.node_id else self._progress[voter].end_offset for voter in self.voters),
            reverse=True,
        )
        candidate = offsets[self._majority - 1]
        # Leader completeness: only an entry of this epoch may be committed by counting replicas.
        if candidate > self._hw and candidate > self._epoch_start_offset:
            self._hw = candidate
            self._emit_commits()

    def _emit_commits(self) -> None:
        if self._hw <= self._applied:
            return
        entries = tuple(self._log.read(self._applied, self._hw))
        self._applied = self._hw
        self._emit(Commit(self._hw, entries))

    def _fetch_error(self, req: FetchRequest) -> Errors | None:
        if req.cluster_id != self.config.cluster_id:
            return Errors.INCONSISTENT_CLUSTER_ID
        if (req.max_wait_ms < 0 or req.fetch_offset < 0 or req.last_fetched_epoch < 0
                or req.last_fetched_epoch > req.current_leader_epoch):
            return Errors.INVALID_REQUEST  # as Kafka's: no replica fetches so, whatever its log holds
        if req.current_leader_epoch < self._epoch:
            return Errors.FENCED_LEADER_EPOCH
        if req.current_leader_epoch > self._epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        if self._role is not Role.LEADER:
            return Errors.NOT_LEADER_OR_FOLLOWER
        return None

    def _on_fetch_request(self, sender: int, req: FetchRequest, now_ms: int) -> None:
        def reply(
            error: Errors, *, diverging: EpochEndOffset | None = None, snapshot_id: SnapshotId | None = None
        ) -> None:
            self._send(
                sender,
                FetchResponse(
                    error,
                    self._reported_hw(),
                    self._log.start_offset,
                    self._current_leader(),
                    diverging_epoch=diverging,
                    snapshot_id=snapshot_id,
                    correlation_id=req.correlation_id,
                ),
            )

        error = self._fetch_error(req)
        if error is not None:
            reply(error)
            return
        progress = self._progress.setdefault(sender, _ReplicaProgress())
        progress.last_fetch_ms = now_ms
        progress.fetched_this_epoch = True
        if req.fetch_offset < self._log.start_offset:
            reply(Errors.NONE, snapshot_id=self._log.snapshot_id)
            return
        found = self._log.end_offset_for_epoch(req.last_fetched_epoch)
        if found is None:
            reply(Errors.NONE, snapshot_id=self._log.snapshot_id)
            return
        epoch, end = found
        if epoch != req.last_fetched_epoch or end < req.fetch_offset:
            reply(Errors.NONE, diverging=EpochEndOffset(epoch, end))
            return
        progress.end_offset = req.fetch_offset
        if req.fetch_offset >= self._log.end_offset:
            progress.last_caught_up_ms = now_ms
        self._parked.pop(sender, None)
        if sender in self.voters:
            self._maybe_advance_hw(now_ms)
        if req.fetch_offset < self._news_end(sender) or req.max_wait_ms <= 0 or self._hw_sent.get(sender) != self._hw:
            # Also when only the high watermark moved since this replica's last answer (its entries were sent before
            # they committed): parked, it would learn of the commit only when the wait ends.
            self._answer_fetch(sender, req)
        else:
            self._parked[sender] = _ParkedFetch(
                req, now_ms + min(req.max_wait_ms, self.config.fetch_max_wait_ms), self._hw
            )
        self._complete_parked(now_ms)

    def _reported_hw(self) -> int:
        """The high watermark a fetch answer carries: -1 (unknown) from a leader that has not yet committed an entry
        of its own epoch, as KRaft's leader reports none until then. Its ``_hw`` is only what it learned as a
        follower (after a restart, its log start), not the quorum's commit offset; a follower taking it as such would
        think itself caught up before it is (``first_leader_high_watermark``)."""
        if self._role is Role.LEADER and self._hw <= self._epoch_start_offset:
            return -1
        return self._hw

    def _news_end(self, replica: int) -> int:
        """Up to where the leader's log has something for ``replica``'s fetch to return at once: a voter takes
        every entry (its copy counts toward the commit); an observer can use only committed ones. Answered with
        entries not yet committed, an observer would make its log durable, fetch again and learn of the commit in a
        second round trip; parked until the high watermark passes them, it gets the entries and the high watermark
        that commits them in one answer (a broker learns of a metadata change, a partition's new leader say, one
        round trip and one fsync sooner)."""
        return self._log.end_offset if replica in self.voters else self._hw

    def _answer_fetch(self, sender: int, req: FetchRequest) -> None:
        records = self._log.read(req.fetch_offset, max_bytes=min(req.max_bytes, self.config.fetch_max_bytes))
        self._hw_sent[sender] = self._hw
        self._send(
            sender,
            FetchResponse(
                Errors.NONE,
                self._reported_hw(),
                self._log.start_offset,
                self._current_leader(),
                records=tuple(records),
                correlation_id=req.correlation_id,
            ),
        )

    def _complete_parked(self, now_ms: int) -> None:
        """Answer parked fetches that now have something to say: new entries (committed ones for an observer), a
        new HW, or their wait is over."""
        if not self._parked:
            return
        done = [
            replica
            for replica, parked in self._parked.items()
            if parked.request.fetch_offset < self._news_end(replica)
            or parked.high_watermark != self._hw
            or now_ms >= parked.deadline_ms
        ]
        for replica in done:
            self._answer_fetch(replica, self._parked.pop(replica).request)

    def _on_fetch_snapshot_request(self, sender: int, req: FetchSnapshotRequest, now_ms: int) -> None:
        def reply(error: Errors, size: int = 0, chunk: bytes = b"") -> None:
            self._send(
                sender,
                FetchSnapshotResponse(
                    error, req.snapshot_id, self._current_leader(), size, req.position, chunk, req.correlation_id
                ),
            )

        if req.cluster_id != self.config.cluster_id:
            reply(Errors.INCONSISTENT_CLUSTER_ID)
            return
        if req.current_leader_epoch != self._epoch or self._role is not Role.LEADER:
            if req.current_leader_epoch < self._epoch:
                reply(Errors.FENCED_LEADER_EPOCH)
            elif req.current_leader_epoch > self._epoch:
                reply(Errors.UNKNOWN_LEADER_EPOCH)
            else:
                reply(Errors.NOT_LEADER_OR_FOLLOWER)
            return
        progress = self._progress.setdefault(sender, _ReplicaProgress())
        progress.last_fetch_ms = now_ms
        progress.fetched_this_epoch = True
        if req.snapshot_id != self._log.snapshot_id or self._log.start_offset == 0:
            reply(Errors.SNAPSHOT_NOT_FOUND)
            return
        data = self._snapshot_data
        if not 0 <= req.position <= len(data):
            reply(Errors.POSITION_OUT_OF_RANGE, len(data))
            return
        size = max(1, min(req.max_bytes, self.config.snapshot_chunk_bytes))
        reply(Errors.NONE, len(data), data[req.position : req.position + size])

    # ---- follower ------------------------------------------------------------------------------------------
    def _send_fetch(self, now_ms: int) -> None:
        assert self._leader_id is not None
        self._next_fetch_at = None
        correlation = self._correlation()
        self._fetch_inflight = (correlation, now_ms)
        if self._snapshot_download is not None:
            download = self._snapshot_download
            self._send(
                self._leader_id,
                FetchSnapshotRequest(
                    self.config.cluster_id,
                    self.node_id,
                    self.config.snapshot_chunk_bytes,
                    self._epoch,
                    download.snapshot_id,
                    len(download.buffer),
                    correlation,
                ),
            )
            return
        self._send(self._leader_id, self._fetch_request(correlation))

    def _fetch_request(self, correlation: int) -> FetchRequest:
        return FetchRequest(
            self.config.cluster_id,
            self.node_id,
            self.config.fetch_max_wait_ms,
            self._epoch,
            self._log.end_offset,
            self._log.last_epoch,
            self._log.start_offset,
            self.config.fetch_max_bytes,
            correlation,
        )

    def _accept_response(self, sender: int, correlation_id: int) -> bool:
        """Is this the answer to the one request the follower has outstanding?"""
        if self._role is not Role.FOLLOWER or sender != self._leader_id or self._fetch_inflight is None:
            return False
        if self._fetch_inflight[0] != correlation_id:
            return False
        self._fetch_inflight = None
        return True

    def _note_refusal(
        self,
        sender: int,
        resp: FetchResponse | FetchSnapshotResponse | VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse,
    ) -> None:
        """Warns once per peer that refused this node's principal or its cluster id: the quorum cannot work until an
        operator fixes ``super.users`` or the node's directory (the node only retries), and at DEBUG the refusal
        would be invisible on this node."""
        refusals = (Errors.CLUSTER_AUTHORIZATION_FAILED, Errors.INCONSISTENT_CLUSTER_ID)
        if resp.error_code not in refusals or sender in self._refused_by:
            return
        self._refused_by.add(sender)
        kind = type(resp).__name__.removesuffix("Response")
        if resp.error_code is Errors.INCONSISTENT_CLUSTER_ID:
            logger.warning(
                "node %d: node %d refused this node's %s request with INCONSISTENT_CLUSTER_ID: this node's cluster id "
                "%s is not node %d's; if the voters are the right quorum, remove this node's metadata directory and "
                "format it with the quorum's cluster id (fjord storage format -t ID); retrying, further refusals by "
                "node %d are not logged",
                self.node_id, sender, kind, self.config.cluster_id, sender, sender,
            )
            return
        logger.warning(
            "node %d: node %d refused this node's %s request with CLUSTER_AUTHORIZATION_FAILED: this node's principal "
            "on the CONTROLLER listener must be a super user (super.users) of node %d; retrying, further refusals "
            "by node %d are not logged",
            self.node_id,
            sender,
            kind,
            sender,
            sender,
        )

    def _on_fetch_error(self, error: Errors, leader: LeaderIdAndEpoch, now_ms: int) -> None:
        if self._observe_leader(leader.leader_epoch, leader.leader_id, now_ms):
            return
        logger.debug("node %d: fetch from %s failed with %s", self.node_id, self._leader_id, error.name)
        self._next_fetch_at = now_ms + self.config.retry_backoff_ms

    def _on_fetch_response(self, sender: int, resp: FetchResponse, now_ms: int) -> None:
        if self.is_observer and self._role is Role.UNATTACHED:
            self._on_discovery_response(sender, resp, now_ms)
            return
        if self._observe_leader(resp.current_leader.leader_epoch, resp.current_leader.leader_id, now_ms):
            return
        if not self._accept_response(sender, resp.correlation_id) or self._snapshot_download is not None:
            return
        if resp.error_code is not Errors.NONE:
            self._note_refusal(sender, resp)
            self._on_fetch_error(resp.error_code, resp.current_leader, now_ms)
            return
        self._fetch_deadline = now_ms + self.config.fetch_timeout_ms
        self._last_leader_contact_ms = now_ms
        if self._first_leader_hw is None and resp.high_watermark >= 0:  # -1: the leader has not committed yet
            self._first_leader_hw = resp.high_watermark
        if resp.diverging_epoch is not None:
            # The high watermark in this answer says nothing about our log until a fetch validates it.
            self._truncate_diverged(resp.diverging_epoch, now_ms)
            self._send_fetch(now_ms)
            return
        if resp.snapshot_id is not None:
            logger.info(
                "node %d: log end %d is below leader %d's log start %d; downloading snapshot %s",
                self.node_id,
                self._log.end_offset,
                sender,
                resp.log_start_offset,
                resp.snapshot_id,
            )
            self._snapshot_download = _SnapshotDownload(resp.snapshot_id)
            self._send_fetch(now_ms)
            return
        if resp.records:
            if resp.records[0].offset != self._log.end_offset:
                logger.debug("node %d: dropping fetch response starting at %d", self.node_id, resp.records[0].offset)
            else:
                before = self._voters_seen()
                self._log.append(resp.records)
                self._emit(AppendEntries(resp.records))
                for entry in resp.records:
                    if entry.kind is EntryKind.VOTERS:
                        self._history.append(entry.offset, _decode_voters(entry))
                self._voters_changed(before, now_ms)
        self._advance_follower_hw(resp.high_watermark)
        self._send_fetch(now_ms)

    def _advance_follower_hw(self, leader_hw: int) -> None:
        hw = min(leader_hw, self._log.end_offset)
        if hw > self._hw:
            self._hw = hw
            self._emit_commits()

    def _truncate_diverged(self, diverging: EpochEndOffset, now_ms: int) -> None:
        local = self._log.end_offset_for_epoch(diverging.epoch)
        if local is None:
            target = self._log.start_offset
        elif local[0] == diverging.epoch:
            target = min(local[1], diverging.end_offset)
        else:
            target = local[1]
        target = max(target, self._log.start_offset)
        if target >= self._log.end_offset:
            return
        if target < self._hw:
            logger.error(
                "node %d: leader %s asks to truncate to %d below the high watermark %d",
                self.node_id,
                self._leader_id,
                target,
                self._hw,
            )
        logger.info(
            "node %d: log diverges from leader %s at epoch %d; truncating %d -> %d",
            self.node_id,
            self._leader_id,
            diverging.epoch,
            self._log.end_offset,
            target,
        )
        before = self._voters_seen()
        self._log.truncate_to(target)
        self._flushed_end = min(self._flushed_end, target)
        self._emit(TruncateLog(target))
        self._history.truncate(target)
        self._voters_changed(before, now_ms)

    def _on_fetch_snapshot_response(self, sender: int, resp: FetchSnapshotResponse, now_ms: int) -> None:
        if self._observe_leader(resp.current_leader.leader_epoch, resp.current_leader.leader_id, now_ms):
            return
        download = self._snapshot_download
        if download is None or not self._accept_response(sender, resp.correlation_id):
            return
        if resp.error_code is not Errors.NONE:
            # e.g. SNAPSHOT_NOT_FOUND: the leader took a newer snapshot; a plain fetch will name it.
            self._note_refusal(sender, resp)
            self._snapshot_download = None
            self._on_fetch_error(resp.error_code, resp.current_leader, now_ms)
            return
        self._fetch_deadline = now_ms + self.config.fetch_timeout_ms
        self._last_leader_contact_ms = now_ms
        if resp.snapshot_id != download.snapshot_id or resp.position != len(download.buffer):
            self._send_fetch(now_ms)
            return
        download.buffer += resp.unaligned_records
        if len(download.buffer) >= resp.size:
            self._install_snapshot(download.snapshot_id, bytes(download.buffer), now_ms)
            self._snapshot_download = None
        elif not resp.unaligned_records:
            self._next_fetch_at = now_ms + self.config.retry_backoff_ms
            return
        self._send_fetch(now_ms)

    def _install_snapshot(self, snapshot_id: SnapshotId, data: bytes, now_ms: int) -> None:
        if snapshot_id.end_offset < self._hw:
            # Never move the state machine backwards; a leader only sends a snapshot that covers our commits.
            logger.error(
                "node %d: ignoring snapshot %s below the high watermark %d", self.node_id, snapshot_id, self._hw
            )
            return
        # Our log may run past the snapshot, but then it diverged before it (else the leader would have fetched
        # from it): nothing in it is worth keeping.
        logger.info("node %d: installing snapshot %s (%d bytes)", self.node_id, snapshot_id, len(data))
        self._emit(PersistSnapshot(snapshot_id, data))
        self._emit(ResetLog(snapshot_id))
        self._log.reset(snapshot_id)
        self._snapshot_data = data
        self._flushed_end = snapshot_id.end_offset
        self._hw = max(self._hw, snapshot_id.end_offset)
        self._applied = snapshot_id.end_offset
        voters, state = unwrap_snapshot(data)
        before = self._voters_seen()
        self._history.reset(voters, snapshot_id.end_offset - 1, self._configured)
        self._emit(LoadSnapshot(snapshot_id, state))
        self._voters_changed(before, now_ms)


def _decode_voters(entry: LogEntry) -> VoterSet:
    try:
        return decode_voters(entry.data)
    except ValueError as exc:
        raise ValueError(f"raft log entry {entry.offset}: {exc}") from exc


def _no_candidate_sends(req: VoteRequest) -> bool:
    """A Vote no candidate sends, which Kafka answers INVALID_REQUEST: a candidate has a node id and a log position,
    and bumped its epoch past every entry it holds (a prospective asks at the epoch it would run in)."""
    if req.pre_vote:
        illegal_epoch = req.last_offset_epoch > req.replica_epoch
    else:
        illegal_epoch = req.last_offset_epoch >= req.replica_epoch
    return req.replica_id < 0 or req.last_offset < 0 or req.last_offset_epoch < 0 or illegal_epoch
