"""Scenario tests of the sans-I/O Raft core: each drives real `RaftNode`s through a scripted network."""

from __future__ import annotations

import logging
import random

import pytest

from raft.core import OBSERVER_SESSION_TIMEOUT_MS, NotLeader, RaftConfig, RaftNode
from raft.effects import (
    AppendEntries,
    Commit,
    LoadSnapshot,
    PersistQuorumState,
    QuorumState,
    Role,
    Send,
    TruncateLog,
)
from raft.log import EntryKind, LogEntry, RaftLog
from raft.messages import (
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    LeaderIdAndEpoch,
    VoteRequest,
    VoteResponse,
)
from tests.raft.scripted_net import CONFIG, Net, data_of


def test_three_nodes_elect_one_leader_and_replicate() -> None:
    net = Net([1, 2, 3])
    leader = net.elect()
    epoch = net.nodes[leader].epoch
    assert epoch == 1
    net.commit(leader, b"a", b"b")
    for i in net.ids:
        assert data_of(net.applied[i]) == [b"a", b"b"]
        # The leader's first entry of its epoch is the leader-change control entry.
        assert net.applied[i][0].kind is EntryKind.LEADER_CHANGE
    follower = next(i for i in net.ids if i != leader)
    assert net.nodes[follower].propose([b"x"], net.now) == NotLeader(leader, epoch)


def test_single_voter_leads_alone_and_commits_on_flush() -> None:
    net = Net([7])
    net.run(10)
    assert net.leaders() == [7]
    net.commit(7, b"solo")
    assert data_of(net.applied[7]) == [b"solo"]


def test_vote_is_persisted_before_it_is_answered() -> None:
    net = Net([1, 2, 3])
    voter = net.nodes[2]
    voter.receive(1, VoteRequest("fjord", 1, 1, 0, 0, False, 2, correlation_id=9), 0)
    effects = voter.drain()
    persist = next(k for k, e in enumerate(effects) if isinstance(e, PersistQuorumState))
    answer = next(k for k, e in enumerate(effects) if isinstance(e, Send) and isinstance(e.message, VoteResponse))
    assert persist < answer
    assert effects[persist] == PersistQuorumState(QuorumState(1, None, 1))
    response = effects[answer].message
    assert isinstance(response, VoteResponse) and response.vote_granted and response.correlation_id == 9
    # Same epoch, another candidate: refused, the vote stands.
    voter.receive(3, VoteRequest("fjord", 1, 3, 0, 0, False, 2, correlation_id=10), 0)
    refusal = [e.message for e in voter.drain() if isinstance(e, Send)]
    assert refusal and isinstance(refusal[0], VoteResponse) and not refusal[0].vote_granted


def test_vote_refused_to_a_candidate_with_a_shorter_log() -> None:
    log = RaftLog(entries=[LogEntry(0, 1, b"x"), LogEntry(1, 2, b"y")])
    node = RaftNode(2, [1, 2, 3], rng=random.Random(0), now_ms=0, config=CONFIG, log=log,
                    quorum_state=QuorumState(2, None, None))
    node.drain()
    for last_epoch, last_offset in [(1, 5), (2, 1)]:
        node.receive(1, VoteRequest("fjord", 3, 1, last_epoch, last_offset, False, 2), 0)
        answers = [e.message for e in node.drain() if isinstance(e, Send)]
        assert isinstance(answers[0], VoteResponse) and not answers[0].vote_granted
    node.receive(1, VoteRequest("fjord", 3, 1, 2, 2, False, 2), 0)
    answers = [e.message for e in node.drain() if isinstance(e, Send)]
    assert isinstance(answers[0], VoteResponse) and answers[0].vote_granted


