"""Deterministic simulation of a Raft quorum built from `raft.core.RaftNode`s.

One seed fixes everything: message delays, drops, duplicates (and so reordering), crashes that lose whatever a node
had not made durable, network partitions that later heal, proposals, snapshots and resignations. The simulated
clock jumps from event to event, so seconds of cluster life cost milliseconds of CPU.

Invariants are checked while the run goes on, not only at the end:

* election safety: at most one leader per epoch;
* log matching: if two logs hold an entry with the same offset and epoch, they are identical up to it;
* leader completeness: a new leader's log holds every entry any node has applied so far;
* state-machine safety: no two nodes (nor one node across restarts) apply different entries at an offset;
* liveness: once the network heals and every node is up, a leader is elected and a fresh proposal is applied by
  every node within a bounded simulated time.

Rerun one seed with ``python -m tests.raft.sim --seed N [--nodes 5] [-v]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import heapq
import json
import logging
import random
import sys
from dataclasses import dataclass, field
from typing import Any

from raft.core import RaftConfig, RaftNode
from raft.effects import (
    AppendEntries,
    Commit,
    LoadSnapshot,
    PersistEffect,
    PersistQuorumState,
    PersistSnapshot,
    QuorumState,
    ResetLog,
    Role,
    RoleChanged,
    Send,
    TrimLogPrefix,
    TruncateLog,
)
from raft.log import EMPTY_SNAPSHOT, EntryKind, LogEntry, RaftLog, SnapshotId, entries_after_snapshot
from raft.messages import RaftMessage, VoteResponse

SIM_CONFIG = RaftConfig(
    election_timeout_ms=300,
    election_backoff_max_ms=300,
    fetch_timeout_ms=600,
    fetch_max_wait_ms=200,
    request_timeout_ms=400,
    begin_quorum_resend_ms=200,
    fetch_max_bytes=64,  # small, so catching up takes several fetches and exercises pipelining
    snapshot_chunk_bytes=16,  # small, so snapshots travel in several chunks
)


class SimulationFailure(AssertionError):
    """An invariant broke; the message starts with the seed that reproduces it."""


@dataclass(frozen=True)
class SimParams:
    nodes: int = 3
    observers: int = 0  # non-voting replicas (brokers replaying the log); they must apply the same entries
    chaos_ms: int = 8_000
    liveness_bound_ms: int = 12_000
    drop_rate: float = 0.05
    duplicate_rate: float = 0.03
    max_delay_ms: int = 30
    slow_message_rate: float = 0.02  # these take up to 10x max_delay_ms: reordering across rounds
    chaos_interval_ms: int = 100  # mean time between chaos events
    propose_interval_ms: int = 25
    crash_after_vote_rate: float = 0.2


@dataclass
class Disk:
    """What survives a crash: the durable state, plus writes issued but not yet durable."""

    state: QuorumState = field(default_factory=QuorumState)
    snapshot_id: SnapshotId = EMPTY_SNAPSHOT
    snapshot_data: bytes = b""
    base: SnapshotId = EMPTY_SNAPSHOT  # where the durable log starts
    entries: list[LogEntry] = field(default_factory=list)
    pending: list[PersistEffect] = field(default_factory=list)

    @property
    def log_end(self) -> int:
        return self.base.end_offset + len(self.entries)

    def flush(self) -> None:
        for effect in self.pending:
            self._apply(effect)
        self.pending.clear()

    def crash(self, rng: random.Random) -> None:
        """A crash lands some prefix of the issued writes (possibly none, possibly all)."""
        keep = rng.randint(0, len(self.pending))
        for effect in self.pending[:keep]:
            self._apply(effect)
        self.pending.clear()

    def _apply(self, effect: PersistEffect) -> None:
        match effect:
            case PersistQuorumState(state=state):
                self.state = state
            case AppendEntries(entries=entries):
                if entries and entries[0].offset != self.log_end:
                    raise AssertionError(f"disk append at {entries[0].offset}, durable log ends at {self.log_end}")
                self.entries.extend(entries)
            case TruncateLog(end_offset=end):
                del self.entries[max(0, end - self.base.end_offset) :]
            case PersistSnapshot(snapshot_id=sid, data=data):
                if sid > self.snapshot_id:
                    self.snapshot_id, self.snapshot_data = sid, data
            case TrimLogPrefix(snapshot_id=sid):
                del self.entries[: max(0, sid.end_offset - self.base.end_offset)]
                self.base = sid
            case ResetLog(snapshot_id=sid):
                self.entries.clear()
                self.base = sid

    def recover_log(self) -> RaftLog:
        """What storage recovery does: the newest snapshot is the base, entries it covers are ignored."""
        base = max(self.base, self.snapshot_id)
        return RaftLog(base, entries_after_snapshot(base, self.entries))


class StateMachine:
    """Applies committed entries into a running digest, and records what it saw for the safety checks."""

    def __init__(self, sim: Simulation, node_id: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.applied_end = 0
        self.digest = b""

    def load(self, snapshot_id: SnapshotId, data: bytes) -> None:
        decoded = json.loads(data)
        if decoded["end"] != snapshot_id.end_offset:
            self.sim.fail(f"node {self.node_id} loaded snapshot {snapshot_id} whose content ends at {decoded['end']}")
        self.applied_end = snapshot_id.end_offset
        self.digest = bytes.fromhex(decoded["digest"])
        self.sim.record_digest(self.node_id, self.applied_end, self.digest)

    def apply(self, entries: tuple[LogEntry, ...]) -> None:
        for entry in entries:
            if entry.offset != self.applied_end:
                self.sim.fail(f"node {self.node_id} applied offset {entry.offset}, expected {self.applied_end}")
            self.digest = hashlib.blake2b(
                self.digest + entry.epoch.to_bytes(8, "big") + entry.data, digest_size=8
            ).digest()
            self.applied_end = entry.offset + 1
            self.sim.record_commit(self.node_id, entry)
            self.sim.record_digest(self.node_id, self.applied_end, self.digest)
            if entry.kind is EntryKind.DATA:
                self.sim.applied_data[self.node_id].add(entry.data)

    def snapshot(self) -> bytes:
        return json.dumps({"end": self.applied_end, "digest": self.digest.hex()}).encode()


class Simulation:
    def __init__(self, seed: int, params: SimParams | None = None, config: RaftConfig = SIM_CONFIG) -> None:
        self.seed = seed
        self.params = params or SimParams()
        # Every third seed runs without pre-vote: more concurrent candidates, so the bare vote path sees races.
        self.config = dataclasses.replace(config, pre_vote=False) if seed % 3 == 2 else config
        self.rng = random.Random(seed)
        self.now = 0
        self.voter_ids = list(range(1, self.params.nodes + 1))
        observer_ids = range(self.params.nodes + 1, self.params.nodes + 1 + self.params.observers)
        self.ids = [*self.voter_ids, *observer_ids]
        self._events: list[tuple[int, int, str, Any]] = []
        self._seq = 0
        self.disks = {n: Disk() for n in self.ids}
        self.nodes: dict[int, RaftNode | None] = {}
        self.machines: dict[int, StateMachine] = {}
        self.incarnation = dict.fromkeys(self.ids, 0)
        self.next_tick: dict[int, int | None] = dict.fromkeys(self.ids)
        self.partition: dict[int, int] = dict.fromkeys(self.ids, 0)  # node -> group; same group talks
        self.drop_rate = self.params.drop_rate
        self.duplicate_rate = self.params.duplicate_rate
        # Invariant bookkeeping.
        self.leaders: dict[int, int] = {}
        self.committed: dict[int, LogEntry] = {}
        self.digests: dict[int, bytes] = {}
        self.applied_data: dict[int, set[bytes]] = {n: set() for n in self.ids}
        self.proposals = 0
        # Liveness probe: a marker entry proposed after healing must reach every node's state machine.
        self._marker = f"live-{seed}".encode()
        self._marker_proposed_to: tuple[int, int] | None = None
        self._live = False
        self.stats = {"messages": 0, "dropped": 0, "crashes": 0, "elections": 0, "snapshots": 0, "events": 0}
        for node_id in self.ids:
            self._start(node_id)

    # ---- failures ------------------------------------------------------------------------------------------
    def fail(self, what: str) -> None:
        raise SimulationFailure(
            f"seed {self.seed} ({self.params.nodes} nodes, {self.params.observers} observers) at t={self.now}ms: "
            f"{what}\n  rerun: python -m tests.raft.sim --seed {self.seed} --nodes {self.params.nodes} "
            f"--observers {self.params.observers} -v"
        )

    def record_commit(self, node_id: int, entry: LogEntry) -> None:
        seen = self.committed.setdefault(entry.offset, entry)
        if seen != entry:
            self.fail(f"state-machine safety: node {node_id} applied {entry} at {entry.offset}, another applied {seen}")

    def record_digest(self, node_id: int, end: int, digest: bytes) -> None:
        seen = self.digests.setdefault(end, digest)
        if seen != digest:
            self.fail(f"state-machine safety: node {node_id}'s state after offset {end - 1} differs from another's")

    def check_log_matching(self) -> None:
        logs = [(n, node.log) for n, node in self.nodes.items() if node is not None]
        for i, (a, log_a) in enumerate(logs):
            for b, log_b in logs[i + 1 :]:
                lo = max(log_a.start_offset, log_b.start_offset)
                hi = min(log_a.end_offset, log_b.end_offset)
                match = None
                for offset in range(hi - 1, lo - 1, -1):
                    if log_a.entry(offset).epoch == log_b.entry(offset).epoch:
                        match = offset
                        break
                if match is None:
                    continue
                for offset in range(match, lo - 1, -1):
                    if log_a.entry(offset) != log_b.entry(offset):
                        self.fail(
                            f"log matching: nodes {a} and {b} agree on the epoch at {match} but differ at {offset}: "
                            f"{log_a.entry(offset)} vs {log_b.entry(offset)}"
                        )

    def check_new_leader(self, node_id: int, epoch: int) -> None:
        previous = self.leaders.setdefault(epoch, node_id)
        if previous != node_id:
            self.fail(f"election safety: nodes {previous} and {node_id} both lead epoch {epoch}")
        self.stats["elections"] += 1
        node = self.nodes[node_id]
        assert node is not None
        log = node.log
        committed_end = max(self.committed, default=-1) + 1
        if committed_end > log.end_offset:
            self.fail(f"leader completeness: leader {node_id} of epoch {epoch} ends at {log.end_offset}, "
                      f"but offsets up to {committed_end - 1} are committed")
        for offset in range(log.start_offset, committed_end):
            if log.entry(offset) != self.committed[offset]:
                self.fail(f"leader completeness: leader {node_id} of epoch {epoch} has {log.entry(offset)} at "
                          f"{offset}, committed was {self.committed[offset]}")
        if log.start_offset > 0 and log.start_offset in self.digests:
            snapshot_digest = json.loads(node.snapshot_data)["digest"]
            if bytes.fromhex(snapshot_digest) != self.digests[log.start_offset]:
                self.fail(f"leader completeness: leader {node_id}'s snapshot {log.snapshot_id} differs from history")

    # ---- event loop ----------------------------------------------------------------------------------------
    def schedule(self, at: int, kind: str, payload: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._events, (at, self._seq, kind, payload))

    def run(self) -> dict[str, int]:
        p = self.params
        self.schedule(self._exp(p.chaos_interval_ms), "chaos")
        self.schedule(self._exp(p.propose_interval_ms), "propose")
        self.schedule(p.chaos_ms, "heal_all")
        end = p.chaos_ms + p.liveness_bound_ms
        steps = 0
        while self._events:
            at, _, kind, payload = heapq.heappop(self._events)
            if at > end:
                break
            self.now = at
            steps += 1
            getattr(self, f"_on_{kind}")(payload)
            if steps % 100 == 0:
                self.check_log_matching()
            if kind == "liveness_done":
                break
        else:
            self.fail("event queue ran dry")
        if not self._live:
            leaders = {n: (node.role.value, node.epoch) for n, node in self.nodes.items() if node is not None}
            self.fail(f"liveness: no proposal committed on all nodes within {p.liveness_bound_ms}ms of healing; "
                      f"states {leaders}")
        self.check_log_matching()
        self.stats["events"] = steps
        return self.stats

    def _exp(self, mean: int) -> int:
        return self.now + 1 + int(self.rng.expovariate(1 / mean))

    # ---- nodes ---------------------------------------------------------------------------------------------
    def _start(self, node_id: int) -> None:
        disk = self.disks[node_id]
        self.incarnation[node_id] += 1
        self.machines[node_id] = StateMachine(self, node_id)
        self.nodes[node_id] = RaftNode(
            node_id,
            self.voter_ids,
            rng=random.Random(self.rng.getrandbits(64)),
            now_ms=self.now,
            config=self.config,
            quorum_state=disk.state,
            log=disk.recover_log(),
            snapshot_data=disk.snapshot_data,
        )
        self.next_tick[node_id] = None
        self._process(node_id)

    def _crash(self, node_id: int) -> None:
        self.disks[node_id].crash(self.rng)
        self.nodes[node_id] = None
        self.next_tick[node_id] = None
        self.stats["crashes"] += 1

    def _flush(self, node_id: int) -> None:
        node = self.nodes[node_id]
        disk = self.disks[node_id]
        if node is None or not disk.pending:
            return
        disk.flush()
        node.log_flushed(disk.log_end, self.now)

    def _process(self, node_id: int) -> None:
        """Execute the node's effects under the durability contract, then rearm its timer."""
        node = self.nodes[node_id]
        assert node is not None
        disk = self.disks[node_id]
        flush_decided = False
        while True:
            effects = node.drain()
            if not effects:
                if disk.pending and not flush_decided:
                    # Flush now (which may commit and so emit more effects) or some milliseconds later.
                    flush_decided = True
                    if self.rng.random() < 0.5:
                        self._flush(node_id)
                        continue
                    self.schedule(self.now + self.rng.randint(1, 15), "flush", (node_id, self.incarnation[node_id]))
                break
            for effect in effects:
                match effect:
                    case Send(destination=dest, message=message):
                        self._flush(node_id)
                        self._send(node_id, dest, message)
                    case Commit(entries=entries):
                        self.machines[node_id].apply(entries)
                    case LoadSnapshot(snapshot_id=sid, data=data):
                        self.machines[node_id].load(sid, data)
                    case RoleChanged(role=role, epoch=epoch):
                        if role is Role.LEADER:
                            self.check_new_leader(node_id, epoch)
                    case _:
                        disk.pending.append(effect)
        deadline = max(node.next_deadline_ms(self.now), self.now + 1)
        if self.next_tick[node_id] is None or deadline < self.next_tick[node_id]:  # type: ignore[operator]
            self.next_tick[node_id] = deadline
            self.schedule(deadline, "tick", (node_id, self.incarnation[node_id]))

    def _send(self, sender: int, dest: int, message: RaftMessage) -> None:
        self.stats["messages"] += 1
        if (
            isinstance(message, VoteResponse)
            and message.vote_granted
            and self.now < self.params.chaos_ms
            and self.rng.random() < self.params.crash_after_vote_rate
        ):
            # The moment a forgotten vote would hurt: the voter dies right after voting and comes straight back.
            self.schedule(self.now + self.rng.randint(1, 5), "crash_restart", (sender, self.incarnation[sender]))
        copies = 2 if self.rng.random() < self.duplicate_rate else 1
        for _ in range(copies):
            if self.rng.random() < self.drop_rate or self.partition[sender] != self.partition[dest]:
                self.stats["dropped"] += 1
                continue
            delay = self.rng.randint(1, self.params.max_delay_ms)
            if self.rng.random() < self.params.slow_message_rate:
                delay *= 10
            self.schedule(self.now + delay, "deliver", (sender, dest, message))

    def _on_deliver(self, payload: tuple[int, int, RaftMessage]) -> None:
        sender, dest, message = payload
        node = self.nodes[dest]
        if node is None or self.partition[sender] != self.partition[dest]:
            return
        node.receive(sender, message, self.now)
        self._process(dest)

    def _on_tick(self, payload: tuple[int, int]) -> None:
        node_id, incarnation = payload
        node = self.nodes[node_id]
        if node is None or incarnation != self.incarnation[node_id] or self.next_tick[node_id] != self.now:
            return
        self.next_tick[node_id] = None
        node.tick(self.now)
        self._process(node_id)

    def _on_flush(self, payload: tuple[int, int]) -> None:
        node_id, incarnation = payload
        if self.nodes[node_id] is None or incarnation != self.incarnation[node_id]:
            return
        self._flush(node_id)
        self._process(node_id)

    def _on_crash_restart(self, payload: tuple[int, int]) -> None:
        node_id, incarnation = payload
        if self.nodes[node_id] is not None and incarnation == self.incarnation[node_id]:
            self._crash(node_id)
            self.schedule(self.now + self.rng.randint(1, 20), "restart", node_id)

    def _on_restart(self, node_id: int) -> None:
        if self.nodes[node_id] is None:
            self._start(node_id)

    # ---- workload and chaos ----------------------------------------------------------------------------------
    def _leaders(self) -> list[int]:
        return [n for n, node in self.nodes.items() if node is not None and node.role is Role.LEADER]

    def _on_propose(self, _: None) -> None:
        for leader in self._leaders():
            node = self.nodes[leader]
            assert node is not None
            count = self.rng.randint(1, 3)
            self.proposals += count
            node.propose([f"p{self.proposals - i}".encode() for i in range(count)], self.now)
            self._process(leader)
        if self.now < self.params.chaos_ms:
            self.schedule(self._exp(self.params.propose_interval_ms), "propose")

    def _on_chaos(self, _: None) -> None:
        if self.now >= self.params.chaos_ms:
            return
        self.schedule(self._exp(self.params.chaos_interval_ms), "chaos")
        live = [n for n in self.ids if self.nodes[n] is not None]
        leaders = self._leaders()
        roll = self.rng.random()
        if roll < 0.10 and live:
            victim = self.rng.choice(live)
            self._crash(victim)
            self.schedule(self.now + self.rng.randint(50, 1500), "restart", victim)
        elif roll < 0.20 and leaders:
            # Crash a leader, often just after it handed out entries nobody has acknowledged yet.
            victim = self.rng.choice(leaders)
            self._crash(victim)
            self.schedule(self.now + self.rng.randint(50, 800), "restart", victim)
        elif roll < 0.28:
            groups = self.rng.randint(2, 3)
            self.partition = {n: self.rng.randrange(groups) for n in self.ids}
        elif roll < 0.36 and leaders:
            # Cut a leader (and perhaps one friend) off from the rest.
            self.partition = dict.fromkeys(self.ids, 0)
            self.partition[self.rng.choice(leaders)] = 1
            self.partition[self.rng.choice(self.ids)] = 1
        elif roll < 0.50:
            self.partition = dict.fromkeys(self.ids, 0)
        elif roll < 0.60 and live:
            node_id = self.rng.choice(live)
            node = self.nodes[node_id]
            assert node is not None
            machine = self.machines[node_id]
            if node.snapshot_taken(machine.applied_end, machine.snapshot(), self.now) is not None:
                self.stats["snapshots"] += 1
            self._process(node_id)
        elif roll < 0.65:
            for leader in leaders:
                node = self.nodes[leader]
                assert node is not None
                node.resign(self.now)
                self._process(leader)

    def _on_heal_all(self, _: None) -> None:
        self.partition = dict.fromkeys(self.ids, 0)
        self.drop_rate = 0.0
        self.duplicate_rate = 0.0
        for node_id in self.ids:
            if self.nodes[node_id] is None:
                self._start(node_id)
        self.schedule(self.now + 50, "liveness_probe")

    def _on_liveness_probe(self, _: None) -> None:
        if all(self._marker in self.applied_data[n] for n in self.ids):
            self._live = True
            self.schedule(self.now, "liveness_done")
            return
        for leader in self._leaders():
            node = self.nodes[leader]
            assert node is not None
            # A leader that lost its epoch may have lost the marker too: propose it again under each new leader.
            if self._marker_proposed_to != (leader, node.epoch):
                node.propose([self._marker], self.now)
                self._marker_proposed_to = (leader, node.epoch)
                self._process(leader)
        self.schedule(self.now + 50, "liveness_probe")

    def _on_liveness_done(self, _: None) -> None:
        pass


def run_seed(seed: int, nodes: int = 3, observers: int = 0) -> dict[str, int]:
    return Simulation(seed, SimParams(nodes=nodes, observers=observers)).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the deterministic Raft simulation for one seed")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--observers", type=int, default=0)
    parser.add_argument("-v", "--verbose", action="store_true", help="log every node's transitions")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        stats = run_seed(args.seed, args.nodes, args.observers)
    except SimulationFailure as failure:
        print(failure, file=sys.stderr)
        return 1
    print(f"seed {args.seed} ({args.nodes} nodes, {args.observers} observers) passed: {stats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
