"""The classic group state machine driven with injected time: no sleeping, no I/O.

A small harness plays the coordinator's part: it records every callback, and "persists" queued writes on demand
(or fails them) so the tests can check that nothing is answered before it is durable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from kio.schema.errors import ErrorCode

from broker.groups.classic.group import Group, JoinRequest
from broker.groups.classic.protocols import parse_subscription_topics
from broker.groups.classic.rebalance import GroupConfig
from broker.groups.classic.state import GroupState, JoinResult, SyncResult
from broker.groups.offsets_schema import decode_group_value, encode_group_value

SESSION = 10_000
REBALANCE = 30_000
DELAY = 3_000


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0, as Java/librdkafka consumers send it."""
    out = bytearray(b"\x00\x00") + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return bytes(out + b"\xff\xff\xff\xff")  # null user data


@dataclass
class Box:
    """Collects what a parked request is eventually answered with."""

    results: list[JoinResult | SyncResult] = field(default_factory=list)

    def __call__(self, result: JoinResult | SyncResult) -> None:
        self.results.append(result)

    @property
    def one(self) -> JoinResult | SyncResult:
        assert len(self.results) == 1, self.results
        return self.results[0]

    @property
    def join(self) -> JoinResult:
        r = self.one
        assert isinstance(r, JoinResult)
        return r

    @property
    def sync(self) -> SyncResult:
        r = self.one
        assert isinstance(r, SyncResult)
        return r


class Harness:
    def __init__(self, **config: int) -> None:
        self.now = 1_000_000
        self.group = Group("g", GroupConfig(**{"initial_rebalance_delay_ms": DELAY, **config}), self.now)
        self.persisted: list[int] = []

    def advance(self, ms: int) -> None:
        self.now += ms
        self.group.tick(self.now)

    def until_answered(self, *boxes: Box) -> None:
        """Fires deadlines in order until every box holds an answer."""
        for _ in range(100):
            if all(b.results for b in boxes):
                return
            deadline = self.group.next_deadline_ms()
            assert deadline is not None, "nothing left that could answer"
            self.now = max(self.now, deadline)
            self.group.tick(self.now)
        raise AssertionError("never answered")

    def persist(self, error: ErrorCode = ErrorCode.none) -> int:
        writes = self.group.take_writes()
        for w in writes:
            # The snapshot must survive the real codec.
            assert decode_group_value(encode_group_value(w.value)) == w.value
            self.persisted.append(w.value.generation)
            w.on_done(error, self.now)
        return len(writes)

    def join(
        self,
        member_id: str = "",
        *,
        instance: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] = (("range", subscription("t")),),
        protocol_type: str = "consumer",
        session: int = SESSION,
        rebalance: int = REBALANCE,
        v4: bool = True,
        v9: bool = False,
    ) -> Box:
        box = Box()
        req = JoinRequest(
            member_id=member_id,
            group_instance_id=instance,
            client_id="client",
            client_host="/127.0.0.1",
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            protocol_type=protocol_type,
            protocols=protocols,
            require_known_member_id=v4,
            supports_skip_assignment=v9,
        )
        self.group.join(self.now, req, box)
        return box

    def new_member(self, **kwargs: object) -> Box:
        """The v4+ two-step join: MEMBER_ID_REQUIRED, then the real join with the given id."""
        first = self.join(**kwargs)  # type: ignore[arg-type]
        assert first.join.error is ErrorCode.member_id_required
        assert first.join.member_id.startswith("client-")
        return self.join(first.join.member_id, **kwargs)  # type: ignore[arg-type]

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, **kw: object) -> Box:
        box = Box()
        self.group.sync(
            self.now,
            member_id=member_id,
            group_instance_id=kw.get("instance"),  # type: ignore[arg-type]
            generation_id=generation,
            protocol_type=kw.get("protocol_type"),  # type: ignore[arg-type]
            protocol_name=kw.get("protocol_name"),  # type: ignore[arg-type]
            assignments=assignments or {},
            callback=box,
        )
        return box

    def form(self, n: int) -> list[str]:
        """n members joined, synced (leader assigns "a:<id>") and persisted: a Stable group."""
        boxes = [self.new_member() for _ in range(n)]
        self.until_answered(*boxes)
        joins = [b.join for b in boxes]
        assert all(j.error is ErrorCode.none for j in joins)
        ids = [j.member_id for j in joins]
        leader = joins[0].leader_id
        gen = joins[0].generation_id
        syncs = {
            mid: self.sync(mid, gen, {m: f"a:{m}".encode() for m in ids} if mid == leader else None) for mid in ids
        }
        assert self.persist() == 1
        assert all(s.sync.error is ErrorCode.none for s in syncs.values())
        assert self.group.state is GroupState.STABLE
        return ids