def test_pre_vote_stops_a_returning_partitioned_node_from_disrupting_the_leader() -> None:
    net = Net([1, 2, 3])
    leader = net.elect()
    epoch = net.nodes[leader].epoch
    loner = next(i for i in net.ids if i != leader)
    net.cut = {loner}
    net.run(2000)  # many election timeouts for the loner
    assert net.nodes[loner].epoch == epoch, "pre-votes must not bump the loner's epoch"
    assert net.nodes[loner].role is Role.PROSPECTIVE
    net.cut = set()
    net.run(500)
    assert net.leaders() == [leader]
    assert net.nodes[leader].epoch == epoch
    assert net.nodes[loner].leader_id == leader and net.nodes[loner].role is Role.FOLLOWER
    net.commit(leader, b"after-heal")
    assert b"after-heal" in data_of(net.applied[loner])


def test_leader_without_a_quorum_steps_down() -> None:
    net = Net([1, 2, 3])
    leader = net.elect()
    followers = [i for i in net.ids if i != leader]
    net.cut = set(followers)
    net.run(CONFIG.check_quorum_ms + 50)
    assert net.nodes[leader].role is Role.RESIGNED
    assert net.nodes[leader].propose([b"late"], net.now) == NotLeader(leader, net.nodes[leader].epoch)
    ends = [m for s, _, m in net.sent if s == leader and isinstance(m, EndQuorumEpochRequest)]
    assert {m.leader_id for m in ends} == {leader}


def test_graceful_resignation_hands_over_quickly() -> None:
    net = Net([1, 2, 3])
    old = net.elect()
    net.commit(old, b"one")
    net.nodes[old].resign(net.now)
    net.pump(old)
    start = net.now
    new = net.elect()
    assert new != old
    assert net.now - start < CONFIG.fetch_timeout_ms + CONFIG.election_timeout_ms * 2
    net.commit(new, b"two")
    assert data_of(net.applied[old]) == [b"one", b"two"]


def test_follower_truncates_a_diverged_suffix_and_converges() -> None:
    # Node 3 led epoch 2 alone and wrote entries nobody else has; nodes 1 and 2 moved on in epoch 3.
    common = [LogEntry(0, 1, b"c0"), LogEntry(1, 1, b"c1")]
    stale = RaftLog(entries=[*common, LogEntry(2, 2, b"stale2"), LogEntry(3, 2, b"stale3"), LogEntry(4, 2, b"stale4")])
    good = [*common, LogEntry(2, 3, b"g2")]
    logs = {1: RaftLog(entries=good), 2: RaftLog(entries=good), 3: stale}
    states = {i: QuorumState(3, None, None) for i in (1, 2, 3)}
    net = Net([1, 2, 3], logs=logs, states=states)
    net.cut = {3}
    leader = net.elect()
    net.cut = set()
    net.run(300)
    truncations = [e for e in net.effects[3] if isinstance(e, TruncateLog)]
    assert truncations and truncations[0].end_offset == 2
    net.commit(leader, b"new")
    leader_log = net.nodes[leader].log
    node3 = net.nodes[3].log
    assert [node3.entry(o) for o in range(node3.end_offset)] == [
        leader_log.entry(o) for o in range(leader_log.end_offset)
    ]
    assert b"stale2" not in data_of(net.applied[3])


def test_leader_commits_old_entries_only_through_its_own_epoch() -> None:
    old = [LogEntry(0, 1, b"old")]
    logs = {1: RaftLog(entries=old), 2: RaftLog(entries=old), 3: RaftLog()}
    net = Net([1, 2, 3], logs=logs, states={i: QuorumState(1, None, None) for i in (1, 2, 3)})
    leader = net.elect()
    assert leader in (1, 2)
    node = net.nodes[leader]
    # Offset 0 (epoch 1) becomes committed only together with the leader-change entry at offset 1.
    commits = [e for e in net.effects[leader] if isinstance(e, Commit)]
    assert commits and commits[0].high_watermark >= 2
    assert node.log.entry(1).kind is EntryKind.LEADER_CHANGE


