"""A scripted network of real `RaftNode`s for the core's scenario tests: instant, in-order delivery, cut nodes."""

from __future__ import annotations

import random
from collections import defaultdict

from raft.core import RaftConfig, RaftNode
from raft.effects import Commit, Effect, LoadSnapshot, QuorumState, Role, Send
from raft.log import EntryKind, LogEntry, RaftLog
from raft.messages import RaftMessage

CONFIG = RaftConfig(
    election_timeout_ms=100,
    election_backoff_max_ms=100,
    fetch_timeout_ms=200,
    fetch_max_wait_ms=50,
    request_timeout_ms=100,
    begin_quorum_resend_ms=50,
    snapshot_chunk_bytes=7,
)


class Net:
    """Instant, in-order delivery between real nodes; ``cut`` nodes neither send nor receive."""

    def __init__(self, voters: list[int], *, logs: dict[int, RaftLog] | None = None,
                 states: dict[int, QuorumState] | None = None, observers: tuple[int, ...] = ()) -> None:
        self.now = 0
        self.ids = [*voters, *observers]
        self.nodes = {
            i: RaftNode(
                i, voters, rng=random.Random(i), now_ms=0, config=CONFIG,
                log=(logs or {}).get(i), quorum_state=(states or {}).get(i),
            )
            for i in self.ids
        }
        self.queue: list[tuple[int, int, RaftMessage]] = []
        self.cut: set[int] = set()
        self.effects: dict[int, list[Effect]] = defaultdict(list)
        self.applied: dict[int, list[LogEntry]] = defaultdict(list)
        self.sent: list[tuple[int, int, RaftMessage]] = []
        for i in self.ids:
            self.pump(i)

    def pump(self, node_id: int) -> None:
        node = self.nodes[node_id]
        while effects := node.drain():
            for effect in effects:
                self.effects[node_id].append(effect)
                if isinstance(effect, Send):
                    self.sent.append((node_id, effect.destination, effect.message))
                    if node_id not in self.cut and effect.destination not in self.cut:
                        self.queue.append((node_id, effect.destination, effect.message))
                elif isinstance(effect, Commit):
                    self.applied[node_id].extend(effect.entries)
                elif isinstance(effect, LoadSnapshot):
                    self.applied[node_id] = []
            node.log_flushed(node.log.end_offset, self.now)

    def deliver(self) -> None:
        for _ in range(10_000):
            if not self.queue:
                return
            sender, dest, message = self.queue.pop(0)
            if sender in self.cut or dest in self.cut:
                continue
            self.nodes[dest].receive(sender, message, self.now)
            self.pump(dest)
        raise AssertionError("message storm: the queue never drained")

    def run(self, ms: int, step: int = 5) -> None:
        end = self.now + ms
        while self.now < end:
            self.deliver()
            self.now += step
            for i, node in self.nodes.items():
                node.tick(self.now)
                self.pump(i)
        self.deliver()

    def leaders(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.role is Role.LEADER and i not in self.cut]

    def elect(self, within_ms: int = 3000) -> int:
        for _ in range(within_ms // 50):
            self.run(50)
            leaders = self.leaders()
            if len(leaders) == 1 and all(
                self.nodes[i].leader_id == leaders[0] for i in self.ids if i not in self.cut
            ):
                return leaders[0]
        states = [(n.role, n.epoch) for n in self.nodes.values()]
        raise AssertionError(f"no stable leader within {within_ms} ms: {states}")

    def commit(self, leader: int, *payloads: bytes) -> int:
        offset = self.nodes[leader].propose(list(payloads), self.now)
        assert isinstance(offset, int)
        return self.wait_committed(leader, offset)

    def wait_committed(self, leader: int, offset: int, rounds: int = 100) -> int:
        """Runs until every reachable node has committed ``offset`` (appended on ``leader``); returns it."""
        self.pump(leader)
        for _ in range(rounds):
            self.run(10)
            if all(self.nodes[i].high_watermark > offset for i in self.ids if i not in self.cut):
                return offset
        raise AssertionError(f"offset {offset} not committed everywhere")


def data_of(entries: list[LogEntry]) -> list[bytes]:
    return [e.data for e in entries if e.kind is EntryKind.DATA]
