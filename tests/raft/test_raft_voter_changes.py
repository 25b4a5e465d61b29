"""KIP-853 voter changes in the sans-I/O Raft core: voters added and removed through the log, one at a time."""

from __future__ import annotations

import random
import uuid

from raft.core import (
    AddVoter,
    NotLeader,
    RaftNode,
    RemoveVoter,
    UpdateVoter,
    VoterChange,
    VoterChangeRefused,
    WriteVoters,
)
from raft.effects import Role, VotersChanged
from raft.log import EntryKind, LogEntry, RaftLog
from raft.messages import Errors
from raft.voter_set import Endpoint, Voter, VoterSet, encode_voters, unwrap_snapshot, wrap_snapshot
from tests.raft.scripted_net import CONFIG, Net, data_of


def voter(node_id: int, directory: uuid.UUID | None = None) -> Voter:
    return Voter(node_id, directory, (Endpoint("CONTROLLER", "127.0.0.1", 9000 + node_id),))


def change(net: Net, leader: int, what: VoterChange) -> int:
    """Appends the change on ``leader`` and runs until every reachable node has committed it."""
    offset = net.nodes[leader].change_voters(what, net.now)
    assert isinstance(offset, int), offset
    return net.wait_committed(leader, offset, rounds=200)


def refusal(net: Net, leader: int, what: VoterChange) -> Errors:
    result = net.nodes[leader].change_voters(what, net.now)
    assert isinstance(result, VoterChangeRefused), result
    return result.error


def test_observers_added_one_at_a_time_become_voters_that_elect_and_commit() -> None:
    net = Net([1], observers=(2, 3))
    assert net.elect() == 1
    net.commit(1, b"before")
    change(net, 1, AddVoter(voter(2)))
    assert {i: net.nodes[i].voters for i in net.ids} == {i: frozenset({1, 2}) for i in (1, 2, 3)}
    assert not net.nodes[2].is_observer and net.nodes[3].is_observer
    change(net, 1, AddVoter(voter(3)))
    # Node 1 was configured by id alone; the added voters came with their endpoints.
    assert all(net.nodes[i].voter_set.addresses() == {2: ("127.0.0.1", 9002), 3: ("127.0.0.1", 9003)}
               for i in net.ids)
    # Node 1 was configured alone; the added voters now elect without it and commit what it never saw.
    net.cut = {1}
    new = net.elect()
    assert new in (2, 3)
    net.commit(new, b"without-1")
    net.cut = set()
    net.run(300)
    assert net.nodes[1].leader_id == new and b"without-1" in data_of(net.applied[1])
    announced = [e.voters.ids for e in net.effects[3] if isinstance(e, VotersChanged)]
    assert announced == [frozenset({1, 2}), frozenset({1, 2, 3})]


def test_a_leader_refuses_changes_with_kraft_error_codes_and_changes_nothing() -> None:
    net = Net([1, 2, 3], observers=(4,))
    leader = net.elect()
    net.commit(leader, b"x")
    follower = next(i for i in (1, 2, 3) if i != leader)
    assert isinstance(net.nodes[follower].change_voters(AddVoter(voter(4)), net.now), NotLeader)
    assert refusal(net, leader, AddVoter(voter(follower))) is Errors.DUPLICATE_VOTER
    assert refusal(net, leader, AddVoter(voter(7))) is Errors.REQUEST_TIMED_OUT  # never fetched
    assert refusal(net, leader, RemoveVoter(7)) is Errors.VOTER_NOT_FOUND
    # One change at a time: the next waits until this one is committed.
    offset = net.nodes[leader].change_voters(AddVoter(voter(4)), net.now)
    assert isinstance(offset, int)
    assert refusal(net, leader, RemoveVoter(follower)) is Errors.REQUEST_TIMED_OUT
    net.pump(leader)
    net.run(200)
    assert net.nodes[leader].voters == frozenset({1, 2, 3, 4})
    assert net.nodes[leader].log.end_offset == offset + 1  # the refusals appended nothing