def test_lagging_follower_catches_up_from_a_snapshot_in_chunks() -> None:
    net = Net([1, 2, 3])
    leader = net.elect()
    lagger = next(i for i in net.ids if i != leader)
    net.cut = {lagger}
    for k in range(5):
        net.commit(leader, f"e{k}".encode())
    node = net.nodes[leader]
    snapshot_bytes = b"state-machine-image-" + bytes(range(30))
    snapshot_id = node.snapshot_taken(node.high_watermark, snapshot_bytes, net.now)
    net.pump(leader)
    assert snapshot_id is not None and node.log.start_offset == snapshot_id.end_offset
    net.commit(leader, b"after-snapshot")
    net.cut = set()
    net.run(500)
    requests = [m for s, _, m in net.sent if s == lagger and isinstance(m, FetchSnapshotRequest)]
    assert len(requests) >= len(snapshot_bytes) // CONFIG.snapshot_chunk_bytes  # it came in chunks
    loads = [e for e in net.effects[lagger] if isinstance(e, LoadSnapshot)]
    assert loads and loads[-1].data == snapshot_bytes and loads[-1].snapshot_id == snapshot_id
    assert net.nodes[lagger].log.start_offset == snapshot_id.end_offset
    assert data_of(net.applied[lagger]) == [b"after-snapshot"]
    assert net.nodes[lagger].high_watermark == node.high_watermark


def test_snapshot_beyond_applied_entries_is_refused() -> None:
    net = Net([1])
    net.run(10)
    net.commit(1, b"x")
    hw = net.nodes[1].high_watermark
    with pytest.raises(ValueError, match="only"):
        net.nodes[1].snapshot_taken(hw + 1, b"", net.now)


def test_follower_appends_durably_before_fetching_again() -> None:
    net = Net([1, 2, 3])
    leader = net.elect()
    follower = next(i for i in net.ids if i != leader)
    net.effects[follower].clear()
    net.commit(leader, b"p")
    effects = net.effects[follower]
    append = next(k for k, e in enumerate(effects) if isinstance(e, AppendEntries))
    later_fetches = [
        k for k, e in enumerate(effects) if isinstance(e, Send) and isinstance(e.message, FetchRequest) and k > append
    ]
    assert later_fetches, "the follower must fetch again after appending"
    fetch = effects[later_fetches[0]].message
    assert isinstance(fetch, FetchRequest) and fetch.fetch_offset == net.nodes[follower].log.end_offset


def test_duplicated_fetch_response_is_ignored() -> None:
    net = Net([1, 2, 3])
    leader = net.elect()
    follower = next(i for i in net.ids if i != leader)
    net.commit(leader, b"once")
    replay = [m for s, d, m in net.sent if s == leader and d == follower and isinstance(m, FetchResponse) and m.records]
    end = net.nodes[follower].log.end_offset
    for message in replay:
        net.nodes[follower].receive(leader, message, net.now)
        net.pump(follower)
    assert net.nodes[follower].log.end_offset == end
    assert data_of(net.applied[follower]) == [b"once"]


def test_fetch_from_a_stale_epoch_is_fenced() -> None:
    net = Net([1, 2, 3])
    leader = net.elect()
    epoch = net.nodes[leader].epoch
    net.nodes[leader].receive(2 if leader != 2 else 3, FetchRequest("fjord", 9, 0, epoch - 1, 0, 0, 0, 100, 5), net.now)
    reply = next(e.message for e in net.nodes[leader].drain() if isinstance(e, Send))
    assert isinstance(reply, FetchResponse)
    assert reply.error_code is Errors.FENCED_LEADER_EPOCH and reply.current_leader.leader_id == leader


def test_config_rejects_a_request_timeout_shorter_than_the_fetch_wait() -> None:
    with pytest.raises(ValueError, match="request_timeout_ms"):
        RaftConfig(fetch_max_wait_ms=500, request_timeout_ms=400)


