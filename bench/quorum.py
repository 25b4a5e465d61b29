"""Quorum controller benchmark: metadata commits per second through 3 controller processes, and election time.

Three ``fjord server start`` processes with ``process.roles=controller`` on 127.0.0.1 (temporary directories, real
fsync), driven over the CONTROLLER listener with the RPCs a broker sends. Measured:

- stream open+close: each operation is one committed metadata write (validated by the active controller);
- object commits: PrepareObjects + CommitStreamSetObject continuing a stream (the commit is the write that makes
  uploaded data visible);
- KV puts with many in flight (the stream metadata validates one write at a time; Raft batches the fsyncs);
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The repository's packages before this directory (bench/storage.py would shadow ``storage``), and the quorum test
# harness, which this benchmark drives the same way the tests do.
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "controller")]

from test_quorum_support import ControllerClient, QuorumCluster  # noqa: E402

from controller.rpc import messages as m  # noqa: E402
from storage.metadata.api import CommitStreamSetObjectRequest, NodeIdentity, ObjectStreamRange  # noqa: E402

NODE = NodeIdentity(1000, 1)


def _ok(response: m.StreamResponse) -> object:
    if response.error_code != m.RpcError.NONE:
        raise RuntimeError(f"controller error {response.error_code}: {response.error_message}")
    return response.result


async def _open_close(client: ControllerClient, seconds: float) -> float:
    stream_id = _ok(await client.stream(m.CreateStream(NODE)))
    assert isinstance(stream_id, int)
    epoch, ops = 0, 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        _ok(await client.stream(m.OpenStream(NODE, stream_id, epoch)))
        _ok(await client.stream(m.CloseStream(NODE, stream_id, epoch)))
        epoch += 1
        ops += 2
    return ops / (time.perf_counter() - started)


async def _object_commits(client: ControllerClient, seconds: float) -> float:
    stream_id = _ok(await client.stream(m.CreateStream(NODE)))
    assert isinstance(stream_id, int)
    _ok(await client.stream(m.OpenStream(NODE, stream_id, 0)))
    offset, commits = 0, 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline:
        object_id = _ok(await client.stream(m.PrepareObjects(NODE, 1, 60_000)))
        assert isinstance(object_id, int)
        ranges = (ObjectStreamRange(stream_id, offset, offset + 100, 0),)
        request = CommitStreamSetObjectRequest(NODE, object_id, 4096, ranges)
        _ok(await client.stream(m.CommitStreamSetObject(NODE, request)))
        offset += 100
        commits += 1
    return commits / (time.perf_counter() - started)


async def _kv_puts(client: ControllerClient, seconds: float, concurrency: int) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(index: int) -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            _ok(await client.stream(m.PutKV(NODE, f"bench/{index}", b"x" * 16)))
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return done / (time.perf_counter() - started)


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


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--trials", type=int, default=5)
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
            try:
                open_close = await _open_close(client, args.seconds)
                objects = await _object_commits(client, args.seconds)
                puts = await _kv_puts(client, args.seconds, args.concurrency)
            finally:
                await client.close()
            elections = await _election_times(cluster, args.trials)
        finally:
            cluster.close()
    print("| measurement (3 controller processes, 127.0.0.1) | result |")
    print("|---|---|")
    print(f"| stream open/close, 1 in flight | {open_close:,.0f} commits/s |")
    print(f"| object commit (prepare + commit), 1 in flight | {objects:,.0f} commits/s |")
    print(f"| KV put, {args.concurrency} in flight | {puts:,.0f} commits/s |")
    print(
        f"| election after kill -9 (election {args.election_timeout_ms} ms, fetch {args.fetch_timeout_ms} ms), "
        f"{len(elections)} trials | p50 {_percentile(elections, 50) * 1000:,.0f} ms, "
        f"p99 {_percentile(elections, 99) * 1000:,.0f} ms, mean {statistics.mean(elections) * 1000:,.0f} ms |"
    )


if __name__ == "__main__":
    asyncio.run(main())
