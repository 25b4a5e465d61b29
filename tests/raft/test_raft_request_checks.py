"""The Raft core checks a peer's request before it acts on it, as Kafka's KafkaRaftClient does: a request from
another cluster, one meant for another voter, or one no replica could send is answered with Kafka's error and
changes nothing on the node that got it (no epoch, role, leader, vote or replica progress).

Before these checks, one BeginQuorumEpoch naming another cluster (a node configured with this quorum's addresses)
made a follower follow a leader of an epoch this quorum never held: it left the quorum and ran pre-votes it could
not win while the real leader went on without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from raft.core import RaftNode
from raft.effects import PersistQuorumState, Role, Send
from raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Errors,
    FetchRequest,
    FetchResponse,
    RaftMessage,
    VoteRequest,
    VoteResponse,
)
from tests.raft.scripted_net import CONFIG, Net


@dataclass(frozen=True)
class Seen:
    """What a peer's request could have changed on a node."""

    epoch: int
    role: Role
    leader_id: int | None


def seen(node: RaftNode) -> Seen:
    return Seen(node.epoch, node.role, node.leader_id)


def answer_to(net: Net, node_id: int, sender: int, request: RaftMessage) -> RaftMessage:
    """Delivers ``request`` from ``sender`` and returns the one answer; fails if the node persisted anything."""
    node = net.nodes[node_id]
    node.receive(sender, request, net.now)
    effects = node.drain()
    assert not [e for e in effects if isinstance(e, PersistQuorumState)], effects
    answers = [e.message for e in effects if isinstance(e, Send) and e.destination == sender]
    assert len(answers) == 1, effects
    return answers[0]


@pytest.fixture
def quorum() -> tuple[Net, int, int, int]:
    """A three-voter quorum with a leader: (net, leader, follower, the other follower)."""
    net = Net([1, 2, 3])
    leader = net.elect()
    follower, other = (i for i in net.ids if i != leader)
    return net, leader, follower, other


def test_a_begin_quorum_epoch_from_another_cluster_does_not_move_a_follower(
    quorum: tuple[Net, int, int, int],
) -> None:
    net, leader, follower, other = quorum
    before = seen(net.nodes[follower])
    foreign = BeginQuorumEpochRequest("another-cluster", other, before.epoch + 5, follower, correlation_id=7)
    answer = answer_to(net, follower, other, foreign)
    assert isinstance(answer, BeginQuorumEpochResponse)
    assert answer.error_code is Errors.INCONSISTENT_CLUSTER_ID and answer.correlation_id == 7
    assert (answer.leader_id, answer.leader_epoch) == (leader, before.epoch)
    assert seen(net.nodes[follower]) == before
    # It stays in the quorum: it keeps fetching from its leader, and commits what the leader appends.
    offset = net.commit(leader, b"after")
    assert net.nodes[follower].high_watermark > offset
    assert seen(net.nodes[follower]) == before


def test_a_begin_quorum_epoch_meant_for_another_voter_changes_nothing(quorum: tuple[Net, int, int, int]) -> None:
    net, _leader, follower, other = quorum
    before = seen(net.nodes[follower])
    misaddressed = BeginQuorumEpochRequest(CONFIG.cluster_id, other, before.epoch + 1, other, correlation_id=8)
    answer = answer_to(net, follower, other, misaddressed)
    assert isinstance(answer, BeginQuorumEpochResponse) and answer.error_code is Errors.INVALID_VOTER_KEY
    assert seen(net.nodes[follower]) == before


def test_a_begin_quorum_epoch_naming_no_leader_changes_nothing(quorum: tuple[Net, int, int, int]) -> None:
    """Without this check a follower would follow "leader -1" in a later epoch: it would leave its leader and wait
    out its fetch timeout before a pre-vote (Kafka answers INVALID_REQUEST)."""
    net, _leader, follower, _other = quorum
    before = seen(net.nodes[follower])
    nobody = BeginQuorumEpochRequest(CONFIG.cluster_id, -1, before.epoch + 1, follower, correlation_id=10)
    answer = answer_to(net, follower, -1, nobody)
    assert isinstance(answer, BeginQuorumEpochResponse) and answer.error_code is Errors.INVALID_REQUEST
    assert seen(net.nodes[follower]) == before


