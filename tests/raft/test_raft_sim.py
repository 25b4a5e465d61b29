"""Thousands of deterministic simulated cluster lives, each checked for Raft's safety and liveness properties.

``RAFT_SIM_SEEDS`` scales the number of seeds per cluster size (default 1500 for 3 nodes, a third of that for 5),
``RAFT_SIM_SEED_BASE`` moves the window to explore new seeds, and ``RAFT_SIM_SEED`` runs just one. A failure names
its seed and the command that replays it (``python -m tests.raft.sim --seed N --nodes M -v``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from raft import core
from tests.raft.sim import SimParams, Simulation, SimulationFailure

SEEDS = int(os.environ.get("RAFT_SIM_SEEDS", "1500"))
SEED_BASE = int(os.environ.get("RAFT_SIM_SEED_BASE", "0"))
ONE_SEED = os.environ.get("RAFT_SIM_SEED")


def _seeds(count: int) -> range:
    if ONE_SEED is not None:
        return range(int(ONE_SEED), int(ONE_SEED) + 1)
    return range(SEED_BASE, SEED_BASE + count)


@pytest.mark.parametrize(("nodes", "count"), [(3, SEEDS), (5, max(1, SEEDS // 3))])
def test_simulated_cluster_keeps_raft_invariants(nodes: int, count: int) -> None:
    failures: list[str] = []
    elections = commits = 0
    for seed in _seeds(count):
        # Odd seeds add a non-voting observer, which must apply exactly what the voters apply.
        sim = Simulation(seed, SimParams(nodes=nodes, observers=seed % 2))
        try:
            sim.run()
        except SimulationFailure as failure:
            failures.append(str(failure))
            if len(failures) >= 5:
                break
        elections += sim.stats["elections"]
        commits += len(sim.committed)
    assert not failures, "\n".join(failures)
    # The runs must actually have exercised something: leader changes and replicated commits.
    runs = len(_seeds(count))
    assert elections >= 2 * runs, f"only {elections} elections over {runs} runs"
    assert commits >= 20 * runs, f"only {commits} committed entries over {runs} runs"


def test_same_seed_replays_identically() -> None:
    first = Simulation(1234, SimParams(nodes=3))
    second = Simulation(1234, SimParams(nodes=3))
    assert first.run() == second.run()
    assert first.committed == second.committed
    assert first.leaders == second.leaders


def test_simulator_catches_a_broken_invariant() -> None:
    """Guard against a simulator that cannot fail: feed it a node that forgets to check candidates' logs."""

    original = core.RaftNode._on_vote_request

    def careless_voter(self: core.RaftNode, sender: int, req: core.VoteRequest, now_ms: int) -> None:
        # Claim the candidate's log is as long as ours, so every vote is granted on log grounds.
        forged = core.VoteRequest(
            req.cluster_id, req.replica_epoch, req.replica_id, max(req.last_offset_epoch, self.log.last_epoch),
            max(req.last_offset, self.log.end_offset), req.pre_vote, req.voter_id, req.correlation_id,
        )
        original(self, sender, forged, now_ms)

    core.RaftNode._on_vote_request = careless_voter  # type: ignore[method-assign]
    try:
        caught = 0
        for seed in range(40):
            try:
                Simulation(seed, SimParams(nodes=3)).run()
            except SimulationFailure as failure:
                assert f"seed {seed}" in str(failure) and "--seed" in str(failure)
                caught += 1
        assert caught > 0
    finally:
        core.RaftNode._on_vote_request = original  # type: ignore[method-assign]


def test_a_seed_replays_from_the_command_line() -> None:

    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "tests.raft.sim", "--seed", "7", "--nodes", "5", "--observers", "1"],
        cwd=root, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "seed 7 (5 nodes, 1 observers) passed" in result.stdout
    assert str(Simulation(7, SimParams(nodes=5, observers=1)).run()) in result.stdout