def test_observer_finds_the_leader_replicates_and_never_votes() -> None:
    net = Net([1, 2, 3], observers=(9,))
    leader = net.elect()
    net.commit(leader, b"seen-by-observer")
    observer = net.nodes[9]
    assert observer.is_observer and observer.role is Role.FOLLOWER and observer.leader_id == leader
    assert b"seen-by-observer" in data_of(net.applied[9])
    assert not any(d == 9 for _, d, m in net.sent if isinstance(m, VoteRequest))
    assert not any(s == 9 for s, _, m in net.sent if isinstance(m, VoteRequest))
    described = net.nodes[leader].describe(net.now)
    assert [o.replica_id for o in described.observers] == [9]
    # The observer does not count toward the quorum: with two voters cut off nothing commits.
    net.cut = {i for i in (1, 2, 3) if i != leader}
    offset = net.nodes[leader].propose([b"no-quorum"], net.now)
    assert isinstance(offset, int)
    net.pump(leader)
    net.run(100)
    assert net.nodes[leader].high_watermark <= offset
    # When the leader goes away the observer finds its successor.
    net.cut = {leader}
    new = net.elect()
    net.commit(new, b"after-failover")
    assert net.nodes[9].leader_id == new
    assert b"after-failover" in data_of(net.applied[9])


@pytest.mark.parametrize("voters", [[1], [1, 2, 3]])
def test_an_observers_parked_fetch_returns_the_entries_with_their_commit_in_one_answer(voters: list[int]) -> None:
    """A broker (an observer) learns a metadata change, a moved partition's new leader say, in one answer that comes
    as soon as the high watermark passes it: not first the entries, then (after its fsync and another fetch) the
    high watermark that commits them, nor only when its parked fetch's wait ends."""
    net = Net(voters, observers=(9,))
    leader = net.elect()
    net.commit(leader, b"warm-up")
    net.run(20)  # every fetch caught up and parked at the leader
    assert not net.queue
    sent_before = len(net.sent)
    offset = net.nodes[leader].propose([b"new-leader"], net.now)
    assert isinstance(offset, int)
    net.pump(leader)
    net.deliver()  # no time passes: no fetch wait or deadline may be what answers the observer
    assert b"new-leader" in data_of(net.applied[9])
    answers = [m for _, d, m in net.sent[sent_before:] if d == 9 and isinstance(m, FetchResponse)]
    assert len(answers) == 1
    assert answers[0].high_watermark > offset
    assert b"new-leader" in data_of(list(answers[0].records))


def test_describe_quorum_reports_voter_progress_on_the_leader_only() -> None:
    net = Net([1, 2, 3])
    leader = net.elect()
    offset = net.commit(leader, b"d")
    described = net.nodes[leader].describe(net.now)
    assert described.error_code is Errors.NONE and described.leader_id == leader
    assert described.high_watermark == offset + 1
    assert [v.replica_id for v in described.current_voters] == [1, 2, 3]
    assert all(v.log_end_offset == offset + 1 for v in described.current_voters)
    follower = next(i for i in net.ids if i != leader)
    assert net.nodes[follower].describe(net.now).error_code is Errors.NOT_LEADER_OR_FOLLOWER


def test_a_voter_that_has_not_fetched_this_epoch_reports_no_fetch_time() -> None:
    """Kafka's leader reports -1 for a voter it has not heard from in its epoch, not the time of its election."""
    net = Net([1, 2, 3])
    net.cut = {3}
    leader = net.elect()
    net.run(100)
    described = {v.replica_id: v for v in net.nodes[leader].describe(net.now).current_voters}
    assert (described[3].log_end_offset, described[3].last_fetch_timestamp, described[3].last_caught_up_timestamp) \
        == (-1, -1, -1)
    follower = next(i for i in (1, 2) if i != leader)
    assert 0 < described[follower].last_fetch_timestamp <= net.now
    assert described[leader].last_fetch_timestamp == net.now


