"""Three controller voters in one test process, over real TCP on 127.0.0.1 with short Raft timeouts.

The ``voters`` fixture (tests/conftest.py) starts them; :func:`active_voter` waits for the one that won the
election. Tests of quorum writes, metadata concurrency and producer-id allocation share them. Tests of a secured
CONTROLLER listener (TLS, SASL) give each voter its security settings (``extra``), start them with
:func:`running_voters` and connect a broker's controller client with :func:`broker_config`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from controller.quorum import QuorumController
from metadata.rpc.connection import ControllerConnection
from settings.server import ServerConfig
from testkit.waiting import eventually_async
from wire import codec, schema
from wire.ports import free_ports


def quorum_configs(
    root: Path, count: int = 3, extra: Callable[[int], Mapping[str, str]] | None = None
) -> list[ServerConfig]:
    """Configs of ``count`` controller-only voters with their metadata logs under ``root``; ``extra(node_id)``:
    that voter's further settings (its listener's security, say)."""
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
            **(extra(i) if extra is not None else {}),
        })
        for i, port in enumerate(ports)
    ]


def broker_config(root: Path, voters: Sequence[ServerConfig], extra: Mapping[str, str] | None = None) -> ServerConfig:
    """A broker-only node 5 (data under ``root``) whose controller client reaches the quorum of ``voters``;
    ``extra``: its further settings (how it connects to a secured CONTROLLER listener, say)."""
    addresses = ",".join(f"{v.node_id}@{v.host}:{v.port}" for v in voters[0].voters)
    return ServerConfig.from_properties(
        {
            "process.roles": "broker",
            "node.id": "5",
            "controller.quorum.voters": addresses,
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(root / "broker"),
            "s3.data.buckets": f"0@file://{root / 'objects'}",
            **(extra or {}),
        }
    )


@asynccontextmanager
async def running_voters(configs: Sequence[ServerConfig]) -> AsyncIterator[list[QuorumController]]:
    """The voters of ``configs`` started in this process, stopped on exit (a test may drop from the list the
    voters it stopped itself)."""
    started = list(await asyncio.gather(*(QuorumController.start(config) for config in configs)))
    try:
        yield started
    finally:
        for quorum in started:
            await quorum.stop(resign=False)


async def active_voter(voters: list[QuorumController], timeout: float = 10.0) -> QuorumController:
    """The voter that is the active controller, once one is (AssertionError after ``timeout`` seconds)."""
    return await eventually_async(
        lambda: next((quorum for quorum in voters if quorum.is_active), None),
        timeout=timeout, interval=0.02, what=f"an active controller among voters {[q.node_id for q in voters]}",
    )


async def ask_controller(port: int, api_key: int, version: int, timeout: float = 20, **fields: Any) -> Any:
    """The answer of the controller listening on 127.0.0.1:``port`` to one request built from ``fields``, over a
    connection of its own (as Kafka's tools send it with ``--bootstrap-controller``)."""
    connection = ControllerConnection("127.0.0.1", port, client_id="quorum-test")
    try:
        await connection.connect(timeout=5)
        return await connection.request(schema.build(codec.request_class(api_key, version), **fields),
                                        timeout=timeout)
    finally:
        await connection.close()