def test_the_directory_id_of_a_removed_voter_must_match_when_both_are_known() -> None:
    directories = {1: uuid.uuid4(), 2: uuid.uuid4(), 3: uuid.uuid4()}
    voters = VoterSet.of(voter(i, directories[i]) for i in (1, 2, 3))
    net = Net([1, 2, 3])
    for i in (1, 2, 3):
        net.nodes[i] = RaftNode(i, voters, rng=random.Random(i), now_ms=net.now, config=CONFIG)
        net.pump(i)
    leader = net.elect()
    net.commit(leader, b"x")
    other = next(i for i in (1, 2, 3) if i != leader)
    assert refusal(net, leader, RemoveVoter(other, uuid.uuid4())) is Errors.VOTER_NOT_FOUND
    assert net.nodes[leader].voters == frozenset({1, 2, 3})
    change(net, leader, RemoveVoter(other, directories[other]))
    assert net.nodes[leader].voters == frozenset({1, 2, 3} - {other})


def test_the_only_voter_cannot_be_removed() -> None:
    net = Net([1])
    net.elect()
    net.commit(1, b"x")
    assert refusal(net, 1, RemoveVoter(1)) is Errors.VOTER_NOT_FOUND


def test_a_leader_that_removes_itself_hands_over_once_the_removal_is_committed() -> None:
    net = Net([1, 2, 3])
    leader = net.elect()
    net.commit(leader, b"x")
    offset = net.nodes[leader].change_voters(RemoveVoter(leader), net.now)
    assert isinstance(offset, int)
    net.pump(leader)
    # Until the others have the removal, the leader still leads (and its own copy no longer counts).
    assert net.nodes[leader].role is Role.LEADER and net.nodes[leader].high_watermark <= offset
    net.run(100)
    new = net.elect()
    assert new != leader
    assert net.nodes[leader].is_observer and net.nodes[leader].voters == frozenset({1, 2, 3} - {leader})
    net.commit(new, b"after")
    assert b"after" in data_of(net.applied[leader])
    net.run(300)
    assert net.nodes[leader].role is Role.FOLLOWER and net.nodes[leader].leader_id == new


def test_an_uncommitted_change_truncated_away_restores_the_voters_before_it() -> None:
    net = Net([1, 2, 3])
    leader = net.elect()
    net.commit(leader, b"x")
    others = [i for i in (1, 2, 3) if i != leader]
    net.cut = set(others)
    offset = net.nodes[leader].change_voters(RemoveVoter(others[0]), net.now)
    assert isinstance(offset, int)
    net.pump(leader)
    assert net.nodes[leader].voters == frozenset({1, 2, 3} - {others[0]})
    net.cut = {leader}
    new = net.elect()
    net.commit(new, b"other-history")
    net.cut = set()
    net.run(400)
    assert net.nodes[leader].voters == frozenset({1, 2, 3})
    assert [e.voters.ids for e in net.effects[leader] if isinstance(e, VotersChanged)][-1] == frozenset({1, 2, 3})
    assert b"other-history" in data_of(net.applied[leader])


def test_a_snapshot_carries_the_voters_to_a_restart_and_to_a_replica_that_installs_it() -> None:
    net = Net([1], observers=(2,))
    net.elect()
    change(net, 1, AddVoter(voter(2)))
    end = net.commit(1, b"state") + 1
    assert net.nodes[1].snapshot_taken(end, b"image", net.now) is not None
    net.pump(1)
    stored = net.nodes[1]._snapshot_data
    voters, data = unwrap_snapshot(stored)
    assert data == b"image" and voters is not None and voters.ids == frozenset({1, 2})
    assert net.nodes[1].snapshot_data == b"image"
    # A restart from that snapshot alone knows both voters, though it was configured with node 1 only.
    restarted = RaftNode(1, [1], rng=random.Random(5), now_ms=net.now, config=CONFIG,
                         log=RaftLog(net.nodes[1].log.snapshot_id), snapshot_data=stored)
    assert restarted.voters == frozenset({1, 2})
    # A new replica configured with node 1 alone installs the snapshot and learns the voters from it.
    net.nodes[3] = RaftNode(3, [1], rng=random.Random(3), now_ms=net.now, config=CONFIG)
    net.ids.append(3)
    net.pump(3)
    net.run(300)
    assert net.nodes[3].voters == frozenset({1, 2}) and net.nodes[3].snapshot_data == b"image"