def test_an_observer_idle_for_the_observer_session_timeout_is_forgotten() -> None:
    """A broker that stopped fetching leaves the leader's DescribeQuorum after 300 s, as Kafka's LeaderState drops
    it, though the leader keeps its office; when it fetches again it is listed again."""
    net = Net([1, 2, 3], observers=(9,))
    leader = net.elect()
    net.commit(leader, b"seen-by-observer")
    described = net.nodes[leader].describe(net.now)
    assert [o.replica_id for o in described.observers] == [9]
    last_fetch = described.observers[0].last_fetch_timestamp
    net.cut = {9}
    net.run(last_fetch + OBSERVER_SESSION_TIMEOUT_MS - 100 - net.now, step=50)  # ends within 50 ms of that
    assert net.now < last_fetch + OBSERVER_SESSION_TIMEOUT_MS
    assert [o.replica_id for o in net.nodes[leader].describe(net.now).observers] == [9]
    net.run(100, step=50)
    assert net.nodes[leader].describe(net.now).observers == ()
    assert net.leaders() == [leader]
    net.cut = set()
    net.run(500)
    assert [o.replica_id for o in net.nodes[leader].describe(net.now).observers] == [9]


def test_resigning_leader_names_the_most_caught_up_successor_first() -> None:
    net = Net([1, 2, 3])
    leader = net.elect()
    behind, ahead = (i for i in net.ids if i != leader)
    net.cut = {behind}
    assert isinstance(net.nodes[leader].propose([b"only-ahead-has-it"], net.now), int)
    net.pump(leader)
    net.run(50)
    net.cut = set()
    net.nodes[leader].resign(net.now)
    net.pump(leader)
    ends = [m for s, _, m in net.sent if s == leader and isinstance(m, EndQuorumEpochRequest)]
    assert ends and ends[0].preferred_successors == (ahead, behind)
    net.run(30)
    assert net.nodes[ahead].role in (Role.PROSPECTIVE, Role.CANDIDATE, Role.LEADER)


def test_refused_candidates_do_not_push_back_a_voters_election_timer() -> None:
    log = RaftLog(entries=[LogEntry(0, 1, b"x"), LogEntry(1, 1, b"y")])
    node = RaftNode(2, [1, 2, 3], rng=random.Random(3), now_ms=0, config=CONFIG, log=log,
                    quorum_state=QuorumState(1, None, None))
    node.drain()
    deadline = node.next_deadline_ms(0)
    # A stream of candidates with stale logs, each in a higher epoch, just before the timer would fire.
    for k in range(5):
        node.receive(3, VoteRequest("fjord", 2 + k, 3, 1, 1, False, 2), deadline - 1)
        answers = [e.message for e in node.drain() if isinstance(e, Send)]
        assert isinstance(answers[0], VoteResponse) and not answers[0].vote_granted
    assert node.epoch == 6
    assert node.next_deadline_ms(deadline - 1) <= deadline
    node.tick(deadline)
    node.drain()
    assert node.role is Role.CANDIDATE or node.role is Role.PROSPECTIVE


def test_a_new_leader_reports_no_high_watermark_until_it_commits_in_its_epoch() -> None:
    """After a full restart every voter's high watermark is its log start. A new leader's own value is not the
    quorum's commit offset until it has committed an entry of its epoch (its leader-change entry), so it answers
    fetches with -1 until then, and a follower learns as its first commit offset (what a restarted voter must apply
    before it serves ACL decisions) the real one, past the entries written before the restart."""
    old = [LogEntry(0, 1, b"a"), LogEntry(1, 1, b"b"), LogEntry(2, 1, b"c")]
    logs = {i: RaftLog(entries=list(old)) for i in (1, 2, 3)}
    net = Net([1, 2, 3], logs=logs, states={i: QuorumState(1, None, None) for i in (1, 2, 3)})
    assert all(n.high_watermark == 0 and n.first_leader_high_watermark is None for n in net.nodes.values())
    leader = net.elect()
    answers = [(d, m) for s, d, m in net.sent if s == leader and isinstance(m, FetchResponse)]
    for follower in (i for i in net.ids if i != leader):
        mine = [m for d, m in answers if d == follower]
        # The first answer, sent before the leader-change entry at offset 3 was acknowledged by a majority.
        assert mine and mine[0].error_code is Errors.NONE and mine[0].high_watermark == -1
        assert all(m.high_watermark == -1 or m.high_watermark > 3 for m in mine)
        learned = net.nodes[follower].first_leader_high_watermark
        assert learned is not None and learned > 3
        assert learned <= net.nodes[leader].high_watermark
        assert data_of(net.applied[follower]) == [b"a", b"b", b"c"]  # applied only once really committed


