"""Three controller voters in one test process, over real TCP on 127.0.0.1 with short Raft timeouts.

The ``voters`` fixture (tests/conftest.py) starts them; :func:`active_voter` waits for the one that won the
election. Tests of quorum writes, metadata concurrency and producer-id allocation share them.
"""

from __future__ import annotations

from pathlib import Path

from controller.config.server import ServerConfig
from controller.quorum import QuorumController
from tests.ports import free_ports
from tests.waiting import eventually_async


def quorum_configs(root: Path, count: int = 3) -> list[ServerConfig]:
    """Configs of ``count`` controller-only voters with their metadata logs under ``root``."""
    ports = free_ports(count)  # every voter's config lists every voter's address, so no voter can bind port 0
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(ports))
    return [
        ServerConfig.from_properties({
            "process.roles": "controller",
            "node.id": str(i),
            "controller.quorum.voters": voters,
            "listeners": f"CONTROLLER://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(root / f"c{i}"),
            "controller.quorum.election.timeout.ms": "200",
            "controller.quorum.fetch.timeout.ms": "400",
            "controller.quorum.request.timeout.ms": "500",
        })
        for i, port in enumerate(ports)
    ]


async def active_voter(voters: list[QuorumController], timeout: float = 10.0) -> QuorumController:
    """The voter that is the active controller, once one is (AssertionError after ``timeout`` seconds)."""
    return await eventually_async(
        lambda: next((quorum for quorum in voters if quorum.is_active), None),
        timeout=timeout, interval=0.02, what=f"an active controller among voters {[q.node_id for q in voters]}",
    )