def test_new_member_needs_member_id_then_initial_delay_forms_generation_one() -> None:
    h = Harness()
    box = h.new_member()
    assert h.group.state is GroupState.PREPARING_REBALANCE
    assert box.results == []  # parked during group.initial.rebalance.delay.ms
    h.advance(DELAY - 1)
    assert box.results == []
    h.advance(1)
    result = box.join
    assert result.error is ErrorCode.none
    assert result.generation_id == 1
    assert result.leader_id == result.member_id
    assert result.protocol_name == "range"
    assert result.protocol_type == "consumer"
    assert [m[0] for m in result.members] == [result.member_id]
    assert h.group.state is GroupState.COMPLETING_REBALANCE


def test_initial_delay_extends_while_members_keep_arriving_up_to_rebalance_timeout() -> None:
    h = Harness()
    first = h.new_member(rebalance=7_000)
    h.advance(2_000)
    second = h.new_member(rebalance=7_000)
    h.advance(1_000)  # first delay over, but a member arrived: wait another delay (capped by what is left)
    assert first.results == [] and second.results == []
    h.advance(3_000)
    assert first.join.generation_id == second.join.generation_id == 1
    assert len(first.join.members) + len(second.join.members) == 2  # only the leader gets the list


def test_join_without_required_member_id_on_old_versions_joins_directly() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    box = h.join(v4=False)
    assert box.join.error is ErrorCode.none
    assert box.join.generation_id == 1


def test_protocol_selected_by_votes_among_common_protocols() -> None:
    h = Harness()
    meta = subscription("t")
    a = h.new_member(protocols=(("range", meta), ("roundrobin", meta), ("sticky", meta)))
    b = h.new_member(protocols=(("roundrobin", meta), ("range", meta)))
    c = h.new_member(protocols=(("roundrobin", meta), ("cooperative-sticky", meta), ("range", meta)))
    h.until_answered(a, b, c)
    assert {box.join.protocol_name for box in (a, b, c)} == {"roundrobin"}


