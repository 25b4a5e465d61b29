"""Raft quorum benchmark: metadata commits per second, and election time after the leader is killed.

A 3-node quorum of `RaftDriver`s in one process (in-process transport, real disk with fsync under a temporary
directory, or ``--dir``). Commits are measured with 1 proposal in flight (latency-bound: every commit waits for a
leader fsync, a follower fetch + fsync, and the next fetch carrying the new high watermark) and with many in flight
(group commit batches them). Election time is from the leader's crash (no EndQuorumEpoch) until every survivor
agrees on a new leader, with the production timeouts (fetch timeout 2 s: that is what dominates).

    .venv/bin/python bench/raft.py [--seconds 3] [--trials 10] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]  # the repository's packages before this directory (this file shadows ``raft``)

from bench.stats import percentile  # noqa: E402
from raft.core import RaftConfig  # noqa: E402
from raft.driver import RaftDriver  # noqa: E402
from raft.effects import Role  # noqa: E402
from raft.transport import InProcessNetwork  # noqa: E402

VOTERS = [1, 2, 3]


class Quorum:
    def __init__(self, root: Path, config: RaftConfig) -> None:
        self.root = root
        self.config = config
        self.network = InProcessNetwork()
        self.drivers: dict[int, RaftDriver] = {}
        self.applied = 0

    async def start(self, node_id: int) -> None:
        def apply(entries: object) -> None:
            if node_id == 1:
                self.applied += 1

        driver = RaftDriver(node_id, VOTERS, self.root / f"node-{node_id}", self.network.transport(node_id),
                            apply=apply, config=self.config, rng=random.Random())
        await driver.start()
        self.drivers[node_id] = driver

    async def leader(self, timeout: float = 30.0) -> RaftDriver:
        async with asyncio.timeout(timeout):
            while True:
                leaders = [d for d in self.drivers.values() if d.role is Role.LEADER]
                if len(leaders) == 1 and all(d.leader_id == leaders[0].node_id for d in self.drivers.values()):
                    return leaders[0]
                await asyncio.sleep(0.002)

    async def stop(self) -> None:
        for driver in self.drivers.values():
            await driver.stop(resign=False)


async def commits_per_second(root: Path, seconds: float, concurrency: int, payload: int) -> tuple[float, float]:
    """Returns (commits/s, mean commit latency ms)."""
    quorum = Quorum(root, RaftConfig())
    for node_id in VOTERS:
        await quorum.start(node_id)
    leader = await quorum.leader()
    data = b"x" * payload
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            await leader.propose([data])
            latencies.append(time.perf_counter() - start)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - began
    await quorum.stop()
    return len(latencies) / elapsed, statistics.fmean(latencies) * 1000


async def election_times(root: Path, trials: int) -> list[float]:
    quorum = Quorum(root, RaftConfig())
    for node_id in VOTERS:
        await quorum.start(node_id)
    times = []
    for _ in range(trials):
        leader = await quorum.leader()
        await leader.propose([b"before-kill"])
        killed = leader.node_id
        began = time.perf_counter()
        await leader.crash()
        del quorum.drivers[killed]
        await quorum.leader()
        times.append((time.perf_counter() - began) * 1000)
        await quorum.start(killed)
    await quorum.stop()
    return times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each throughput run")
    parser.add_argument("--concurrency", type=int, default=64, help="proposals in flight for the batched run")
    parser.add_argument("--payload", type=int, default=200, help="bytes per metadata record")
    parser.add_argument("--trials", type=int, default=10, help="leader kills for the election measurement")
    parser.add_argument("--dir", type=Path, default=None, help="data directory (default: a temporary one)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="fjord-raft-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        rows = []
        for concurrency in (1, args.concurrency):
            rate, latency = await commits_per_second(root / f"tput-{concurrency}", args.seconds, concurrency,
                                                     args.payload)
            rows.append((f"commits/s, {concurrency} in flight", f"{rate:,.0f}", f"mean latency {latency:.1f} ms"))
        times = await election_times(root / "election", args.trials)
        rows.append(("election after leader kill, p50", f"{percentile(times, 0.5):,.0f} ms", f"{args.trials} trials"))
        rows.append(("election after leader kill, p99", f"{percentile(times, 0.99):,.0f} ms",
                     f"max {max(times):,.0f} ms"))

    width = max(len(r[0]) for r in rows)
    print(f"{'3-node Raft quorum (in-process, fsync to disk)':<{width}}  {'value':>12}  notes")
    print("-" * (width + 40))
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>12}  {note}")


if __name__ == "__main__":
    asyncio.run(main())