def test_a_peer_refusing_this_nodes_principal_is_warned_about_once_per_peer(caplog: pytest.LogCaptureFixture) -> None:
    """A voter whose principal a peer's authorizer refuses gets CLUSTER_AUTHORIZATION_FAILED (not INVALID_REQUEST)
    and says so at WARNING, once per peer however often it retries, naming the peer and the fix."""
    net = Net([1, 2, 3])
    leader = net.elect()
    follower, other = (i for i in net.ids if i != leader)
    node = net.nodes[follower]
    net.cut = {leader}
    refused = Errors.CLUSTER_AUTHORIZATION_FAILED
    with caplog.at_level(logging.WARNING, logger="raft.core"):
        for _ in range(3):
            fetch = [m for s, d, m in net.sent if s == follower and d == leader and isinstance(m, FetchRequest)][-1]
            answer = FetchResponse(refused, -1, -1, LeaderIdAndEpoch(-1, -1), correlation_id=fetch.correlation_id)
            node.receive(leader, answer, net.now)
            net.pump(follower)
            net.run(CONFIG.retry_backoff_ms)  # the follower retries its fetch (the cut leader never answers it)
        node.receive(other, BeginQuorumEpochResponse(refused, -1, -1, 0), net.now)
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "super user" in r.getMessage()
    ]
    assert len(warnings) == 2, warnings
    assert f"node {leader} refused this node's Fetch request with CLUSTER_AUTHORIZATION_FAILED" in warnings[0]
    assert f"node {other} refused this node's BeginQuorumEpoch request" in warnings[1]
    assert node.role is Role.FOLLOWER and node.leader_id == leader  # still retrying the same leader


def test_a_peer_of_another_cluster_is_warned_about_once_with_the_fix(caplog: pytest.LogCaptureFixture) -> None:
    """A node whose directory has another cluster id than the quorum's (a broker not formatted with the -t the
    controllers were) is answered INCONSISTENT_CLUSTER_ID on every fetch: it says so once per peer, naming its
    own id and how to format it, instead of retrying without a word."""
    net = Net([1, 2, 3])
    leader = net.elect()
    follower = next(i for i in net.ids if i != leader)
    node = net.nodes[follower]
    net.cut = {leader}
    with caplog.at_level(logging.WARNING, logger="raft.core"):
        for _ in range(3):
            fetch = [m for s, d, m in net.sent if s == follower and d == leader and isinstance(m, FetchRequest)][-1]
            answer = FetchResponse(Errors.INCONSISTENT_CLUSTER_ID, -1, -1, LeaderIdAndEpoch(-1, -1),
                                   correlation_id=fetch.correlation_id)
            node.receive(leader, answer, net.now)
            net.pump(follower)
            net.run(CONFIG.retry_backoff_ms)
    warnings = [r.getMessage() for r in caplog.records if "INCONSISTENT_CLUSTER_ID" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"node {leader} refused this node's Fetch request" in warnings[0]
    assert f"cluster id {CONFIG.cluster_id} is not node {leader}'s" in warnings[0]
    assert "fjord storage format -t" in warnings[0]