@pytest.mark.parametrize(
    ("protocol_type", "protocols"),
    [("connect", (("range", b"x"),)), ("consumer", (("sticky", b"x"),))],
)
def test_inconsistent_protocol_rejected(protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> None:
    h = Harness()
    h.form(1)
    assert h.join(protocol_type=protocol_type, protocols=protocols).join.error is ErrorCode.inconsistent_group_protocol


def test_empty_protocol_list_rejected_on_a_new_group() -> None:
    assert Harness().join(protocols=()).join.error is ErrorCode.inconsistent_group_protocol


def test_invalid_session_timeout() -> None:
    h = Harness()
    assert h.join(session=1_000).join.error is ErrorCode.invalid_session_timeout
    assert h.join(session=1_800_001).join.error is ErrorCode.invalid_session_timeout


def test_sync_answers_only_after_assignment_is_persisted() -> None:
    h = Harness()
    boxes = [h.new_member() for _ in range(3)]
    h.until_answered(*boxes)
    ids = [b.join.member_id for b in boxes]
    leader = boxes[0].join.leader_id
    gen = boxes[0].join.generation_id
    follower_syncs = [h.sync(m, gen) for m in ids if m != leader]
    assert all(s.results == [] for s in follower_syncs)
    leader_sync = h.sync(leader, gen, {m: m.encode()[::-1] for m in ids})
    assert leader_sync.results == [] and h.group.state is GroupState.COMPLETING_REBALANCE
    assert h.persist() == 1
    assert h.persisted == [gen]
    assert h.group.state is GroupState.STABLE
    assert leader_sync.sync.assignment == leader.encode()[::-1]
    for m, s in zip([m for m in ids if m != leader], follower_syncs, strict=True):
        assert s.sync.error is ErrorCode.none
        assert s.sync.assignment == m.encode()[::-1]
    # A member syncing again in Stable gets its assignment straight away.
    assert h.sync(ids[1], gen).sync.assignment == ids[1].encode()[::-1]


def test_failed_persist_fails_the_sync_and_rebalances() -> None:
    h = Harness()
    boxes = [h.new_member() for _ in range(2)]
    h.until_answered(*boxes)
    leader, gen = boxes[0].join.leader_id, boxes[0].join.generation_id
    follower = next(b.join.member_id for b in boxes if b.join.member_id != leader)
    fs = h.sync(follower, gen)
    ls = h.sync(leader, gen, {leader: b"x", follower: b"y"})
    h.persist(ErrorCode.not_coordinator)
    assert ls.sync.error is ErrorCode.not_coordinator
    assert fs.sync.error is ErrorCode.not_coordinator
    assert h.group.state is GroupState.PREPARING_REBALANCE


def test_sync_errors() -> None:
    h = Harness()
    ids = h.form(2)
    gen = h.group.generation_id
    assert h.sync("nobody", gen).sync.error is ErrorCode.unknown_member_id
    assert h.sync(ids[0], gen + 1).sync.error is ErrorCode.illegal_generation
    assert h.sync(ids[0], gen, protocol_name="roundrobin").sync.error is ErrorCode.inconsistent_group_protocol
    assert h.sync(ids[0], gen, protocol_type="connect").sync.error is ErrorCode.inconsistent_group_protocol
    h.join(ids[0], protocols=(("range", subscription("t", "u")),))  # subscription change -> rebalance
    assert h.sync(ids[1], gen).sync.error is ErrorCode.rebalance_in_progress


def test_heartbeat_errors_and_rebalance_signal() -> None:
    h = Harness()
    ids = h.form(2)
    gen = h.group.generation_id
    assert h.group.heartbeat(h.now, ids[0], None, gen) is ErrorCode.none
    assert h.group.heartbeat(h.now, "nobody", None, gen) is ErrorCode.unknown_member_id
    assert h.group.heartbeat(h.now, ids[0], None, gen - 1) is ErrorCode.illegal_generation
    rejoin = h.join(ids[0], protocols=(("range", subscription("t", "u")),))
    assert rejoin.results == []
    assert h.group.heartbeat(h.now, ids[1], None, gen) is ErrorCode.rebalance_in_progress
    second = h.join(ids[1])
    assert rejoin.join.generation_id == second.join.generation_id == gen + 1


def test_session_timeout_removes_silent_member_and_rebalances() -> None:
    h = Harness()
    ids = h.form(3)
    gen = h.group.generation_id
    for _ in range(4):  # two members heartbeat, the third stays silent past its session timeout
        h.advance(SESSION // 3)
        for m in ids[:2]:
            expected = ErrorCode.none if ids[2] in h.group.members else ErrorCode.rebalance_in_progress
            assert h.group.heartbeat(h.now, m, None, gen) is expected
    assert ids[2] not in h.group.members
    assert h.group.state is GroupState.PREPARING_REBALANCE
    boxes = [h.join(m) for m in ids[:2]]
    assert [b.join.generation_id for b in boxes] == [gen + 1, gen + 1]
    assert {m for m, _, _ in boxes[0].join.members} == set(ids[:2])


def test_rebalance_timeout_drops_dynamic_members_that_do_not_rejoin() -> None:
    h = Harness()
    ids = h.form(2)
    gen = h.group.generation_id
    rejoin = h.join(ids[0], protocols=(("range", subscription("t", "u")),))
    # ids[1] keeps heartbeating (it would learn REBALANCE_IN_PROGRESS) but never rejoins.
    for _ in range(REBALANCE // 5_000):
        h.advance(5_000)
        h.group.heartbeat(h.now, ids[1], None, gen)
    assert rejoin.join.generation_id == gen + 1
    assert list(h.group.members) == [ids[0]]
    assert rejoin.join.leader_id == ids[0]


def test_member_that_never_syncs_is_removed_after_rebalance_timeout() -> None:
    h = Harness()
    boxes = [h.new_member() for _ in range(2)]
    h.until_answered(*boxes)
    leader, gen = boxes[0].join.leader_id, boxes[0].join.generation_id
    ls = h.sync(leader, gen, {})
    h.persist()
    assert ls.sync.error is ErrorCode.none
    for _ in range(REBALANCE // 5_000):
        h.advance(5_000)
        h.group.heartbeat(h.now, leader, None, gen)
    assert list(h.group.members) == [leader]
    assert h.group.state is GroupState.PREPARING_REBALANCE


def test_leave_of_leader_elects_new_leader_and_last_leave_empties_group() -> None:
    h = Harness()
    ids = h.form(3)
    gen = h.group.generation_id
    leader = h.group.leader_id
    assert h.group.leave(h.now, leader or "", None) is ErrorCode.none
    others = [m for m in ids if m != leader]
    boxes = [h.join(m) for m in others]
    assert boxes[0].join.generation_id == gen + 1
    assert boxes[0].join.leader_id in others
    assert h.group.leave(h.now, "nobody", None) is ErrorCode.unknown_member_id
    for m in others:
        h.group.leave(h.now, m, None)
    assert h.group.state is GroupState.EMPTY
    assert h.persist() == 1  # the empty generation is written too
    assert h.group.generation_id == gen + 2


def test_static_member_rejoin_with_same_metadata_keeps_generation_and_fences_old_id() -> None:
    h = Harness()
    a = h.join(instance="i-a")
    b = h.join(instance="i-b")
    h.until_answered(a, b)
    a_id, b_id, gen = a.join.member_id, b.join.member_id, a.join.generation_id
    assert a_id.startswith("i-a-")
    leader = a.join.leader_id
    h.sync(leader, gen, {a_id: b"A", b_id: b"B"}, instance="i-a" if leader == a_id else "i-b")
    h.sync(b_id if leader == a_id else a_id, gen, instance="i-b" if leader == a_id else "i-a")
    h.persist()
    # i-b restarts: joins with no member id but its instance id and the same subscription.
    again = h.join(instance="i-b")
    assert again.results == []  # answered once the new member id is durable
    assert h.persist() == 1
    new_id = again.join.member_id
    assert again.join.error is ErrorCode.none and new_id != b_id
    assert again.join.generation_id == gen
    assert h.group.state is GroupState.STABLE
    assert h.sync(new_id, gen, instance="i-b").sync.assignment == b"B"
    # The old incarnation is fenced.
    assert h.group.heartbeat(h.now, b_id, "i-b", gen) is ErrorCode.fenced_instance_id
    assert h.group.heartbeat(h.now, new_id, "i-b", gen) is ErrorCode.none


@pytest.mark.parametrize("v9", [True, False])
def test_static_leader_rejoin_gets_skip_assignment_on_v9_and_is_a_follower_before(v9: bool) -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    a = h.join(instance="i-a", v4=False)
    gen = a.join.generation_id
    h.sync(a.join.member_id, gen, {a.join.member_id: b"A"}, instance="i-a")
    h.persist()
    again = h.join(instance="i-a", v9=v9)
    h.persist()
    assert again.join.generation_id == gen
    if v9:
        assert again.join.skip_assignment is True
        assert again.join.leader_id == again.join.member_id
        assert [m[0] for m in again.join.members] == [again.join.member_id]
    else:
        # An older client told it leads would assign: it is named no leader of its own and sent no members.
        assert again.join.skip_assignment is False
        assert again.join.leader_id == a.join.member_id != again.join.member_id
        assert list(again.join.members) == []
        assert h.sync(again.join.member_id, gen, instance="i-a").sync.assignment == b"A"


def test_static_member_rejoin_with_changed_metadata_rebalances() -> None:
    h = Harness()
    a = h.join(instance="i-a")
    h.advance(DELAY)
    gen = a.join.generation_id
    h.sync(a.join.member_id, gen, {a.join.member_id: b"A"}, instance="i-a")
    h.persist()
    again = h.join(instance="i-a", protocols=(("range", subscription("t", "other")),))
    h.until_answered(again)
    assert again.join.generation_id == gen + 1


def test_static_member_with_wrong_member_id_is_fenced() -> None:
    h = Harness()
    a = h.join(instance="i-a")
    h.advance(DELAY)
    impostor = h.join("someone-else", instance="i-a")
    assert impostor.join.error is ErrorCode.fenced_instance_id
    assert h.group.leave(h.now, "someone-else", "i-a") is ErrorCode.fenced_instance_id
    assert h.group.leave(h.now, "", "i-a") is ErrorCode.none
    assert a.join.member_id not in h.group.members


def form_static(h: Harness, session: int) -> tuple[str, str, int]:
    """Static members i-a (the leader) and i-b joined and synced: a Stable group; their member ids and generation."""
    a, b = h.join(instance="i-a", session=session), h.join(instance="i-b", session=session)
    h.until_answered(a, b)
    a_id, b_id, gen = a.join.member_id, b.join.member_id, a.join.generation_id
    assert a.join.leader_id == a_id
    h.sync(a_id, gen, {a_id: b"A", b_id: b"B"}, instance="i-a")
    h.sync(b_id, gen, instance="i-b")
    h.persist()
    return a_id, b_id, gen


def test_static_member_that_does_not_rejoin_keeps_its_membership_and_partitions() -> None:
    h = Harness()
    a_id, b_id, gen = form_static(h, session=4 * REBALANCE)
    # i-a, the leader, is restarting when i-b's subscription changes: only i-b rejoins before the rebalance timeout.
    changed = (("range", subscription("t", "u")),)
    rejoin = h.join(b_id, instance="i-b", protocols=changed, session=4 * REBALANCE)
    h.until_answered(rejoin)
    assert rejoin.join.generation_id == gen + 1
    assert rejoin.join.leader_id == b_id  # the leader did not rejoin, so one that did assigns
    assert sorted(rejoin.join.members) == sorted([(a_id, "i-a", subscription("t")), (b_id, "i-b", changed[0][1])])
    h.sync(b_id, gen + 1, {a_id: b"A2", b_id: b"B2"}, instance="i-b")
    h.persist()
    assert h.group.state is GroupState.STABLE
    # Back under a new member id with the same subscription: the partitions it was given, in the same generation.
    again = h.join(instance="i-a", session=4 * REBALANCE)
    h.persist()
    assert (again.join.generation_id, h.group.state) == (gen + 1, GroupState.STABLE)
    assert h.sync(again.join.member_id, gen + 1, instance="i-a").sync.assignment == b"A2"


def test_static_member_that_never_comes_back_is_removed_by_its_session_timeout() -> None:
    h = Harness()
    a_id, b_id, gen = form_static(h, session=SESSION)
    rejoin = h.join(b_id, instance="i-b", protocols=(("range", subscription("t", "u")),))
    for _ in range(REBALANCE // 5_000 - 1):  # i-a heartbeats through the join phase, then stops for good
        h.advance(5_000)
        assert h.group.heartbeat(h.now, a_id, "i-a", gen) is ErrorCode.rebalance_in_progress
    h.advance(5_000)
    assert rejoin.join.generation_id == gen + 1 and a_id in h.group.members
    h.sync(b_id, gen + 1, {a_id: b"A2", b_id: b"B2"}, instance="i-b")
    h.persist()
    h.advance(SESSION // 2)  # its session counts from the end of the join phase
    assert h.group.heartbeat(h.now, b_id, "i-b", gen + 1) is ErrorCode.none
    h.advance(SESSION // 2)
    assert list(h.group.members) == [b_id] and "i-a" not in h.group.static_members
    assert h.group.state is GroupState.PREPARING_REBALANCE


def test_join_phase_where_no_member_rejoined_waits_for_the_static_members() -> None:
    h = Harness()
    a_id, b_id, gen = form_static(h, session=4 * REBALANCE)
    assert h.group.leave(h.now, b_id, "i-b") is ErrorCode.none  # i-a is restarting meanwhile
    h.advance(REBALANCE)
    assert h.group.state is GroupState.PREPARING_REBALANCE
    assert (list(h.group.members), h.group.generation_id) == ([a_id], gen)
    again = h.join(instance="i-a", session=4 * REBALANCE)
    assert again.join.generation_id == gen + 1 and again.join.leader_id == again.join.member_id


def test_group_max_size() -> None:
    h = Harness(max_size=2)
    h.form(2)
    first = h.join()
    assert first.join.error is ErrorCode.group_max_size_reached


def test_unknown_member_rejoin() -> None:
    h = Harness()
    h.form(1)
    assert h.join("ghost").join.error is ErrorCode.unknown_member_id


def test_pending_member_that_never_rejoins_expires_and_does_not_block_rebalance() -> None:
    h = Harness()
    ids = h.form(1)
    ghost = h.join()
    assert ghost.join.error is ErrorCode.member_id_required
    rejoin = h.join(ids[0], protocols=(("range", subscription("t", "u")),))
    h.until_answered(rejoin)
    assert rejoin.join.error is ErrorCode.none
    assert ghost.join.member_id not in h.group.members


def test_duplicate_join_while_parked_answers_both() -> None:
    h = Harness()
    first = h.join()
    mid = first.join.member_id
    one = h.join(mid)
    two = h.join(mid)
    h.advance(DELAY)
    assert one.join == two.join
    assert one.join.generation_id == 1


def test_offset_commit_validation() -> None:
    h = Harness()
    assert h.group.validate_offset_commit(h.now, "", None, -1) is ErrorCode.none  # simple (unmanaged) commit
    # Kafka checks the generation before the member: librdkafka's assign() + commit() always sends its
    # group.instance.id (and may send an old member id), and an Empty group takes the commit.
    assert h.group.validate_offset_commit(h.now, "", "static-1", -1) is ErrorCode.none
    assert h.group.validate_offset_commit(h.now, "gone", "static-1", -1, transactional=True) is ErrorCode.none
    # A generation names a member: without one it is UNKNOWN_MEMBER_ID, transactional or not.
    assert h.group.validate_offset_commit(h.now, "", None, 0, transactional=True) is ErrorCode.unknown_member_id
    ids = h.form(2)
    gen = h.group.generation_id
    assert h.group.validate_offset_commit(h.now, ids[0], None, gen) is ErrorCode.none
    assert h.group.validate_offset_commit(h.now, "", None, -1) is ErrorCode.unknown_member_id
    assert h.group.validate_offset_commit(h.now, ids[0], None, gen + 5) is ErrorCode.illegal_generation
    assert h.group.validate_offset_commit(h.now, "x", None, gen) is ErrorCode.unknown_member_id
    assert h.group.validate_offset_commit(h.now, "", "static-1", -1) is ErrorCode.unknown_member_id
    # A TxnOffsetCommit without member or generation (its old versions carry none) is taken from anyone; with
    # them, they must be current (a producer with a stale consumer generation is a zombie).
    assert h.group.validate_offset_commit(h.now, "", None, -1, transactional=True) is ErrorCode.none
    assert h.group.validate_offset_commit(h.now, ids[0], None, gen, transactional=True) is ErrorCode.none
    assert h.group.validate_offset_commit(h.now, ids[0], None, gen - 1, transactional=True) is (
        ErrorCode.illegal_generation
    )
    # During PreparingRebalance a current member may still commit (eager consumers commit on revoke).
    h.join(ids[0], protocols=(("range", subscription("t", "u")),))
    assert h.group.validate_offset_commit(h.now, ids[1], None, gen) is ErrorCode.none


def test_restore_from_snapshot_is_stable_and_expires_silent_members() -> None:
    h = Harness()
    ids = h.form(2)
    value = h.group.snapshot(h.now)
    restored = Group.restore("g", h.group.config, decode_group_value(encode_group_value(value)), h.now)
    assert restored.state is GroupState.STABLE
    assert restored.generation_id == h.group.generation_id
    assert restored.leader_id == h.group.leader_id
    assert {m: restored.members[m].assignment for m in ids} == {m: f"a:{m}".encode() for m in ids}
    assert restored.subscribed_topics() == {"t"}
    assert restored.heartbeat(h.now + SESSION - 1, ids[0], None, restored.generation_id) is ErrorCode.none
    restored.tick(h.now + SESSION)
    assert ids[1] not in restored.members
    assert restored.state is GroupState.PREPARING_REBALANCE


def test_describe_members_only_exposes_metadata_when_stable() -> None:
    h = Harness()
    ids = h.form(1)
    [(member, metadata, assignment)] = list(h.group.describe_members())
    assert member.member_id == ids[0]
    assert parse_subscription_topics(metadata) == ["t"]
    assert assignment == f"a:{ids[0]}".encode()
    h.join(ids[0], protocols=(("range", subscription("t", "u")),))
    [(_, metadata, assignment)] = list(h.group.describe_members())
    assert metadata == b"" and assignment == b""


def test_mark_dead_answers_parked_requests() -> None:
    h = Harness()
    box = h.new_member()
    h.group.mark_dead(h.now)
    assert box.join.error is ErrorCode.not_coordinator
    assert h.group.state is GroupState.DEAD
    assert h.join().join.error is ErrorCode.coordinator_not_available
