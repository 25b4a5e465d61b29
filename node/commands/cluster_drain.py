"""``fjord cluster drain --bootstrap-server H:P --node N``: moves every partition off broker N before it leaves.

A thin front end over the admin API a Kafka tool would use, so an operator sees the moves where they look for
them (``kafka-reassign-partitions.sh --list``, ListPartitionReassignments):

1. Metadata names the live brokers and the partitions N leads (internal topics too: ``__consumer_offsets`` and
   ``__transaction_state`` partitions move like any other, their coordinators follow the leaders), and
   DescribeConfigs the brokers already in ``autobalancer.controller.exclude.broker.ids`` (drained earlier: they lead
   nothing, so they would be picked first), which take partitions only when no other broker is left;
2. IncrementalAlterConfigs appends N to the cluster-wide ``autobalancer.controller.exclude.broker.ids``, so the
   auto-balancer does not move partitions back to it (subtract it again to use the broker once more), once the
   moves are planned: a drain refused before it moves anything leaves the setting as it was;
3. AlterPartitionReassignments moves each of them to the other live broker leading the fewest (the controller's
   reassignment: the source closes and uploads its streams, the target opens them, nothing is copied);
4. ListPartitionReassignments and Metadata are polled (bounded by ``--timeout``) while progress is printed.

It ends with a table of what moved where and exits 0 once N leads nothing; 1 with a one-line reason otherwise
(unknown broker, no other broker, refused moves, timeout). Stopping the broker afterwards (SIGTERM) finds nothing
left to move, and ``kafka-cluster.sh unregister --id N`` then removes it from the cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from node.admin_client import AdminError, connect_bootstrap, parse_bootstrap
from node.client_config import ClientConfigError, ClientSecurity, load_client_config
from wire import codec, schema
from wire.client import ClientConnection

METADATA = 3
DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
_METADATA_VERSION = 12
_EXCLUDE_BROKERS = "autobalancer.controller.exclude.broker.ids"
_RESOURCE_BROKER = 4
_OP_APPEND = 2
_POLL_S = 0.25
_REQUEST_TIMEOUT_S = 15.0


class DrainError(Exception):
    """Why the drain cannot go on: printed as one line, exit status 1."""


@dataclass(frozen=True, slots=True)
class Move:
    topic: str
    partition: int
    source: int
    target: int


def register(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    drain = actions.add_parser(
        "drain",
        help="move every partition off a broker before it leaves the cluster",
        description="Moves every partition broker --node leads to the other live brokers (AlterPartitionReassignments, "
        "visible in ListPartitionReassignments), keeps the auto-balancer from moving any back, prints "
        "progress and a table of the moves, and exits 0 once the broker leads nothing.",
    )
    drain.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="HOST:PORT[,...]",
        help="brokers to ask (any live broker of the cluster)",
    )
    drain.add_argument("--node", required=True, type=int, metavar="N", help="the broker to drain")
    drain.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties for a secured cluster, as Kafka's tools take them (security.protocol, sasl.mechanism, "
        "sasl.jaas.config, ssl.truststore.location, ...; PEM files)",
    )
    drain.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for the moves to finish (default 120)",
    )
    drain.set_defaults(run=run_drain)


def run_drain(args: argparse.Namespace) -> int:
    try:
        addresses = _addresses(args.bootstrap_server)
        security = load_client_config(args.command_config)
        moves = asyncio.run(drain(addresses, args.node, args.timeout, security))
    except (DrainError, ClientConfigError) as exc:
        print(f"fjord cluster drain: {exc}", file=sys.stderr)
        return 1
    if moves:
        print(render_table(moves))
    print(f"broker {args.node} leads no partition")
    return 0


async def drain(
    addresses: Sequence[tuple[str, int]], node: int, timeout_s: float, security: ClientSecurity | None = None
) -> list[Move]:
    connection = await _connect(addresses, security or ClientSecurity())
    try:
        return await _drain(connection, node, timeout_s)
    finally:
        await connection.close()


async def _drain(connection: ClientConnection, node: int, timeout_s: float) -> list[Move]:
    brokers, led = await _metadata(connection)
    if node not in brokers:
        raise DrainError(
            f"broker {node} is not a live broker of this cluster (live: "
            f"{', '.join(map(str, sorted(brokers))) or 'none'})"
        )
    excluded = await _excluded_brokers(connection)
    others = sorted(b for b in brokers if b != node)
    others = [b for b in others if b not in excluded] or others
    # Planned first: a drain refused (no other broker can take the partitions) must leave the broker to the
    # balancer, not excluded for good. Excluded before the moves, so the balancer does not move any back.
    moves = _plan(led, node, others, in_flight=await _reassigning(connection))
    await _exclude_from_balancer(connection, node)
    if moves:
        await _reassign(connection, moves)
        print(f"moving {len(moves)} partitions off broker {node}", flush=True)
    await _wait_moved(connection, node, others, moves, timeout_s)
    return moves


def _plan(
    led: Mapping[tuple[str, int], int], node: int, others: Sequence[int], in_flight: Collection[tuple[str, int]]
) -> list[Move]:
    """A move for each partition ``node`` leads and nobody is moving yet, to the other broker leading the fewest."""
    mine = sorted(key for key, leader in led.items() if leader == node and key not in in_flight)
    if mine and not others:
        raise DrainError(f"broker {node} leads {len(mine)} partitions and no other live broker can take them")
    load = {b: sum(1 for leader in led.values() if leader == b) for b in others}
    moves: list[Move] = []
    for topic, partition in mine:
        target = min(others, key=lambda b: (load[b], b))
        load[target] += 1
        moves.append(Move(topic, partition, node, target))
    return moves


async def _wait_moved(
    connection: ClientConnection, node: int, others: Sequence[int], moves: list[Move], timeout_s: float
) -> None:
    """Polls until ``node`` leads nothing and neither ``moves`` nor any move to ``node`` is in flight; a partition
    that lands on ``node`` meanwhile (a move someone else had started to it) is moved off too."""
    deadline = time.monotonic() + timeout_s
    reported: tuple[int, int] | None = None
    while True:
        in_flight = await _reassigning(connection)
        _, led = await _metadata(connection)
        late = _plan(led, node, others, in_flight)
        if late:
            await _reassign(connection, late)
            moves.extend(late)
            print(f"moving {len(late)} more partitions that came to broker {node}", flush=True)
        ours = {(m.topic, m.partition) for m in moves}
        waiting = [key for key, replicas in in_flight.items() if key in ours or node in replicas]
        done = sum(
            1 for m in moves if (m.topic, m.partition) not in in_flight and led.get((m.topic, m.partition)) == m.target
        )
        if (done, len(waiting)) != reported:
            reported = (done, len(waiting))
            print(f"{done}/{len(moves)} moved, {len(waiting)} still moving", flush=True)
        if not late and not waiting and not any(leader == node for leader in led.values()):
            return
        if time.monotonic() >= deadline:
            raise DrainError(
                f"broker {node} still leads {sum(1 for leader in led.values() if leader == node)} partitions after "
                f"{timeout_s:.0f} s ({len(waiting)} of its moves still in flight)"
            )
        await asyncio.sleep(_POLL_S)


def render_table(moves: Sequence[Move]) -> str:
    rows = [("TOPIC", "PARTITION", "FROM", "TO")]
    rows.extend((m.topic, str(m.partition), str(m.source), str(m.target)) for m in moves)
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows)


# ---- the admin requests ------------------------------------------------------------------------------------------


async def _metadata(connection: ClientConnection) -> tuple[dict[int, tuple[str, int]], dict[tuple[str, int], int]]:
    """(live broker id -> address, (topic, partition) -> leader id) from a Metadata request for every topic."""
    cls = codec.request_class(METADATA, _METADATA_VERSION)
    response = await _request(connection, schema.build(cls, topics=None, allow_auto_topic_creation=False), "Metadata")
    brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
    led: dict[tuple[str, int], int] = {}
    for topic in response.topics:
        if ErrorCode(int(topic.error_code)) is not ErrorCode.none or topic.name is None:
            continue
        for partition in topic.partitions:
            led[(str(topic.name), int(partition.partition_index))] = int(partition.leader_id)
    return brokers, led


async def _excluded_brokers(connection: ClientConnection) -> frozenset[int]:
    """The broker ids in the cluster-wide ``autobalancer.controller.exclude.broker.ids`` (DescribeConfigs of the
    default broker resource), as the balancer reads them: an item that is not a number names no broker."""
    cls = codec.request_class(DESCRIBE_CONFIGS, 4)
    resource = schema.build_nested(
        cls, "resources", resource_type=_RESOURCE_BROKER, resource_name="", configuration_keys=(_EXCLUDE_BROKERS,)
    )
    response = await _request(connection, schema.build(cls, resources=(resource,)), "DescribeConfigs")
    excluded: set[int] = set()
    for result in response.results:
        code = ErrorCode(int(result.error_code))
        if code is not ErrorCode.none:
            raise DrainError(f"cannot read {_EXCLUDE_BROKERS}: {code.name}: {result.error_message or ''}".rstrip(": "))
        for entry in result.configs:
            for item in (entry.value or "").split(","):
                if item.strip().lstrip("-").isdigit():
                    excluded.add(int(item))
    return frozenset(excluded)


async def _exclude_from_balancer(connection: ClientConnection, node: int) -> None:
    cls = codec.request_class(INCREMENTAL_ALTER_CONFIGS, 0)
    resource_cls = schema.field_entity(cls, "resources")
    config = schema.build_nested(
        resource_cls, "configs", name=_EXCLUDE_BROKERS, config_operation=_OP_APPEND, value=str(node)
    )
    resource = schema.build_nested(
        cls, "resources", resource_type=_RESOURCE_BROKER, resource_name="", configs=(config,)
    )
    response = await _request(
        connection, schema.build(cls, resources=(resource,), validate_only=False), "IncrementalAlterConfigs"
    )
    for answer in response.responses:
        code = ErrorCode(int(answer.error_code))
        if code is not ErrorCode.none:
            raise DrainError(
                f"cannot exclude broker {node} from the auto-balancer ({_EXCLUDE_BROKERS}): "
                f"{code.name}: {answer.error_message or ''}".rstrip(": ")
            )
    print(f"broker {node} excluded from auto-balancing ({_EXCLUDE_BROKERS})", flush=True)


async def _reassign(connection: ClientConnection, moves: Sequence[Move]) -> None:
    cls = codec.request_class(ALTER_PARTITION_REASSIGNMENTS, 0)
    topic_cls = schema.field_entity(cls, "topics")
    by_topic: dict[str, list[Move]] = {}
    for move in moves:
        by_topic.setdefault(move.topic, []).append(move)
    topics = tuple(
        schema.build_nested(
            cls,
            "topics",
            name=topic,
            partitions=tuple(
                schema.build_nested(topic_cls, "partitions", partition_index=m.partition, replicas=(m.target,))
                for m in items
            ),
        )
        for topic, items in by_topic.items()
    )
    response = await _request(
        connection,
        schema.build(cls, timeout=int(_REQUEST_TIMEOUT_S * 1000), topics=topics),
        "AlterPartitionReassignments",
    )
    code = ErrorCode(int(response.error_code))
    if code is not ErrorCode.none:
        raise DrainError(f"the reassignment was refused: {code.name}: {response.error_message or ''}".rstrip(": "))
    refused = [
        f"{topic.name}-{p.partition_index}: {ErrorCode(int(p.error_code)).name} {p.error_message or ''}".rstrip()
        for topic in response.responses
        for p in topic.partitions
        if ErrorCode(int(p.error_code)) is not ErrorCode.none
    ]
    if refused:
        raise DrainError(f"{len(refused)} moves refused: {'; '.join(refused[:5])}")


async def _reassigning(connection: ClientConnection) -> dict[tuple[str, int], tuple[int, ...]]:
    """Every reassignment in flight: (topic, partition) -> the replicas it moves the partition to."""
    cls = codec.request_class(LIST_PARTITION_REASSIGNMENTS, 0)
    response = await _request(
        connection, schema.build(cls, timeout=int(_REQUEST_TIMEOUT_S * 1000), topics=None), "ListPartitionReassignments"
    )
    code = ErrorCode(int(response.error_code))
    if code is not ErrorCode.none:
        raise DrainError(f"listing the reassignments failed: {code.name}")
    return {
        (str(t.name), int(p.partition_index)): tuple(int(r) for r in p.replicas)
        for t in response.topics
        for p in t.partitions
    }


async def _request(connection: ClientConnection, request: Any, what: str) -> Any:
    try:
        return await connection.request(request, timeout=_REQUEST_TIMEOUT_S)
    except (ConnectionError, TimeoutError, codec.ProtocolError) as exc:
        raise DrainError(f"{what} to {connection.host}:{connection.port} failed: {exc}") from None


async def _connect(addresses: Sequence[tuple[str, int]], security: ClientSecurity) -> ClientConnection:
    try:
        connection, _ = await connect_bootstrap(
            addresses, security, client_id="fjord-cluster-drain", timeout_s=_REQUEST_TIMEOUT_S
        )
    except AdminError as exc:
        raise DrainError(str(exc)) from None
    return connection


def _addresses(text: str) -> list[tuple[str, int]]:
    try:
        return parse_bootstrap(text)
    except AdminError as exc:
        raise DrainError(str(exc)) from None