def test_an_end_quorum_epoch_from_another_cluster_starts_no_election(quorum: tuple[Net, int, int, int]) -> None:
    net, leader, follower, _other = quorum
    before = seen(net.nodes[follower])
    foreign = EndQuorumEpochRequest("another-cluster", leader, before.epoch, (follower,), correlation_id=9)
    answer = answer_to(net, follower, leader, foreign)
    assert isinstance(answer, EndQuorumEpochResponse) and answer.error_code is Errors.INCONSISTENT_CLUSTER_ID
    net.run(3 * CONFIG.election_timeout_ms)
    assert seen(net.nodes[follower]) == before  # a real EndQuorumEpoch would have it run for leader at once


@dataclass(frozen=True)
class VoteCase:
    what: str
    last_offset_epoch: int  # relative to the epoch the candidate runs in when ``relative``
    last_offset: int
    pre_vote: bool = False
    to_another_voter: bool = False
    no_candidate_id: bool = False
    relative: bool = False
    error: Errors = Errors.INVALID_REQUEST


@pytest.mark.parametrize("case", [
    VoteCase("no candidate id", 0, 0, no_candidate_id=True),
    VoteCase("a negative log end offset", 0, -1),
    VoteCase("a negative last epoch", -1, 0),
    VoteCase("a last entry in the epoch it runs in", 0, 5, relative=True),
    VoteCase("a pre-vote with a last entry past the epoch it would run in", 1, 5, pre_vote=True, relative=True),
    VoteCase("a vote meant for another voter", 0, 0, to_another_voter=True, error=Errors.INVALID_VOTER_KEY),
    VoteCase("a pre-vote meant for another voter", 0, 0, pre_vote=True, to_another_voter=True,
             error=Errors.INVALID_VOTER_KEY),
], ids=lambda case: case.what)
def test_a_vote_request_no_candidate_sends_is_refused_without_an_epoch_change(
    quorum: tuple[Net, int, int, int], case: VoteCase
) -> None:
    """From a voter whose leader is cut off, so that a real request of this epoch would be granted."""
    net, leader, follower, other = quorum
    net.cut = {leader}
    net.run(CONFIG.fetch_timeout_ms + CONFIG.election_timeout_ms)
    node = net.nodes[follower]
    before = seen(node)
    running = before.epoch + 1
    last_epoch = running + case.last_offset_epoch if case.relative else case.last_offset_epoch
    addressed = other if case.to_another_voter else follower
    candidate = -1 if case.no_candidate_id else other
    request = VoteRequest(CONFIG.cluster_id, running, candidate, last_epoch, case.last_offset, case.pre_vote, addressed,
                          11)
    answer = answer_to(net, follower, candidate, request)
    assert isinstance(answer, VoteResponse)
    assert answer.error_code is case.error and not answer.vote_granted
    assert seen(node) == before


@dataclass(frozen=True)
class FetchCase:
    what: str
    max_wait_ms: int = 10
    fetch_offset: int = 1
    last_fetched_epoch: int | None = None  # None: the leader's epoch plus ``past_epoch``
    past_epoch: int = 0


@pytest.mark.parametrize("case", [
    FetchCase("a negative wait", max_wait_ms=-1),
    FetchCase("a negative fetch offset", fetch_offset=-1),
    FetchCase("a negative last fetched epoch", last_fetched_epoch=-1),
    FetchCase("a last fetched epoch past the leader epoch it names", past_epoch=1),
], ids=lambda case: case.what)
def test_a_fetch_no_replica_sends_is_refused_and_counts_for_nothing(
    quorum: tuple[Net, int, int, int], case: FetchCase
) -> None:
    net, leader, follower, _other = quorum
    node = net.nodes[leader]
    progress = {r.replica_id: r for r in node.describe(net.now).current_voters}[follower]
    net.now += 1_000  # a fetch that counted would show in the replica's last fetch time
    epoch = node.epoch
    fetched_epoch = epoch + case.past_epoch if case.last_fetched_epoch is None else case.last_fetched_epoch
    request = FetchRequest(CONFIG.cluster_id, follower, case.max_wait_ms, epoch, case.fetch_offset, fetched_epoch, 0,
                           1 << 20, 12)
    answer = answer_to(net, leader, follower, request)
    assert isinstance(answer, FetchResponse) and answer.error_code is Errors.INVALID_REQUEST
    assert not answer.records
    after = {r.replica_id: r for r in node.describe(net.now).current_voters}[follower]
    assert (after.log_end_offset, after.last_fetch_timestamp) == (progress.log_end_offset,
                                                                  progress.last_fetch_timestamp)
