"""Quorum controller benchmark: metadata commits per second through 3 controller processes, and election time.

Three ``fjord server start`` processes with ``process.roles=controller`` on 127.0.0.1 (temporary directories, real
fsync), driven over the CONTROLLER listener with the RPCs a broker sends. Measured:

- stream open+close: each operation is one committed metadata write (validated by the active controller);
- object commits: PrepareObjects + CommitStreamSetObject continuing a stream (the commit is the write that makes
  uploaded data visible);
- KV puts;

each with one request in flight and with ``--concurrency`` (each in-flight worker on a stream / key of its own);
- election time: from ``kill -9`` of the active controller until a survivor accepts writes, with the quorum
  timeouts given (the defaults are KRaft's production values).

    .venv/bin/python bench/quorum.py [--seconds 3] [--trials 5] [--concurrency 16]
        [--election-timeout-ms 1000 --fetch-timeout-ms 2000]

``bench/raft.py`` measures the bare Raft core in one process; this one adds the network, the controller's
validation and the stream metadata state machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The repository's packages before this directory (bench/storage.py would shadow ``storage``).
sys.path[:0] = [str(ROOT)]

from bench.stats import percentile  # noqa: E402
from metadata.rpc.error_codes import RpcError  # noqa: E402
from metadata.rpc.stream_rpcs import (  # noqa: E402
    CloseStream,
    CommitStreamSetObject,
    CreateStream,
    OpenStream,
    PrepareObjects,
    PutKV,
    StreamResponse,
)
from storage.metadata.api import CommitStreamSetObjectRequest, NodeIdentity, ObjectStreamRange  # noqa: E402
from testkit.quorum_cluster import ControllerClient, QuorumCluster  # noqa: E402

NODE = NodeIdentity(1000, 1)


def _ok(response: StreamResponse) -> object:
    if response.error_code != RpcError.NONE:
        raise RuntimeError(f"controller error {response.error_code}: {response.error_message}")
    return response.result


async def _concurrently(concurrency: int, seconds: float, operation: Callable[[int], Awaitable[int]]) -> float:
    """Runs ``concurrency`` workers for ``seconds``, each repeating ``operation(worker index)`` (which returns how
    many commits it made); returns commits per second."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(index: int) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            commits = await operation(index)  # not ``done += await ...``: that reads ``done`` before awaiting
            done += commits

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return done / (time.perf_counter() - started)


async def _open_close(client: ControllerClient, seconds: float, concurrency: int) -> float:
    """Each worker opens and closes a stream of its own (one committed write each)."""
    streams: list[int] = []
    for _ in range(concurrency):
        stream_id = _ok(await client.stream(CreateStream(NODE)))
        assert isinstance(stream_id, int)
        streams.append(stream_id)
    epochs = [0] * concurrency

    async def open_close(index: int) -> int:
        stream_id, epoch = streams[index], epochs[index]
        _ok(await client.stream(OpenStream(NODE, stream_id, epoch)))
        _ok(await client.stream(CloseStream(NODE, stream_id, epoch)))
        epochs[index] = epoch + 1
        return 2

    return await _concurrently(concurrency, seconds, open_close)


async def _object_commits(client: ControllerClient, seconds: float, concurrency: int) -> float:
    """Each worker prepares an object and commits it continuing a stream of its own."""
    streams: list[int] = []
    for _ in range(concurrency):
        stream_id = _ok(await client.stream(CreateStream(NODE)))
        assert isinstance(stream_id, int)
        _ok(await client.stream(OpenStream(NODE, stream_id, 0)))
        streams.append(stream_id)
    offsets = [0] * concurrency

    async def commit(index: int) -> int:
        object_id = _ok(await client.stream(PrepareObjects(NODE, 1, 60_000)))
        assert isinstance(object_id, int)
        offset = offsets[index]
        ranges = (ObjectStreamRange(streams[index], offset, offset + 100, 0),)
        request = CommitStreamSetObjectRequest(NODE, object_id, 4096, ranges)
        _ok(await client.stream(CommitStreamSetObject(NODE, request)))
        offsets[index] = offset + 100
        return 1

    return await _concurrently(concurrency, seconds, commit)


async def _kv_puts(client: ControllerClient, seconds: float, concurrency: int) -> float:
    async def put(index: int) -> int:
        _ok(await client.stream(PutKV(NODE, f"bench/{index}", b"x" * 16)))
        return 1

    return await _concurrently(concurrency, seconds, put)


async def _election_times(cluster: QuorumCluster, trials: int) -> list[float]:
    times: list[float] = []
    for _ in range(trials):
        leader, epoch = await cluster.leader(timeout=60)
        killed = time.perf_counter()
        cluster.kill(leader)
        survivors = [v.node_id for v in cluster.voters if v.node_id != leader]
        await cluster.leader(among=survivors, not_epoch=epoch, timeout=60)
        times.append(time.perf_counter() - killed)
        cluster.start(leader)
        await cluster.converged_dumps([0, 1, 2], timeout=60)
    return times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--trials", type=int, default=5, help="elections to measure (0: none)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--election-timeout-ms", type=int, default=1000)
    parser.add_argument("--fetch-timeout-ms", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fjord-bench-quorum-") as root:
        cluster = QuorumCluster(
            Path(root),
            overrides={
                "controller.quorum.election.timeout.ms": str(args.election_timeout_ms),
                "controller.quorum.fetch.timeout.ms": str(args.fetch_timeout_ms),
                "controller.quorum.election.backoff.max.ms": str(args.election_timeout_ms),
                "controller.quorum.request.timeout.ms": str(max(2000, args.fetch_timeout_ms)),
            },
        )
        cluster.start_all()
        try:
            leader, _ = await cluster.leader(timeout=60)
            client = await cluster.client(leader)
            rows: list[tuple[str, int, float]] = []
            try:
                for concurrency in sorted({1, args.concurrency}):
                    rows.append(("stream open/close", concurrency,
                                 await _open_close(client, args.seconds, concurrency)))
                    rows.append(("object commit (prepare + commit)", concurrency,
                                 await _object_commits(client, args.seconds, concurrency)))
                    rows.append(("KV put", concurrency, await _kv_puts(client, args.seconds, concurrency)))
            finally:
                await client.close()
            elections = await _election_times(cluster, args.trials)
        finally:
            cluster.close()
    print("| measurement (3 controller processes, 127.0.0.1) | in flight | result |")
    print("|---|---|---|")
    for name, concurrency, rate in sorted(rows, key=lambda row: (row[0], row[1])):
        print(f"| {name} | {concurrency} | {rate:,.0f} commits/s |")
    if not elections:
        return
    print(
        f"| election after kill -9 (election {args.election_timeout_ms} ms, fetch {args.fetch_timeout_ms} ms), "
        f"{len(elections)} trials | - | p50 {percentile(elections, 0.5) * 1000:,.0f} ms, "
        f"p99 {percentile(elections, 0.99) * 1000:,.0f} ms, mean {statistics.mean(elections) * 1000:,.0f} ms |"
    )


if __name__ == "__main__":
    asyncio.run(main())