def test_a_restarted_node_replays_the_voters_entries_of_its_log() -> None:
    log = RaftLog(entries=[
        LogEntry(0, 1, encode_voters(VoterSet.of([voter(1), voter(2)])), EntryKind.VOTERS),
        LogEntry(1, 1, b"data"),
        LogEntry(2, 1, encode_voters(VoterSet.of([voter(2)])), EntryKind.VOTERS),
    ])
    node = RaftNode(1, [1], rng=random.Random(1), now_ms=0, config=CONFIG, log=log)
    assert node.voters == frozenset({2}) and node.is_observer
    assert wrap_snapshot(None, b"plain") == b"plain" and unwrap_snapshot(b"plain") == (None, b"plain")


def test_a_joining_node_that_knows_no_voter_learns_them_then_is_added_and_keeps_them_over_a_restart() -> None:
    net = Net([1])
    assert net.elect() == 1
    net.commit(1, b"before")
    joiner = RaftNode(2, VoterSet.of([]), rng=random.Random(2), now_ms=net.now, config=CONFIG)
    net.nodes[2] = joiner
    net.ids.append(2)
    net.run(100)
    assert joiner.is_observer and joiner.leader_id is None  # nobody to ask yet
    assert joiner.learn_voters(VoterSet.of([voter(1)]), net.now)
    net.pump(2)
    net.run(200)
    assert joiner.leader_id == 1 and b"before" in data_of(net.applied[2])
    change(net, 1, AddVoter(voter(2)))
    assert joiner.voters == frozenset({1, 2}) and not joiner.is_observer
    # The log names the voters now: what a bootstrap server says no longer counts.
    assert not joiner.learn_voters(VoterSet.of([voter(1)]), net.now)
    restarted = RaftNode(2, VoterSet.of([]), rng=random.Random(3), now_ms=net.now, config=CONFIG, log=joiner.log)
    assert restarted.voters == frozenset({1, 2}) and restarted.voter_set.addresses() == {2: ("127.0.0.1", 9002)}


def test_a_static_quorum_writes_its_voters_to_the_log_then_changes_them_and_a_restart_keeps_the_logs() -> None:
    """kraft.version 0 -> 1 (Kafka 4.1's kafka-features upgrade): the configured voters become the log's."""
    static = VoterSet.of([voter(1), voter(2), voter(3)])
    net = Net([1, 2, 3], observers=(4,))
    leader = net.elect()
    net.commit(leader, b"x")
    # Voters configured by id alone (no endpoint) cannot be written: nobody would know where they listen.
    assert refusal(net, leader, WriteVoters()) is Errors.INVALID_REQUEST
    net = Net([1, 2, 3], observers=(4,))
    for i in net.ids:
        net.nodes[i] = RaftNode(i, static, rng=random.Random(i), now_ms=net.now, config=CONFIG)
        net.pump(i)
    leader = net.elect()
    net.commit(leader, b"before")
    end = net.nodes[leader].log.end_offset
    assert net.nodes[leader].change_voters(WriteVoters(validate_only=True), net.now) == -1
    assert net.nodes[leader].log.end_offset == end and not net.nodes[leader].voters_from_log
    for i in net.ids:
        net.effects[i].clear()
    offset = change(net, leader, WriteVoters())
    assert all(net.nodes[i].voters_from_log and net.nodes[i].voter_set == static for i in net.ids)
    # The same voters, but the log's now: every node tells its driver (its controller may announce itself now).
    assert all(VotersChanged(static) in net.effects[i] for i in net.ids)
    assert net.nodes[leader].change_voters(WriteVoters(), net.now) == offset  # written once: nothing appended
    assert net.nodes[leader].log.end_offset == offset + 1
    follower = next(i for i in (1, 2, 3) if i != leader)
    # The static list named no directory: an UpdateVoter with the same endpoints and the voter's directory fills it
    # in, once.
    directory = uuid.uuid4()
    announced = UpdateVoter(Voter(follower, directory, voter(follower).endpoints), -1)
    filled = change(net, leader, announced)
    assert all(net.nodes[i].voter_set.get(follower) == announced.voter for i in net.ids)
    assert net.nodes[leader].change_voters(announced, net.now) == filled
    change(net, leader, RemoveVoter(follower))
    # Restarted with the static list in its configuration, the removed voter takes the log's set: an observer.
    restarted = RaftNode(follower, static, rng=random.Random(9), now_ms=net.now, config=CONFIG,
                         log=net.nodes[follower].log)
    assert restarted.voters == frozenset({1, 2, 3} - {follower}) and restarted.is_observer
    assert restarted.voters_from_log
